"""Kernel probes without a kernel: batches of system call and context switch rows (as the kernel
trace hands them over, out of order) fired record by record and counted on columns, the same."""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np
import pytest

from openetw.consumer._engine.index_build import KIND_CODES, RECORD_DTYPE
from openetw.probe.lang.program import compile_script
from openetw.probe.run.kernel_probes import KernelProbes, syscall_names
from openetw.probe.run.live import LiveSessions, etw_enables
from openetw.probe.run.providers import PROBE_PROVIDERS
from openetw.probe.run.runner import ProbeRun

CSWITCH, ENTER, EXIT = 0x0524, 0x0F33, 0x0F34
UNKNOWN = 0xFFFFFFFF
BASE = 134_000_000_000_000_000
# (time, cpu, hook, value, header pid): thread 101 (process 100) runs on CPU 0, then on CPU 1
# after thread 202 (process 200), and returns there from the call it entered on CPU 0 before.
ROWS = [
    (1, 0, CSWITCH, 101, UNKNOWN), (2, 0, ENTER, 257, UNKNOWN), (3, 0, EXIT, (-2) & 0xFFFFFFFF, UNKNOWN),
    (4, 0, ENTER, 0, UNKNOWN), (6, 0, CSWITCH, 0 | (101 << 32), 100),
    (1, 1, CSWITCH, 202, UNKNOWN), (2, 1, ENTER, 0, UNKNOWN), (3, 1, EXIT, 5, UNKNOWN),
    (7, 1, CSWITCH, 101 | (202 << 32), 200), (8, 1, EXIT, 7, UNKNOWN), (9, 1, ENTER, 1, UNKNOWN), (10, 1, EXIT, 3, UNKNOWN),
]  # fmt: skip


class FakeIndex:
    """What the probes read of a ``BufferIndex``: rows and their buffers' bytes."""

    def __init__(self, rows: list[tuple[int, int, int, int, int]], scale: int = 1000) -> None:
        self.records = np.zeros(len(rows), dtype=RECORD_DTYPE)
        data = bytearray()
        for n, (when, cpu, hook, value, pid) in enumerate(rows):
            entry = self.records[n]
            # Times 10 apart, CPU 1's 5 after CPU 0's: no two rows at the same moment.
            entry["filetime"], entry["cpu"], entry["hook_id"], entry["pid"] = BASE + (when * 10 + cpu * 5) * scale, cpu, hook, pid
            entry["kind"] = KIND_CODES["system" if hook == CSWITCH else "perfinfo"]
            entry["buffer"], entry["offset"], entry["user_data_offset"] = 1, len(data), 0
            data += struct.pack("<Q", value)
        self.data = {1: bytes(data)}


class FakeLive(LiveSessions):
    """Delivers the rows in two batches, each shuffled, as the kernel trace could."""

    def __init__(self) -> None:
        self.paths, self.evtx, self.manifests, self.errors, self.trace, self.stats = [], [], None, [], None, {}
        self._lock = threading.Lock()

    def run(self, callback: Any, kernel_batch: Any = None, caught_up: Any = None) -> dict[str, Any]:
        order = np.random.default_rng(7).permutation(len(ROWS)).tolist()
        probes: KernelProbes = kernel_batch.__self__.kernel_probes
        probes.thread_pid.update({101: 100, 202: 200})
        probes.comm.update({100: "alpha", 200: "beta"})
        kernel_batch(FakeIndex([ROWS[i] for i in order[:7]]))
        kernel_batch(FakeIndex([ROWS[i] for i in order[7:]]))
        return {}

    def stop(self) -> None:
        pass


class BatchedLive(FakeLive):
    """Delivers the given batches in order, ``scale`` FILETIME units per tenth of a row's time."""

    def __init__(self, batches: list[list[tuple[int, int, int, int, int]]], scale: int) -> None:
        super().__init__()
        self.batches, self.scale = batches, scale

    def run(self, callback: Any, kernel_batch: Any = None, caught_up: Any = None) -> dict[str, Any]:
        probes: KernelProbes = kernel_batch.__self__.kernel_probes
        probes.thread_pid.update({101: 100, 202: 200})
        probes.comm.update({100: "alpha", 200: "beta"})
        for batch in self.batches:
            kernel_batch(FakeIndex(batch, self.scale))
        return {}


def run(text: str, *, columnar: bool = True, live: FakeLive | None = None) -> tuple[str, ProbeRun]:
    program = compile_script(text, providers=frozenset(PROBE_PROVIDERS))
    out: list[str] = []
    runner = ProbeRun(program, live or FakeLive(), write=out.append, quiet=True, columnar=columnar, warn=lambda text: None)
    assert runner.run() == 0
    return "".join(out), runner


def test_calls_get_their_cpus_thread_and_its_entry() -> None:
    text, _ = run('syscall:::entry, syscall:::return { printf("%s %s %s %d %d|", execname, probefunc, probename, arg0, errno); }')
    fired = [line.split() for line in text.split("|") if line.strip()]
    # Names from the kernel headers (x86-64: 257 openat, 0 read, 1 write), sys_<n> without them.
    names = syscall_names()
    openat, read, write = (names.get(n, f"sys_{n}") for n in (257, 0, 1))
    assert fired == [
        ["alpha", openat, "entry", "0", "0"], ["beta", read, "entry", "0", "0"],
        ["alpha", openat, "return", "-2", "2"], ["beta", read, "return", "5", "0"],
        ["alpha", read, "entry", "0", "0"],
        ["alpha", read, "return", "7", "0"], ["alpha", write, "entry", "0", "0"], ["alpha", write, "return", "3", "0"],
    ]  # fmt: skip
    # (An entry's arg0 is the call's first argument, not its number: 0 where the arguments were not recorded.)


# CPU 1 as some kernels record it: the switches out of idle are missing. Thread 202 goes idle, then
# thread 101 (never switched in) makes a write and goes idle; then 202 runs again unannounced.
IDLE_GAPS = [
    (1, 1, CSWITCH, 0 | (202 << 32), 200), (3, 1, ENTER, 1, UNKNOWN), (4, 1, EXIT, 4096, UNKNOWN),
    (6, 1, CSWITCH, 0 | (101 << 32), 100), (8, 1, ENTER, 0, UNKNOWN), (9, 1, CSWITCH, 0 | (202 << 32), 200),
]  # fmt: skip
SCHED_AND_CALLS = 'sched:::on-cpu, sched:::off-cpu, syscall:::entry, syscall:::return { printf("%s %s %d|", probename, execname, timestamp); }'


def fired_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.split("|") if line.strip()]


def test_a_switch_out_of_idle_the_kernel_did_not_record_is_inferred() -> None:
    text, runner = run(SCHED_AND_CALLS, live=BatchedLive([IDLE_GAPS], 1000))
    # The inferred switch in comes at the first call after idle (idle makes no system calls).
    ms = 10_000 * 100  # one row time unit (10 * 1000 FILETIME units) in nanoseconds
    assert fired_lines(text) == [
        ["off-cpu", "beta", "0"],
        ["on-cpu", "alpha", str(2 * ms)], ["entry", "alpha", str(2 * ms)], ["return", "alpha", str(3 * ms)],
        ["off-cpu", "alpha", str(5 * ms)],
        ["on-cpu", "beta", str(7 * ms)], ["entry", "beta", str(7 * ms)], ["off-cpu", "beta", str(8 * ms)],
    ]  # fmt: skip
    assert runner.kernel_probes is not None
    assert (runner.kernel_probes.switches_inferred, runner.kernel_probes.unattributed) == (2, 0)


def test_calls_on_a_cpu_of_unknown_thread_wait_for_its_next_switch() -> None:
    # Thread 101 comes out of idle on CPU 1 unannounced and makes calls for seconds; CPU 0 moves on,
    # so CPU 1's first calls are released before the switch that names their thread has come.
    second = 1_000_000  # scale: a row time unit is 1 s
    first = [(0, 0, CSWITCH, 202, UNKNOWN), (1, 1, CSWITCH, 0 | (202 << 32), 200), (2, 1, ENTER, 1, UNKNOWN),
             (3, 1, EXIT, 10, UNKNOWN), (6, 1, ENTER, 1, UNKNOWN), (7, 1, EXIT, 20, UNKNOWN), (7, 0, ENTER, 0, UNKNOWN)]  # fmt: skip
    later = [(8, 1, CSWITCH, 0 | (101 << 32), 100), (12, 0, EXIT, 5, UNKNOWN)]
    text, runner = run('syscall::write:return { printf("%s %d|", execname, arg0); } sched:::on-cpu /execname == "alpha"/ { printf("on|"); }',
                       live=BatchedLive([first, later], second))  # fmt: skip
    assert fired_lines(text) == [["on"], ["alpha", "10"], ["alpha", "20"]]
    assert runner.kernel_probes is not None and runner.kernel_probes.unattributed == 0


def test_calls_wait_for_their_thread_at_most_five_seconds() -> None:
    # Thread 101 has CPU 1 to itself after idle and makes calls for 16 s before it switches: the
    # calls more than 5 s behind the newest record go without a thread, the later ones wait.
    second = 1_000_000
    first = [(0, 0, CSWITCH, 202, UNKNOWN), (1, 1, CSWITCH, 0 | (202 << 32), 200), (2, 1, ENTER, 1, UNKNOWN),
             (3, 1, EXIT, 10, UNKNOWN), (12, 1, ENTER, 1, UNKNOWN), (13, 1, EXIT, 20, UNKNOWN), (20, 0, ENTER, 0, UNKNOWN)]  # fmt: skip
    later = [(17, 1, CSWITCH, 0 | (101 << 32), 100), (30, 0, EXIT, 5, UNKNOWN)]
    text, runner = run('syscall::write:return { printf("%s %d|", execname, arg0); }', live=BatchedLive([first, later], second))
    assert fired_lines(text) == [["alpha", "20"]]
    assert runner.kernel_probes is not None and runner.kernel_probes.unattributed == 2


def test_calls_whose_thread_is_never_known_are_counted_not_fired() -> None:
    rows = [(1, 1, CSWITCH, 0 | (202 << 32), 200), (3, 1, ENTER, 1, UNKNOWN), (4, 1, EXIT, 4096, UNKNOWN)]
    text, runner = run(SCHED_AND_CALLS, live=BatchedLive([rows], 1000))
    assert fired_lines(text) == [["off-cpu", "beta", "0"]]
    assert runner.kernel_probes is not None and runner.kernel_probes.unattributed == 2


def test_counting_on_columns_equals_firing_clause_by_clause() -> None:
    program = "syscall:::entry, syscall:::return { @[execname, probefunc, probename] = count(); } syscall:::return { @n[pid] = count(); }"
    counted, runner = run(program)
    fired, by_record = run(program, columnar=False)
    assert runner.kernel_probes is not None and runner.kernel_probes.counting is not None
    assert by_record.kernel_probes is not None and by_record.kernel_probes.counting is None
    assert counted == fired and "alpha" in counted


class ExecLive(BatchedLive):
    """Thread 101 (process 100) reads twice on CPU 0, exec'ing between the reads: its name changes there."""

    EXEC_AT = BASE + 5 * 10 * 1000

    def __init__(self) -> None:
        rows = [(1, 0, CSWITCH, 101, UNKNOWN), (2, 0, ENTER, 0, UNKNOWN), (3, 0, EXIT, 1, UNKNOWN),
                (6, 0, ENTER, 0, UNKNOWN), (7, 0, EXIT, 1, UNKNOWN), (8, 0, ENTER, 0, UNKNOWN)]  # fmt: skip
        super().__init__([rows], 1000)

    def run(self, callback: Any, kernel_batch: Any = None, caught_up: Any = None) -> dict[str, Any]:
        probes: KernelProbes = kernel_batch.__self__.kernel_probes
        probes.exec_times[100] = [self.EXEC_AT]
        probes.execname = lambda pid, when: "python3" if when < self.EXEC_AT else "tool"  # type: ignore[method-assign]
        return super().run(callback, kernel_batch, caught_up)


def test_counting_on_columns_names_a_process_as_it_was_named_before_and_after_its_exec() -> None:
    program = "syscall:::entry, syscall:::return { @[execname, probename] = count(); }"
    counted, runner = run(program, live=ExecLive())
    fired, _ = run(program, columnar=False, live=ExecLive())
    assert runner.kernel_probes is not None and runner.kernel_probes.counting is not None
    assert counted == fired
    counts = {tuple(line.split()[:2]): int(line.split()[2]) for line in counted.splitlines() if line.strip()}
    assert counts == {("python3", "entry"): 1, ("python3", "return"): 1, ("tool", "entry"): 2, ("tool", "return"): 1}


def test_etw_enables_take_the_union_of_the_descriptions() -> None:
    from openetw.probe.lang.descriptions import parse_description

    guid = "d1d93ef7-e1f2-4f45-9943-03d245fe6c00"
    enables = etw_enables([parse_description(f"etw:{guid}:0x03_0x0000000000000001:12"), parse_description(f"etw:{guid}:0x05_0x0000000000000004:13")])
    (enable,) = enables.values()
    assert (enable.level, enable.keywords, enable.ids) == (5, 0x5, {12, 13})
    enables = etw_enables([parse_description(f"etw:{guid}:0x03_0x0000000000000001:12"), parse_description(f"etw:{guid}::generic_event")])
    (enable,) = enables.values()
    assert enable.ids is None and enable.options(None)["level"] == 0 and enable.options(None)["any"] == 0
    with pytest.raises(Exception, match="names its provider"):
        etw_enables([parse_description("etw:*::12")])


def test_calls_around_a_switch_missed_between_two_threads_are_counted_not_guessed() -> None:
    # CPU 0 runs 202 (beta); the next recorded switch takes 101 (alpha) off: the switch 202 -> 101
    # was missed somewhere between, so the two calls between are either thread's.
    rows = [(1, 0, CSWITCH, 202, UNKNOWN), (2, 0, ENTER, 1, UNKNOWN), (3, 0, EXIT, 4, UNKNOWN),
            (5, 0, CSWITCH, 202 | (101 << 32), 100), (6, 0, ENTER, 0, UNKNOWN)]  # fmt: skip
    text, runner = run('syscall:::entry, syscall:::return { printf("%s %s|", probename, execname); }', live=BatchedLive([rows], 1000))
    assert fired_lines(text) == [["entry", "beta"]]  # only the call after the recorded switch has a known thread
    assert runner.kernel_probes is not None
    assert (runner.kernel_probes.switches_inferred, runner.kernel_probes.unattributed) == (1, 2)
