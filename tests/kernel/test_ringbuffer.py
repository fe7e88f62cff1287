from __future__ import annotations

import collections
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import OpenEtwError, TraceDataError
from openetw.kernel.ringbuffer import MISSED_EVENTS, MISSED_STORED, EventDecoder
from openetw.kernel.tracefs_format import parse_event_format

from . import pages as P

PARSER = P.captured_parser()
DECODER = P.captured_decoder()


def _decoded(cpu_pages):
    for cpu, raw in cpu_pages:
        sub = PARSER.parse(raw)
        for event in sub.events:
            found = DECODER.decode(sub.payload(event))
            assert found is not None
            yield cpu, event.timestamp, found[0].name, found[1]


def test_captured_pages_decode_every_event():
    counts = collections.Counter(name for _, _, name, _ in _decoded(P.captured_pages()))
    assert counts == {
        "sys_exit": 808, "sched_switch": 114, "inet_sock_set_state": 12, "block_rq_complete": 7,
        "block_rq_issue": 6, "sched_process_exec": 3, "sys_enter_exit_group": 3, "sched_process_exit": 3,
        "task_newtask": 3, "sched_process_fork": 3, "sock_send_length": 1, "sock_recv_length": 1,
    }


def test_captured_timestamps_increase_per_cpu_and_are_mono_ns():
    last = {}
    for cpu, raw in P.captured_pages():
        sub = PARSER.parse(raw)
        assert not sub.missed_events and sub.lost_events is None
        assert sub.events[0].timestamp >= sub.timestamp
        for event in sub.events:
            assert event.timestamp >= last.get(cpu, 0)
            last[cpu] = event.timestamp
    # CLOCK_MONOTONIC of a machine up for about 75 minutes, in nanoseconds
    assert all(4_400e9 < ts < 4_600e9 for ts in last.values())


def test_captured_values_data_loc_and_syscall_slot():
    events = list(_decoded(P.captured_pages()))
    execs = [v for _, _, name, v in events if name == "sched_process_exec"]
    assert [v["filename"] for v in execs] == ["/bin/sh"] * 3
    assert all(v["pid"] == v["old_pid"] for v in execs)
    forks = [v for _, _, name, v in events if name == "sched_process_fork"]
    assert {v["parent_comm"] for v in forks} == {"python"}
    codes = sorted(v["error_code"] for _, _, name, v in events if name == "sys_enter_exit_group")
    assert codes == [0, 1, 2]
    sends = [v for _, _, name, v in events if name == "sock_send_length"]
    assert sends[0]["ret"] == 1000


# -- handcrafted pages -------------------------------------------------------------------------

DEMO = parse_event_format(
    "name: demo\nID: 900\nformat:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:__rel_loc char[] path;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\tfield:u32 words[2];\toffset:16;\tsize:8;\tsigned:0;\n\n"
    "print fmt: \"\"\n"
)
DEMO_DECODER = EventDecoder([DEMO])


def demo_payload(pid: int, name: bytes, path: bytes) -> bytes:
    fixed = 24
    name_loc = len(name) << 16 | fixed
    path_start = fixed + len(name)
    path_rel = len(path) << 16 | (path_start - 16)  # counted from the end of the path field
    body = struct.pack("<HBBiII2I", 900, 0, 0, pid, name_loc, path_rel, 7, 8) + name + path
    return body + bytes(-len(body) % 4)


def test_data_loc_rel_loc_and_arrays():
    payload = demo_payload(42, b"comm\0", b"/usr/bin/x\0")
    sub = PARSER.parse(P.page(1000, P.data_event(payload, delta=5)))
    [event] = sub.events
    _fmt, values = DEMO_DECODER.decode(sub.payload(event))
    assert event.timestamp == 1005
    assert values["common_pid"] == 42 and values["name"] == "comm" and values["path"] == "/usr/bin/x"
    assert values["words"] == (7, 8)


def test_long_event_uses_length_word():
    payload = demo_payload(1, b"n" * 200 + b"\0", b"p\0")
    sub = PARSER.parse(P.page(10, P.data_event(payload, delta=3)))
    assert len(sub.payload(sub.events[0])) == len(payload)
    assert DEMO_DECODER.decode(sub.payload(sub.events[0]))[1]["name"] == "n" * 200


def test_time_extend_absolute_timestamp_discarded_and_padding():
    small = demo_payload(1, b"a\0", b"b\0")
    big_delta = (5 << 27) + 123
    raw = P.page(
        1_000,
        P.data_event(small, delta=10),           # 1010
        P.time_extend(big_delta),                # +big_delta
        P.data_event(small, delta=7),            # 1010 + big + 7
        P.discarded(12, delta=3),                # skipped, but its delta counts
        P.data_event(small, delta=2),
        P.absolute(5_000_000_000_000),
        P.data_event(small, delta=1),
        tail_padding=True,
    )
    sub = PARSER.parse(raw)
    stamps = [e.timestamp for e in sub.events]
    assert stamps == [1010, 1010 + big_delta + 7, 1010 + big_delta + 12, 5_000_000_000_001]
    assert sub.discarded == 1


def test_missed_events_and_stored_count():
    raw = P.page(5, P.data_event(demo_payload(1, b"a\0", b"b\0")), commit_flags=MISSED_EVENTS | MISSED_STORED, lost=77)
    sub = PARSER.parse(raw)
    assert sub.missed_events and sub.lost_events == 77 and len(sub.events) == 1


@pytest.mark.parametrize("raw", [
    b"\0" * 8,                                                         # shorter than the header
    struct.pack("<QQ", 0, 5000) + bytes(4080),                         # commit past the page
    struct.pack("<QQI", 0, 4, 3) + bytes(4076),                        # 12-byte event in 4 bytes
    struct.pack("<QQII", 0, 8, 0, 2) + bytes(4072),                    # length word below 4
])
def test_damaged_pages_raise_trace_data_error(raw):
    with pytest.raises(TraceDataError):
        PARSER.parse(raw)


def test_data_loc_past_payload_raises():
    payload = bytearray(demo_payload(1, b"a\0", b"b\0"))
    struct.pack_into("<I", payload, 8, 200 << 16 | 24)
    with pytest.raises(TraceDataError):
        DEMO_DECODER.decode(bytes(payload))


def test_unknown_event_type_is_none():
    assert DEMO_DECODER.decode(struct.pack("<HBBi", 901, 0, 0, 1) + bytes(16)) is None


CAPTURED = [raw for _, raw in P.captured_pages()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CAPTURED), st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), min_size=1, max_size=12))
def test_fuzz_mutated_pages_only_raise_project_errors(raw, mutations):
    data = bytearray(raw)
    for offset, value in mutations:
        data[offset] = value
    try:
        sub = PARSER.parse(bytes(data))
        for event in sub.events:
            DECODER.decode(sub.payload(event))
    except OpenEtwError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CAPTURED), st.integers(0, 4096))
def test_fuzz_truncated_pages(raw, cut):
    try:
        sub = PARSER.parse(raw[:cut])
        for event in sub.events:
            DECODER.decode(sub.payload(event))
    except OpenEtwError:
        pass


# -- one-pass walk and decode ------------------------------------------------------------------


def _two_step(raw, cpu, decoder):
    """parse() + decode_events(): what decode_into must give, or the error it must raise."""
    sub = PARSER.parse(raw)
    out = []
    unknown, damaged = decoder.decode_events(sub, cpu, out)
    return out, (sub.discarded, unknown, damaged)


def _one_pass(raw, cpu, decoder):
    out = [("before",)]
    counts = PARSER.decode_into(raw, cpu, decoder, out)
    return out[1:], counts


def test_decode_into_equals_parse_then_decode_on_captured_and_handcrafted_pages():
    for cpu, raw in P.captured_pages():
        assert _one_pass(raw, cpu, DECODER) == _two_step(raw, cpu, DECODER)
    small = demo_payload(1, b"a\0", b"b\0")
    raw = P.page(
        1_000, P.data_event(small, delta=10), P.time_extend((5 << 27) + 123), P.data_event(small, delta=7),
        P.discarded(12, delta=3), P.data_event(demo_payload(2, b"n" * 200 + b"\0", b"p\0"), delta=2),
        P.absolute(5_000_000_000_000), P.data_event(struct.pack("<HBBi", 901, 0, 0, 1) + bytes(16), delta=1),
        tail_padding=True,
    )  # fmt: skip
    out, counts = _one_pass(raw, 3, DEMO_DECODER)
    assert (out, counts) == _two_step(raw, 3, DEMO_DECODER)
    assert counts == (1, 1, 0) and [e[3]["common_pid"] for e in out] == [1, 1, 2] and out[2][3]["name"] == "n" * 200


def test_decode_into_leaves_out_untouched_when_the_page_is_damaged():
    raw = P.page(5, P.data_event(demo_payload(1, b"a\0", b"b\0")), struct.pack("<II", 0, 2))  # length word below 4
    with pytest.raises(TraceDataError):
        PARSER.parse(raw)
    out = [("before",)]
    with pytest.raises(TraceDataError):
        PARSER.decode_into(raw, 0, DEMO_DECODER, out)
    assert out == [("before",)]


def _same_outcome(raw):
    try:
        expected = _two_step(raw, 1, DECODER)
    except TraceDataError:
        expected = TraceDataError
    try:
        got = _one_pass(raw, 1, DECODER)
    except TraceDataError:
        got = TraceDataError
    assert got == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CAPTURED), st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), min_size=1, max_size=12))
def test_fuzz_decode_into_matches_the_two_step_path(raw, mutations):
    data = bytearray(raw)
    for offset, value in mutations:
        data[offset] = value
    _same_outcome(bytes(data))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CAPTURED), st.integers(0, 4096))
def test_fuzz_decode_into_truncated(raw, cut):
    _same_outcome(raw[:cut])
