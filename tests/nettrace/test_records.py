"""EventPipe events as ETW ``EventRecord``s: header fields, clock, stacks, and decoding like ``.etl``."""

from __future__ import annotations

import uuid
from pathlib import Path

from openetw.consumer.nettrace_source import NettraceFileSource
from openetw.etl.extended import EXT_EVENT_SCHEMA_TL, EXT_STACK_TRACE64
from openetw.etl.reader import EtlReader
from openetw.guids import provider_guid_from_name
from openetw.nettrace import NettraceReader
from openetw.nettrace.container import TraceInfo
from openetw.nettrace.events import EventHeader
from openetw.nettrace.metadata import EventMetadata
from openetw.nettrace.reader import NettraceEvent
from openetw.nettrace.records import RecordBuilder
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path

RUNTIME = uuid.UUID("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4")
GC_START = 1


def _records(path: Path) -> list:
    source = NettraceFileSource(path)
    source.open()
    try:
        return list(source.records())
    finally:
        source.close()


def test_a_gc_start_decodes_to_the_fields_it_has_on_etw(trace_file) -> None:  # type: ignore[no-untyped-def]
    registry = SchemaRegistry()
    ours = next(r for r in _records(trace_file("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace")) if r.provider_id == RUNTIME and r.id == GC_START)
    with EtlReader(corpus_path("etl", "perfview", "gcevents.etl")) as reader:
        etw = next(r for r in reader.records() if r.kind == "event" and r.provider_id == RUNTIME and r.id == GC_START)
    assert (ours.kind, ours.version, ours.task, ours.opcode) == ("event", etw.version, etw.task, etw.opcode)
    schema, etw_schema = registry.schema_for(ours), registry.schema_for(etw)
    assert schema is etw_schema and schema is not None and schema.source == "manifest"
    ours_props = dict(registry.decode(schema, ours.user_data, ours.pointer_size).items())
    etw_props = dict(registry.decode(etw_schema, etw.user_data, etw.pointer_size).items())
    assert list(ours_props) == list(etw_props) and ours_props["Reason"] == 0 and isinstance(ours_props["Count"], int)


def test_header_fields_and_the_clock(trace_file) -> None:  # type: ignore[no-untyped-def]
    path = trace_file("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace")
    reader = NettraceReader(path.read_bytes())
    info = reader.info
    event = next(e for e in reader.events() if e.metadata.provider_name == "Microsoft-Windows-DotNETRuntime" and e.stack)
    record = RecordBuilder(info).record(event)
    assert record.provider_id == RUNTIME and record.id == event.metadata.event_id and record.level == event.metadata.level
    assert record.keyword == event.metadata.keywords and record.pid == info.process_id == 10064
    assert record.tid == event.header.thread_id and record.timestamp == event.header.timestamp
    ticks = (event.header.timestamp - info.sync_qpc) * 10_000_000 // info.qpc_frequency
    assert record.filetime == info.sync_time_filetime + ticks and record.time_iso.startswith("2019-06-15T23:5")
    # the stack rides as ETW carries it: a STACK_TRACE64 extended item
    assert record.extended_item(EXT_STACK_TRACE64) is not None
    assert record.stack is not None and record.stack.addresses == event.stack and record.stack.pointer_size == 8


def test_self_describing_events_carry_their_fields_as_tracelogging(trace_file) -> None:  # type: ignore[no-untyped-def]
    records = _records(trace_file("eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf"))
    registry = SchemaRegistry()
    context = DecodeContext(registry)
    method = next(r for r in records if r.id == 4)
    assert method.provider_id == provider_guid_from_name("MySource") and method.extended_item(EXT_EVENT_SCHEMA_TL) is not None
    schema = context.schema_for(method)
    assert schema is not None and (schema.provider_name, schema.event_name) == ("MySource", "TestEventMethod")
    assert dict(registry.decode(schema, method.user_data, 8).items()) == {"i": 1, "s": "Hello World!"}
    nested = next(r for r in records if context.schema_for(r).event_name == "TestNestedStructs")
    values = dict(registry.decode(context.schema_for(nested), nested.user_data, 8).items())
    assert values == {"": {"structVal": {"field17": "hello world!"}, "i": 42}}


def test_array_fields_decode(trace_file) -> None:  # type: ignore[no-untyped-def]
    records = _records(trace_file("eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace"))
    registry = SchemaRegistry()
    context = DecodeContext(registry)
    test_events = [r for r in records if (schema := context.schema_for(r)) is not None and schema.provider_name == "TestEventSource0"]
    assert len(test_events) == 3
    values = [dict(registry.decode(context.schema_for(r), r.user_data, 8).items()) for r in test_events]
    assert any(isinstance(value, list) and len(value) > 1 for props in values for value in props.values())


def test_a_payload_past_etws_record_size_is_cut_and_counted() -> None:
    info = TraceInfo(version=4, sync_time_filetime=132_000_000_000_000_000, sync_qpc=0, qpc_frequency=10_000_000)
    meta = EventMetadata(1, "Big.Source", 1, "Big")
    builder = RecordBuilder(info)
    record = builder.record(NettraceEvent(EventHeader(metadata_id=1, thread_id=5, timestamp=10), meta, bytes(100_000), (), 1))
    assert record.size <= 0xFFFF and builder.truncated == 1 and record.filetime == info.sync_time_filetime + 10


def test_the_stack_collector_sees_eventpipe_stacks(trace_file) -> None:  # type: ignore[no-untyped-def]
    from openetw.events.stacks import collect_stacks

    path = trace_file("only_managed_samples.nettrace")
    events = {(e.header.timestamp, e.header.thread_id): e.stack for e in NettraceReader(path.read_bytes()).events() if e.stack}
    stacks, _ = collect_stacks(_records(path))
    assert len(stacks) == len(events) == 7423
    assert all(events[(stack.timestamp, stack.tid)] == stack.addresses for stack in stacks[:200])
