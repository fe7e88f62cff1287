"""System call arguments without a kernel: argument records (``syscall_args``) matched to their
entries by thread, call number and time, as the kernel trace hands them over (column-wise, out of
order); the calls and names a program's probes ask the kernel trace to record."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from openetw.consumer._engine.index_build import KIND_CODES
from openetw.kernel.classes_args import SYSCALL_ARGS_HOOK, parse_syscall_args, same_call
from openetw.probe.lang.program import compile_script
from openetw.probe.run.kernel_columns import ColumnStage
from openetw.probe.run.kernel_probes import KernelProbes, syscall_args_calls, syscall_args_execnames
from openetw.probe.run.providers import PROBE_PROVIDERS
from tests.probe.test_kernel_columns import BASE, CSWITCH, ENTER, EXIT, UNKNOWN, FakeIndex, FakeLive, run

SCALE = 1000
HEAD = struct.Struct("<IBBH6Q")


def at(when: int, cpu: int = 0) -> int:
    """The FILETIME FakeIndex gives a row of this time on this CPU."""
    return BASE + (when * 10 + cpu * 5) * SCALE


def payload(number: int, args: tuple[int, ...], paths: dict[int, str] | None = None) -> bytes:
    mask = sum(1 << index for index in paths or {})
    texts = b"".join(text.encode() + b"\0" for _, text in sorted((paths or {}).items()))
    return HEAD.pack(number, mask, 0, 0, *(a & 0xFFFFFFFFFFFFFFFF for a in args)) + texts


class ArgsIndex(FakeIndex):
    """FakeIndex's rows, then argument records ``(filetime, tid, payload)``."""

    def __init__(self, rows: list[tuple[int, int, int, int, int]], arguments: list[tuple[int, int, bytes]]) -> None:
        super().__init__(rows, SCALE)
        data = bytearray(self.data[1])
        extra = np.zeros(len(arguments), dtype=self.records.dtype)
        for n, (filetime, tid, body) in enumerate(arguments):
            row = extra[n]
            row["filetime"], row["cpu"], row["hook_id"], row["pid"], row["tid"] = filetime, 0, SYSCALL_ARGS_HOOK, 100, tid
            row["kind"] = KIND_CODES["system"]
            row["buffer"], row["offset"], row["user_data_offset"], row["user_data_length"] = 1, len(data), 0, len(body)
            data += body + bytes(-len(body) % 8)
        self.records = np.concatenate((self.records, extra))[::-1]  # out of order, as batches come
        self.data = {1: bytes(data)}


class ArgsLive(FakeLive):
    kernel_flags = ("syscall", "cswitch", "process", "thread", "syscall_args")

    def __init__(self, rows: list[tuple[int, int, int, int, int]], arguments: list[tuple[int, int, bytes]]) -> None:
        super().__init__()
        self.rows, self.arguments = rows, arguments

    def run(self, callback: Any, kernel_batch: Any = None, caught_up: Any = None) -> dict[str, Any]:
        probes: KernelProbes = kernel_batch.__self__.kernel_probes
        probes.thread_pid.update({101: 100})
        probes.comm.update({100: "alpha"})
        kernel_batch(ArgsIndex(self.rows, self.arguments))
        return {}


# Thread 101 (process 100) on CPU 0: read (0), openat (257), write (1); each entry then its return.
CALLS = [
    (1, 0, CSWITCH, 101, UNKNOWN), (2, 0, ENTER, 0, UNKNOWN), (3, 0, EXIT, 7, UNKNOWN),
    (4, 0, ENTER, 257, UNKNOWN), (5, 0, EXIT, 3, UNKNOWN), (6, 0, ENTER, 1, UNKNOWN), (7, 0, EXIT, 1, UNKNOWN),
]  # fmt: skip
AT_FDCWD = -100
RECORDS = [
    (at(1) + 5, 101, payload(9, (1, 2, 3, 4, 5, 6))),  # a call whose entry did not come (lost): passed over
    (at(2) + 1, 101, payload(0, (3, 4096, 7, 0, 0, 0))),
    # Every call recorded: openat's record from raw_syscalls (its int as the register held it, and
    # whatever the two unused registers held), then its own with the path.
    (at(4) + 1, 101, payload(257, (AT_FDCWD & 0xFFFFFFFF, 0x2000, 0x80000, 0, 77, 88))),
    (at(4) + 2, 101, payload(257, (AT_FDCWD, 0x2000, 0x80000, 0, 0, 0), {1: "/etc/x"})),
    # (the write's record was lost)
]  # fmt: skip
PROGRAM = """
syscall::read:entry, syscall::write:entry { printf("%s %d %d %d|", probefunc, arg0, arg1, arg2); }
syscall::openat:entry { printf("%s %d %x %s|", probefunc, (int) arg0, arg2, copyinstr(arg1)); }
"""


def test_an_entry_gets_the_first_record_of_its_call_and_thread_near_its_time() -> None:
    text, runner = run(PROGRAM, live=ArgsLive(CALLS, RECORDS))
    fired = [line.split() for line in text.split("|") if line.strip()]
    assert fired == [["read", "3", "4096", "7"], ["openat", "-100", "80000", "/etc/x"], ["write", "0", "0", "0"]]
    assert runner.kernel_probes is not None
    # The write's arguments were not recorded: counted, never silently 0.
    assert (runner.kernel_probes.args_unrecorded, runner.kernel_probes.strings_unread) == (1, 0)
    assert runner.kernel_probes.args_held == 0 and not any(runner.kernel_probes.call_args.values())  # every record taken or passed over


def test_two_records_are_one_call_only_with_one_path_pointer_and_paths_on_one_of_them() -> None:
    raw = parse_syscall_args(payload(257, (0xFFFFFF9C, 0x2000, 0, 0, 5, 6)))
    own = parse_syscall_args(payload(257, (AT_FDCWD, 0x2000, 0, 0, 0, 0), {1: "/a"}))
    assert same_call(raw, own) and same_call(own, raw)
    assert not same_call(raw, raw)  # two calls without paths (a path record lost)
    assert not same_call(raw, parse_syscall_args(payload(257, (AT_FDCWD, 0x3000, 0, 0, 0, 0), {1: "/b"})))
    assert not same_call(parse_syscall_args(payload(2, (0x2000, 0, 0, 0, 0, 0))), own)


def test_argument_records_are_forgotten_once_their_entry_cannot_come() -> None:
    stage = ColumnStage()
    for n in range(5):
        stage._take_args((BASE + n, 7, payload(0, (n, 0, 0, 0, 0, 0)), 0))
    assert stage.args_held == 5
    stage._purge_args(BASE + 100_000_000)  # 10 s later: past WAIT_LIMIT
    assert (stage.call_args, stage.args_held) == ({}, 0)


def _program(text: str) -> Any:
    return compile_script(text, providers=frozenset(PROBE_PROVIDERS))


@pytest.mark.parametrize(
    "text, calls",
    [
        ("syscall::read:entry { @[arg2] = count(); }", ["read"]),
        ('syscall::openat:entry, syscall::open*:return { printf("%s", copyinstr(arg1)); }', ["openat", "open*"]),
        ("syscall::read:entry { trace(arg0); } syscall:::entry { @ = count(); }", ["*"]),
        ("syscall::*:return { trace(arg0); }", ["*"]),
    ],
)
def test_the_calls_a_program_probes_are_those_whose_arguments_are_recorded(text: str, calls: list[str]) -> None:
    program = _program(text)
    assert syscall_args_calls([d for clause in program.clauses for d in clause.descriptions]) == calls


@pytest.mark.parametrize(
    "text, names",
    [
        ('syscall:::entry /execname == "dd"/ { @[arg0] = count(); }', ["dd"]),
        ('syscall:::entry /pid > 1 && "cat" == execname/ { trace(arg0); } syscall::read:entry /execname == "dd"/ { trace(arg2); }',
         ["cat", "dd"]),
        ('syscall:::entry /execname == "dd"/ { trace(arg0); } syscall::read:entry { trace(arg2); }', None),
        ('syscall:::entry /execname == "dd" || pid == 1/ { trace(arg0); }', None),
        ('syscall:::entry /execname != "dd"/ { trace(arg0); }', None),
        ('syscall:::entry /execname == "dd"/ { trace(arg0); } proc:::exit { trace(pid); }', ["dd"]),
    ],
)  # fmt: skip
def test_the_names_every_syscall_predicate_requires_are_those_whose_arguments_are_recorded(text: str, names: list[str] | None) -> None:
    program = _program(text)
    assert syscall_args_execnames(program.tree, program.clauses) == names


class TwoThreadsLive(ArgsLive):
    """ArgsLive with thread 202 of process 200 (beta) beside 101 of 100 (alpha)."""

    def run(self, callback: Any, kernel_batch: Any = None, caught_up: Any = None) -> dict[str, Any]:
        probes: KernelProbes = kernel_batch.__self__.kernel_probes
        probes.thread_pid.update({202: 200})
        probes.comm.update({200: "beta"})
        return super().run(callback, kernel_batch, caught_up)


def test_a_record_stamped_late_is_its_calls_until_the_threads_next_entry() -> None:
    # The thread was preempted between the call's two tracepoints: its openat's record comes half
    # a millisecond after the entry. Of two reads, the record after the second is the second's.
    calls = [(1, 0, CSWITCH, 101, UNKNOWN), (2, 0, ENTER, 257, UNKNOWN), (3, 0, EXIT, 3, UNKNOWN),
             (5, 0, ENTER, 0, UNKNOWN), (6, 0, ENTER, 0, UNKNOWN)]  # fmt: skip
    records = [(at(2) + 5_000, 101, payload(257, (AT_FDCWD, 0x2000, 0x80000, 0, 0, 0), {1: "/late"})),
               (at(6) + 1, 101, payload(0, (4, 64, 9, 0, 0, 0)))]  # fmt: skip
    text, runner = run(PROGRAM, live=ArgsLive(calls, records))
    fired = [line.split() for line in text.split("|") if line.strip()]
    assert fired == [["openat", "-100", "80000", "/late"], ["read", "0", "0", "0"], ["read", "4", "64", "9"]]
    assert runner.kernel_probes is not None and runner.kernel_probes.args_unrecorded == 1


def test_argument_records_say_which_thread_ran_around_a_missed_switch() -> None:
    # CPU 0 runs 202 (beta), and the next recorded switch takes 101 (alpha) off: the switch between
    # was missed. beta's read record says beta still ran at 2, alpha's openat record that alpha
    # ran from its entry at 4: only the return at 3 is either's.
    calls = [(1, 0, CSWITCH, 202, UNKNOWN), (2, 0, ENTER, 0, UNKNOWN), (3, 0, EXIT, 5, UNKNOWN),
             (4, 0, ENTER, 257, UNKNOWN), (5, 0, EXIT, 3, UNKNOWN), (6, 0, CSWITCH, 0 | (101 << 32), 100)]  # fmt: skip
    records = [(at(2) + 1, 202, payload(0, (3, 64, 5, 0, 0, 0))),
               (at(4) + 1, 101, payload(257, (AT_FDCWD, 0x2000, 0x80000, 0, 0, 0), {1: "/etc/y"}))]  # fmt: skip
    program = 'syscall:::entry, syscall:::return { printf("%s %s %s|", probename, probefunc, execname); }' \
              'syscall::openat:entry { printf("%s|", copyinstr(arg1)); }'  # fmt: skip
    text, runner = run(program, live=TwoThreadsLive(calls, records))
    fired = [line.split() for line in text.split("|") if line.strip()]
    assert fired == [["entry", "read", "beta"], ["entry", "openat", "alpha"], ["/etc/y"], ["return", "openat", "alpha"]]
    assert runner.kernel_probes is not None
    assert (runner.kernel_probes.unattributed, runner.kernel_probes.args_unrecorded) == (1, 0)
    # Without the records, all four calls are either thread's.
    text, runner = run(program, live=TwoThreadsLive(calls, []))
    assert text == "" and runner.kernel_probes is not None and runner.kernel_probes.unattributed == 4
