"""perf_event_attr packing and perf ring parsing, on captured and hand-built ring bytes."""

from __future__ import annotations

import collections
import random
import struct

import pytest

from openetw.errors import TraceDataError
from openetw.kernel import perf_format as F

from . import perf_records as R


def test_attr_block_has_the_kernel_offsets():
    attr = F.PerfAttr(
        config=F.PERF_COUNT_SW_CPU_CLOCK, sample_period=1_001_003, flags=F.FLAG_USE_CLOCKID | F.FLAG_MMAP2,
        wakeup=4096, clockid=1, sample_max_stack=64,
    )
    raw = F.pack_attr(attr)
    assert len(raw) == 112
    assert struct.unpack_from("<II", raw, 0) == (F.PERF_TYPE_SOFTWARE, 112)
    assert struct.unpack_from("<QQQ", raw, 8) == (0, 1_001_003, F.DEFAULT_SAMPLE_TYPE)
    assert struct.unpack_from("<Q", raw, 40)[0] == 1 << 25 | 1 << 23
    assert struct.unpack_from("<I", raw, 48)[0] == 4096
    assert struct.unpack_from("<i", raw, 92)[0] == 1
    assert struct.unpack_from("<H", raw, 108)[0] == 64
    assert F.unpack_attr(raw) == attr


def test_captured_ring_parses_whole_across_the_end_of_the_area():
    data, meta = R.captured_ring()
    assert meta["tail"] % meta["data_size"] > meta["head"] % meta["data_size"]  # the unread part wraps
    records = F.parse_records(data, meta["tail"], meta["head"], meta["sample_type"])
    assert collections.Counter(r.kind for r in records) == {"mmap2": 28, "sample": 26, "fork": 7, "comm": 7, "exit": 7}
    times = [r.time for r in records]
    assert times == sorted(times) and times[0] == 9419828045067 and times[-1] == 9419853489050
    assert {r.cpu for r in records} == {0}
    forks = [r.values for r in records if r.kind == "fork"]
    assert {f["ppid"] for f in forks} == {30176}
    assert [f["pid"] for f in forks] == list(range(30185, 30192))
    assert all(f["pid"] == f["tid"] for f in forks)
    comms = [r.values for r in records if r.kind == "comm"]
    assert {(c["comm"], c["exec"]) for c in comms} == {("sh", True)}
    files = collections.Counter(r.values["filename"] for r in records if r.kind == "mmap2")
    assert files == {
        "/usr/bin/dash": 7, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": 7, "[vdso]": 7,
        "/usr/lib/x86_64-linux-gnu/libc.so.6": 7,
    }
    libc = next(r.values for r in records if r.kind == "mmap2" and r.values["filename"].endswith("libc.so.6"))
    assert (libc["pid"], libc["len"], libc["pgoff"], libc["prot"]) == (30185, 1400832, 155648, 5)
    for r in records:
        if r.kind == "sample":
            chain = r.values["callchain"]
            assert chain[0] in (F.CONTEXT_KERNEL, F.CONTEXT_USER)
            assert chain[1] == r.values["ip"]
            assert r.values["user"] == (chain[0] == F.CONTEXT_USER)


def test_captured_records_straddling_the_end_parse_the_same():
    data, meta = R.captured_ring()
    unread = F.ring_bytes(data, meta["tail"], meta["head"])
    expected = F.RingParser(meta["sample_type"]).parse(unread)
    for start in (meta["data_size"] - 4 * 8, meta["data_size"] * 5 - 100 * 8, 3 * 8):
        area, tail, head = R.place(unread, meta["data_size"], start)
        assert F.parse_records(area, tail, head, meta["sample_type"]) == expected


def test_hand_built_records_of_every_kind():
    raw = b"".join([
        R.task(F.RECORD_FORK, 101, 100, 101, 100, 10),
        R.comm(101, 101, "worker", 11),
        R.mmap2(101, 101, 0x7F0000001000, 0x5000, 0x1000, "/usr/lib/libdemo.so", 12),
        R.mmap2(101, 101, 0x7F0000010000, 0x1000, 0, "/opt/with build id", 13, build_id=b"\x01\x02\x03"),
        R.sample(0x7F0000001234, 101, 102, 14, 1, (F.CONTEXT_USER, 0x7F0000001234, 0x7F0000002000)),
        R.lost(5, 15),
        R.record(F.RECORD_THROTTLE, struct.pack("<QQQ", 16, 1, 2) + R.sample_id(0, 0, 16, 1)),
        R.record(F.RECORD_SWITCH_CPU_WIDE, struct.pack("<II", 7, 8) + R.sample_id(9, 9, 17, 1), F.MISC_SWITCH_OUT | F.MISC_SWITCH_OUT_PREEMPT),
        R.record(F.RECORD_SWITCH, R.sample_id(9, 9, 18, 1)),
        R.task(F.RECORD_EXIT, 101, 100, 101, 100, 19),
        R.record(17, b"\0" * 16 + R.sample_id(0, 0, 20, 0)),  # KSYMBOL: not asked for, skipped
    ])
    records = F.RingParser().parse(raw)
    assert [r.kind for r in records] == ["fork", "comm", "mmap2", "mmap2", "sample", "lost", "throttle", "switch", "switch", "exit"]
    assert [r.time for r in records] == list(range(10, 20))
    fork, comm, lib, built, smp, lost, throttle, switch_wide, switch, exit_ = records
    assert (fork.values["pid"], fork.values["ppid"], fork.values["tid"], fork.values["ptid"]) == (101, 100, 101, 100)
    assert (comm.values["comm"], comm.values["exec"]) == ("worker", True)
    assert (lib.values["addr"], lib.values["len"], lib.values["pgoff"], lib.values["ino"]) == (0x7F0000001000, 0x5000, 0x1000, 1234)
    assert lib.values["filename"] == "/usr/lib/libdemo.so"
    assert (built.values["build_id"], built.values["filename"]) == (b"\x01\x02\x03", "/opt/with build id")
    assert (smp.values["ip"], smp.values["pid"], smp.values["tid"], smp.cpu, smp.values["user"]) == (0x7F0000001234, 101, 102, 1, True)
    assert lost.values["lost"] == 5
    assert throttle.values["id"] == 1
    assert (switch_wide.values["out"], switch_wide.values["preempt"], switch_wide.values["other_tid"]) == (True, True, 8)
    assert (switch.values["out"], switch.values["other_pid"]) == (False, None)
    assert exit_.kind == "exit" and exit_.cpu == 0


def test_hand_built_record_split_by_the_end_of_the_area():
    raw = R.mmap2(7, 7, 0x400000, 0x2000, 0, "/bin/true", 1) + R.sample(0x400010, 7, 7, 2, 0, (F.CONTEXT_USER, 0x400010))
    for start in range(4096 - len(raw), 4096, 8):  # every split point, header included
        area, tail, head = R.place(raw, 4096, start + 4096 * 3)
        records = F.parse_records(area, tail, head)
        assert [r.kind for r in records] == ["mmap2", "sample"]
        assert records[0].values["filename"] == "/bin/true"
        assert records[1].values["callchain"] == (F.CONTEXT_USER, 0x400010)


def test_sample_type_without_callchain_or_trailer():
    parser = F.RingParser(F.SAMPLE_IP | F.SAMPLE_TID | F.SAMPLE_TIME | F.SAMPLE_PERIOD, sample_id_all=False)
    raw = R.record(F.RECORD_SAMPLE, struct.pack("<QIIQQ", 0x1000, 3, 4, 99, 1_000_000))
    raw += R.record(F.RECORD_COMM, struct.pack("<II", 3, 4) + R.c_string("x"))
    sample, comm = parser.parse(raw)
    assert (sample.values["ip"], sample.values["period"], sample.time, sample.cpu) == (0x1000, 1_000_000, 99, None)
    assert (comm.values["comm"], comm.time) == ("x", None)


def test_split_callchain_drops_markers():
    chain = (F.CONTEXT_KERNEL, 0xFFFF0001, 0xFFFF0002, F.CONTEXT_USER, 0x401000, 0x402000, F.CONTEXT_HV, 0x5)
    assert F.split_callchain(chain) == ([0xFFFF0001, 0xFFFF0002], [0x401000, 0x402000])


@pytest.mark.parametrize(("raw", "message"), [
    (b"\x09\0\0\0\0\0", "header cut"),
    (struct.pack("<IHH", 9, 0, 0), "bad size 0"),
    (struct.pack("<IHH", 9, 0, 12) + b"\0" * 8, "bad size 12"),
    (struct.pack("<IHH", 9, 0, 64) + b"\0" * 8, "bad size 64"),
    (R.record(F.RECORD_SAMPLE, struct.pack("<QIIQIIQ", 1, 2, 3, 4, 0, 0, 1000)), "callchain of 1000 entries"),
    (R.record(F.RECORD_COMM, struct.pack("<II", 1, 1) + b"abcdefgh" + R.sample_id(1, 1, 1, 0)), "terminating NUL"),
    (R.record(F.RECORD_FORK, b"\0" * 16), "cannot hold"),
    (R.record(F.RECORD_MMAP2, b"\0" * 8 + R.sample_id(1, 1, 1, 0)), "cannot hold"),
    (
        R.record(
            F.RECORD_MMAP2, struct.pack("<IIQQQ", 1, 1, 0, 0, 0) + bytes([30, 0, 0, 0]) + b"\0" * 20 + b"\0" * 16 + R.sample_id(1, 1, 1, 0),
            F.MISC_MMAP_BUILD_ID,
        ),
        "build id of 30 bytes",
    ),
])
def test_damaged_records_raise_trace_data_error(raw, message):
    with pytest.raises(TraceDataError, match=message):
        F.RingParser().parse(raw)


@pytest.mark.parametrize(("size", "tail", "head", "message"), [
    (4096, 16, 8, "behind its tail"),
    (4096, 0, 4104, "unread bytes in a 4096-byte area"),
    (4096, 4, 16, "not 8-byte aligned"),
    (3000, 0, 8, "not a power of two"),
])
def test_impossible_ring_positions_raise_trace_data_error(size, tail, head, message):
    with pytest.raises(TraceDataError, match=message):
        F.ring_bytes(bytes(size), tail, head)


def test_random_damage_to_captured_bytes_raises_only_trace_data_error():
    data, meta = R.captured_ring()
    unread = F.ring_bytes(data, meta["tail"], meta["head"])
    parser = F.RingParser(meta["sample_type"])
    rng = random.Random(1234)
    failures = 0
    for _ in range(400):
        damaged = bytearray(unread)
        for _ in range(rng.randint(1, 6)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = rng.choice([len(damaged), rng.randrange(len(damaged))])
        try:
            parser.parse(bytes(damaged[:cut]))
        except TraceDataError:
            failures += 1
    assert failures > 0


def test_unsupported_sample_type_is_refused():
    with pytest.raises(TraceDataError, match="0x400"):
        F.RingParser(F.DEFAULT_SAMPLE_TYPE | F.SAMPLE_RAW)
