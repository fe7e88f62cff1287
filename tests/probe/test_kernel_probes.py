"""Kernel probes over the kernel trace (root), one test per family against a known workload,
and seed 002's ``syscall:::return`` script emitting ``etw_trace`` events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from openetw.controller import Session
from tests.service.harness import ServiceProcess, as_other_user, decoded, read_events

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

syscall:::return /(int32_t) arg0 == -2/ { printf("%d %s %s\\n", pid, execname, probefunc); }
"""


def probe_workload(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = f"{sys.executable} {WORKLOAD} {tmp_path}"
    return subprocess.run([sys.executable, "-m", "openetw", "probe", "-c", command, *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def json_data(text: str, kind: str) -> list[Any]:
    return [record["data"] for record in map(json.loads, text.splitlines()) if record["type"] == kind]


def test_seed_syscall_script_emits_exactly_the_events_a_listener_records(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    script = tmp_path / "addnewetwevent.d"
    script.write_text(SEED_SCRIPT)
    trace = tmp_path / "listener.etl"
    listener = Session.start("dtrace-listener", trace, providers=[("Tools.DTrace.Platform", {"level": 5, "any": 0x20})])
    try:
        result = probe_workload(tmp_path, "-q", "-s", str(script))
    finally:
        listener.stop()
    assert result.returncode == 0, result.stderr
    emitted = [line.split() for line in result.stdout.splitlines() if line.strip()]
    # The workload's three opens of a missing file are among them (and the interpreter's own lookups).
    assert sum(1 for _pid, name, call in emitted if call == "openat" and name.startswith("python")) >= 3
    records = decoded(read_events(trace))
    assert {(provider, event) for provider, event, _ in records} == {("Tools.DTrace.Platform", "My custom event from DTrace")}
    assert [[str(v["PID"]), v["Execname"], v["Probefunc"]] for _, _, v in records] == emitted


def test_seed_syscall_script_writes_nothing_without_a_listener(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    script = tmp_path / "addnewetwevent.d"
    script.write_text(SEED_SCRIPT + 'END { printf("written %d\\n", 0); }')
    trace = tmp_path / "other.etl"
    other = Session.start("not-listening", trace, providers=[("Tools.DTrace.Platform", {"level": 5, "any": 0x40})])
    try:
        result = probe_workload(tmp_path, "-q", "-s", str(script))
    finally:
        other.stop()
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) > 3  # the script did call etw_trace
    assert read_events(trace) == []  # a session asking another keyword got none of them


def test_syscall_entry_and_return(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = ('syscall::openat:entry { @entry[probefunc] = count(); } '
               'syscall::openat:return /errno == 2/ { @enoent[probefunc, arg0, errno] = count(); } '
               'syscall::write:return { @written = sum(arg0 > 0 ? arg0 : 0); }')  # fmt: skip
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    maps = {name: value for data in json_data(result.stdout, "map") for name, value in data.items()}
    assert maps["@entry"]["openat"] >= maps["@enoent"]["openat,-2,2"] >= 3
    assert maps["@written"] >= 65536  # the workload's O_DIRECT write among them


def test_proc_create_exec_exit(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = 'proc:::create, proc:::exec-success, proc:::exit { printf("%s %s %d %d", probename, execname, pid, arg0); }'
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    lines = [text.split() for text in json_data(result.stdout, "printf")]
    target = int(lines[0][2])
    assert lines[0][:2] == ["exec-success", "python3"] or lines[0][0] == "exec-success"
    (create,) = [line for line in lines if line[0] == "create"]
    child = int(create[3])
    assert int(create[2]) == target
    assert ["exec-success", "sh", str(child), str(child)] in lines
    assert ["exit", "sh", str(child), "3"] in lines
    assert lines[-1][0] == "exit" and int(lines[-1][2]) == target and lines[-1][3] == "0"


def test_sched_on_and_off_cpu(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = "sched:::on-cpu, sched:::off-cpu /pid == $target/ { @[probename] = count(); }"
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    (counts,) = [data["@"] for data in json_data(result.stdout, "map")]
    assert counts["off-cpu"] >= 20 and counts["on-cpu"] >= 20  # 20 sleeps at least
    assert abs(counts["off-cpu"] - counts["on-cpu"]) <= 2


def test_io_start_and_done(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = "io:::start, io:::done /arg0 == 65536/ { @[probefunc, probename] = count(); }"
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    (counts,) = [data["@"] for data in json_data(result.stdout, "map")]
    assert counts == {"read,start": 1, "read,done": 1, "write,start": 1, "write,done": 1}


def test_tcp_send_and_receive(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = "tcp:::send, tcp:::receive { @[probename] = sum(arg0); }"
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    (sums,) = [data["@"] for data in json_data(result.stdout, "map")]
    assert sums == {"send": 3000, "receive": 3000}


def test_profile_samples(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    program = "profile-997 /pid == $target/ { @samples = count(); @user[arg1 != 0] = count(); }"
    result = probe_workload(tmp_path, "-q", "-f", "json", "-n", program)
    assert result.returncode == 0, result.stderr
    maps = {name: value for data in json_data(result.stdout, "map") for name, value in data.items()}
    assert maps["@samples"] >= 100  # 0.4 s of CPU at 997 Hz, give or take
    assert maps["@user"]["1"] >= 50  # most land in user code


def test_kernel_probes_need_root() -> None:
    from openetw.errors import AccessDenied
    from openetw.probing.kernel_probes import kernel_flags_for
    from openetw.probing.live import LiveSessions

    def attempt() -> dict[str, Any]:
        try:
            LiveSessions([], kernel_flags=kernel_flags_for(["syscall"]))
        except AccessDenied as error:
            return {"refused": str(error)}
        return {"refused": None}

    answer = as_other_user(attempt) if os.geteuid() == 0 else attempt()
    assert "kernel probes need root" in answer["refused"] and "syscall" in answer["refused"]
