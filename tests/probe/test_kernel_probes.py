"""Kernel probes over the kernel trace (root): one run of a known workload under a program with a
clause per probe family, one test per family reading its part; and seed 002's ``syscall:::return``
script emitting ``etw_trace`` events."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import Session
from tests.service.harness import (
    as_other_user,
    decoded,
    kill_recorders,
    need_tracefs,
    read_events,
    start_service,
)

WORKLOAD = Path(__file__).with_name("kernel_workload.py")

# Seed 002's script; only the status test differs: Linux returns -errno (ENOENT, 2), not an NTSTATUS.
SEED_SCRIPT = """
syscall:::return
{
	this->status = (int32_t) arg0;

	if (this->status == -2)
	{
		etw_trace
		(
			"Tools.DTrace.Platform", /* Provider Name */
			"AAD330CC-4BB9-588A-B252-08276853AF02", /* Provider GUID */
			"My custom event from DTrace", /* Event Name */
			1, /* Event Level (0 - 5) */
			0x0000000000000020, /* Flag */
			"etw_int32", /* Field_1 Name */
			"PID",/* Field_1 Type */
			(int32_t)pid, /* Field_1 Value  */
			"etw_string", /* Field_2 Name */
			"Execname", /* Field_2 type */
			execname, /* Field_2 Value */
			"etw_string", /* Field_3 Name */
			"Probefunc", /* Field_3 type */
			probefunc /* Field_3 Value */
			);
	}
}

syscall:::return /(int32_t) arg0 == -2/ { printf("%d %s %s", pid, execname, probefunc); }
"""

# Beside the seed's clauses, in the same run (system calls are the kernel trace's busiest records).
SYSCALLS = """
syscall::openat:entry { @entry[probefunc] = count(); }
syscall::openat:return /errno == 2/ { @enoent[probefunc, arg0, errno] = count(); }
syscall::write:return { @written = sum(arg0 > 0 ? arg0 : 0); }
"""

FAMILIES = """
proc:::create, proc:::exec-success, proc:::exit { printf("%s %s %d %d", probename, execname, pid, arg0); }
sched:::on-cpu, sched:::off-cpu /pid == $target/ { @sched[probename] = count(); }
io:::start, io:::done /arg0 == 65536/ { @io[probefunc, probename] = count(); }
tcp:::send, tcp:::receive { @tcp[probename] = sum(arg0); }
profile-997 /pid == $target/ { @samples = count(); @user[arg1 != 0] = count(); @frames[ustack(1)] = count(); }
"""


def probe_workload(directory: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = f"{sys.executable} {WORKLOAD} {directory}"
    return subprocess.run([sys.executable, "-m", "openetw", "probe", "-c", command, *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def run_once(directory: Path, program: str, listeners: tuple[str, ...] = ()) -> dict[str, Any]:
    """The workload run under ``program`` with a private service (and sessions writing
    ``listeners``' files, enabling the seed's provider with keywords 0x20 and 0x40): the maps,
    the printf lines, and the listeners' records."""
    need_tracefs()
    socket_path = directory / "control.sock"
    running = start_service(socket_path)
    env = {**os.environ, "OPENETW_SOCKET": str(socket_path), "OPENETW_NO_AUTOSTART": "1"}
    sessions = [Session.start(f"listener-{n}", directory / name, socket=socket_path, autostart=False,
                              providers=[("*Tools.DTrace.Platform", {"level": 5, "any": 0x20 << n})])
                for n, name in enumerate(listeners)]  # fmt: skip
    try:
        script = directory / "program.d"
        script.write_text(program)
        result = probe_workload(directory, env, "-q", "-f", "json", "-s", str(script))
    finally:
        for session in sessions:
            session.stop()
        running.kill()
        kill_recorders(running.pid)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    maps = {name: value for r in records if r["type"] == "map" for name, value in r["data"].items()}
    lines = [r["data"].split() for r in records if r["type"] == "printf"]
    return {"maps": maps, "lines": lines, "written": [read_events(directory / name) for name in listeners],
            "stderr": result.stderr}


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The workload run once under a clause per family (system calls aside)."""
    return run_once(tmp_path_factory.mktemp("kernel-probes"), FAMILIES)


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The workload run once under the seed's script and the system call clauses, with a session
    listening to the seed's provider and one asking it for another keyword."""
    return run_once(tmp_path_factory.mktemp("kernel-seed"), SEED_SCRIPT + SYSCALLS, ("listener.etl", "other.etl"))


def test_syscall_entry_and_return(seed: dict[str, Any]) -> None:
    maps = seed["maps"]
    assert maps["@entry"]["openat"] >= maps["@enoent"]["openat,-2,2"] >= 3  # the workload's three misses
    # Its page-cache write and its O_DIRECT one, which sleeps and may return on another CPU (the
    # switch to it there may be one the kernel did not record: inferred).
    assert maps["@written"] >= 12345 + 65536, seed["stderr"]


def test_proc_create_exec_exit(families: dict[str, Any]) -> None:
    lines = families["lines"]
    assert lines[0][0] == "exec-success"  # the command itself
    target = int(lines[0][2])
    (create,) = [line for line in lines if line[0] == "create"]
    child = int(create[3])
    assert int(create[2]) == target
    assert ["exec-success", "sh", str(child), str(child)] in lines
    assert ["exit", "sh", str(child), "3"] in lines
    assert lines[-1][0] == "exit" and int(lines[-1][2]) == target and lines[-1][3] == "0"


def test_sched_on_and_off_cpu(families: dict[str, Any]) -> None:
    counts = families["maps"]["@sched"]
    assert counts["off-cpu"] >= 20 and counts["on-cpu"] >= 20  # 20 sleeps at least
    assert abs(counts["off-cpu"] - counts["on-cpu"]) <= 2


def test_io_start_and_done(families: dict[str, Any]) -> None:
    assert families["maps"]["@io"] == {"read,start": 1, "read,done": 1, "write,start": 1, "write,done": 1}


def test_tcp_send_and_receive(families: dict[str, Any]) -> None:
    assert families["maps"]["@tcp"] == {"send": 3000, "receive": 3000}


def test_profile_samples(families: dict[str, Any]) -> None:
    maps = families["maps"]
    assert maps["@samples"] >= 100  # 0.4 s of CPU at 997 Hz, give or take
    assert maps["@user"]["1"] >= 50  # most land in user code
    # Their innermost user frame, as image`function+0xoffset (ELF symbols) or image`0xoffset: the interpreter's busy loop is in its images.
    frames = maps["@frames"]
    assert sum(frames.values()) == maps["@samples"]
    assert sum(count for frame, count in frames.items() if re.fullmatch(r"\S+`(\S+\+)?0x[0-9a-f]+", frame)) >= 50


def test_seed_syscall_script_emits_exactly_the_events_a_listener_records(seed: dict[str, Any]) -> None:
    emitted = seed["lines"]
    # The workload's three opens of a missing file are among them (and the interpreter's own lookups).
    assert sum(1 for _pid, name, call in emitted if call == "openat" and name.startswith("python")) >= 3
    listened, other = seed["written"]
    records = decoded(listened)
    assert {(provider, event) for provider, event, _ in records} == {("Tools.DTrace.Platform", "My custom event from DTrace")}
    assert [[str(v["PID"]), v["Execname"], v["Probefunc"]] for _, _, v in records] == emitted
    assert other == []  # the session asking the provider for another keyword got none of them


def test_kernel_probes_need_root() -> None:
    from openetw.errors import AccessDenied
    from openetw.probe.run.kernel_probes import kernel_flags_for
    from openetw.probe.run.live import LiveSessions

    def attempt() -> dict[str, Any]:
        try:
            LiveSessions([], kernel_flags=kernel_flags_for(["syscall"]))
        except AccessDenied as error:
            return {"refused": str(error)}
        return {"refused": None}

    answer = as_other_user(attempt) if os.geteuid() == 0 else attempt()
    assert "kernel probes need root" in answer["refused"] and "syscall" in answer["refused"]
