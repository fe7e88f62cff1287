"""FileIo, UdpIp and PageFault records from plain tracepoint values, decoded by openetw and dissect.etl."""

from __future__ import annotations

import io
import ipaddress

import pytest

from openetw.errors import InvalidArgument
from openetw.etl import EtlReader
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel.classes import FLAG_EVENTS, KERNEL_FLAGS, KernelEventMapper, file_key, tracepoints_for

from .test_classes import decoded

O_WRONLY, O_CREAT, O_TRUNC, O_APPEND, O_CLOEXEC = 0o1, 0o100, 0o1000, 0o2000, 0o2000000
PID, TID = 400, 401


class FakeProc:
    """/proc as the mapper sees it: a process with a thread, and its descriptors' targets."""

    def __init__(self, fd_targets=None):
        self.fd_targets = dict(fd_targets or {})

    def command_line(self, pid):
        return None

    def thread_group(self, tid):
        return PID if tid in (PID, TID) else None

    def image(self, pid):
        return None

    def status(self, tid):
        return {}

    def fd_path(self, pid, fd):
        return self.fd_targets.get((pid, fd))


def syscall(mapper, call, ts, tid=TID, ret=None, **args):
    """Runs sys_enter_<call> (at ts) then sys_exit_<call> (at ts + 1); returns the exit's records."""
    records = mapper.map(f"sys_enter_{call}", ts, 0, {"common_pid": tid, "__syscall_nr": 0, **args})
    assert records == []
    return mapper.map(f"sys_exit_{call}", ts + 1, 0, {"common_pid": tid, "__syscall_nr": 0, "ret": ret})


def file_mapper(targets=None):
    return KernelEventMapper({"file_io"}, FakeProc(targets if targets is not None else {(PID, 3): "/tmp/data.bin"}))


# -- flags ---------------------------------------------------------------------------------------


def test_every_known_flag_is_accepted_and_perf_flags_need_no_tracepoints():
    assert KERNEL_FLAGS == {"process", "thread", "cswitch", "disk_io", "network", "syscall",
                            "file_io", "page_fault", "image", "profile", "syscall_args"}  # fmt: skip
    assert tracepoints_for(["image", "profile"]) == []
    assert tracepoints_for(["image", "cswitch"]) == ["sched/sched_switch"]
    assert tracepoints_for(["page_fault"]) == ["exceptions/page_fault_user", "exceptions/page_fault_kernel"]
    file_events = tracepoints_for(["file_io"])
    assert "syscalls/sys_enter_openat" in file_events and "syscalls/sys_exit_pwrite64" in file_events
    assert len(file_events) == len(set(file_events)) == len(FLAG_EVENTS["file_io"])
    with pytest.raises(InvalidArgument, match="unknown kernel flag 'file'"):
        tracepoints_for(["file"])
    KernelEventMapper({"image", "profile"})
    with pytest.raises(InvalidArgument):
        KernelEventMapper({"pagefault"})


# -- FileIo --------------------------------------------------------------------------------------


def test_open_write_read_seek_flush_close_give_fileio_records():
    mapper = file_mapper()
    records = syscall(mapper, "openat", 10, ret=3, dfd=0xFFFFFF9C, filename=0x7FFF0000, flags=O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode=0o644)
    records += syscall(mapper, "write", 20, ret=100, fd=3, buf=0x1000, count=100)
    records += syscall(mapper, "writev", 30, ret=50, fd=3, vec=0x2000, vlen=2)
    records += syscall(mapper, "pwrite64", 40, ret=10, fd=3, buf=0x1000, count=10, pos=4096)
    records += syscall(mapper, "write", 50, ret=7, fd=3, buf=0x1000, count=7)  # at 150: pwrite moved nothing
    records += syscall(mapper, "lseek", 60, ret=1000, fd=3, offset=1000, whence=0)
    records += syscall(mapper, "read", 70, ret=20, fd=3, buf=0x1000, count=64)
    records += syscall(mapper, "preadv2", 80, ret=5, fd=3, vec=0x2000, vlen=1, pos_l=0xFFFFFFFFFFFFFFFF, pos_h=0, flags=0)
    records += syscall(mapper, "fsync", 90, ret=0, fd=3)
    records += syscall(mapper, "close", 100, ret=0, fd=3)
    events = list(decoded(records))
    key = file_key(PID, 3)
    assert [n for n, _, _ in events] == [
        "FileIO/Create", "FileIO/Write", "FileIO/Write", "FileIO/Write", "FileIO/Write", "FileIO/Read", "FileIO/Read",
        "FileIO/Flush", "FileIO/Cleanup", "FileIO/Close",
    ]
    create = events[0][2]
    assert create["FileName"] == "/tmp/data.bin" and create["FileObject"] == key == (PID << 32 | 3)
    assert create["TTID"] == TID and create["CreateOptions"] == 5 << 24 and create["ShareAccess"] == 7
    io_events = [(n.split("/")[1], v["Offset"], v["IoSize"]) for n, _, v in events[1:7]]
    assert io_events == [("Write", 0, 100), ("Write", 100, 50), ("Write", 4096, 10), ("Write", 150, 7),
                         ("Read", 1000, 20), ("Read", 1020, 5)]  # fmt: skip
    for name, record, values in events[1:]:
        assert values["FileObject"] == values["FileKey"] == key, name
        assert values["TTID"] == TID and record.pid == PID and record.tid == TID
    assert [r.timestamp for r in records] == [11, 21, 31, 41, 51, 71, 81, 91, 101, 101]


def test_the_file_name_is_taken_when_the_open_is_read_not_when_it_is_mapped():
    proc = FakeProc({(TID, 3): "/tmp/early.bin"})
    mapper = KernelEventMapper({"file_io"}, proc)
    enter = {"common_pid": TID, "__syscall_nr": 0, "dfd": 0, "filename": 0, "flags": O_WRONLY, "mode": 0}
    leave = {"common_pid": TID, "__syscall_nr": 0, "ret": 3}
    failed = {"common_pid": TID, "__syscall_nr": 0, "ret": -2}
    mapper.on_arrival([(10, 0, "sys_enter_openat", enter), (11, 0, "sys_exit_openat", leave), (12, 0, "sys_exit_openat", failed)])
    assert leave["fd_path"] == "/tmp/early.bin" and "fd_path" not in failed
    proc.fd_targets.clear()  # the descriptor is closed before the events are mapped
    assert mapper.map("sys_enter_openat", 10, 0, enter) == []
    (create,) = mapper.map("sys_exit_openat", 11, 0, leave)
    ((name, _, values),) = decoded([create])
    assert name == "FileIO/Create" and values["FileName"] == "/tmp/early.bin"


def test_arrival_looks_nothing_up_without_the_file_flag():
    proc = FakeProc({(TID, 3): "/tmp/early.bin"})
    leave = {"common_pid": TID, "__syscall_nr": 0, "ret": 3}
    KernelEventMapper({"process"}, proc).on_arrival([(11, 0, "sys_exit_openat", leave)])
    assert "fd_path" not in leave


def test_failed_calls_unknown_descriptors_and_non_files_are_not_reported():
    mapper = file_mapper({(PID, 3): "/tmp/f", (PID, 4): "/dev/null", (PID, 5): "pipe:[77]"})
    assert syscall(mapper, "openat", 1, ret=-2, dfd=0, filename=0, flags=0, mode=0) == []  # ENOENT
    assert syscall(mapper, "open", 2, ret=4, filename=0, flags=O_WRONLY, mode=0) == []  # a device
    assert syscall(mapper, "openat", 3, ret=5, dfd=0, filename=0, flags=0, mode=0) == []  # reopened pipe
    assert syscall(mapper, "write", 4, ret=10, fd=4, buf=0, count=10) == []
    assert syscall(mapper, "write", 5, ret=10, fd=1, buf=0, count=10) == []  # opened before the session
    assert len(syscall(mapper, "openat", 6, ret=3, dfd=0, filename=0, flags=0, mode=0)) == 1
    assert syscall(mapper, "read", 7, ret=-11, fd=3, buf=0, count=10) == []  # EAGAIN
    assert syscall(mapper, "fdatasync", 8, ret=-5, fd=3) == []
    assert syscall(mapper, "close", 9, ret=-9, fd=77) == []
    # an exit without its enter (the call began before the session) is ignored
    assert mapper.map("sys_exit_read", 10, 0, {"common_pid": TID, "__syscall_nr": 0, "ret": 5}) == []


def test_append_writes_have_no_known_offset_and_dup_shares_the_file():
    mapper = file_mapper()
    syscall(mapper, "open", 1, ret=3, filename=0, flags=O_WRONLY | O_APPEND, mode=0)
    assert syscall(mapper, "dup2", 2, ret=9, oldfd=3, newfd=9) == []
    [(name, _, values)] = decoded(syscall(mapper, "write", 3, ret=12, fd=9, buf=0, count=12))
    assert name == "FileIO/Write" and values["Offset"] == 0 and values["IoSize"] == 12
    assert values["FileObject"] == file_key(PID, 3)
    assert [n for n, _, _ in decoded(syscall(mapper, "close", 4, ret=0, fd=3))] == ["FileIO/Cleanup", "FileIO/Close"]
    assert len(syscall(mapper, "write", 5, ret=1, fd=9, buf=0, count=1)) == 1  # the duplicate stays open


def test_creat_openat2_and_missing_fd_path():
    mapper = KernelEventMapper({"file_io"}, None)  # no /proc: names are empty
    [(_, _, create)] = decoded(syscall(mapper, "creat", 1, tid=PID, ret=3, pathname=0, mode=0o600))
    assert create["FileName"] == "" and create["CreateOptions"] == 5 << 24 and create["FileObject"] == file_key(PID, 3)
    [(_, _, create2)] = decoded(syscall(mapper, "openat2", 2, tid=PID, ret=4, dfd=0, filename=0, how=0, usize=24))
    assert create2["CreateOptions"] == 0  # openat2's flags are behind a user pointer
    [(_, _, write)] = decoded(syscall(mapper, "write", 3, tid=PID, ret=8, fd=4, buf=0, count=8))
    assert write["Offset"] == 0 and write["IoSize"] == 8


def test_exec_forgets_close_on_exec_files_and_exit_forgets_all():
    mapper = KernelEventMapper({"file_io"}, FakeProc({(PID, 3): "/a", (PID, 4): "/b"}))
    syscall(mapper, "openat", 1, tid=PID, ret=3, dfd=0, filename=0, flags=O_CLOEXEC, mode=0)
    syscall(mapper, "openat", 2, tid=PID, ret=4, dfd=0, filename=0, flags=0, mode=0)
    assert mapper.map("sched_process_exec", 3, 0, {"common_pid": PID, "filename": "/bin/x", "pid": PID, "old_pid": PID}) == []
    assert syscall(mapper, "read", 4, tid=PID, ret=1, fd=3, buf=0, count=1) == []
    assert len(syscall(mapper, "read", 5, tid=PID, ret=1, fd=4, buf=0, count=1)) == 1
    mapper.map("sched_process_exit", 6, 0, {"common_pid": PID, "comm": "x", "pid": PID, "prio": 120, "group_dead": True})
    assert syscall(mapper, "read", 7, tid=PID, ret=1, fd=4, buf=0, count=1) == []


def test_close_range_closes_or_marks_close_on_exec():
    mapper = KernelEventMapper({"file_io"}, FakeProc({(PID, 3): "/a", (PID, 4): "/b", (PID, 5): "/c"}))
    for ts, fd in enumerate((3, 4, 5)):
        syscall(mapper, "openat", ts * 2, tid=PID, ret=fd, dfd=0, filename=0, flags=0, mode=0)
    syscall(mapper, "close_range", 10, tid=PID, ret=0, fd=3, max_fd=3, flags=0)
    syscall(mapper, "close_range", 12, tid=PID, ret=0, fd=4, max_fd=4, flags=0x4)
    assert syscall(mapper, "read", 14, tid=PID, ret=1, fd=3, buf=0, count=1) == []
    assert len(syscall(mapper, "read", 16, tid=PID, ret=1, fd=4, buf=0, count=1)) == 1
    mapper.map("sched_process_exec", 18, 0, {"common_pid": PID, "filename": "/bin/x", "pid": PID, "old_pid": PID})
    assert syscall(mapper, "read", 20, tid=PID, ret=1, fd=4, buf=0, count=1) == []
    assert len(syscall(mapper, "read", 22, tid=PID, ret=1, fd=5, buf=0, count=1)) == 1


# -- UdpIp ---------------------------------------------------------------------------------------


def udp(name, ret, family=2, flags=0, sk=0xFFFF888012345678, protocol=17):
    return name, {"common_pid": TID, "sk": sk, "family": family, "protocol": protocol, "ret": ret, "flags": flags}


def test_udp_send_and_receive_have_size_pid_and_socket():
    mapper = KernelEventMapper({"network"}, FakeProc())
    records = []
    for ts, (name, values) in enumerate([
        udp("sock_send_length", 512), udp("sock_recv_length", 512), udp("sock_recv_length", 512, flags=0x2),
        udp("sock_send_length", -11), udp("sock_send_length", 64, family=10), udp("sock_recv_length", 64, family=10),
        udp("sock_send_length", 64, family=1, protocol=0),
    ]):
        records += mapper.map(name, ts, 1, values)
    events = list(decoded(records))
    assert [n for n, _, _ in events] == ["UdpIp/Send", "UdpIp/Recv", "UdpIp/SendIPV6", "UdpIp/RecvIPV6"]
    for _name, record, values in events:
        assert values["PID"] == PID == record.pid and record.tid == TID
        assert values["connid"] == 0xFFFF888012345678 and values["seqnum"] == 0
        assert values["sport"] == values["dport"] == 0
    assert [v["size"] for _, _, v in events] == [512, 512, 64, 64]
    assert events[0][2]["saddr"] == events[0][2]["daddr"] == ipaddress.IPv4Address("0.0.0.0")
    assert events[2][2]["daddr"] == ipaddress.IPv6Address("::")
    assert [r.timestamp for r in records] == [0, 1, 4, 5]


# -- PageFault -----------------------------------------------------------------------------------


def test_page_faults_map_error_codes_to_fault_kinds():
    mapper = KernelEventMapper({"page_fault"}, FakeProc())
    faults = [
        ("page_fault_user", 0x7F0000001000, 0x401000, 0x6),   # not present, write, user: first touch
        ("page_fault_user", 0x7F0000002000, 0x401010, 0x7),   # present, write: copy-on-write
        ("page_fault_user", 0x7F0000003000, 0x401020, 0x15),  # present, instruction fetch: violation
        ("page_fault_kernel", 0x7F0000004000, 0xFFFFFFFF81000000, 0x2),  # kernel writes a user page
    ]
    records = []
    for ts, (name, address, ip, error) in enumerate(faults):
        records += mapper.map(name, ts, 0, {"common_pid": TID, "address": address, "ip": ip, "error_code": error})
    events = list(decoded(records))
    assert [n for n, _, _ in events] == ["Memory/DemandZeroFault", "Memory/CopyOnWrite",
                                         "Memory/AccessViolation", "Memory/DemandZeroFault"]  # fmt: skip
    assert [(v["VirtualAddress"], v["ProgramCounter"]) for _, _, v in events] == [(a, ip) for _, a, ip, _ in faults]
    assert all(r.pid == PID and r.tid == TID for _, r, _ in events)


# -- both parsers read the records ---------------------------------------------------------------


def test_dissect_and_openetw_read_the_new_classes_from_a_file(tmp_path):
    dissect_etl = pytest.importorskip("dissect.etl")
    mapper = KernelEventMapper({"file_io", "network", "page_fault"}, FakeProc())
    records = syscall(mapper, "openat", 10, ret=3, dfd=0, filename=0, flags=0, mode=0)
    records += syscall(mapper, "pread64", 20, ret=4096, fd=3, buf=0, count=4096, pos=8192)
    records += syscall(mapper, "close", 30, ret=0, fd=3)
    name, values = udp("sock_send_length", 300)
    records += mapper.map(name, 40, 0, values)
    records += mapper.map("page_fault_user", 50, 0, {"common_pid": TID, "address": 0x7F0000001000, "ip": 0x401000, "error_code": 6})
    path = tmp_path / "io.etl"
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", number_of_processors=1)
    with EtlWriter(path, header=header) as writer:
        writer.write_all(records)
    with EtlReader(str(path)) as reader:
        ours = list(reader)
    theirs = list(dissect_etl.ETL(io.BytesIO(path.read_bytes())))[1:]  # after the logfile header
    assert len(ours) - 1 == len(theirs) == len(records) == 6
    read, send, fault = theirs[1].event, theirs[4].event, theirs[5].event
    assert read.Offset == 8192 and read.IoSize == 4096 and read.TTID == TID and read.FileObject == file_key(PID, 3)
    assert send.size == 300 and send.PID == PID
    assert fault.VirtualAddress == 0x7F0000001000 and fault.ProgramCounter == 0x401000
