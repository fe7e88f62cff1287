"""The proc connector's messages, built by hand, parse to exact events; damage raises TraceDataError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.errors import InvalidArgument, TraceDataError
from openetw.kernel.proc_connector_format import (
    EVENT_NAMES,
    PROC_CN_MCAST_IGNORE,
    PROC_CN_MCAST_LISTEN,
    SequenceTracker,
    decode_wait_status,
    parse_datagram,
    subscribe_message,
)

FORK, EXEC, UID, GID, SID, PTRACE, COMM, COREDUMP, EXIT = 1, 2, 4, 0x40, 0x80, 0x100, 0x200, 0x40000000, 0x80000000


def message(what: int, union: bytes, *, cpu: int = 1, ts: int = 123_456_789, seq: int = 5, ack: int = 0,
            idx: int = 1, val: int = 1, pad_union_to: int = 24) -> bytes:
    """One datagram as the kernel sends it: nlmsghdr + cn_msg + proc_event (union padded to 24)."""
    event = struct.pack("<IIQ", what, cpu, ts) + union.ljust(pad_union_to, b"\0")
    cn = struct.pack("<IIIIHH", idx, val, seq, ack, len(event), 0) + event
    return struct.pack("<IHHII", 16 + len(cn), 3, 0, seq, 0) + cn


def test_subscribe_message_layout():
    data = subscribe_message(PROC_CN_MCAST_LISTEN, seq=9, ack=41)
    assert data == struct.pack("<IHHII", 40, 3, 0, 9, 0) + struct.pack("<IIIIHH", 1, 1, 9, 41, 4, 0) + struct.pack("<I", 1)
    assert subscribe_message(PROC_CN_MCAST_IGNORE)[-4:] == struct.pack("<I", 2)
    with pytest.raises(InvalidArgument):
        subscribe_message(3)


def test_fork():
    [event] = parse_datagram(message(FORK, struct.pack("<iiii", 100, 100, 205, 205), cpu=1, ts=77, seq=12))
    assert (event.name, event.what, event.cpu, event.timestamp_ns, event.seq, event.ack) == ("proc_fork", FORK, 1, 77, 12, 0)
    assert event.values == {"parent_pid": 100, "parent_tgid": 100, "child_pid": 205, "child_tgid": 205}


def test_exec_comm_uid_gid_sid_ptrace_coredump():
    cases = [
        (EXEC, struct.pack("<ii", 205, 205), "proc_exec", {"pid": 205, "tgid": 205}),
        (COMM, struct.pack("<ii16s", 206, 205, b"worker-1"), "proc_comm", {"pid": 206, "tgid": 205, "comm": "worker-1"}),
        (UID, struct.pack("<iiII", 205, 205, 1000, 0), "proc_uid", {"pid": 205, "tgid": 205, "ruid": 1000, "euid": 0}),
        (GID, struct.pack("<iiII", 205, 205, 100, 65534), "proc_gid", {"pid": 205, "tgid": 205, "rgid": 100, "egid": 65534}),
        (SID, struct.pack("<ii", 205, 205), "proc_sid", {"pid": 205, "tgid": 205}),
        (PTRACE, struct.pack("<iiii", 205, 205, 300, 300), "proc_ptrace", {"pid": 205, "tgid": 205, "tracer_pid": 300, "tracer_tgid": 300}),
        (COREDUMP, struct.pack("<iiii", 205, 205, 100, 100), "proc_coredump", {"pid": 205, "tgid": 205, "parent_pid": 100, "parent_tgid": 100}),
    ]
    for what, union, name, values in cases:
        [event] = parse_datagram(message(what, union))
        assert (event.name, dict(event.values)) == (name, values)


def test_comm_of_full_length_has_no_terminator():
    [event] = parse_datagram(message(COMM, struct.pack("<ii16s", 1, 1, b"abcdefghijklmnop")))
    assert event.values["comm"] == "abcdefghijklmnop"


@pytest.mark.parametrize(("status", "code", "signal", "core"), [
    (7 << 8, 7, 0, False),          # exit(7)
    (0, 0, 0, False),
    (255 << 8, 255, 0, False),      # exit(-1): a wait status keeps the low 8 bits
    (9, 137, 9, False),             # SIGKILL
    (11 | 0x80, 139, 11, True),     # SIGSEGV with a core dump
    (15, 143, 15, False),
])
def test_exit_status(status, code, signal, core):
    [event] = parse_datagram(message(EXIT, struct.pack("<iiIiii", 300, 299, status, 17, 100, 100)))
    assert event.name == "proc_exit"
    assert event.values == {
        "pid": 300, "tgid": 299, "exit_status": status, "exit_signal": 17, "parent_pid": 100, "parent_tgid": 100,
        "exit_code": code, "signal": signal, "core_dumped": core,
    }
    assert decode_wait_status(status) == (code, signal, core)


def test_thread_exit_signal_is_signed():
    [event] = parse_datagram(message(EXIT, struct.pack("<iiIiii", 301, 299, 0, -1, 1, 1)))
    assert event.values["exit_signal"] == -1


def test_ack_and_cpu_of_old_kernels():
    [ack] = parse_datagram(message(0, struct.pack("<I", 1), cpu=0xFFFFFFFF, seq=0, ack=42))
    assert (ack.name, ack.cpu, ack.ack, dict(ack.values)) == ("proc_ack", None, 42, {"err": 1})


def test_unknown_what_is_an_explicit_event():
    [event] = parse_datagram(message(0x1000, b"\1\2\3\4"))
    assert (event.name, dict(event.values), event.what) == ("proc_unknown", {"what": 0x1000}, 0x1000)
    assert "proc_unknown" in EVENT_NAMES


def test_other_connector_ids_and_noop_are_skipped_several_per_datagram():
    noop = struct.pack("<IHHII", 16, 1, 0, 0, 0)
    other = message(FORK, struct.pack("<iiii", 1, 1, 2, 2), idx=2)
    data = message(EXEC, struct.pack("<ii", 5, 5), seq=1) + noop + other + message(EXEC, struct.pack("<ii", 6, 6), seq=2)
    assert [(e.seq, e.values["pid"]) for e in parse_datagram(data)] == [(1, 5), (2, 6)]


def test_unaligned_lengths_are_padded_to_four():
    first = message(COMM, struct.pack("<ii16s", 1, 1, b"x"), pad_union_to=25)  # 77 bytes
    data = first + b"\0\0\0" + message(EXEC, struct.pack("<ii", 6, 6))
    assert [e.name for e in parse_datagram(data)] == ["proc_comm", "proc_exec"]


@pytest.mark.parametrize("cut", [1, 15, 16, 20, 35, 36, 51, 52, 60, 75])
def test_truncated_message_raises(cut):
    data = message(EXIT, struct.pack("<iiIiii", 1, 1, 0, 17, 1, 1))
    with pytest.raises(TraceDataError):
        parse_datagram(data[:cut])


def test_corrupt_lengths_raise():
    good = bytearray(message(EXIT, struct.pack("<iiIiii", 1, 1, 0, 17, 1, 1)))
    too_long = bytearray(good)
    struct.pack_into("<I", too_long, 0, 200)
    short_nl = bytearray(good)
    struct.pack_into("<I", short_nl, 0, 8)
    cn_overrun = bytearray(good)
    struct.pack_into("<H", cn_overrun, 32, 41)
    event_short = message(EXIT, b"", pad_union_to=8)  # an exit event needs a 24-byte union
    header_short = bytearray(good)
    struct.pack_into("<H", header_short, 32, 8)
    error = struct.pack("<IHHII", 36, 2, 0, 0, 0) + b"\0" * 20
    for data in (too_long, short_nl, cn_overrun, event_short, header_short, error):
        with pytest.raises(TraceDataError):
            parse_datagram(bytes(data))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=75), st.integers(min_value=0, max_value=255))
def test_fuzz_raises_trace_data_error_only(noise, position, byte):
    corrupted = bytearray(message(EXIT, struct.pack("<iiIiii", 1, 1, 0, 17, 1, 1)))
    corrupted[position] = byte
    for data in (noise, bytes(corrupted), bytes(corrupted) + noise, bytes(corrupted[:position])):
        try:
            events = parse_datagram(data)
        except TraceDataError:
            continue
        assert all(e.name in EVENT_NAMES for e in events)


def test_sequence_tracker_counts_gaps_per_cpu():
    tracker = SequenceTracker()
    assert [tracker.observe(0, 10), tracker.observe(1, 500), tracker.observe(0, 11), tracker.observe(0, 14)] == [0, 0, 0, 2]
    assert tracker.observe(1, 501) == 0
    assert tracker.observe(None, 7) == 0   # no cpu: not counted
    assert tracker.observe(0, 3) == 0      # backwards: a new baseline
    assert tracker.observe(0, 5) == 1
    assert tracker.observe(2, 0xFFFFFFFE) == 0
    assert tracker.observe(2, 1) == 2  # across the wrap: 0xFFFFFFFF and 0 were lost
    assert tracker.observe(1, 400) == 0  # far backwards (a huge forward step is not believed)
    assert tracker.lost == 2 + 1 + 2
