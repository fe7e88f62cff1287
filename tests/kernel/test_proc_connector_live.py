"""The proc connector source against the real kernel: as root, and as ``nobody`` (uid 65534)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from openetw.errors import OpenEtwError
from openetw.kernel.capabilities import probe
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_proc import install_proc_connector_handlers
from openetw.kernel.proc_connector import ProcConnectorSource
from openetw.kernel.procfs import ProcSource
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.service.harness import OTHER_UID, as_other_user

REGISTRY = SchemaRegistry()
Facts = dict[int, dict[str, Any]]


def _started_source() -> ProcConnectorSource:
    source = ProcConnectorSource()
    try:
        source.start()
    except OpenEtwError as error:
        source.close()
        pytest.skip(f"the proc connector is not available here: {error}")
    return source


def _process_facts(records) -> Facts:
    """pid → its Process Start records (image, parent, command line) and End exit status."""
    facts: Facts = {}
    for record in records:
        schema = REGISTRY.schema_for(record)
        if schema is None or schema.event_name not in ("Process/Start", "Process/Stop"):
            continue
        values = dict(decode_properties(schema, record.user_data, record.pointer_size))
        entry = facts.setdefault(values["ProcessID"], {"starts": [], "end": None})
        start = [values["ImageFileName"], values["ParentID"], values["CommandLine"]]
        if schema.event_name == "Process/Start":
            entry["starts"].append(start)
        else:
            entry["end"] = start[:2] + [values["ExitStatus"]]
    return facts


class Recorder:
    """Reads the source and maps every event, keeping the raw events of chosen processes."""

    def __init__(self, source: ProcConnectorSource, flags=("process",)) -> None:
        self.source = source
        self.mapper = KernelEventMapper(flags, ProcSource())
        install_proc_connector_handlers(self.mapper)
        self.records: list = []
        self.raw: list[tuple[str, dict[str, Any]]] = []

    def pump_until(self, done: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"proc connector events did not arrive in {timeout} s: {self.raw[-20:]}")
            for ts, cpu, name, values in self.source.read(0.1):
                self.raw.append((name, dict(values)))
                self.records.extend(self.mapper.map(name, ts, cpu, values))

    def seen(self, name: str, pid: int) -> bool:
        key = "child_tgid" if name == "proc_fork" else "tgid"
        return any(n == name and v[key] == pid for n, v in self.raw)

    def exit_codes(self, pids) -> dict[int, int]:
        return {v["tgid"]: v["exit_code"] for n, v in self.raw if n == "proc_exit" and v["tgid"] in pids and v["pid"] == v["tgid"]}


def test_children_fork_exec_exit_as_root():
    if os.geteuid() != 0:
        pytest.skip("this test checks the view of root; the nobody test covers other accounts")
    source = _started_source()
    try:
        recorder = Recorder(source)
        commands = {
            "sh": ["/bin/sh", "-c", "read line; exit 7"],
            "python": [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(3)"],
            "sleep": ["/bin/sleep", "60"],
        }
        children = {key: subprocess.Popen(argv, stdin=subprocess.PIPE) for key, argv in commands.items()}
        pids = {child.pid for child in children.values()}
        # The command line is read from /proc when the exec is mapped: release them after that.
        recorder.pump_until(lambda: all(recorder.seen("proc_exec", pid) for pid in pids))
        for key in ("sh", "python"):
            children[key].communicate(b"go\n", timeout=10)
        children["sleep"].send_signal(signal.SIGKILL)
        children["sleep"].wait(timeout=10)
        recorder.pump_until(lambda: all(recorder.seen("proc_exit", pid) for pid in pids))
        assert source.lost() == 0
        assert source.stats["overruns"] == 0
    finally:
        source.close()

    me = os.getpid()
    my_image = ProcSource().image(me)
    sh_image = os.path.basename(os.path.realpath("/bin/sh"))
    python_image = os.path.basename(os.path.realpath(sys.executable))
    expected = {
        children["sh"].pid: (sh_image, "/bin/sh -c read line; exit 7", 7),
        children["python"].pid: (python_image, f"{sys.executable} -c import sys; sys.stdin.readline(); sys.exit(3)", 3),
        children["sleep"].pid: ("sleep", "/bin/sleep 60", 128 + signal.SIGKILL),
    }
    assert recorder.exit_codes(pids) == {pid: code for pid, (_, _, code) in expected.items()}
    facts = _process_facts(recorder.records)
    for pid, (image, command_line, code) in expected.items():
        assert facts[pid]["starts"][0][:2] == [my_image, me], pid  # at fork: the parent's image
        assert facts[pid]["starts"][-1] == [image, me, command_line], pid  # at exec
        assert facts[pid]["end"] == [image, me, code], pid


def _as_nobody_work() -> dict[str, Any]:
    """Runs as uid 65534: spawn three children, record them, report what was recorded."""
    caps = probe()
    result: dict[str, Any] = {
        "euid": os.geteuid(),
        "tracefs": [caps.get("tracefs").available, caps.get("tracefs").reason],
        "proc_connector": [caps.get("proc_connector").available, caps.get("proc_connector").reason],
    }
    source = ProcConnectorSource()
    source.start()
    try:
        result["receive_buffer"] = source.receive_buffer
        recorder = Recorder(source)
        release_read, release_write = os.pipe()
        hold_read, _hold_write = os.pipe()  # never written: the third child waits to be killed
        pids: dict[str, int] = {}
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.dup2(release_read, 0)
            os.execv("/bin/sh", ["sh", "-c", "read line; exit 7"])
        pids["sh"] = pid
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os._exit(3)
        pids["exit3"] = pid
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.read(hold_read, 1)
            os._exit(0)
        pids["killed"] = pid
        recorder.pump_until(lambda: recorder.seen("proc_exec", pids["sh"]) and recorder.seen("proc_fork", pids["killed"]))
        os.kill(pids["killed"], signal.SIGKILL)
        os.write(release_write, b"go\n")
        statuses = {key: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for key, pid in pids.items()}
        recorder.pump_until(lambda: all(recorder.seen("proc_exit", pid) for pid in pids.values()))
        result.update(
            pids=pids, statuses=statuses, lost=source.lost(), overruns=source.stats["overruns"],
            exit_codes={str(k): v for k, v in recorder.exit_codes(set(pids.values())).items()},
            facts={str(k): v for k, v in _process_facts(recorder.records).items() if k in pids.values()},
            my_image=ProcSource().image(os.getpid()), me=os.getpid(),
        )
    finally:
        source.close()
    return result


def test_children_as_nobody():
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    # Everything the child uses is loaded now: the interpreter's files are not readable by nobody.
    ProcConnectorSource, probe, REGISTRY.schema_for  # noqa: B018
    for record in _warm_records():
        REGISTRY.schema_for(record)
    result = as_other_user(_as_nobody_work)
    assert "error" not in result, result
    assert result["euid"] == OTHER_UID == 65534
    assert result["tracefs"] == [False, "tracefs: needs root"]
    assert result["proc_connector"] == [True, "proc connector: available"]
    pids, me = result["pids"], result["me"]
    assert result["statuses"] == {"sh": 7, "exit3": 3, "killed": -signal.SIGKILL}
    assert result["exit_codes"] == {str(pids["sh"]): 7, str(pids["exit3"]): 3, str(pids["killed"]): 128 + signal.SIGKILL}
    assert (result["lost"], result["overruns"]) == (0, 0)
    facts = result["facts"]
    sh_image = os.path.basename(os.path.realpath("/bin/sh"))
    assert facts[str(pids["sh"])] == {
        "starts": [[result["my_image"], me, ""], [sh_image, me, "sh -c read line; exit 7"]],
        "end": [sh_image, me, 7],
    }
    assert facts[str(pids["exit3"])] == {"starts": [[result["my_image"], me, ""]], "end": [result["my_image"], me, 3]}
    assert facts[str(pids["killed"])] == {"starts": [[result["my_image"], me, ""]], "end": [result["my_image"], me, 137]}


def _warm_records():
    mapper = KernelEventMapper({"process", "thread"})
    install_proc_connector_handlers(mapper)
    records = mapper.map("proc_fork", 1, 0, {"parent_pid": 1, "parent_tgid": 1, "child_pid": 2, "child_tgid": 2})
    records += mapper.map("proc_exit", 2, 0, {"pid": 2, "tgid": 2, "exit_code": 0})
    return records


def test_overflow_is_counted_as_lost():
    # A tiny receive queue that is not read while 300 processes start and end must overflow:
    # recv reports ENOBUFS and the CPUs' message sequences jump.
    source = ProcConnectorSource(receive_buffer=4096)
    try:
        source.start()
    except OpenEtwError as error:
        source.close()
        pytest.skip(f"the proc connector is not available here: {error}")
    try:
        children = []
        for _ in range(300):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        source.stop()
        received = source.drain()
        ours = [v for _, _, name, v in received if name in ("proc_fork", "proc_exit") and v.get("child_tgid", v.get("tgid")) in children]
        assert source.stats["overruns"] >= 1
        assert len(ours) < 600
        # Every CPU's sequence is read at start and at stop: each of our events is either
        # received or counted lost (other processes' events may be among the lost too).
        assert len(ours) + source.lost() >= 600
        assert source.lost() == source.stats["sequence_lost"]
    finally:
        source.close()


_IN_USER_NAMESPACE = """
import json, socket
from openetw.kernel.capabilities import probe
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)
sock.bind((0, 1))  # joining the group works here; only the subscription is ignored
sock.close()
item = probe().get("proc_connector")
print(json.dumps([item.available, item.reason]))
"""


def test_probe_in_a_user_namespace_reports_the_silent_kernel():
    # Outside the initial user namespace the kernel ignores subscriptions without an answer:
    # a probe that only bound the socket would wrongly report the connector available.
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) to make a user namespace")
    result = subprocess.run([unshare, "--user", "--map-root-user", sys.executable, "-c", _IN_USER_NAMESPACE],
                            capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0 and "unshare failed" in result.stderr:
        pytest.skip(f"user namespaces are not available: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [False, (
        "proc connector: the kernel did not answer the subscription "
        "(process events reach only listeners in the initial user and pid namespaces)"
    )]


def test_watermark_and_drain_follow_the_clock():
    source = _started_source()
    try:
        assert source.watermark <= time.monotonic_ns()
        before = time.monotonic_ns()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os._exit(5)
        os.waitpid(pid, 0)
        after = time.monotonic_ns()
        seen: list = []
        deadline = time.monotonic() + 10
        while not any(name == "proc_exit" and v["tgid"] == pid for _, _, name, v in seen):
            assert time.monotonic() < deadline, seen[-10:]
            seen += source.read(0.1)
        ours = [(name, ts) for ts, _, name, v in seen if v.get("child_tgid", v.get("tgid")) == pid]
        assert [name for name, _ in ours] == ["proc_fork", "proc_exit"]
        assert all(before <= ts <= after for _, ts in ours)  # CLOCK_MONOTONIC, like time.monotonic_ns()
        assert [ts for ts, *_ in seen] == sorted(ts for ts, *_ in seen)
        time.sleep(source.reorder_window_ns / 1e9)
        source.read(0.01)
        assert source.watermark >= ours[-1][1]
        source.stop()
        stopped = time.monotonic_ns()
        late = os.fork()
        if late == 0:  # pragma: no cover - child
            os._exit(0)
        os.waitpid(late, 0)
        rest = source.drain()
        assert all(ts <= stopped for ts, *_ in rest)
        assert not any(v.get("child_tgid", v.get("tgid")) == late for *_, v in rest)
    finally:
        source.close()
    source.close()  # idempotent
