"""KernelSession over several event sources: merging in time order, loss per source, the
choice of sources from flags and privileges, and the proc connector without privileges."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from openetw.errors import AccessDenied, InvalidArgument, OpenEtwError
from openetw.etl.build import build_system_record
from openetw.etl.record import EventRecord
from openetw.kernel import KernelSession, KernelSessionConfig, tracepoints_for
from openetw.kernel.capabilities import Capability, KernelCapabilities
from openetw.kernel.perf import PerfSource
from openetw.kernel.proc_connector import ProcConnectorSource
from openetw.kernel.source import RawKernelEvent
from openetw.kernel.tracefs_source import TracefsSource
from tests.kernel.test_live import _decode
from tests.service.harness import OTHER_UID, as_other_user

MARKER_HOOK = 0xFF01
PROCESS_START, PROCESS_END = 0x0301, 0x0302


class ListSink:
    """A RecordSink that keeps everything."""

    def __init__(self) -> None:
        self.records: list[EventRecord] = []
        self.lost = 0
        self.flushes = 0
        self.closed = 0

    def write(self, record: EventRecord) -> bool:
        self.records.append(record)
        return True

    def add_lost(self, events: int = 0, buffers: int = 0) -> None:
        self.lost += events

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed += 1


class ScriptedSource:
    """A source whose events and watermark the test sets; it notes the thread of every call."""

    name = "scripted"

    def __init__(self, *, fail_start: OpenEtwError | None = None, lost: int = 0) -> None:
        self.fail_start = fail_start
        self.lost_count = lost
        self.threads: dict[str, set[int]] = {}
        self.closed = 0
        self._queued: list[RawKernelEvent] = []
        self._watermark = 0
        self._lock = threading.Lock()

    def _note(self, call: str) -> None:
        self.threads.setdefault(call, set()).add(threading.get_native_id())

    def push(self, events: list[RawKernelEvent], watermark: int) -> None:
        with self._lock:
            self._queued.extend(events)
            self._watermark = watermark

    def start(self) -> None:
        self._note("start")
        if self.fail_start is not None:
            raise self.fail_start

    def read(self, timeout: float) -> list[RawKernelEvent]:
        self._note("read")
        with self._lock:
            events, self._queued = self._queued, []
        return events

    @property
    def watermark(self) -> int:
        return self._watermark

    def stop(self) -> None:
        self._note("stop")

    def drain(self) -> list[RawKernelEvent]:
        self._note("drain")
        return self.read(0)

    def lost(self) -> int:
        return self.lost_count

    def close(self) -> None:
        self.closed += 1


def _marker(ts: int, cpu: int, values: Mapping[str, Any]) -> list[EventRecord]:
    return [build_system_record(hook_id=MARKER_HOOK, timestamp=ts, cpu=cpu, user_data=bytes([values["index"]]))]


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- merging ------------------------------------------------------------------------------------


def test_two_sources_are_merged_in_time_order_behind_the_lowest_watermark(tracefs_root):
    sink = ListSink()
    scripted = ScriptedSource(lost=7)
    tracefs = TracefsSource(f"t_merge_{os.getpid()}", tracepoints_for(["process"]), root=tracefs_root)
    session = KernelSession(flags={"process"}, name=f"t_merge_{os.getpid()}", sources=[tracefs, scripted], sink=sink, flush_interval=0.05)
    session.mapper.register("scripted_marker", _marker)
    session.start()
    try:
        marks, children = [], []
        for code in range(3):
            marks.append(time.monotonic_ns())
            child = subprocess.Popen(["/bin/sh", "-c", f"exit {code}"])
            child.wait()
            children.append(child)
        marks.append(time.monotonic_ns())
        # The scripted source's watermark is 0: every tracefs event is newer, so none is mapped.
        assert _wait_for(lambda: session.stats["pages_read"] > 0)
        time.sleep(0.2)
        assert session.stats["events_read"] == 0
        scripted.push([(mark, 0, "scripted_marker", {"index": i}) for i, mark in enumerate(marks)], watermark=marks[-1])
        assert _wait_for(lambda: session.stats["events_read"] >= len(marks))
    finally:
        stats = session.stop()

    traced = sink.records[stats["rundown_records"]:]
    stamps = [record.timestamp for record in traced]
    assert stamps == sorted(stamps)
    positions = {record.user_data[0]: index for index, record in enumerate(traced) if record.hook_id == MARKER_HOOK}
    assert sorted(positions) == [0, 1, 2, 3]
    for index, child in enumerate(children):
        mine = [i for i, r in enumerate(traced) if r.hook_id in (PROCESS_START, PROCESS_END) and r.pid == child.pid]
        assert [traced[i].hook_id for i in mine] == [PROCESS_START, PROCESS_START, PROCESS_END]  # fork, exec, exit
        assert all(positions[index] < i < positions[index + 1] for i in mine)

    # Loss: every source's count, the total in the sink; the per-CPU detail of tracefs.
    assert stats["events_lost_per_source"] == {"tracefs": stats["sources"]["tracefs"]["events_lost"], "scripted": 7}
    assert stats["events_lost"] == 7 + stats["events_lost_per_source"]["tracefs"] == sink.lost
    assert set(stats["events_lost_per_cpu"]) == set(range(len(stats["events_lost_per_cpu"])))
    assert stats["sources"]["scripted"] == {"events_lost": 7}
    # The reader asked for more CPU at start (as root it gets it; None: an earlier session did).
    # (A runner in the kernel's default autogroup cannot reweigh it: the reader thread's nice value is raised.)
    assert stats["reader_priority"] is None or " -> -10" in stats["reader_priority"], stats["reader_priority"]
    # Every call on a source happens in the one reader thread; the sink is closed once.
    threads = set().union(*scripted.threads.values())
    assert set(scripted.threads) == {"start", "read", "stop", "drain"} and len(threads) == 1
    assert threading.get_native_id() not in threads
    assert scripted.closed == 1 and sink.closed == 1
    assert session.instance_path is None and not (tracefs_root / "instances" / f"openetw_t_merge_{os.getpid()}").exists()


def test_a_source_that_fails_to_start_stops_the_session_and_releases_the_others(tracefs_root, tmp_path):
    scripted = ScriptedSource(fail_start=AccessDenied("scripted: not allowed"))
    tracefs = TracefsSource(f"t_fail_{os.getpid()}", tracepoints_for(["process"]), root=tracefs_root)
    session = KernelSession(flags={"process"}, output=tmp_path / "f.etl", name=f"t_fail_{os.getpid()}", sources=[tracefs, scripted])
    with pytest.raises(AccessDenied, match="scripted: not allowed"):
        session.start()
    assert session.state == "failed" and scripted.closed == 1
    assert not (tracefs_root / "instances" / f"openetw_t_fail_{os.getpid()}").exists()


# -- choosing the sources -----------------------------------------------------------------------


def _kinds(session: KernelSession) -> list[type]:
    return [type(source) for source in session.sources]


def test_sources_follow_the_flags_and_the_source_choice(tmp_path):
    out = tmp_path / "k.etl"
    assert _kinds(KernelSession({"process", "cswitch"}, out)) == [TracefsSource]
    both = KernelSession({"process", "image", "profile"}, out, profile_rate_hz=250)
    assert _kinds(both) == [TracefsSource, PerfSource] and both.needs_root
    perf = both.sources[1]
    assert isinstance(perf, PerfSource) and perf.image and perf.profile and perf.frequency == 250 and perf.target_pid is None
    assert _kinds(KernelSession({"image"}, out)) == [PerfSource]
    connector = KernelSession({"process", "thread"}, out, source="proc-connector")
    assert _kinds(connector) == [ProcConnectorSource] and not connector.needs_root
    children = KernelSession({"profile"}, out, source="perf_children", target_pid=os.getpid())
    assert _kinds(children) == [PerfSource] and not children.needs_root and children.sources[0].target_pid == os.getpid()
    assert not out.exists()


def test_a_session_is_made_from_its_config_as_from_the_keywords(tmp_path):
    config = KernelSessionConfig(flags={"process", "image", "profile"}, output=tmp_path / "k.etl", source="auto", profile_rate_hz=250)
    session = KernelSession(config)
    assert session.config is config and (session.flags, session.output, session.profile_rate_hz) == (config.flags, config.output, 250)
    assert _kinds(session) == _kinds(KernelSession({"process", "image", "profile"}, tmp_path / "k.etl", profile_rate_hz=250))
    assert KernelSession(flags={"process"}, output=str(tmp_path / "k.etl"), name="n").config == KernelSessionConfig(
        frozenset({"process"}), tmp_path / "k.etl", name="n"
    )
    with pytest.raises(InvalidArgument, match="not both"):
        KernelSession(config, name="other")
    with pytest.raises(InvalidArgument, match="needs the profile flag"):
        KernelSessionConfig(flags={"process"}, profile_rate_hz=100)


def test_the_tracefs_source_decodes_only_the_fields_the_mapper_reads(tmp_path):
    session = KernelSession({"process", "cswitch", "image"}, tmp_path / "k.etl")
    tracefs = session.sources[0]
    assert isinstance(tracefs, TracefsSource)
    assert tracefs.fields == session.mapper.fields_used()
    assert tracefs.fields["sched_switch"] == frozenset({"prev_state", "prev_pid", "next_pid", "prev_prio", "next_prio"})
    assert "perf_mmap2" not in tracefs.fields  # registered handlers get whole events


def test_system_calls_go_column_wise_only_to_a_sink_that_takes_blocks(tmp_path):
    to_file = KernelSession({"process", "syscall"}, tmp_path / "k.etl").sources[0]
    assert isinstance(to_file, TracefsSource)
    assert to_file.fixed == {"sys_enter": ("id",), "sys_exit": ("ret",)}
    to_sink = KernelSession({"process", "syscall"}, tmp_path / "k.etl", sink=ListSink()).sources[0]
    assert isinstance(to_sink, TracefsSource) and not to_sink.fixed  # mapped one by one, merged
    # The trace service's sink takes blocks when it has pools for them (a second pool per CPU).
    from openetw.service.kernel_recorder import PoolSink

    pools = KernelSession({"process", "syscall"}, tmp_path / "k.etl", sink=PoolSink([ListSink()])).sources[0]  # type: ignore[list-item]
    assert isinstance(pools, TracefsSource) and not pools.fixed
    blocks = PoolSink([ListSink()], block_writers=[ListSink()])  # type: ignore[list-item]
    assert KernelSession({"process", "syscall"}, tmp_path / "k.etl", sink=blocks).sources[0].fixed == to_file.fixed
    assert not KernelSession({"process"}, tmp_path / "k.etl").sources[0].fixed


@pytest.mark.parametrize("kwargs, message", [
    ({"flags": {"process", "cswitch"}, "source": "proc_connector"}, "the proc connector records only process, thread; cswitch need(s) tracefs"),
    ({"flags": {"process", "image"}, "source": "tracefs"}, "flag(s) image are recorded by perf_event_open, not tracefs"),
    ({"flags": {"process"}, "source": "perf_children", "target_pid": 1}, "source perf_children records only image, profile; process"),
    ({"flags": {"image"}, "source": "perf_children"}, "perf_children needs target_pid"),
    ({"flags": {"image"}, "target_pid": 1}, "target_pid goes with source perf_children"),
    ({"flags": {"process"}, "source": "bpf"}, "unknown kernel event source 'bpf'; choose one of auto, tracefs, proc_connector, perf_children"),
    ({"flags": {"process"}, "profile_rate_hz": 100}, "needs the profile flag"),
    ({"flags": {"registry"}}, "unknown kernel flag(s) registry"),
])  # fmt: skip
def test_sources_that_cannot_record_the_flags_are_refused(tmp_path, kwargs, message):
    with pytest.raises(InvalidArgument) as refused:
        KernelSession(output=tmp_path / "k.etl", **kwargs)
    assert message in str(refused.value)


def test_without_tracefs_the_start_is_refused_with_the_usable_sources(tmp_path):
    caps = KernelCapabilities("6.0-test", 1000, (
        Capability("tracefs", False, "tracefs: needs root"),
        Capability("perf", False, "perf side-band: disabled (perf_event_paranoid=3)"),
        Capability("proc_connector", True, "proc connector: available"),
    ))  # fmt: skip
    sink = ListSink()
    session = KernelSession({"process"}, tmp_path / "k.etl", capabilities=caps, sink=sink)
    with pytest.raises(AccessDenied) as refused:
        session.start()
    assert str(refused.value) == (
        "kernel sessions need root (tracefs: needs root; euid 1000). Available to this account instead: source"
        " proc_connector (--source proc-connector): process and thread start/exit events of the whole machine,"
        " with exit codes (proc connector: available)"
    )
    assert session.state == "failed" and sink.records == [] and not (tmp_path / "k.etl").exists()


def _shared_directory(tmp_path: Path) -> Path:
    """A directory the other user can write (tmp_path's parents are root's, 0700)."""
    directory = Path(f"/tmp/openetw-kernel-test-{os.getpid()}-{tmp_path.name}")
    directory.mkdir()
    directory.chmod(0o777)
    return directory


@pytest.fixture
def shared_dir(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    directory = _shared_directory(tmp_path)
    yield directory
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


@pytest.mark.parametrize("source", ["auto", "tracefs"])
def test_as_another_user_a_tracefs_session_is_refused_naming_the_alternatives(shared_dir, source):
    output = shared_dir / "refused.etl"

    def work() -> dict[str, Any]:
        try:
            KernelSession({"process", "thread"}, output, name="t_nobody", source=source).start()
        except OpenEtwError as error:
            return {"type": type(error).__name__, "message": str(error)}
        return {"type": None}

    result = as_other_user(work)
    assert result["type"] == "AccessDenied", result
    message = result["message"]
    assert message.startswith(f"kernel sessions need root (tracefs: needs root; euid {OTHER_UID}). Available to this account instead: ")
    assert "source proc_connector (--source proc-connector): process and thread start/exit events" in message
    assert "source perf_children" in message and "own children only" in message
    assert not output.exists()


def test_as_another_user_the_proc_connector_records_children_with_exit_codes(shared_dir):
    output = shared_dir / "proc.etl"
    codes = [0, 5, 77]

    def work() -> dict[str, Any]:
        session = KernelSession({"process", "thread"}, output, name="t_proc_nobody", source="proc_connector", flush_interval=0.05)
        session.start()
        try:
            children = [subprocess.Popen(["/bin/sh", "-c", f"sleep 0.2; exit {code}"]) for code in codes]
            for child in children:
                child.wait()
        finally:
            stats = session.stop()
        return {
            "me": os.getpid(), "pids": [c.pid for c in children], "codes": [c.returncode for c in children],
            "lost": stats["events_lost"], "per_source": stats["events_lost_per_source"], "source": stats["source"],
            "written": stats["records_written"], "rundown": stats["rundown_records"],
        }  # fmt: skip

    result = as_other_user(work)
    assert "error" not in result, result
    assert result["codes"] == codes and result["source"] == "proc_connector"
    assert result["per_source"] == {"proc_connector": result["lost"]}
    assert os.stat(output).st_uid == OTHER_UID
    ends: dict[int, dict[str, Any]] = {}
    starts: dict[int, list[dict[str, Any]]] = {}
    thread_starts: set[int] = set()
    count = 0
    for name, _, values in _decode(output):
        count += 1
        if name == "Process/Stop":
            ends[values["ProcessID"]] = dict(values)
        elif name == "Process/Start":
            starts.setdefault(values["ProcessID"], []).append(dict(values))
        elif name == "Thread/Start":
            thread_starts.add(values["TThreadId"])
    assert count == result["written"] + 1 and result["rundown"] > 0  # + the logfile header
    for pid, code in zip(result["pids"], codes, strict=True):
        assert ends[pid]["ExitStatus"] == code
        assert ends[pid]["ParentID"] == result["me"]
        # The exec's image is read from /proc/<pid>/exe: the file /bin/sh links to.
        assert starts[pid][-1]["ImageFileName"] == os.path.basename(os.path.realpath("/bin/sh"))
        assert pid in thread_starts
