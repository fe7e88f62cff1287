"""``openetw kernel ...`` through the command's entry point. Recording needs root and tracefs
(skipped with the reason otherwise); the refusals and the limits are checked everywhere."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.errors import AccessDenied, SessionError
from openetw.kernel import Capability, KernelCapabilities, TracefsInstance, find_tracefs
from openetw.kernel.control import (
    KERNEL_DIR_ENV,
    ORDINARY_KERNEL_SESSIONS,
    KernelSessionRegistry,
    privilege_refusal,
    process_start_time,
)
from openetw.session import TooManyKernelSessions


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def kernel_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "run"
    monkeypatch.setenv(KERNEL_DIR_ENV, str(directory))
    return directory


@pytest.fixture
def tracefs_root() -> Path:
    if os.geteuid() != 0:
        pytest.skip("kernel sessions need root (tracefs is root only)")
    root = find_tracefs()
    if root is None:
        pytest.skip("tracefs is not mounted")
    return root


def _capabilities(*, tracefs: bool, euid: int = 1000) -> KernelCapabilities:
    return KernelCapabilities("6.0-test", euid, (
        Capability("tracefs", tracefs, "tracefs: available at /t" if tracefs else "tracefs: needs root"),
        Capability("tracepoints", tracefs, "tracepoints: tracefs unavailable"),
        Capability("perf", True, "perf side-band: own children only (perf_event_paranoid=2)"),
        Capability("proc_connector", True, "proc connector: available"),
        Capability("bpf", False, "bpf: needs root (unprivileged_bpf_disabled=2)"),
    ))  # fmt: skip


def _recorders(state_dir: Path) -> list[int]:
    """Processes whose command line names a state file of ``state_dir``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "openetw.kernel.control" in command and str(state_dir) in command:
            found.append(int(entry.name))
    return found


# -- without privileges -------------------------------------------------------------------------


def test_probe_json_lists_sources_and_flags(capsys, kernel_dir):
    code, out, _ = run(capsys, "kernel", "probe", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"kernel", "euid", "items", "flags", "kernel_sessions", "refusal"} <= set(data)
    assert [item["name"] for item in data["items"]] == ["tracefs", "tracepoints", "perf", "proc_connector", "bpf"]
    assert all({"name", "available", "reason", "detail"} <= set(item) for item in data["items"])
    assert data["flags"]["available"] == ["process", "thread", "cswitch", "disk", "net", "syscall"]
    assert {"image", "file", "pagefault", "profile"} <= set(data["flags"]["not_yet"])
    assert data["kernel_sessions"] is (data["refusal"] is None)
    code, out, _ = run(capsys, "kernel", "probe")
    assert code == 0 and "tracefs" in out and "flags: process, thread" in out


@pytest.mark.parametrize("flags, word", [("process,image", "not recorded on Linux yet"), ("disk,pagefault,profile", "not recorded"),
                                         ("process,bogus", "unknown kernel flag(s) bogus"), (",", "at least one")])
def test_flags_it_cannot_record_are_refused_with_what_is_available(capsys, kernel_dir, flags, word):
    code, _, err = run(capsys, "kernel", "start", "t-flags", "--flags", flags)
    assert code == 2
    assert word in err
    assert "available: process, thread, cswitch, disk, net, syscall" in err
    assert not list(kernel_dir.glob("*.json"))


@pytest.mark.parametrize("name", ["NT Kernel Logger", "global logger", "Global Logger"])
def test_reserved_names_are_refused(capsys, kernel_dir, name):
    code, _, err = run(capsys, "kernel", "start", name, "--flags", "process")
    assert code == 1
    assert "reserved" in err and "openetw-kernel" in err
    assert not list(kernel_dir.glob("*.json"))


def test_realtime_mode_and_bad_names_are_refused(capsys, kernel_dir):
    code, _, err = run(capsys, "kernel", "start", "t-rt", "--mode", "realtime")
    assert code == 2 and "record to a file" in err
    code, _, err = run(capsys, "kernel", "start", "a/b")
    assert code == 2 and "not a valid kernel session name" in err
    code, _, err = run(capsys, "kernel", "stop", "t-no-such-session")
    assert code == 1 and "no kernel session named 't-no-such-session'" in err
    code, out, _ = run(capsys, "kernel", "query", "--json")
    assert code == 0 and json.loads(out) == []


def test_without_tracefs_access_the_refusal_lists_what_the_account_could_use():
    refusal = privilege_refusal(_capabilities(tracefs=False))
    assert isinstance(refusal, AccessDenied)
    text = str(refusal)
    assert "need root" in text and "tracefs: needs root" in text and "euid 1000" in text
    assert "proc connector: available (process fork/exec/exit" in text
    assert "perf side-band: own children only (perf_event_paranoid=2)" in text
    assert "bpf" not in text  # not available to this account
    assert privilege_refusal(_capabilities(tracefs=True)) is None
    unmounted = KernelCapabilities("6.0", 0, (Capability("tracefs", False, "tracefs: not mounted"),))
    refusal = privilege_refusal(unmounted)
    assert isinstance(refusal, SessionError) and not isinstance(refusal, AccessDenied) and "mount -t tracefs" in str(refusal)


def test_a_start_refused_for_privileges_leaves_nothing(kernel_dir):
    with pytest.raises(AccessDenied, match="proc connector"):
        KernelSessionRegistry().start("t-denied", "process", capabilities=_capabilities(tracefs=False))
    assert not list(kernel_dir.glob("*.json")) and not _recorders(kernel_dir)


def _fake_running(directory: Path, count: int) -> None:
    """State files of live sessions; their "recorder" is this test process (start time and all)."""
    directory.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    for index in range(count):
        state = {"name": f"t-fake-{index}", "state": "running", "pid": me, "pid_start": process_start_time(me),
                 "flags": ["process"], "output": "/dev/null", "mode": "file", "buffer_size_kb": 4, "stats": {}}
        (directory / f"t-fake-{index}.json").write_text(json.dumps(state))


def test_one_more_kernel_session_than_the_free_slots_is_refused(kernel_dir):
    assert ORDINARY_KERNEL_SESSIONS == 6  # 8 kernel loggers, 2 kept for the reserved names
    registry = KernelSessionRegistry(tracefs_root=kernel_dir / "no-tracefs")
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS - 1)
    registry.check_capacity()  # one slot left
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS)
    with pytest.raises(TooManyKernelSessions, match="all 6 kernel session slots are in use") as refused:
        registry.start("t-seventh", "process", capabilities=_capabilities(tracefs=True, euid=0))
    assert "2 more of the 8 are kept for the reserved loggers" in str(refused.value)
    assert not (kernel_dir / "t-seventh.json").exists() and not _recorders(kernel_dir)
    # A dead recorder does not hold a slot.
    dead = json.loads((kernel_dir / "t-fake-0.json").read_text())
    dead["pid_start"] = -1
    (kernel_dir / "t-fake-0.json").write_text(json.dumps(dead))
    registry.check_capacity()
    assert registry.query("t-fake-0", refresh=False)["state"] == "crashed"


# -- with root and tracefs ----------------------------------------------------------------------


def test_other_openetw_instances_count_against_the_limit(capsys, kernel_dir, tracefs_root):
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS - 1)
    foreign = TracefsInstance.create(f"t_cap_{os.getpid()}", root=tracefs_root, buffer_size_kb=4, exclude_pids=[os.getpid()])
    try:
        code, _, err = run(capsys, "kernel", "start", "t-one-too-many", "--flags", "process")
        assert code == 1
        assert "kernel session slots are in use" in err and foreign.name in err
    finally:
        foreign.remove()
    assert not (kernel_dir / "t-one-too-many.json").exists() and not _recorders(kernel_dir)


def _tcp_round_trip(size: int) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        peer, _ = server.accept()
        with peer:
            received = 0
            while received < size:
                chunk = peer.recv(65536)
                if not chunk:
                    break
                received += len(chunk)
                peer.sendall(chunk)

    thread = threading.Thread(target=echo)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"x" * size)
        back = 0
        while back < size:
            back += len(client.recv(65536))
    thread.join()
    server.close()


def test_start_query_stop_and_the_summary_of_the_workload(capsys, kernel_dir, tracefs_root, tmp_path):
    name = f"t-cli-{os.getpid()}"
    output = tmp_path / "kernel.etl"
    code, out, err = run(capsys, "kernel", "start", name, "--flags", "process,thread,cswitch,disk,net,syscall",
                         "-o", str(output), "--buffer-size", "2048", "--json")  # fmt: skip
    assert code == 0, err
    started = json.loads(out)
    recorder = started["pid"]
    instance = tracefs_root / "instances" / f"openetw_{name}"
    try:
        assert started["state"] == "running" and instance.is_dir() and process_start_time(recorder) is not None
        assert _recorders(kernel_dir) == [recorder]
        code, _, err = run(capsys, "kernel", "start", name.upper(), "--flags", "process")
        assert code == 1 and "is running" in err  # names compare without case, as in ETW

        codes = [0, 3, 7]
        spawned = time.monotonic()
        children = [
            subprocess.Popen(["/bin/sh", "-c", f"read line; exit {code}", f"openetw-workload-{code}"], stdin=subprocess.PIPE)
            for code in codes
        ]
        with open(tmp_path / "data.bin", "wb") as data:
            data.write(os.urandom(1 << 20))
            data.flush()
            os.fsync(data.fileno())
        _tcp_round_trip(200_000)
        # The recorder reads a command line from /proc when it maps the exec (every 0.25 s):
        # the children live on a while so that it is still there.
        time.sleep(max(0.0, spawned + 1.5 - time.monotonic()))
        for child in children:
            child.communicate(b"\n")

        code, out, err = run(capsys, "kernel", "query", name, "--json")
        assert code == 0, err
        info = json.loads(out)
        assert info["state"] == "running" and info["pid"] == recorder
        assert info["flags"] == ["process", "thread", "cswitch", "disk", "net", "syscall"]
        assert info["output"] == str(output) and info["mode"] == "file" and info["buffer_size_kb"] == 2048
        assert info["events_read"] > 0 and info["records_written"] > 0 and info["duration_s"] > 0
        assert "events_lost" in info and info["stats"]["missing_tracepoints"] == []
        code, out, _ = run(capsys, "kernel", "query")
        assert code == 0 and f"{name}: running" in out
    finally:
        code, out, err = run(capsys, "kernel", "stop", name, "--json")
    assert code == 0, err
    stopped = json.loads(out)
    assert stopped["state"] == "stopped" and stopped["failure"] is None and stopped["records_written"] > 0
    # Nothing left: no ftrace instance, no recorder, no state.
    assert not instance.exists()
    assert process_start_time(recorder) is None and not _recorders(kernel_dir)
    assert not list(kernel_dir.glob("*.json")) and not list(kernel_dir.glob("*.log"))

    code, out, err = run(capsys, "report", "--format", "summary", "--json", str(output))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["undecoded"] == 0 and summary["events_lost"] == stopped["events_lost"]
    kernel = summary["kernel"]
    by_pid = {p["pid"]: p for p in kernel["processes"] if not p["running_at_start"]}
    for child, expected in zip(children, codes):
        life = by_pid[child.pid]
        assert life["exit_code"] == expected and life["parent"] == os.getpid()
        assert life["images"][-1] == "sh" and life["end_time"] > life["start_time"]
        assert f"openetw-workload-{expected}" in life["command_line"]
    network = {row["pid"]: row for row in kernel["network"]}
    assert network[os.getpid()]["sent_bytes"] >= 400_000 and network[os.getpid()]["received_bytes"] >= 400_000
    assert any(row["write_bytes"] > 0 for row in kernel["disk"])
    # Switches are attributed through the fork records; a CPU whose events arrive late (see
    # docs/kernel.md, "Known behaviour") can leave a child's early switches unattributed.
    switched = {row["pid"] for row in kernel["context_switches"]}
    assert switched & {child.pid for child in children}
    assert os.getpid() in {row["pid"] for row in kernel["syscalls"]}

    code, out, _ = run(capsys, "report", "--format", "summary", str(output))
    assert code == 0
    text = out[out.index("\nkernel\n"):]
    assert "top network" in text and "top system calls" in text
    assert all(f"openetw-workload-{expected}" in text for expected in codes)


def test_a_recorder_that_died_is_reported_and_cleaned_up_by_stop(capsys, kernel_dir, tracefs_root, tmp_path):
    name = f"t-crash-{os.getpid()}"
    code, out, err = run(capsys, "kernel", "start", name, "--flags", "process", "-o", str(tmp_path / "k.etl"), "--json")
    assert code == 0, err
    recorder = json.loads(out)["pid"]
    instance = tracefs_root / "instances" / f"openetw_{name}"
    os.kill(recorder, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process_start_time(recorder) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    code, out, _ = run(capsys, "kernel", "query", name, "--json")
    assert code == 0 and json.loads(out)["state"] == "crashed"
    assert instance.exists()  # what a crash leaves, until someone stops the session
    code, _, err = run(capsys, "kernel", "stop", name)
    assert code == 1 and "crashed" in err
    assert not instance.exists() and not list(kernel_dir.glob("*.json"))
