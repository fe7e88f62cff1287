"""perf.data and EventHeader events decoded as LinuxTracepoints' own decoder decodes them.

Every event of the corpus' ``perf.data`` (tracepoints recorded by ``perf record``, among them
EventHeader events of ``user_events``) and of ``EventHeaderInterceptorLE64.dat`` (raw
EventHeader events, every type and format) is read, decoded through openetw's TraceLogging
decoder and compared field by field with the ``*.linux.json`` beside it, after the
normalisation ``tests.perfdata.expected`` documents.
"""

from __future__ import annotations

from typing import Any

from openetw.consumer.perfdata_source import PerfDataSource
from openetw.etl.clock import SYSTEM_TIME_CLOCK
from openetw.etl.record import EventRecord, RecordContext
from openetw.perfdata.eventheader import parse_tracepoint_name
from openetw.perfdata.interceptor import interceptor_events
from openetw.perfdata.transcode import eventheader_record
from openetw.tdh.decode import decode_properties
from openetw.tdh.tracelogging import schema_from_record
from tests.conftest import corpus_path
from tests.perfdata.expected import load_reference, same_fields, same_value


def decoded(record: EventRecord) -> tuple[str, list[tuple[str, Any]], Any]:
    schema = schema_from_record(record)
    assert schema is not None
    values = decode_properties(schema, record.user_data, record.pointer_size)
    assert values.ok, values.errors
    return (
        f"{schema.provider_name}:{schema.event_name}",
        list(zip([p.name for p in schema.properties], values.values_in_order(), strict=True)),
        schema,
    )


def _meta_problems(meta: dict[str, Any], record: EventRecord, schema: Any, *, with_time: bool) -> list[str]:
    problems = []
    if with_time:
        want = meta["time"].rstrip("Z")
        got = record.time_iso.rstrip("Z")
        if want[: len(got)] != got:
            problems.append(f"time {want} != {got}")
        for key, value in (("cpu", record.cpu), ("pid", record.pid), ("tid", record.tid)):
            if meta[key] != value:
                problems.append(f"{key} {meta[key]} != {value}")
    if "level" in meta and meta["level"] != record.level:
        problems.append(f"level {meta['level']} != {record.level}")
    for key, value in (
        ("keyword", record.keyword),
        ("opcode", record.opcode),
        ("id", record.id),
        ("version", record.version),
    ):
        if not same_value(meta.get(key, 0), value):
            problems.append(f"{key} {meta.get(key, 0)} != {value}")
    tag = schema.tags if hasattr(schema, "tags") else None
    if "tag" in meta and tag is not None and not same_value(meta["tag"], tag):
        problems.append(f"tag {meta['tag']} != {tag}")
    activity = str(record.activity_id)
    if meta.get("activity", "00000000-0000-0000-0000-000000000000") != activity:
        problems.append(f"activity {meta.get('activity')} != {activity}")
    related = record.related_activity_id
    if meta.get("relatedActivity") != (str(related) if related is not None else None):
        problems.append(f"related activity {meta.get('relatedActivity')} != {related}")
    return problems


def _compare(expected: list[list[tuple[str, Any]]], records: list[EventRecord], *, with_time: bool) -> None:
    assert len(records) == len(expected)
    problems = []
    for index, (want, record) in enumerate(zip(expected, records, strict=True)):
        pairs = dict(want[:1])
        meta = dict(dict(want)["meta"])
        fields = [(key, value) for key, value in want[1:] if key != "meta"]
        name, mine, schema = decoded(record)
        if pairs["n"] != name:
            problems.append(f"event {index}: name {pairs['n']} != {name}")
            continue
        problems += [
            f"event {index} {name}: {problem}"
            for problem in same_fields(fields, mine) + _meta_problems(meta, record, schema, with_time=with_time)
        ]
    assert problems == [], "\n".join(problems[:40])


def test_perf_data_decodes_as_perf_decode_does() -> None:
    path = corpus_path("perfdata", "perf.data")
    expected = load_reference(corpus_path("perfdata", "perf.data.linux.json").read_text("utf-8", "surrogateescape"))
    source = PerfDataSource(path, time_order=False)  # the order perf-decode printed
    source.open()
    try:
        records = list(source.records())
        assert source.losses() == [] and source.notices() == []
    finally:
        source.close()
    assert len(expected) == 539
    _compare(expected, records, with_time=True)


def test_interceptor_events_decode_as_perf_decode_does() -> None:
    data = corpus_path("perfdata", "EventHeaderInterceptorLE64.dat").read_bytes()
    expected = load_reference(
        corpus_path("perfdata", "EventHeaderInterceptorLE64.dat.linux.json").read_text("utf-8", "surrogateescape")
    )
    context = RecordContext(SYSTEM_TIME_CLOCK, source="<interceptor>")
    records = []
    for offset, name, event in interceptor_events(data):
        tracepoint = parse_tracepoint_name(name)
        assert tracepoint is not None, name
        records.append(eventheader_record(tracepoint, event, context=context, base=offset))
    assert len(expected) == 374
    _compare(expected, records, with_time=False)
