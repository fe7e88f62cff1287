"""Traces over .etl files: merged like relog, time windows, state before the window, statistics.

Every test runs twice, through the file index and streaming with ``EtlReader``: both paths must
give the same callbacks in the same order and the same counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P
from openetw.errors import EtlFormatError
from openetw.etl import EtlReader, merge_records
from openetw.etl.clock import filetime_to_datetime
from openetw.etl.relog import is_logfile_header_record, relog
from openetw.manifest import load_manifest
from tests.conftest import corpus_path
from tests.consumer.helpers import (
    DIAGHUB,
    KERNEL_PROCESS_MANIFEST,
    PROCESS_ETL,
    corpus_etl,
    diaghub_files,
    every_kind,
    write_etl,
)

KERNEL_PROCESS = "Microsoft-Windows-Kernel-Process"
PATHS = pytest.mark.parametrize("index", [True, False], ids=["indexed", "streamed"])


@pytest.fixture(scope="module")
def kernel_process_manifest() -> Any:
    return load_manifest(corpus_path(*KERNEL_PROCESS_MANIFEST)).manifest


@PATHS
def test_several_files_merge_as_relog_merges_them(index: bool, tmp_path: Path) -> None:
    files = diaghub_files()
    relogged = tmp_path / "relogged.etl"
    relog([EtlReader(path, strict=False) for path in files], relogged)
    with EtlReader(relogged) as reader:
        clock = reader.header.clock
        expected = [r.raw for r in reader.records(time_order=True) if not is_logfile_header_record(r)]
    merged = [r.raw for r in merge_records([EtlReader(path, strict=False) for path in files])]
    trace = UserTrace(files=files, manifests=[], index=index)
    got: list[Any] = []
    trace.set_default_event_callback(lambda record, context: got.append(record))
    trace.start()
    assert [r.raw for r in got] == merged
    # The relogged file holds the same records, moved to its clock, in the same order.
    moved = [r.with_timestamp(clock.from_filetime(r.filetime)).raw for r in got if not is_logfile_header_record(r)]
    assert moved == expected
    stats = trace.query_stats()
    assert stats["events_read"] == stats["events_handled"] == len(merged) == stats["events_written"]


@PATHS
def test_records_are_the_readers_records(index: bool, tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(400))
    trace = UserTrace(files=[path], manifests=[], index=index)
    got: list[tuple[Any, ...]] = []
    trace.set_default_event_callback(lambda r, c: got.append((r.kind, r.cpu, r.buffer_index, r.raw, r.filetime, r.pointer_size)))
    trace.start()
    with EtlReader(path) as reader:
        expected = [(r.kind, r.cpu, r.buffer_index, r.raw, r.filetime, r.pointer_size) for r in reader.records(time_order=True)]
    assert got == expected
    assert {kind for kind, *_ in got} == {"system", "compact", "perfinfo", "classic", "instance", "event", "wpp"}


@PATHS
def test_time_window_delivers_exactly_the_events_inside(index: bool, kernel_process_manifest: Any) -> None:
    path = corpus_etl(*PROCESS_ETL)
    with EtlReader(path) as reader:
        everything = list(reader.records(time_order=True))
    times = sorted({r.filetime for r in everything})
    start, end = times[len(times) // 3], times[2 * len(times) // 3]
    inside = [r.raw for r in everything if start <= r.filetime <= end]
    state_before = [r.raw for r in everything if r.filetime < start and r.kind == "event" and r.id in (1, 2)]
    trace = UserTrace(files=[path], start_time=filetime_to_datetime(start) if index else start, end_time=end, manifests=[kernel_process_manifest], index=index)
    provider = Provider(KERNEL_PROCESS)
    got: list[bytes] = []
    provider.add_on_event_callback(lambda r, c: got.append(r.raw))
    trace.enable(provider)
    rundown: list[bytes] = []
    trace.set_rundown_callback(lambda r, c: rundown.append(r.raw))
    trace.set_default_event_callback(lambda r, c: got.append(r.raw))
    trace.start()
    if index:  # a datetime keeps microseconds only: the window starts up to 9 ticks earlier
        start_us = start - start % 10
        inside = [r.raw for r in everything if start_us <= r.filetime <= end]
        state_before = [r.raw for r in everything if r.filetime < start_us and r.kind == "event" and r.id in (1, 2)]
    assert got == inside
    assert rundown == state_before and state_before
    stats = trace.query_stats()
    assert stats["events_handled"] == len(inside)
    assert stats["state_events_before_window"] == len(state_before)
    assert stats["events_outside_window"] + stats["state_events_before_window"] + len(inside) == len(everything) == stats["events_read"]


@PATHS
def test_state_before_the_window_still_names_processes(index: bool, kernel_process_manifest: Any) -> None:
    path = corpus_etl(*PROCESS_ETL)
    with EtlReader(path) as reader:
        everything = list(reader.records(time_order=True))
    first_start = next(r for r in everything if r.kind == "event" and r.id == 1)
    pid = first_start.user_data[:4]
    later = [r for r in everything if r.filetime > first_start.filetime and r.pid == int.from_bytes(pid, "little")]
    assert later, "the corpus file has events of a process started inside it"
    names: list[str | None] = []
    trace = UserTrace(files=[path], start_time=first_start.filetime + 1, manifests=[kernel_process_manifest], index=index)
    trace.set_default_event_callback(lambda r, c: None)
    provider = Provider(KERNEL_PROCESS)
    provider.add_on_event_callback(lambda r, c: names.append(c.process_name_of(r)) if r.pid == later[0].pid else None)
    trace.enable(provider)
    trace.start()
    assert names and names[0] == "devenv"


@pytest.mark.parametrize("stop_after", [1, 100, 5000])
def test_both_paths_agree_on_everything(stop_after: int, kernel_process_manifest: Any) -> None:
    path = corpus_etl(*PROCESS_ETL)
    with EtlReader(path) as reader:
        times = [r.filetime for r in reader.records(time_order=True)]
    outcomes = []
    for index in (True, False):
        log: list[tuple[Any, ...]] = []
        trace = UserTrace(files=[path], start_time=times[2000], end_time=times[9000], manifests=[kernel_process_manifest], index=index)
        provider = Provider(KERNEL_PROCESS).event_ids([5, 6, 8])
        images = EventFilter(P.property_icontains("ImageName", "system32"))
        images.add_on_event_callback(lambda r, c, log=log: log.append(("image", r.id, c.parser_for(r).parse("ImageName"))))
        provider.add_filter(images)
        priority = EventFilter(P.and_(P.id_is(8), P.property_is("NewPriority", 15)))
        priority.add_on_event_callback(lambda r, c, log=log: log.append(("priority", r.timestamp)))
        provider.add_filter(priority)
        trace.enable(provider)

        def rundown(r: Any, c: Any, log: list[tuple[Any, ...]] = log) -> None:
            log.append(("rundown", r.id))

        trace.set_rundown_callback(rundown)

        def stop_when(r: Any, c: Any, log: list[tuple[Any, ...]] = log, trace: UserTrace = trace) -> None:
            if len(log) >= stop_after:
                trace.stop()

        provider.add_on_event_callback(stop_when)
        trace.start()
        stats = trace.query_stats()
        stats.pop("events_not_processed")  # only an index knows what a stop left unread
        stats.pop("events_read")
        if stop_after >= 5000:
            assert trace.query_stats()["events_read"] == len(times)
        outcomes.append((log, stats if stop_after >= 5000 else None))
    assert outcomes[0] == outcomes[1]
    if stop_after >= 5000:
        assert {entry[0] for entry in outcomes[0][0]} == {"image", "priority", "rundown"}


def test_statistics_of_a_file_come_from_its_header_and_reading() -> None:
    path = corpus_etl("etl-parser", "AMSITrace.etl")
    trace = UserTrace(files=[path], manifests=[])
    trace.start()
    stats = trace.query_stats()
    with EtlReader(path) as reader:
        header = reader.header
        records = sum(1 for _ in reader)
        buffers = reader.stats.buffers
    assert stats["events_lost"] == header.events_lost == 3
    assert stats["buffers_written"] == header.buffers_written
    assert stats["log_buffers_lost"] == header.buffers_lost
    assert stats["buffers"] == buffers and stats["events_written"] == records
    assert stats["free_buffers"] == 0 and stats["realtime_buffers_lost"] == 0
    assert stats["events_unmatched"] == records  # nobody asked for anything


@PATHS
def test_damaged_files_are_read_to_the_end_and_the_damage_reported(index: bool, tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(300))
    data = bytearray(path.read_bytes())
    data[4096 * 2 + 72 + 3] = 0x12  # the first record of buffer 2: no record marker any more
    data[4096 * 4 + 72 + 2] = 0x7F  # the first record of buffer 4: an unknown header type
    first = 4096 * 6 + 72
    size_at = 4 if data[first + 2] in (1, 2, 3, 4, 0x10, 0x11) else 0  # SYSTEM/PERFINFO keep Size at +4
    data[first + size_at : first + size_at + 2] = b"\xff\xff"  # buffer 6: a record larger than its buffer
    path.write_bytes(bytes(data))
    with EtlReader(path, strict=False) as reader:
        expected = [(r.kind, r.raw) for r in reader.records(time_order=True)]
    trace = UserTrace(files=[path], manifests=[], index=index)
    got: list[tuple[str, bytes]] = []
    trace.set_default_event_callback(lambda r, c: got.append((r.kind, r.raw)))
    errors: list[Any] = []
    trace.on_error(lambda error, record: errors.append(error))
    trace.start()
    assert got == expected
    assert [kind for kind, _ in got].count("unknown") == 2
    stats = trace.query_stats()
    assert stats["unknown_records"] == 2 and stats["skipped_bytes"] > 0
    assert stats["format_errors"] == len(errors) == sum(isinstance(e, EtlFormatError) for e in errors) == 1


def _record_facts(record: Any) -> tuple[Any, ...]:
    return (
        type(record).__name__, record.kind, record.header_fields(), record.raw, record.user_data, record.user_data_offset,
        record.extended, record.pointer_size, record.cpu, record.buffer_index, record.filetime, record.provider_id, repr(record),
        tuple(getattr(record, name) for name in _HEADER_PROPERTIES),
    )  # fmt: skip


_HEADER_PROPERTIES = (
    "header_type", "flags", "event_property", "tid", "pid", "timestamp", "provider_guid_bytes", "id", "version", "channel",
    "level", "opcode", "task", "keyword", "hook_id", "kernel_time", "user_time", "processor_time", "activity_guid_bytes",
)  # fmt: skip


@pytest.mark.parametrize("parts", [("tx", "HTTP_Server.etl"), PROCESS_ETL, (*DIAGHUB.split("/"), "diaghub.etl")], ids=["http", "process", "diaghub"])
def test_callbacks_get_the_records_the_reader_gives(parts: tuple[str, ...], tmp_path: Path) -> None:
    """Records built from the index (their header read on first use) are the reader's records:
    same class, header fields, bytes, extended items, user data and time, in the same order."""
    path = corpus_etl(*parts)
    with EtlReader(path, strict=False) as reader:
        expected = [_record_facts(record) for record in reader.records(time_order=True)]
    seen: list[tuple[Any, ...]] = []
    trace = UserTrace(files=[path], manifests=[], index_dir=tmp_path)
    trace.set_default_event_callback(lambda record, context: seen.append(_record_facts(record)))
    trace.start()
    assert len(seen) == len(expected) > 1000
    assert seen == expected


def test_records_from_the_index_copy_as_the_reader_s_do(tmp_path: Path) -> None:
    """``with_context`` and ``with_timestamp`` of a record built from the index are records
    equal to the same copies of the reader's record."""
    path = corpus_etl(*DIAGHUB.split("/"), "diaghub.etl")
    with EtlReader(path, strict=False) as reader:
        records = list(reader.records(time_order=True))
        context = reader.context
    expected = [(_record_facts(r.with_context(context)), _record_facts(r.with_timestamp(7))) for r in records[:300]]
    seen: list[tuple[Any, ...]] = []
    trace = UserTrace(files=[path], manifests=[], index_dir=tmp_path)
    trace.set_default_event_callback(
        lambda record, ctx: seen.append((_record_facts(record.with_context(context)), _record_facts(record.with_timestamp(7))))
        if len(seen) < 300 else None
    )  # fmt: skip
    trace.start()
    assert seen == expected
