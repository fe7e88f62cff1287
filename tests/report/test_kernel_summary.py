"""The kernel section of ``openetw report --format summary``: process lifetimes, disk, network,
context switches and system calls by process; from Linux records and from a Windows trace."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel import KernelEventMapper
from openetw.kernel.procfs import ProcessInfo, ThreadInfo
from tests.conftest import corpus_path

SUMMARY_KEYS = {"records", "decoded", "undecoded", "undecoded_providers", "events_lost", "buffers_lost",
                "first_time", "last_time", "providers", "files"}  # fmt: skip


class FakeProc:
    """The /proc answers the mapper asks for: command lines only."""

    def __init__(self, command_lines: dict[int, str]) -> None:
        self.command_lines = command_lines

    def command_line(self, pid: int) -> str | None:
        return self.command_lines.get(pid)

    def thread_group(self, tid: int) -> int | None:
        return None

    def image(self, pid: int) -> str | None:
        return None

    def status(self, tid: int) -> dict[str, str]:
        return {}


def _socket(sk: int, old: int, new: int, pid: int) -> dict[str, Any]:
    return {"protocol": 6, "skaddr": sk, "oldstate": old, "newstate": new, "common_pid": pid, "family": 2,
            "saddr": b"\x7f\0\0\x01", "daddr": b"\x7f\0\0\x01", "sport": 40000, "dport": 8080}  # fmt: skip


def _block(rwbs: str, sector: int, size: int, pid: int) -> list[tuple[str, int, dict[str, Any]]]:
    common = {"dev": 8 << 20, "sector": sector, "nr_sector": size // 512, "rwbs": rwbs}
    return [("block_rq_issue", 0, {**common, "bytes": size, "common_pid": pid}), ("block_rq_complete", 0, {**common, "common_pid": 0})]


def _switch(cpu: int, prev: int, new: int) -> tuple[str, int, dict[str, Any]]:
    return ("sched_switch", cpu, {"prev_pid": prev, "next_pid": new, "prev_state": 1, "prev_prio": 120, "next_prio": 120})


def _fork(parent: int, child: int) -> tuple[str, int, dict[str, Any]]:
    return ("sched_process_fork", 0, {"parent_pid": parent, "child_pid": child, "parent_comm": "bash", "child_comm": "bash"})


def _exit(pid: int, comm: str) -> tuple[str, int, dict[str, Any]]:
    return ("sched_process_exit", 0, {"pid": pid, "comm": comm, "group_dead": 1})


WORKLOAD: list[tuple[str, int, dict[str, Any]]] = [
    _fork(100, 200),
    _switch(1, 0, 200),
    ("sched_process_exec", 1, {"pid": 200, "filename": "/usr/bin/sleep"}),
    *[("sys_enter", 1, {"id": 35})] * 3,
    ("sys_enter", 0, {"id": 1}),  # no switch seen on CPU 0 yet: not attributed
    *_block("WS", 1000, 4096, 200),
    *_block("R", 5000, 8192, 100),
    ("inet_sock_set_state", 1, _socket(0xFFFF0001, 7, 2, 200)),
    ("inet_sock_set_state", 1, _socket(0xFFFF0001, 2, 1, 200)),
    ("sock_send_length", 1, {"sk": 0xFFFF0001, "protocol": 6, "ret": 1500, "common_pid": 200}),
    ("sock_recv_length", 1, {"sk": 0xFFFF0001, "protocol": 6, "ret": 3000, "common_pid": 200}),
    ("sys_enter_exit_group", 1, {"common_pid": 200, "error_code": 9}),
    _exit(200, "sleep"),
    _switch(1, 200, 100),
    *[("sys_enter", 1, {"id": 0})] * 2,
    _fork(100, 300),
    ("signal_deliver", 0, {"common_pid": 300, "sig": 9, "sa_handler": 0}),
    _exit(300, "bash"),
    _fork(100, 200),  # the id again: a new process
]


@pytest.fixture
def linux_trace(tmp_path: Path) -> Path:
    path = tmp_path / "kernel.etl"
    mapper = KernelEventMapper({"process", "thread", "cswitch", "disk_io", "network", "syscall"},
                               FakeProc({200: "sleep 5 openetw-marker"}))  # fmt: skip
    now = time.monotonic_ns()
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", number_of_processors=2)
    with EtlWriter(path, header=header) as writer:
        rundown = [
            ProcessInfo(100, 1, "bash", "bash -i", 0, (ThreadInfo(100, "bash"),)),
            ProcessInfo(50, 2, "kworker/0:1", "", 0, (ThreadInfo(50, "kworker/0:1"),)),
        ]
        writer.write_all(mapper.rundown(rundown, now))
        for step, (name, cpu, values) in enumerate(WORKLOAD, start=1):
            writer.write_all(mapper.map(name, now + step * 1000, cpu, values))
    return path


def _summary(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str]:
    code = main(["report", "--format", "summary", *extra, str(path)])
    return code, capsys.readouterr().out


def test_linux_kernel_records_give_lifetimes_and_usage_by_process(capsys, linux_trace):
    code, out = _summary(capsys, linux_trace, "--json")
    assert code == 0
    data = json.loads(out)
    assert SUMMARY_KEYS | {"kernel"} == set(data)
    kernel = data["kernel"]
    lives = kernel["processes"]
    assert [(p["pid"], p["running_at_start"], p["running_at_end"]) for p in lives] == [
        (50, True, True), (100, True, True), (200, False, False), (300, False, False), (200, False, True),
    ]
    sleep = lives[2]
    assert sleep["parent"] == 100 and sleep["images"] == ["bash", "sleep"] and sleep["image"] == "sleep"
    assert sleep["command_line"] == "sleep 5 openetw-marker" and sleep["exit_code"] == 9
    assert sleep["duration_s"] == pytest.approx(16_000 / 1e9, abs=2e-7)  # fork (step 1) to exit (step 17), in 100 ns ticks
    assert lives[3]["exit_code"] == 128 + 9 and lives[3]["command_line"] == "bash -i"  # killed; no exec: the parent's
    assert lives[4]["exit_code"] is None and lives[4]["end_time"] is None
    assert lives[1]["command_line"] == "bash -i" and lives[1]["start_time"] is None

    disk = {row["pid"]: row for row in kernel["disk"]}
    assert disk[200]["write_bytes"] == 4096 and disk[200]["writes"] == 1 and disk[200]["read_bytes"] == 0
    assert disk[100]["read_bytes"] == 8192 and disk[100]["reads"] == 1 and disk[100]["image"] == "bash"
    assert [row["pid"] for row in kernel["disk"]] == [100, 200]  # most bytes first
    assert kernel["network"] == [{"pid": 200, "image": "bash", "bytes": 4500, "sent_bytes": 1500, "received_bytes": 3000,
                                  "sends": 1, "receives": 1}]  # fmt: skip
    assert {row["pid"]: row["switches"] for row in kernel["context_switches"]} == {200: 1, 100: 1}
    assert {row["pid"]: row["syscalls"] for row in kernel["syscalls"]} == {200: 3, 100: 2}
    assert kernel["syscalls_unattributed"] == 1


def test_system_calls_after_an_unrecorded_switch_out_of_idle_go_to_the_thread_switched_out_next(capsys, tmp_path):
    # Some kernels record no switch out of idle on some CPUs: CPU 1 goes idle, then bash's thread
    # makes two calls there unannounced and goes idle; CPU 0 never switches.
    mapper = KernelEventMapper({"process", "thread", "cswitch", "syscall"}, FakeProc({}))
    steps = [_switch(1, 50, 0), ("sys_enter", 1, {"id": 0}), ("sys_enter", 1, {"id": 1}), _switch(1, 100, 0),
             ("sys_enter", 0, {"id": 1})]  # fmt: skip
    path = tmp_path / "idle.etl"
    now = time.monotonic_ns()
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", number_of_processors=2)
    with EtlWriter(path, header=header) as writer:
        writer.write_all(mapper.rundown([ProcessInfo(100, 1, "bash", "bash -i", 0, (ThreadInfo(100, "bash"),)),
                                         ProcessInfo(50, 2, "kworker/0:1", "", 0, (ThreadInfo(50, "kworker/0:1"),))], now))  # fmt: skip
        for step, (name, cpu, values) in enumerate(steps, start=1):
            writer.write_all(mapper.map(name, now + step * 1000, cpu, values))
    code, out = _summary(capsys, path, "--json")
    assert code == 0
    kernel = json.loads(out)["kernel"]
    assert {row["pid"]: row["syscalls"] for row in kernel["syscalls"]} == {100: 2}
    assert {row["pid"]: row["switches"] for row in kernel["context_switches"]} == {0: 2, 100: 1}
    assert (kernel["switches_inferred"], kernel["syscalls_unattributed"]) == (1, 1)
    _code, out = _summary(capsys, path)
    assert "1  of them inferred" in out and "1  not attributed" in out


def test_the_text_summary_keeps_its_lines_and_adds_the_kernel_section(capsys, linux_trace):
    code, out = _summary(capsys, linux_trace)
    assert code == 0
    head, _, kernel = out.partition("\nkernel\n")
    assert head.splitlines()[1].startswith("records ") and "Process/Start" in head and "Thread/CSwitch" in head
    lines = kernel.splitlines()
    assert lines[0].startswith("  processes      5: 3 started, 2 exited during the trace, 2 running throughout")
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("  top "))]
    rows = [line.split() for line in table if line.startswith("    ") and line.split()[0].isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("200", "100", "9"), ("300", "100", "137"), ("200", "100", "-")]
    assert "bash > sleep   sleep 5 openetw-marker" in kernel
    assert "  top disk (bytes read + written)" in lines and "  top system calls" in lines
    assert any("1  not attributed" in line for line in lines)


def test_a_windows_kernel_trace_lists_processes_with_exit_codes(capsys):
    path = corpus_path("etl", "etl-parser", "ShutdownPerfDiagLogger.etl")
    code, out = _summary(capsys, path, "--json")
    assert code == 0
    kernel = json.loads(out)["kernel"]
    lives = {p["pid"]: p for p in kernel["processes"]}
    assert len(kernel["processes"]) == 97  # 94 DCStart + processes seen only at their end
    exited = [p for p in kernel["processes"] if not p["running_at_end"]]
    assert len(exited) == 60 and all(p["exit_code"] is not None for p in exited)  # 60 Process/Stop
    assert lives[496]["image"] == "svchost.exe" and lives[496]["exit_code"] == 0 and lives[496]["parent"] == 600
    assert lives[496]["command_line"] == r"C:\Windows\System32\svchost.exe -k NetworkService"
    assert lives[256]["exit_code"] == 0x40010004  # DBG_TERMINATE_PROCESS
    code, text = _summary(capsys, path)
    assert "0x40010004" in text and "svchost.exe   C:\\Windows\\System32\\svchost.exe -k NetworkService" in text


def test_a_trace_without_kernel_process_events_keeps_the_summary_as_it_was(capsys):
    path = corpus_path("etl", "krabsetw", "powershell.etl")
    code, out = _summary(capsys, path, "--json")
    assert code == 0 and set(json.loads(out)) == SUMMARY_KEYS
    code, text = _summary(capsys, path)
    assert code == 0 and "\nkernel\n" not in text and "top " not in text
