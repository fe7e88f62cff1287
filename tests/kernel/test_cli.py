"""``openetw kernel ...`` through the command's entry point. Recording needs root and tracefs
(skipped with the reason otherwise); the refusals and the limits are checked everywhere."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.controller.session import Session
from openetw.errors import AccessDenied, InvalidArgument, SessionError
from openetw.kernel import Capability, KernelCapabilities, TracefsInstance, find_tracefs
from openetw.kernel.classes import KERNEL_FLAGS
from openetw.kernel.control import (
    AVAILABLE_FLAGS,
    KERNEL_DIR_ENV,
    ORDINARY_KERNEL_SESSIONS,
    KernelSessionRegistry,
    cli_flag_names,
    parse_flags,
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


ALL_FLAGS = "process, thread, image, disk, file, net, cswitch, pagefault, syscall, profile, syscall_args"


def test_probe_json_lists_sources_and_flags(capsys, kernel_dir):
    code, out, _ = run(capsys, "kernel", "probe", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"kernel", "euid", "items", "flags", "kernel_sessions", "refusal"} <= set(data)
    assert [item["name"] for item in data["items"]] == ["tracefs", "tracepoints", "perf", "proc_connector", "bpf"]
    assert all({"name", "available", "reason", "detail"} <= set(item) for item in data["items"])
    assert data["flags"]["available"] == ALL_FLAGS.split(", ")
    assert {"registry", "dpc", "hard_faults"} <= set(data["flags"]["not_yet"])
    assert not set(data["flags"]["available"]) & set(data["flags"]["not_yet"])
    assert data["kernel_sessions"] is (data["refusal"] is None)
    code, out, _ = run(capsys, "kernel", "probe")
    assert code == 0 and "tracefs" in out and f"flags: {ALL_FLAGS} (not yet: " in out


def test_flags_are_the_kernel_flags_of_the_classes_with_short_names_and_aliases():
    assert AVAILABLE_FLAGS == {
        "process": "process", "thread": "thread", "image": "image", "disk": "disk_io", "file": "file_io",
        "net": "network", "cswitch": "cswitch", "pagefault": "page_fault", "syscall": "syscall", "profile": "profile",
        "syscall_args": "syscall_args",
    }  # fmt: skip
    assert set(AVAILABLE_FLAGS.values()) == KERNEL_FLAGS
    assert parse_flags("disk_io, network,FILE_IO,page_fault,proc_thread,loader,disk") == [
        "disk_io", "network", "file_io", "page_fault", "process", "image",
    ]
    assert parse_flags(["context_switch", "tcpip", "syscalls", "pagefaults"]) == ["cswitch", "network", "syscall", "page_fault"]
    assert cli_flag_names(["disk_io", "file_io", "page_fault", "profile"]) == ["disk", "file", "pagefault", "profile"]


@pytest.mark.parametrize("flags, word", [("process,registry", "kernel flag(s) registry are not recorded on Linux yet"),
                                         ("disk,dpc,interrupt", "dpc, interrupt are not recorded"),
                                         ("process,bogus", "unknown kernel flag(s) bogus"), (",", "at least one")])
def test_flags_it_cannot_record_are_refused_with_what_is_available(capsys, kernel_dir, flags, word):
    code, _, err = run(capsys, "kernel", "start", "t-flags", "--flags", flags)
    assert code == 2
    assert word in err
    assert f"available: {ALL_FLAGS}" in err
    assert not list(kernel_dir.glob("*.json"))


@pytest.mark.parametrize("args, word", [
    (["--flags", "process", "--profile-rate", "500"], "profile_rate_hz is a positive rate and needs the profile flag"),
    (["--flags", "profile", "--profile-rate", "0"], "profile_rate_hz is a positive rate"),
    (["--flags", "process,cswitch", "--source", "proc-connector"], "the proc connector records only process, thread; cswitch need(s) tracefs"),
    (["--flags", "process,image", "--source", "tracefs"], "image are recorded by perf_event_open, not tracefs; use source auto"),
    (["--source", "bpf"], "Invalid value for '--source'"),
    (["--realtime", "--mode", "circular"], "--realtime and --mode circular contradict each other"),
])  # fmt: skip
def test_options_that_do_not_fit_the_flags_or_sources_are_refused(capsys, kernel_dir, args, word):
    code, _, err = run(capsys, "kernel", "start", "t-options", *args)
    assert code == 2, err
    assert word in err
    assert not list(kernel_dir.glob("*.json")) and not _recorders(kernel_dir)


@pytest.mark.parametrize("args, word", [
    (["--mode", "realtime", "--flags", "process", "--profile-rate", "100"], "a profile rate needs the profile kernel flag"),
    (["--realtime", "--flags", "profile", "--profile-rate", "100001"], "the profile rate must be 1..100000 samples per second"),
    (
        ["--realtime", "--flags", "process,cswitch", "--source", "proc-connector"],
        "the proc_connector source records only the process and thread flags, not cswitch",
    ),
    (["--realtime", "--flags", "process,source=bpf"], "kernel flags are names, not settings: source=bpf;"),
    (["--realtime", "--flags", "profile,profile_rate=500"], "kernel flags are names, not settings: profile_rate=500;"),
    (["--mode", "realtime", "--flags", "process,registry"], "kernel flag(s) registry are not recorded on Linux yet"),
])  # fmt: skip
def test_realtime_options_the_service_does_not_take_are_refused(capsys, kernel_dir, service_env, args, word):
    code, _, err = run(capsys, "kernel", "start", "t-rt", *args)
    assert code == 2 and word in err, err
    assert not service_env.exists() and not list(kernel_dir.glob("*.json"))


def test_realtime_without_a_trace_service_says_so(capsys, kernel_dir, service_env):
    code, _, err = run(capsys, "kernel", "start", "t-rt", "--flags", "process", "--realtime")
    assert code != 0 and "no trace service is running" in err
    assert not list(kernel_dir.glob("*.json"))
    with pytest.raises(InvalidArgument, match="real-time kernel sessions run in the trace service"):
        KernelSessionRegistry().start("t-rt", "process", mode="realtime")


def test_realtime_kernel_sessions_run_in_the_trace_service(capsys, kernel_dir, kernel_service, tmp_path):
    code, out, err = run(capsys, "kernel", "start", "t-krt", "--realtime", "--flags", "process,thread", "--buffer-size", "512", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["kind"] == "kernel" and info["mode"] == "real-time" and info["file_name"] is None
    assert info["kernel_flags"] == ["process", "thread"] and info["kernel_buffer_kb"] == 512
    assert not list(kernel_dir.glob("*.json"))  # the service's session, not a recorder of the registry
    code, out, _ = run(capsys, "kernel", "query", "t-krt")
    assert code == 0 and "t-krt: running, real-time (trace service)" in out and "flags: process,thread" in out
    output = tmp_path / "both.etl"
    code, out, err = run(capsys, "kernel", "start", "t-krf", "--realtime", "-o", str(output), "--flags", "process", "--json")
    assert code == 0, err
    assert json.loads(out)["mode"] == "file-real-time" and json.loads(out)["file_name"] == str(output)
    for name in ("t-krt", "t-krf"):
        code, out, err = run(capsys, "kernel", "stop", name, "--json")
        assert code == 0, err
        final = json.loads(out)
        assert final["state"] == "stopped" and final["kernel"]["source"] == "auto" and final["kernel"]["rundown_records"] > 0
    assert any(name == "Process/DCStart" for name, _ in _decoded(output))
    code, _, err = run(capsys, "kernel", "query", "t-krt")
    assert code == 1 and "no kernel session named 't-krt'" in err


def test_realtime_kernel_sessions_take_the_source_and_the_profile_rate(capsys, kernel_dir, kernel_service):
    code, out, err = run(capsys, "kernel", "start", "t-kprof", "--realtime", "--profile-rate", "500", "--flags", "profile,image", "--json")
    assert code == 0, err
    started = json.loads(out)
    assert started["kernel_flags"] == ["image", "profile"]
    assert (started["kernel_source"], started["kernel_profile_rate_hz"]) == ("auto", 500)
    code, out, _ = run(capsys, "kernel", "query", "t-kprof")
    assert code == 0 and "flags: image,profile" in out and "source: auto; profile rate 500 Hz" in out
    subprocess.run([sys.executable, "-c", "total = 0\nfor i in range(500_000): total += i"], check=True)
    code, out, err = run(capsys, "kernel", "stop", "t-kprof", "--json")
    assert code == 0, err
    kernel = json.loads(out)["kernel"]
    assert kernel["source"] == "auto" and kernel["profile_rate_hz"] == 500 and set(kernel["sources"]) == {"perf"}
    assert kernel["sources"]["perf"]["samples"] > 0
    session = Session.start("t-kpc", mode="realtime", kernel_flags="process,thread", kernel_source="proc-connector")
    try:
        assert session.info_at_start["kernel_source"] == "proc_connector"
        assert session.info_at_start["kernel"]["source"] == "proc_connector"
    finally:
        session.stop()
    assert set(session.final["kernel"]["sources"]) == {"proc_connector"}
    code, out, err = run(capsys, "kernel", "start", "t-kpc-cli", "--realtime", "--source", "proc-connector", "--flags", "process", "--json")
    assert code == 0, err
    started = json.loads(out)
    assert started["kernel_source"] == "proc_connector" and started["kernel"]["source"] == "proc_connector"
    code, out, err = run(capsys, "kernel", "stop", "t-kpc-cli", "--json")
    assert code == 0 and set(json.loads(out)["kernel"]["sources"]) == {"proc_connector"}, err


def test_bad_names_and_unknown_sessions_are_refused(capsys, kernel_dir):
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
    assert "Available to this account instead: source proc_connector (--source proc-connector): process and thread" in text
    assert "with exit codes (proc connector: available); source perf_children" in text
    assert text.endswith("image loads and CPU samples of a command and its children (perf side-band: own children only (perf_event_paranoid=2))")
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
    # syscall records every process of the machine: a large ring rides out the bursts of the others.
    code, out, err = run(capsys, "kernel", "start", name, "--flags", "process,thread,cswitch,disk,net,syscall",
                         "-o", str(output), "--buffer-size", "16384", "--json")  # fmt: skip
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
        assert info["output"] == str(output) and info["mode"] == "file" and info["buffer_size_kb"] == 16384
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
    for child, expected in zip(children, codes, strict=True):
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


def test_the_reserved_names_take_the_reserved_slots(kernel_dir):
    registry = KernelSessionRegistry(tracefs_root=kernel_dir / "no-tracefs")
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS)
    with pytest.raises(TooManyKernelSessions):
        registry.check_capacity("t-one-more")
    registry.check_capacity("NT Kernel Logger")  # as the session table: its own slot
    registry.check_capacity("global logger")
    # A running reserved logger does not take an ordinary slot.
    reserved = json.loads((kernel_dir / "t-fake-1.json").read_text()) | {"name": "NT Kernel Logger"}
    (kernel_dir / "t-fake-1.json").unlink()
    (kernel_dir / "nt%20kernel%20logger.json").write_text(json.dumps(reserved))
    assert len(registry.running()) == ORDINARY_KERNEL_SESSIONS
    registry.check_capacity("t-one-more")
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS)
    with pytest.raises(TooManyKernelSessions, match=r"all 6 kernel session slots are in use \(t-fake-0, .*t-fake-5\)"):
        registry.check_capacity("t-one-more")


def _decoded(path: Path) -> list[tuple[str, dict]]:
    from tests.kernel.test_live import _decode

    return [(name, dict(values)) for name, _, values in _decode(path)]


def test_the_proc_connector_source_records_without_a_tracefs_instance(capsys, kernel_dir, tracefs_root, tmp_path):
    name = f"t-pc-{os.getpid()}"
    output = tmp_path / "pc.etl"
    code, out, err = run(capsys, "kernel", "start", name, "--source", "proc-connector", "--flags", "process,thread",
                         "-o", str(output), "--json")  # fmt: skip
    assert code == 0, err
    started = json.loads(out)
    try:
        assert started["source"] == "proc_connector" and started["flags"] == ["process", "thread"]
        assert started["instance"] is None and not (tracefs_root / "instances" / f"openetw_{name}").exists()
        children = [subprocess.Popen(["/bin/sh", "-c", f"exit {code}"]) for code in (4, 9)]
        for child in children:
            child.wait()
        time.sleep(0.3)
        code, out, _ = run(capsys, "kernel", "query", name)
        assert code == 0 and f"{name}: running, file, source proc_connector" in out
    finally:
        code, out, err = run(capsys, "kernel", "stop", name, "--json")
    assert code == 0, err
    stopped = json.loads(out)
    assert stopped["state"] == "stopped" and stopped["stats"]["events_lost_per_source"] == {"proc_connector": stopped["events_lost"]}
    ends = {values["ProcessID"]: values for event, values in _decoded(output) if event == "Process/Stop"}
    assert [ends[child.pid]["ExitStatus"] for child in children] == [4, 9]
    assert all(ends[child.pid]["ParentID"] == os.getpid() for child in children)


def test_image_and_profile_flags_record_through_perf_in_a_reserved_slot(capsys, kernel_dir, tracefs_root, tmp_path):
    name = "NT Kernel Logger"
    output = tmp_path / "perf.etl"
    _fake_running(kernel_dir, ORDINARY_KERNEL_SESSIONS)  # every ordinary slot taken
    code, out, err = run(capsys, "kernel", "start", name, "--flags", "process,image,profile", "--profile-rate", "500",
                         "-o", str(output), "--json")  # fmt: skip
    assert code == 0, err
    started = json.loads(out)
    instance = tracefs_root / "instances" / "openetw_NT Kernel Logger"
    try:
        assert started["flags"] == ["process", "image", "profile"] and started["profile_rate_hz"] == 500
        assert instance.is_dir()
        child = subprocess.run([sys.executable, "-c", "total = 0\nfor i in range(2_000_000): total += i"], check=True)
        del child
        time.sleep(0.3)
    finally:
        code, out, err = run(capsys, "kernel", "stop", name, "--json")
    assert code == 0, err
    stopped = json.loads(out)
    assert stopped["state"] == "stopped" and set(stopped["stats"]["sources"]) == {"tracefs", "perf"}
    assert not instance.exists()
    events = _decoded(output)
    names = {event for event, _ in events}
    assert {"PerfInfo/CollectionStart", "PerfInfo/Sample", "StackWalk/Stack", "Image/DCStart", "Image/Load", "Process/Stop"} <= names
    interval = next(values for event, values in events if event == "PerfInfo/CollectionStart")
    assert 20_000 in interval.values()  # 2 ms in 100 ns units
    assert stopped["stats"]["sources"]["perf"]["samples"] == sum(1 for event, _ in events if event == "PerfInfo/Sample")
