"""Captured and synthetic tracepoint events become NT Kernel Logger records that decode."""

from __future__ import annotations

import collections
import ipaddress

import pytest

from openetw.errors import InvalidArgument
from openetw.kernel.classes import KernelEventMapper, tracepoints_for, unix_user_sid, windows_priority
from openetw.kernel.procfs import ProcessInfo, ThreadInfo
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry

from . import pages as P

REGISTRY = SchemaRegistry()
ALL_FLAGS = {"process", "thread", "cswitch", "disk_io", "network", "syscall"}


class FakeProc:
    def __init__(self, command_lines=None):
        self.command_lines = command_lines or {}

    def command_line(self, pid):
        return self.command_lines.get(pid)

    def thread_group(self, tid):
        return None

    def image(self, pid):
        return None

    def status(self, tid):
        return {}


def decoded(records):
    for record in records:
        schema = REGISTRY.schema_for(record)
        assert schema is not None, record
        values = dict(decode_properties(schema, record.user_data, record.pointer_size))
        assert not any(isinstance(v, Exception) for v in values.values()), values
        yield schema.event_name, record, values


def map_captured(flags=ALL_FLAGS, proc=None):
    parser, decoder = P.captured_parser(), P.captured_decoder()
    events = []
    for cpu, raw in P.captured_pages():
        sub = parser.parse(raw)
        for event in sub.events:
            fmt, values = decoder.decode(sub.payload(event))
            events.append((event.timestamp, cpu, fmt.name, values))
    events.sort(key=lambda e: e[0])
    mapper = KernelEventMapper(flags, proc)
    records = [r for ts, cpu, name, values in events for r in mapper.map(name, ts, cpu, values)]
    return list(decoded(records))


def test_captured_events_map_to_kernel_classes():
    counts = collections.Counter(name for name, _, _ in map_captured())
    assert counts == {
        "PerfInfo/SysClExit": 808, "Thread/CSwitch": 114, "Process/Start": 6, "DiskIO/Write": 4,
        "DiskIO/FlushBuffers": 1, "Thread/Start": 3, "Thread/Stop": 3, "Process/Stop": 3,
        "TcpIp/Disconnect": 2, "TcpIp/Connect": 1, "TcpIp/Accept": 1, "TcpIp/Send": 1, "TcpIp/Recv": 1,
    }


def test_process_lifecycle_from_captured_pages():
    events = map_captured({"process"})
    stops = [(v["ProcessID"], v["ParentID"], v["ImageFileName"], v["ExitStatus"]) for n, _, v in events if n == "Process/Stop"]
    assert [s[3] for s in stops] == [0, 1, 2]
    assert {s[2] for s in stops} == {"sh"}
    assert len({s[1] for s in stops}) == 1
    starts = [v for n, _, v in events if n == "Process/Start"]
    # announced at fork with the parent's image, again at exec with the new one
    assert [v["ImageFileName"] for v in starts] == ["python", "sh"] * 3


def test_tcp_records_from_captured_pages():
    events = {n: v for n, _, v in map_captured({"network"})}
    connect, accept = events["TcpIp/Connect"], events["TcpIp/Accept"]
    loopback = ipaddress.IPv4Address("127.0.0.1")
    assert connect["daddr"] == connect["saddr"] == loopback
    assert connect["dport"] == accept["sport"] and connect["sport"] == accept["dport"]
    assert connect["PID"] == accept["PID"] != 0
    assert events["TcpIp/Send"]["size"] == events["TcpIp/Recv"]["size"] == 1000
    assert events["TcpIp/Send"]["connid"] == connect["connid"]


def test_disk_records_have_offset_size_and_response_time():
    writes = [v for n, _, v in map_captured({"disk_io"}) if n == "DiskIO/Write"]
    assert writes[0]["TransferSize"] == 65536 and writes[0]["ByteOffset"] % 512 == 0
    assert all(0 < w["HighResResponseTime"] < 1_000_000_000 for w in writes)
    assert all(w["IssuingThreadId"] for w in writes)


def test_a_queued_request_issued_by_a_worker_is_the_submitters():
    mapper = KernelEventMapper({"disk_io"}, FakeProc())
    common = {"dev": 8 << 20, "sector": 2048, "nr_sector": 128, "rwbs": "WS"}
    steps = [("block_rq_insert", {**common, "common_pid": 4242}),  # the writer queues it
             ("block_rq_issue", {**common, "bytes": 65536, "common_pid": 77}),  # a kworker dispatches it
             ("block_rq_complete", {**common, "common_pid": 0}),
             ("block_rq_issue", {**common, "sector": 4096, "bytes": 4096, "common_pid": 4242}),  # issued directly
             ("block_rq_complete", {**common, "sector": 4096, "common_pid": 0})]  # fmt: skip
    records = [r for ts, (name, values) in enumerate(steps, start=1) for r in mapper.map(name, ts * 1000, 0, values)]
    writes = [(v["IssuingThreadId"], v["TransferSize"], record.tid) for _, record, v in decoded(records)]
    assert writes == [(4242, 65536, 4242), (4242, 4096, 4242)]


def test_exec_takes_command_line_from_proc_when_alive():
    mapper = KernelEventMapper({"process"}, FakeProc({77: "/bin/true --flag"}))
    records = mapper.map("sched_process_exec", 10, 0, {"common_pid": 77, "filename": "/bin/true", "pid": 77, "old_pid": 77})
    [(name, record, values)] = decoded(records)
    assert name == "Process/Start" and values["CommandLine"] == "/bin/true --flag" and values["ImageFileName"] == "true"
    assert record.timestamp == 10


def exit_event(tid, group_dead=True, comm="x"):
    return {"common_pid": tid, "comm": comm, "pid": tid, "prio": 120, "group_dead": group_dead}


def test_exit_status_is_the_exit_code_not_the_wait_status():
    mapper = KernelEventMapper({"process"}, FakeProc())
    mapper.map("sys_enter_exit_group", 1, 0, {"common_pid": 50, "__syscall_nr": 231, "error_code": 0xFFFFFFFF})
    [(_, _, values)] = decoded(mapper.map("sched_process_exit", 2, 0, exit_event(50)))
    assert values["ExitStatus"] == -1


def test_fatal_signal_gives_128_plus_signal():
    mapper = KernelEventMapper({"process"}, FakeProc())
    mapper.map("signal_deliver", 1, 0, {"common_pid": 60, "sig": 9, "errno": 0, "code": 0, "sa_handler": 0, "sa_flags": 0})
    [(_, _, values)] = decoded(mapper.map("sched_process_exit", 2, 0, exit_event(60)))
    assert values["ExitStatus"] == 137


def test_threads_belong_to_their_process():
    mapper = KernelEventMapper({"process", "thread"}, FakeProc())
    mapper.map("task_newtask", 1, 0, {"common_pid": 70, "pid": 71, "comm": "w", "clone_flags": 0x00010000 | 0x100, "oom_score_adj": 0})
    records = mapper.map("sched_process_exit", 2, 0, exit_event(71, group_dead=False))
    [(name, record, values)] = decoded(records)
    assert name == "Thread/Stop" and values["ProcessId"] == 70 and values["TThreadId"] == 71 and record.pid == 70


def test_rundown_writes_dc_start_with_unix_sid():
    mapper = KernelEventMapper({"process", "thread"}, FakeProc())
    info = ProcessInfo(1, 0, "init", "/sbin/init splash", 0, (ThreadInfo(1, "init"), ThreadInfo(2, "worker")))
    events = list(decoded(mapper.rundown([info], 5)))
    assert [n for n, _, _ in events] == ["Process/DCStart", "Thread/DCStart", "Thread/DCStart"]
    assert events[0][2]["CommandLine"] == "/sbin/init splash"
    assert events[0][2]["UserSID"] == "S-1-22-1-0"
    assert unix_user_sid(None) == b"\0\0\0\0"


def test_priority_mapping_and_flags():
    assert windows_priority(120) == 8 and windows_priority(100) == 15 and windows_priority(139) == 1
    assert windows_priority(0) == 31
    assert "sched/sched_switch" in tracepoints_for(["cswitch"])
    with pytest.raises(InvalidArgument):
        tracepoints_for(["nonsense"])


def test_proc_fd_path_names_what_a_descriptor_points_at(tmp_path):
    import os

    from openetw.kernel.procfs import ProcSource

    target = tmp_path / "named.txt"
    fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o600)
    read_end, write_end = os.pipe()
    proc = ProcSource()
    try:
        assert proc.fd_path(os.getpid(), fd) == str(target)
        assert proc.fd_path(os.getpid(), read_end).startswith("pipe:[")
    finally:
        os.close(fd)
        os.close(read_end)
        os.close(write_end)
    assert proc.fd_path(os.getpid(), fd) is None
    assert ProcSource(str(tmp_path)).fd_path(1, 0) is None


def test_a_command_line_over_64_kb_is_cut_as_etw_cuts_it_and_counted():
    mapper = KernelEventMapper({"process"}, FakeProc())
    huge = "python -c " + "x" * 100_000
    info = ProcessInfo(7, 1, "/usr/bin/" + "p" * 70_000, huge, 0, ())
    [(name, record, values)] = list(decoded(mapper.rundown([info], 5)))
    assert name == "Process/DCStart" and mapper.truncated == 1
    assert huge.startswith(values["CommandLine"]) and len(values["CommandLine"]) > 20_000
    assert len(record.raw) <= 0xFFFF
    small = ProcessInfo(8, 1, "sh", "sh -c true", 0, ())
    assert next(iter(decoded(mapper.rundown([small], 6))))[2]["CommandLine"] == "sh -c true" and mapper.truncated == 1
