"""Kernel sessions of the trace service: recorded by a recorder process into the session's own
pools, so files, statistics, real-time consumers and the limits work as for any session.

Root and tracefs are needed (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.consumer import KernelTrace, Provider, Schema, UserTrace
from openetw.consumer.kernel_trace import process_provider
from openetw.controller import Session, list_sessions
from openetw.etl import EtlReader
from openetw.etl.relog import is_logfile_header_record
from openetw.session import STATISTICS_KEYS, AccessDenied, ReservedSessionName, TooManyKernelSessions
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user, need_tracefs, start_service

PROCESS_CLASS = "3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c"
WAIT = 60.0  # a guard against hangs only: a loaded machine starts recorders slowly


def _spawn_children(codes: list[int]) -> list[subprocess.Popen[bytes]]:
    children = [subprocess.Popen(["/bin/sh", "-c", f"sleep 0.2; exit {code}"]) for code in codes]
    for child in children:
        child.wait()
    return children


def _file_events(path: Path) -> list[tuple[str, Any, dict[str, Any]]]:
    registry = SchemaRegistry()
    out = []
    with EtlReader(str(path)) as reader:
        for record in reader.records(time_order=True):
            if is_logfile_header_record(record):
                continue
            schema = registry.schema_for(record)
            name = schema.event_name if schema is not None else None
            values = dict(decode_properties(schema, record.user_data, record.pointer_size)) if schema is not None else {}
            out.append((name, record, values))
        assert reader.stats.errors == []
        header_lost = reader.header.events_lost
    return out + [("<header events_lost>", None, {"events_lost": header_lost})]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_a_kernel_file_session_from_the_command_line_records_children(
    kernel_service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "kernel.etl"
    started = run_json(capsys, "session", "start", "KFile", "--kernel-flags", "process", "-o", str(output))
    assert started["kind"] == "kernel" and started["kernel_flags"] == ["process"] and started["state"] == "running"
    assert started["mode"] == "sequential-file" and started["file_name"] == str(output)
    assert started["log_file_mode"] & 0x2000000  # SYSTEM_LOGGER_MODE
    recorder = started["kernel"]["recorder_pid"]
    codes = [0, 3, 42]
    children = _spawn_children(codes)
    queried = run_json(capsys, "session", "query", "KFile")
    assert set(STATISTICS_KEYS) <= set(queried)
    assert queried["buffers"] >= 2 and 0 <= queried["free_buffers"] <= queried["buffers"]
    assert queried["kernel"]["recorder_pid"] == recorder
    final = run_json(capsys, "session", "stop", "KFile")
    kernel = final["kernel"]
    assert kernel["state"] == "stopped"

    events = _file_events(output)
    records = events[:-1]
    stops = {values["ProcessID"]: values for name, _, values in records if name == "Process/Stop"}
    starts = {values["ProcessID"]: values for name, _, values in records if name == "Process/Start"}
    for child, code in zip(children, codes, strict=True):
        assert stops[child.pid]["ExitStatus"] == code
        assert stops[child.pid]["ParentID"] == os.getpid()
        assert starts[child.pid]["ImageFileName"] == "sh"
    assert any(name == "Process/DCStart" and values["ProcessID"] == os.getpid() for name, _, values in records)
    # The books: every record in the file was counted written, and what the recorder handed
    # over is what the service wrote (no pool ran out of buffers here).
    assert final["events_written"] == len(records) == kernel["records_written"]
    assert final["events_lost"] == kernel["events_lost"] == events[-1][2]["events_lost"]
    assert final["buffers_written"] >= 1 and final["log_buffers_lost"] == 0 and final["realtime_buffers_lost"] == 0
    assert [name for name, _, _ in records if name is None] == []
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{recorder}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{recorder}")  # the recorder exited with its session
    assert not list(Path("/sys/kernel/tracing/instances").glob(f"openetw_svc{kernel_service.pid}_*"))


def test_session_start_takes_the_kernel_event_source(
    kernel_service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "pc.etl"
    started = run_json(capsys, "session", "start", "KPc", "--kernel-flags", "process,thread", "--kernel-source", "proc-connector",
                       "-o", str(output))  # fmt: skip
    assert (started["kernel_source"], started["kernel_profile_rate_hz"]) == ("proc_connector", None)
    assert started["kernel"]["source"] == "proc_connector"
    codes = [5, 6]
    children = _spawn_children(codes)
    assert main(["session", "query", "KPc"]) == 0
    assert "  kernel source: proc_connector\n" in capsys.readouterr().out
    final = run_json(capsys, "session", "stop", "KPc")
    assert set(final["kernel"]["sources"]) == {"proc_connector"}
    stops = {values["ProcessID"]: values for name, _, values in _file_events(output)[:-1] if name == "Process/Stop"}
    assert [stops[child.pid]["ExitStatus"] for child in children] == codes
    assert all(stops[child.pid]["ParentID"] == os.getpid() for child in children)


def test_session_start_takes_the_profile_rate(kernel_service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "profile.etl"
    started = run_json(capsys, "session", "start", "KProf", "--kernel-flags", "profile,image", "--profile-rate", "500", "-o", str(output))
    assert (started["kernel_flags"], started["kernel_source"], started["kernel_profile_rate_hz"]) == (["image", "profile"], "auto", 500)
    subprocess.run([sys.executable, "-c", "total = 0\nfor i in range(2_000_000): total += i"], check=True)
    queried = run_json(capsys, "session", "query", "KProf")
    assert queried["kernel_profile_rate_hz"] == 500 and queried["kernel"]["profile_rate_hz"] == 500
    final = run_json(capsys, "session", "stop", "KProf")
    assert set(final["kernel"]["sources"]) == {"perf"}
    events = _file_events(output)[:-1]
    collection = [values for name, _, values in events if name == "PerfInfo/CollectionStart"]
    assert len(collection) == 1 and 20_000 in collection[0].values()  # 2 ms in 100 ns units
    samples = sum(1 for name, _, _ in events if name == "PerfInfo/Sample")
    assert samples > 0 and samples == final["kernel"]["sources"]["perf"]["samples"]


def test_kernel_ring_losses_count_as_events_lost(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    output = tmp_path / "storm.etl"
    session = Session.start("KStorm", output, kernel_flags=["syscall"], kernel_buffer_size=8)
    subprocess.run([sys.executable, "-c", "import os\nfor _ in range(300000): os.getppid()"], check=True)
    final = session.stop()
    kernel = session.info()["kernel"]
    print(f"storm: {final}, kernel lost {kernel['events_lost']}")
    assert kernel["events_lost"] > 0
    assert final["events_lost"] >= kernel["events_lost"]
    events = _file_events(output)
    assert events[-1][2]["events_lost"] == final["events_lost"]
    assert final["events_written"] == len(events) - 1


def _wait_for_consumer(name: str, thread: threading.Thread, errors: list[BaseException]) -> None:
    from openetw.controller import ServiceClient

    deadline = time.monotonic() + WAIT
    with ServiceClient() as client:
        while time.monotonic() < deadline and thread.is_alive():
            listed = any(s["name"] == name for s in client.call("list")["sessions"])
            if listed and client.call("query", session=name)["session"].get("realtime_consumers") == 1:
                return
            time.sleep(0.05)
    raise AssertionError(f"no consumer attached to {name}: {errors or 'still waiting'}")


def _collect_stops(trace: Any, provider: Provider, pids: set[int], seen: dict[int, int]) -> None:
    def on_event(record: Any, context: Any) -> None:
        if Schema(record, context).event_name == "Process/Stop":
            parser = context.parser_for(record)
            seen[parser.parse("ProcessID")] = parser.parse("ExitStatus")
            if pids and pids <= set(seen):
                trace.stop()

    provider.add_on_event_callback(on_event)
    trace.enable(provider)


def _run_until_children_seen(trace: Any, name: str, pids: set[int]) -> tuple[list[subprocess.Popen[bytes]], list[int]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            trace.start()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        _wait_for_consumer(name, thread, errors)
        codes = [5, 6, 7]
        children = _spawn_children(codes)
        pids.update(child.pid for child in children)
        thread.join(WAIT)
    finally:
        trace.stop()
        thread.join(10)
    assert not errors, errors
    assert not thread.is_alive()
    return children, codes


def test_a_real_time_kernel_session_reaches_a_user_trace(kernel_service: ServiceProcess) -> None:
    session = Session.start("KLive", kernel_flags="process", mode="realtime")
    try:
        trace = UserTrace(sessions=["KLive"], manifests=[])
        pids: set[int] = set()
        seen: dict[int, int] = {}
        _collect_stops(trace, Provider(PROCESS_CLASS), pids, seen)
        children, codes = _run_until_children_seen(trace, "KLive", pids)
        assert {child.pid: seen.get(child.pid) for child in children} == dict(zip((c.pid for c in children), codes, strict=True))
    finally:
        final = session.stop()
    kernel = session.info()["kernel"]
    assert final["events_written"] > 0
    # Buffers handed over while no consumer was attached (the rundown, the end) are lost, as in
    # ETW's real-time mode; every record the recorder wrote is written or lost, nothing else.
    assert final["events_written"] + final["events_lost"] == kernel["records_written"] + kernel["events_lost"]


def test_kernel_trace_starts_its_own_real_time_kernel_session(kernel_service: ServiceProcess) -> None:
    trace = KernelTrace("KTrace", manifests=[])
    pids: set[int] = set()
    seen: dict[int, int] = {}
    _collect_stops(trace, process_provider(), pids, seen)
    children, codes = _run_until_children_seen(trace, "KTrace", pids)
    assert {child.pid: seen.get(child.pid) for child in children} == dict(zip((c.pid for c in children), codes, strict=True))
    assert trace.session_final is not None and trace.session_final["kernel_flags"] == ["process"]
    assert trace.session_final["events_written"] > 0
    assert "KTrace" not in [s["name"] for s in list_sessions()]  # stopped with the trace


def test_kernel_session_limits(kernel_service: ServiceProcess) -> None:
    started: list[Session] = []
    try:
        for index in range(6):
            started.append(Session.start(f"K{index}", kernel_flags="process", mode="realtime", kernel_buffer_size=16))
        with pytest.raises(TooManyKernelSessions, match="all 6 kernel session slots are in use"):
            Session.start("K6", kernel_flags="process", mode="realtime", kernel_buffer_size=16)
        with pytest.raises(ReservedSessionName, match="reserved"):
            Session.start("NT Kernel Logger", mode="realtime")  # an ordinary session may not take the name
        for reserved in ("NT Kernel Logger", "Global Logger"):  # their slots are kept for them
            started.append(Session.start(reserved, kernel_flags="process", mode="realtime", kernel_buffer_size=16))
        assert sum(1 for s in list_sessions() if s["kind"] == "kernel") == 8
        with pytest.raises(TooManyKernelSessions):
            Session.start("K8", kernel_flags="thread", mode="realtime", kernel_buffer_size=16)
        assert Session.start("User", mode="realtime").stop()["events_written"] == 0  # user sessions still start
    finally:
        for session in started:
            session.stop()
    assert list_sessions() == []


def test_the_kernel_session_limit_holds_for_the_whole_machine(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    from openetw.kernel import TracefsInstance
    from openetw.kernel.control import ORDINARY_KERNEL_SESSIONS, KernelSessionRegistry
    from openetw.session import SessionExists

    registry = KernelSessionRegistry(tmp_path / "registry")  # the command line's sessions (none of its own here)
    started: list[Session] = []
    others: list[TracefsInstance] = []
    try:
        started.append(Session.start("K-svc", kernel_flags="process", mode="realtime", kernel_buffer_size=16))
        ours = [n for n in registry.running() if n.startswith(f"openetw_svc{kernel_service.pid}_")]
        assert len(ours) == 1  # the service's session takes a slot of the command line's count
        # Sessions elsewhere on the machine (another service, `openetw kernel start`) fill the other slots.
        taken = [n for n in registry.running() if n != "openetw_NT Kernel Logger" and n != "openetw_Global Logger"]
        for index in range(ORDINARY_KERNEL_SESSIONS - len(taken)):
            others.append(TracefsInstance.create(f"t_elsewhere_{os.getpid()}_{index}", buffer_size_kb=4,
                                                 exclude_pids=[threading.get_native_id()]))  # fmt: skip
        refused_file = tmp_path / "more.etl"
        with pytest.raises(TooManyKernelSessions, match="all 6 kernel session slots are in use"):
            Session.start("K-more", refused_file, kernel_flags="process", kernel_buffer_size=16)
        # Refused before the session was made: not listed, no session id used, the file untouched.
        assert [s["name"] for s in list_sessions()] == ["K-svc"]
        assert refused_file.stat().st_size == 0
        with pytest.raises(TooManyKernelSessions):
            registry.check_capacity("t-cli")
        # The reserved name takes its reserved slot, and holds the name for the whole machine.
        started.append(Session.start("NT Kernel Logger", kernel_flags="process", mode="realtime", kernel_buffer_size=16))
        assert started[-1].info_at_start["session_id"] == started[0].info_at_start["session_id"] + 1
        assert "openetw_NT Kernel Logger" in registry.running()
        with pytest.raises(SessionExists, match="a kernel session named 'NT Kernel Logger' is running"):
            registry.check_capacity("NT Kernel Logger")
    finally:
        for instance in others:
            instance.remove()
        for session in started:
            session.stop()
    assert list_sessions() == []


@pytest.fixture
def reachable_kernel_service(service_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A root service whose socket another user can reach."""
    need_tracefs()
    base = Path(tempfile.mkdtemp(prefix="openetw-kaccess-"))
    socket_path = base / "run" / "control.sock"
    socket_path.parent.mkdir()
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    running = start_service(socket_path)
    try:
        for directory in (base, socket_path.parent):
            os.chmod(directory, 0o711)
        os.chmod(socket_path, 0o666)
        yield socket_path
    finally:
        running.kill()
        shutil.rmtree(base, ignore_errors=True)


def test_an_unprivileged_caller_gets_access_denied(reachable_kernel_service: Path) -> None:
    def attempt() -> dict[str, Any]:
        report: dict[str, Any] = {}
        for label, start in (
            ("session", lambda: Session.start("KNobody", kernel_flags="process", mode="realtime")),
            ("trace", lambda: KernelTrace("KNobodyTrace", flags=["process"], manifests=[]).open()),
        ):
            try:
                start()
                report[label] = "started"
            except AccessDenied as error:
                report[label] = str(error)
        report["sessions"] = [s["name"] for s in list_sessions()]
        return report

    report = as_other_user(attempt)
    for label in ("session", "trace"):
        assert report[label].startswith(f"uid {OTHER_UID} may not create kernel trace sessions"), report
        assert "Instead: run the command as root" in report[label]
        assert "ordinary session" in report[label]
    assert report["sessions"] == []


def test_only_a_recorder_may_speak_for_a_kernel_session(service: ServiceProcess) -> None:
    from openetw.controller import ServiceClient

    with ServiceClient() as client:
        for op, fields in (("kernel_lost", {"events": 5}), ("kernel_started", {"stats": {}}), ("kernel_stats", {"stats": {}})):
            with pytest.raises(AccessDenied, match="only a kernel session's recorder"):
                client.call(op, **fields)
        assert client.call("status")["sessions"] == 0  # the connection goes on


def test_the_pool_sink_puts_raw_records_into_the_pool_of_their_cpu() -> None:
    from openetw.service.kernel_recorder import PoolSink

    class Writer:
        def __init__(self) -> None:
            self.written: list[tuple[bytes, int, int]] = []
            self.flushes = 0

        def write(self, raw: bytes, timestamp: int, cpu: int) -> bool:
            self.written.append((raw, timestamp, cpu))
            return len(self.written) < 2  # the second one finds no free buffer

        def flush(self) -> None:
            self.flushes += 1

    writers = [Writer(), Writer()]
    sink = PoolSink(writers)  # type: ignore[arg-type]
    assert sink.write_raw(b"a" * 16, 3, 70) is True
    assert sink.write_raw(b"b" * 16, 1, 71) is False
    assert sink.write_raw(b"c" * 16, 0, 72) is True
    assert writers[1].written == [(b"a" * 16, 70, 3), (b"b" * 16, 71, 1)]
    assert writers[0].written == [(b"c" * 16, 72, 0)]
    sink.close()
    assert sink.write_raw(b"d" * 16, 0, 73) is False and len(writers[0].written) == 1
    assert [w.flushes for w in writers] == [1, 1]


class _BlockWriter:
    """A pool writer that keeps what it is given; writes after the first ``room`` find no free buffer."""

    def __init__(self, room: int = 1 << 30, buffer_size: int = 32 * 48) -> None:
        self.written: list[tuple[bytes, int, int]] = []
        self.room = room
        self.flushes = 0
        self.pool = type("Pool", (), {"buffer_size": buffer_size})()  # runs of 1/32 of it: two 24-byte rows

    def write(self, raw: bytes, timestamp: int, cpu: int) -> bool:
        self.written.append((bytes(raw), timestamp, cpu))
        return len(self.written) <= self.room

    def flush(self) -> None:
        self.flushes += 1


def test_the_pool_sink_writes_system_call_blocks_into_the_block_pool_of_their_cpu() -> None:
    import numpy as np

    from openetw.service.kernel_recorder import PoolSink

    assert not hasattr(PoolSink([_BlockWriter()]), "write_block")  # the session then maps system calls one by one
    totals: list[int] = []
    plain, blocks = [_BlockWriter(), _BlockWriter()], [_BlockWriter(), _BlockWriter(room=2)]
    sink = PoolSink(plain, block_writers=blocks, on_lost=totals.append)  # type: ignore[arg-type]
    rows = [bytes([i]) * 24 for i in range(5)]
    # Runs of two rows, each one write with its last row's time; the third write finds no free buffer.
    assert sink.write_block(b"".join(rows), 3, 24, np.array([10, 11, 12, 13, 14], dtype=np.uint64)) == 4
    assert blocks[1].written == [(rows[0] + rows[1], 11, 3), (rows[2] + rows[3], 13, 3), (rows[4], 14, 3)]
    assert totals == []  # a run of one lost row: the pool counts it
    assert sink.write_block(b"".join(rows), 1, 24, [20, 21, 22, 23, 24]) == 0
    assert totals == [2] and sink.events_lost == 2  # the pool counts one per run, the sink the others
    assert sink.write_block(b"".join(rows[:2]), 2, 24, [30, 31]) == 2
    assert blocks[0].written == [(rows[0] + rows[1], 31, 2)]
    assert plain[0].written == plain[1].written == []
    sink.close()
    assert [w.flushes for w in plain + blocks] == [1, 1, 1, 1]
    assert sink.write_block(b"".join(rows), 0, 24, [1, 2, 3, 4, 5]) == 0 and len(blocks[0].written) == 1


def test_pool_sink_blocks_read_back_as_their_records_and_every_row_is_written_or_lost() -> None:
    from openetw.ipc.pool import BufferPool
    from openetw.kernel import KernelEventMapper
    from openetw.kernel.ringbuffer import FixedLayouts
    from openetw.service.kernel_recorder import PoolSink
    from openetw.service.sessions import count_typed_records
    from tests.kernel import pages as P

    parser, decoder = P.captured_parser(), P.captured_decoder()
    mapper = KernelEventMapper({"process", "syscall"})
    lean = type(decoder)(decoder.formats.values(), fields=mapper.fields_used())
    fixed = FixedLayouts(lean, mapper.fixed_events())
    pool = BufferPool.create(4096, 4, logger_id=1, producer_pid=0, flush_interval_ms=0)  # runs of five rows
    try:
        sink = PoolSink([BufferPool.create(4096, 2, logger_id=1, producer_pid=0, flush_interval_ms=0).writer()],
                        block_writers=[pool.writer()])  # fmt: skip
        rows = written = 0
        for cpu, raw in P.captured_pages():
            result = parser.decode_batch([raw], cpu, lean, [], fixed)
            if result.fixed is not None:
                block, row_size, timestamps = mapper.map_fixed(result.fixed)
                rows += len(timestamps)
                written += sink.write_block(block, 0, row_size, timestamps)
        sink.flush()
        in_buffers = sum(count_typed_records(pool.take(index)) for index in pool.full_buffers())
        assert rows > written > 0  # four 4 KB buffers hold some of them
        assert in_buffers == written
        assert sink.events_lost > 0  # runs that found no free buffer: the pool counted one row of each
        assert written + pool.events_lost + sink.events_lost == rows
    finally:
        pool.close()


def test_system_calls_of_a_kernel_session_go_column_wise_into_buffers_of_their_own(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    from openetw.kernel.classes_base import PERFINFO_GROUP, SYSCALL_ENTER, SYSCALL_EXIT
    from openetw.service.kernel_sessions import possible_cpus

    syscall_hooks = {PERFINFO_GROUP << 8 | SYSCALL_ENTER, PERFINFO_GROUP << 8 | SYSCALL_EXIT}
    output = tmp_path / "syscalls.etl"
    session = Session.start("KSys", output, kernel_flags=["process", "syscall"], max_buffers=256)
    children = _spawn_children([0, 1])
    subprocess.run([sys.executable, "-c", "import os\nfor _ in range(20000): os.getppid()"], check=True)
    final = session.stop()
    kernel = session.info()["kernel"]
    assert kernel["pools"] == 2 * possible_cpus()  # a second pool per CPU for the system calls
    buffers: dict[int, list[Any]] = {}
    with EtlReader(str(output)) as reader:
        for record in reader.records():
            if not is_logfile_header_record(record):
                buffers.setdefault(record.buffer_index, []).append(record)
        assert reader.stats.errors == []
    kinds = [{getattr(r, "hook_id", None) in syscall_hooks for r in records} for records in buffers.values()]
    assert {True} in kinds and {False} in kinds and {True, False} not in kinds  # never mixed in one buffer
    for records in buffers.values():
        stamps = [r.timestamp for r in records]
        assert stamps == sorted(stamps)
    events = _file_events(output)  # in time order: merged across the buffers
    stops = {values["ProcessID"] for name, _, values in events if name == "Process/Stop"}
    assert {child.pid for child in children} <= stops
    in_syscall_buffers = sum(len(records) for records, kind in zip(buffers.values(), kinds, strict=True) if kind == {True})
    assert sum(name in ("PerfInfo/SysClEnter", "PerfInfo/SysClExit") for name, _, _ in events) == in_syscall_buffers
    # Every record the recorder wrote is in the file; what it could not write, or the kernel
    # dropped, is counted lost.
    assert final["events_written"] == sum(len(records) for records in buffers.values()) == kernel["records_written"]
    assert final["events_lost"] >= kernel["events_lost"]


def test_a_real_time_consumer_gets_every_system_call_buffer_in_time_order(kernel_service: ServiceProcess) -> None:
    from openetw.controller import ServiceClient
    from openetw.kernel.classes_base import PERFINFO_GROUP, SYSCALL_ENTER, SYSCALL_EXIT

    syscall_hooks = {PERFINFO_GROUP << 8 | SYSCALL_ENTER, PERFINFO_GROUP << 8 | SYSCALL_EXIT}
    session = Session.start("KSysLive", mode="realtime", kernel_flags=["process", "syscall"], max_buffers=256)
    buffers: dict[int, list[Any]] = {}
    errors: list[BaseException] = []
    consumer = session.consumer()

    def consume() -> None:
        try:
            for record in consumer.records():
                buffers.setdefault(record.buffer_index, []).append((getattr(record, "hook_id", None) in syscall_hooks, record.timestamp))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    reader = threading.Thread(target=consume)
    try:
        with ServiceClient() as client:
            deadline = time.monotonic() + WAIT
            while client.call("query", session="KSysLive")["session"].get("realtime_consumers") != 1:
                assert time.monotonic() < deadline, "the consumer did not attach"
                time.sleep(0.05)
            before = client.call("query", session="KSysLive")["session"]
        reader.start()
        subprocess.run([sys.executable, "-c", "import os\nfor _ in range(20000): os.getppid()"], check=True)
    finally:
        final = session.stop()
        reader.join(WAIT)
        consumer.close()
    assert not errors and not reader.is_alive()
    kinds = [{is_syscall for is_syscall, _ in records} for records in buffers.values()]
    syscalls = sum(len(records) for records, kind in zip(buffers.values(), kinds, strict=True) if kind == {True})
    assert syscalls + final["events_lost"] - before["events_lost"] >= 40000  # 20000 getppid calls at least
    assert {True, False} not in kinds  # system calls have buffers of their own
    for records in buffers.values():
        stamps = [stamp for _, stamp in records]
        assert stamps == sorted(stamps)
    # A real-time session counts written what a consumer took: all of it reached this one.
    assert sum(len(records) for records in buffers.values()) == final["events_written"]


def test_the_kernel_trace_example_prints_its_children_with_their_exit_codes(kernel_service: ServiceProcess) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "consumer" / "kernel_trace.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    stops = [line for line in done.stdout.splitlines() if "Process/Stop" in line]
    assert sorted(line.split(" exit ")[1].split()[0] for line in stops) == ["0", "3", "7"], done.stdout


def test_a_kernel_session_records_the_arguments_of_the_calls_processes_and_names_asked_for(kernel_service: ServiceProcess, tmp_path: Path) -> None:
    from openetw.kernel.classes_args import SYSCALL_ARGS_HOOK, parse_syscall_args

    output = tmp_path / "args.etl"
    # The shell waits for a line, then becomes dd (same process, named dd from then on).
    child = subprocess.Popen(["/bin/sh", "-c", "read _; exec dd if=/dev/zero of=/dev/null bs=1 count=300 status=none"], stdin=subprocess.PIPE)
    session = Session.start("KArgs", str(output), kernel_flags="syscall,syscall_args", kernel_syscall_args=["read", "no_such_call"],
                            kernel_syscall_args_pids=[child.pid], kernel_syscall_args_execnames=["dd"])  # fmt: skip
    try:
        assert session.info_at_start["kernel_syscall_args"] == ["no_such_call", "read"]
        assert (session.info_at_start["kernel_syscall_args_pids"], session.info_at_start["kernel_syscall_args_execnames"]) == ([child.pid], ["dd"])
        child.communicate(b"go\n")
    finally:
        session.stop()
    bpf = session.info()["kernel"]["sources"]["bpf"]
    assert (bpf["syscall_args_tracepoints"], bpf["syscall_args_missing"]) == (1, ["syscalls/sys_enter_no_such_call"])
    recorded = [(record.pid, parse_syscall_args(record.user_data)) for _, record, _ in _file_events(output)[:-1]
                if record is not None and record.hook_id == SYSCALL_ARGS_HOOK]  # fmt: skip
    # dd's reads only: not the shell's (another name), not another process's, not another call's.
    assert {pid for pid, _ in recorded} == {child.pid} and {number for _, (number, _, _) in recorded} == {0}
    assert sum(1 for _, (_, args, _) in recorded if args[2] == 1) == 300
