"""Probes as DTrace users write them: a system call entry's ``argN`` are its arguments and
``copyinstr(argN)`` the path the kernel trace recorded for it (root, live, with a private trace
service); a program of ``BEGIN`` alone runs (no root needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.main import main
from tests.service.harness import kill_recorders, need_tracefs, start_service

# Three opens of a missing file, then one of an existing one, each with known flags.
WORKLOAD = """
import os, sys
missing, present = sys.argv[1], sys.argv[2]
for _ in range(3):
    try:
        os.open(missing, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        pass
os.close(os.open(present, os.O_WRONLY | os.O_APPEND))

"""

PROGRAM = r"""
syscall::openat:entry /pid == $target/ { printf("%d %x %s\n", (int) arg0, arg2, copyinstr(arg1)); }
syscall::openat:return /pid == $target && errno == 2/ { @misses = count(); }
"""


def test_argn_and_copyinstr_on_openat_entry(tmp_path: Path) -> None:
    need_tracefs()
    missing, present = tmp_path / "no-such-file-probe", tmp_path / "present.txt"
    present.write_text("x")
    (tmp_path / "work.py").write_text(WORKLOAD)
    socket_path = tmp_path / "control.sock"
    running = start_service(socket_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(OPENETW_SOCKET=str(socket_path), OPENETW_NO_AUTOSTART="1")
    command = f"{sys.executable} {tmp_path / 'work.py'} {missing} {present}"
    try:
        result = subprocess.run([sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", "-c", command, "-n", PROGRAM],
                                env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    finally:
        running.kill()
        kill_recorders(running.pid)
    records = [json.loads(line) for line in result.stdout.splitlines()]
    lost = next(r["data"] for r in records if r["type"] == "lost")
    # A path the kernel could not copy (a page not resident at the call: seen on a loaded machine,
    # never for the workload's own strings) is counted, and its copyinstr() is the run's error.
    assert result.returncode == (1 if lost["strings_unread"] else 0), (result.stderr, result.stdout)
    assert lost["runtime_errors"] == lost["strings_unread"], lost
    lines = [r["data"].split() for r in records if r["type"] == "printf"]
    at_fdcwd = "-100"
    rdonly_nofollow = f"{os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC:x}"  # Python opens with O_CLOEXEC
    wronly_append = f"{os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC:x}"
    assert lines.count([at_fdcwd, rdonly_nofollow, str(missing)]) == 3, (lines, result.stderr)
    assert lines.count([at_fdcwd, wronly_append, str(present)]) == 1, lines
    maps = {name: value for r in records if r["type"] == "map" for name, value in r["data"].items()}
    assert maps["@misses"] >= 3  # (and the interpreter's own lookups)


def _probe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["probe", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_a_begin_only_program_runs_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _probe(capsys, "-q", "-n", 'BEGIN { printf("hello %d\\n", 6 * 7); exit(3); }')
    assert (status, out) == (3, "hello 42\n"), err
    # Without exit(), it runs until its command (-c) ends, and END runs then.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    result = subprocess.run([sys.executable, "-m", "openetw", "probe", "-q", "-c", "true", "-n",
                             'BEGIN { printf("begin\\n"); } END { printf("end\\n"); }'],
                            env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "begin\nend\n"), result.stderr


def test_copyinstr_outside_a_recorded_call_is_a_runtime_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    result = subprocess.run([sys.executable, "-m", "openetw", "probe", "-q", "-c", "true", "-n",
                             'BEGIN { printf("%s", copyinstr(1234)); }'],
                            env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "copyinstr(0x4d2): no string recorded at this address" in result.stderr
    assert result.stdout == "" and result.returncode == 1


# A call that takes no path: its argN are its arguments too (the descriptor, the count).
# The reads come after a pause: a call in the first moments of a new process, before the trace has
# seen the process start, may be counted unattributed (honestly, in "syscalls_unattributed"); this
# test is about the arguments of the calls, not about that race.
READS = """
import os, sys, time
time.sleep(0.3)
fd = os.open(sys.argv[1], os.O_RDONLY)
os.dup2(fd, 57)
for size in (3, 5, 7):
    os.read(57, size)
"""


def _run_probe(tmp_path: Path, args: list[str], timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    socket_path = tmp_path / "control.sock"
    running = start_service(socket_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(OPENETW_SOCKET=str(socket_path), OPENETW_NO_AUTOSTART="1")
    try:
        result = subprocess.run([sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", *args],
                                env=env, capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip
    finally:
        running.kill()
        kill_recorders(running.pid)
    return result, [json.loads(line) for line in result.stdout.splitlines()]


def _maps(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {name: value for r in records if r["type"] == "map" for name, value in r["data"].items()}


def test_argn_of_a_call_without_a_path(tmp_path: Path) -> None:
    need_tracefs()
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(64))
    (tmp_path / "reads.py").write_text(READS)
    program = 'syscall::read:entry /pid == $target && arg0 == 57/ { printf("%d %d\\n", (int) arg0, (int) arg2); }'
    result, records = _run_probe(tmp_path, ["-c", f"{sys.executable} {tmp_path / 'reads.py'} {data}", "-n", program])
    assert [r["data"] for r in records if r["type"] == "printf"] == ["57 3\n", "57 5\n", "57 7\n"], (result.stderr, result.stdout)
    lost = next(r["data"] for r in records if r["type"] == "lost")
    assert lost["syscall_args_unrecorded"] == 0, lost


DD_BYTES = 2000


def test_read_sizes_of_dd(tmp_path: Path) -> None:
    need_tracefs()
    command = f"dd if=/dev/zero of=/dev/null bs=1 count={DD_BYTES} status=none"
    # (-c holds the command in a shell that reads a line first, a byte at a time: not dd's reads.)
    result, records = _run_probe(tmp_path, ["-c", command, "-n", 'syscall::read:entry /execname == "dd"/ { @[arg2] = count(); }'])
    assert result.returncode == 0, result.stderr
    lost = next(r["data"] for r in records if r["type"] == "lost")
    assert _maps(records)["@"]["1"] == DD_BYTES and lost["syscall_args_unrecorded"] == 0, (_maps(records), lost)


LOADED_BYTES = 20_000
EVERY_CALL = """
syscall:::entry /pid == $target && execname == "dd"/ { @calls[probefunc, arg2] = count(); }
syscall::openat:entry /pid == $target && execname == "dd"/ { @opened[copyinstr(arg1)] = count(); }
"""


def test_every_call_of_a_command_on_a_loaded_machine(tmp_path: Path) -> None:
    # syscall:::entry: the arguments of every call (raw_syscalls), the paths of the path-taking ones,
    # of the target's processes named dd (-c holds the command in a shell that reads a line first).
    need_tracefs()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        command = f"dd if=/dev/zero of=/dev/null bs=1 count={LOADED_BYTES} status=none"
        result, records = _run_probe(tmp_path, ["-c", command, "-n", EVERY_CALL])
    finally:
        for process in busy:
            process.kill()
            process.wait()
    lost = next(r["data"] for r in records if r["type"] == "lost")
    # copyinstr() of a path not copied (a page not in memory) or of an entry not recorded (its
    # record lost, counted) is the run's error; nothing else is.
    assert result.returncode == (1 if lost["runtime_errors"] else 0), result.stderr
    assert lost["runtime_errors"] <= lost["strings_unread"] + lost["syscall_args_unrecorded"], lost
    reported = lost["events_lost"] + lost["syscalls_unattributed"] + lost["syscall_args_unrecorded"]
    calls = _maps(records)["@calls"]
    assert abs(calls["read,1"] - LOADED_BYTES) <= reported and abs(calls["write,1"] - LOADED_BYTES) <= reported, (calls, lost)
    opened = _maps(records).get("@opened", {})
    assert opened.get("/dev/zero", 0) + opened.get("/dev/null", 0) + lost["runtime_errors"] >= 2, (opened, lost)
    assert opened.get("/dev/zero", 0) <= 1 and opened.get("/dev/null", 0) <= 1, opened


def test_every_call_of_the_processes_of_a_name(tmp_path: Path) -> None:
    # No target: the predicate's execname is what the kernel trace records the arguments of.
    need_tracefs()
    dd = tmp_path / "ddargs"
    shutil.copy(shutil.which("dd") or "/bin/dd", dd)
    program = """
    syscall:::entry /execname == "ddargs"/ { @calls[probefunc, arg2] = count(); }
    proc:::exit /execname == "ddargs"/ { exit(0); }
    """
    socket_path = tmp_path / "control.sock"
    running = start_service(socket_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(OPENETW_SOCKET=str(socket_path), OPENETW_NO_AUTOSTART="1")
    try:
        probe = subprocess.Popen([sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", "-n", program],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert probe.stderr is not None
        started = probe.stderr.readline()
        assert "tracing" in started, started
        subprocess.run([str(dd), "if=/dev/zero", "of=/dev/null", "bs=1", f"count={DD_BYTES}", "status=none"], check=True)
        out, err = probe.communicate(timeout=300)
    finally:
        running.kill()
        kill_recorders(running.pid)
    records = [json.loads(line) for line in out.splitlines()]
    lost = next(r["data"] for r in records if r["type"] == "lost")
    calls = _maps(records)["@calls"]
    reported = lost["events_lost"] + lost["syscalls_unattributed"] + lost["syscall_args_unrecorded"]
    assert abs(calls["read,1"] - DD_BYTES) <= reported and abs(calls["write,1"] - DD_BYTES) <= reported, (calls, lost, err)
    # Only ddargs's calls are recorded, and only theirs could be counted unrecorded (a record lost).
    assert lost["syscall_args_unrecorded"] <= lost["events_lost"], lost
