"""System call arguments from BPF: which tracepoints the programs go on for the calls asked for,
the records' bytes, and (root) the programs on a live kernel: the calls, processes and names
asked for, and those only."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.bpf_args import BpfArgsSource, enter_calls
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_args import PATH_SYSCALLS, parse_syscall_args

AVAILABLE = ["read", "write", "openat", "newstat", "newfstatat", "pread64", "preadv", "execve"]


def test_the_calls_asked_for_are_found_by_name_pattern_or_new_name() -> None:
    found, missing, every = enter_calls(AVAILABLE, ["read", "stat", "pread*", "no_such_call"])
    assert (found, missing, every) == (["newstat", "pread64", "preadv", "read"], ["no_such_call"], False)  # path-taking first
    # Every call: raw_syscalls records them all; the path-taking ones' own programs add the paths.
    assert enter_calls(AVAILABLE, ["read", "*"]) == ([c for c in PATH_SYSCALLS if c in AVAILABLE], [], True)
    assert enter_calls(AVAILABLE, [""])[2]
    # Nothing asked: the path-taking calls (the syscall_args flag of `kernel start`).
    found, missing, every = enter_calls(AVAILABLE, None)
    assert (set(found), set(missing), every) == (set(PATH_SYSCALLS) & set(AVAILABLE), set(PATH_SYSCALLS) - set(AVAILABLE), False)


def _mapped(values: dict[str, Any]) -> tuple[EventRecord, bytes]:
    mapper = KernelEventMapper({"syscall_args", "syscall"})
    records = mapper.map("syscall_args", 5_000, 1, values)
    raw: list[bytes] = []
    mapper.map_events([(5_000, 1, "syscall_args", values)], lambda record: True, lambda data, cpu, ts: raw.append(data) or True)
    return records[0], raw[0]


def test_a_record_without_paths_is_its_payload_and_both_ways_give_the_same_bytes() -> None:
    body = parse_syscall_args  # the payload the program writes is the record's, byte for byte
    head = (0).to_bytes(4, "little") + bytes(4) + b"".join(a.to_bytes(8, "little") for a in (3, 4096, 7, 0, 0, 0))
    record, raw = _mapped({"tid": 41, "pid": 40, "payload": head})
    assert bytes(record.user_data) == head and body(head) == (0, (3, 4096, 7, 0, 0, 0), {})
    assert (record.tid, record.pid, record.hook_id) == (41, 40, 0x0F78)
    assert raw == bytes(record.raw)
    record, raw = _mapped({"tid": 41, "pid": 40, "nr": 257, "args": (-100, 0x2000, 0, 0, 0, 0), "paths": {1: "/etc/x"}})
    assert body(bytes(record.user_data)) == (257, ((-100) & (1 << 64) - 1, 0x2000, 0, 0, 0, 0), {1: "/etc/x"})
    assert raw == bytes(record.raw)


def _records(source: BpfArgsSource, command: list[str]) -> list[dict[str, Any]]:
    source.start()
    try:
        subprocess.run(command, check=True)
        events: list[Any] = []
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            events += source.read(0.05)
        source.stop()
        events += source.drain()
        assert source.lost() == 0
    finally:
        source.close()
    return [values for _, _, _, values in events]


def _parsed(values: dict[str, Any]) -> tuple[int, int, tuple[int, ...], dict[int, str | None]]:
    if "payload" in values:
        number, args, paths = parse_syscall_args(values["payload"])
        return values["pid"], number, args, paths
    return values["pid"], values["nr"], tuple(a & (1 << 64) - 1 for a in values["args"]), values["paths"]


DD = "dd if=/dev/zero of=/dev/null bs=1 count=300 status=none"


def test_a_process_its_children_and_the_calls_asked_for_only(tracefs_root: Path) -> None:
    script = f"read _; {DD}; ({DD}; true)"
    child = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)
    source = BpfArgsSource(tracefs_root, calls=["read"], pids=[child.pid])
    source.start()
    try:
        child.communicate(b"go\n")
        events: list[Any] = []
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            events += source.read(0.05)
        source.stop()
        events += source.drain()
    finally:
        source.close()
    calls = [_parsed(values) for _, _, _, values in events]
    assert {number for _, number, _, _ in calls} == {0}  # read, and nothing else
    one_byte = Counter(pid for pid, _, args, _ in calls if args[2] == 1)
    # Both dd (one a child of the shell, one of its subshell's) read 300 bytes one at a time (the
    # shell's `read` may read its line a byte at a time too); no one else is recorded.
    assert sorted(one_byte.values())[-2:] == [300, 300] and len(one_byte) <= 3
    assert len({pid for pid, _, _, _ in calls}) <= 4  # the shell, its subshell, the two dd


def test_every_call_of_the_names_asked_for(tracefs_root: Path) -> None:
    calls = [_parsed(values) for values in _records(BpfArgsSource(tracefs_root, calls=["*"], execnames=["dd"]),
                                                     ["sh", "-c", f"{DD}; cat /dev/null"])]  # fmt: skip
    numbers = Counter((number, args[2]) for _, number, args, _ in calls)
    assert numbers[0, 1] == 300 and numbers[1, 1] == 300  # read and write of one byte: every call, not only the path-taking
    assert len({pid for pid, _, _, _ in calls}) == 1  # dd's alone: not the shell's, not cat's
    opened = [paths[1] for _, number, _, paths in calls if number == 257 and paths]
    assert "/dev/zero" in opened and "/dev/null" in opened  # the path-taking calls' own programs add the paths
    assert os.getpid() not in {pid for pid, _, _, _ in calls}
