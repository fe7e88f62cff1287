"""The lean paths (decoding only the fields the mapper reads, hot records packed in one step)
give exactly the records of the full paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.etl.build import build_perfinfo_record, build_system_record
from openetw.kernel.classes import FLAG_EVENTS, KernelEventMapper, windows_priority
from openetw.kernel.ringbuffer import EventDecoder
from openetw.kernel.tracefs import find_tracefs
from openetw.kernel.tracefs_format import parse_event_format

from . import pages as P

ALL_FLAGS = {"process", "thread", "cswitch", "disk_io", "network", "syscall", "file_io", "page_fault"}


def _events(decoder):
    parser = P.captured_parser()
    events = []
    for cpu, raw in P.captured_pages():
        sub = parser.parse(raw)
        unknown, damaged = decoder.decode_events(sub, cpu, events)
        assert (unknown, damaged) == (0, 0)
    events.sort(key=lambda e: e[0])
    return events


def _records(events):
    mapper = KernelEventMapper(ALL_FLAGS)
    return [(r.raw, r.cpu) for e in events for r in mapper.map(e[2], e[0], e[1], e[3])]


def test_lean_decoder_gives_the_same_records_as_the_full_one():
    full = P.captured_decoder()
    formats = list(full.formats.values())
    lean = EventDecoder(formats, fields=KernelEventMapper(ALL_FLAGS).fields_used())
    full_events, lean_events = _events(full), _events(lean)
    assert len(full_events) == len(lean_events) == 964
    switch = next(e for e in lean_events if e[2] == "sched_switch")[3]
    assert set(switch) == {"prev_state", "prev_pid", "next_pid", "prev_prio", "next_prio"}
    assert _records(full_events) == _records(lean_events)


def test_decode_events_matches_decode_per_event():
    decoder = P.captured_decoder()
    parser = P.captured_parser()
    for cpu, raw in P.captured_pages():
        sub = parser.parse(raw)
        out = []
        decoder.decode_events(sub, cpu, out)
        one_by_one = [(e.timestamp, cpu, *decoder.decode(sub.payload(e))) for e in sub.events]
        assert [(ts, c, name, values) for ts, c, name, values in out] == [(ts, c, fmt.name, v) for ts, c, fmt, v in one_by_one]


def test_hot_records_are_the_bytes_the_generic_builders_make():
    mapper = KernelEventMapper({"cswitch", "syscall"})
    [enter] = mapper.map("sys_enter", 1000, 1, {"id": 39})
    [exit_] = mapper.map("sys_exit", 1001, 1, {"ret": -2})
    [switch] = mapper.map("sched_switch", 1002, 0, {"prev_pid": 7, "next_pid": 0, "prev_prio": 120, "next_prio": 98, "prev_state": 2})
    assert enter.raw == build_perfinfo_record(hook_id=0x0F33, version=2, timestamp=1000, cpu=1, user_data=(39).to_bytes(8, "little")).raw
    assert exit_.raw == build_perfinfo_record(hook_id=0x0F34, version=2, timestamp=1001, cpu=1, user_data=(0xFFFFFFFE).to_bytes(4, "little")).raw
    payload = bytes((0, 0, 0, 0, 7, 0, 0, 0, windows_priority(98), 8, 0, 0, 0, 0, 5)) + bytes(9)
    expected = build_system_record(hook_id=0x0524, version=2, pid=7, tid=7, timestamp=1002, cpu=0, user_data=payload)
    assert switch.raw == expected.raw and switch.cpu == 0 and switch.pid == 7 and switch.tid == 7 and switch.timestamp == 1002


def test_every_field_the_mapper_reads_exists_on_this_kernel():
    root = find_tracefs()
    if root is None or not (root / "events").is_dir():
        pytest.skip("tracefs is not mounted or not readable")
    used = KernelEventMapper(ALL_FLAGS).fields_used()
    checked = 0
    for events in FLAG_EVENTS.values():
        for event in events:
            path = Path(root) / "events" / event / "format"
            if not path.exists():
                continue
            fmt = parse_event_format(path.read_text(), system=event.split("/")[0])
            assert used[fmt.name] <= set(fmt.by_name), (event, used[fmt.name] - set(fmt.by_name))
            checked += 1
    assert checked > 40


def test_registered_handlers_get_every_field():
    mapper = KernelEventMapper({"cswitch"})
    assert "sched_switch" in mapper.fields_used()
    mapper.register("sched_switch", lambda ts, cpu, values: [])
    assert "sched_switch" not in mapper.fields_used()


def test_map_events_writes_what_map_returns():
    events = _events(P.captured_decoder()) + [(10**15, 0, "no_such_event", {})]
    one_by_one = KernelEventMapper(ALL_FLAGS)
    expected = [r.raw for ts, cpu, name, values in events for r in one_by_one.map(name, ts, cpu, values)]
    batch = KernelEventMapper(ALL_FLAGS)
    written = []
    count = batch.map_events(events, lambda record: written.append(record.raw) or len(written) % 2 == 0)
    assert written == expected and count == len(expected) // 2
    assert batch.unmapped == one_by_one.unmapped == 1


def test_map_events_gives_the_hot_records_as_bytes_to_write_raw():
    events = _events(P.captured_decoder())
    one_by_one = KernelEventMapper(ALL_FLAGS)
    expected = [(r.raw, r.cpu, r.timestamp) for ts, cpu, name, values in events for r in one_by_one.map(name, ts, cpu, values)]
    batch = KernelEventMapper(ALL_FLAGS)
    written, raw_written = [], []

    def write(record):
        written.append((record.raw, record.cpu, record.timestamp))
        return True

    def write_raw(raw, cpu, timestamp):
        written.append((raw, cpu, timestamp))
        raw_written.append(raw)
        return False  # refused: not counted

    count = batch.map_events(events, write, write_raw)
    assert written == expected  # the same records in the same order, whichever path
    hot = sum(1 for e in events if e[2] in ("sys_enter", "sys_exit", "sched_switch"))
    assert len(raw_written) == hot > 0 and count == len(expected) - hot
    mapper = KernelEventMapper({"cswitch"})
    mapper.register("sched_switch", lambda ts, cpu, v: [])  # a registered handler replaces the raw path too
    assert mapper.map_events([e for e in events if e[2] == "sched_switch"], write, write_raw) == 0
