"""Linux tracepoints → NT Kernel Logger records (Process, Thread, CSwitch, DiskIo, TcpIp, UdpIp,
FileIo, PageFault, SysCall).

Each record is a SYSTEM64 (PERFINFO64 for system calls) kernel record whose HookId, version
and payload follow the layouts in :mod:`openetw.tdh.mof_kernel`, so the project's decoder,
dissect.etl and PerfView read them as Windows kernel events. Timestamps are the tracepoint's
``trace_clock=mono`` time in nanoseconds: the QPC of a file written with
:func:`openetw.etl.writer.linux_trace_clock`.

The mapper keeps the state tracepoints do not carry (thread → process, exit codes, block
requests in flight, socket endpoints, open files, system calls in progress). It does no I/O
itself: /proc lookups go through the ``proc`` object given to it (a
:class:`~openetw.kernel.procfs.ProcSource` or a test double). See docs/kernel.md for what each
field means on Linux.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from openetw.errors import InvalidArgument
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.build import build_system_record
from openetw.etl.record import DEFAULT_CONTEXT, EventRecord, PerfInfoRecord, SystemRecord
from openetw.kernel.procfs import ProcessInfo

if TYPE_CHECKING:
    from openetw.kernel.ringbuffer import FixedEvents

__all__ = [
    "FLAG_EVENTS",
    "KERNEL_FLAGS",
    "KernelEventMapper",
    "PERF_FLAGS",
    "ProcLookup",
    "file_key",
    "tracepoints_for",
    "unix_user_sid",
]

# Groups (high byte of the HookId) and the versions written.
PROCESS_GROUP, THREAD_GROUP, DISK_GROUP, TCPIP_GROUP, PERFINFO_GROUP = 0x03, 0x05, 0x01, 0x06, 0x0F
FILEIO_GROUP, UDPIP_GROUP, PAGEFAULT_GROUP = 0x04, 0x08, 0x02
PROCESS_VERSION, THREAD_VERSION, CSWITCH_VERSION, DISK_VERSION, TCPIP_VERSION, SYSCALL_VERSION = 4, 3, 2, 3, 2, 2
FILEIO_VERSION, UDPIP_VERSION, PAGEFAULT_VERSION = 3, 2, 2

PROCESS_START, PROCESS_END, PROCESS_DC_START = 1, 2, 3
THREAD_START, THREAD_END, THREAD_DC_START, CSWITCH = 1, 2, 3, 36
DISK_READ, DISK_WRITE, DISK_FLUSH = 10, 11, 14
TCP_SEND, TCP_RECV, TCP_CONNECT, TCP_DISCONNECT, TCP_ACCEPT = 10, 11, 12, 13, 15
TCP_IPV6_OFFSET = 16
SYSCALL_ENTER, SYSCALL_EXIT = 51, 52
UDP_SEND, UDP_RECV = 10, 11
FILE_CREATE, FILE_CLEANUP, FILE_CLOSE, FILE_READ, FILE_WRITE, FILE_FLUSH = 64, 65, 66, 67, 68, 73
FAULT_DEMAND_ZERO, FAULT_COPY_ON_WRITE, FAULT_ACCESS_VIOLATION = 11, 12, 15

_OPEN_EXITS = frozenset({"sys_exit_open", "sys_exit_openat", "sys_exit_openat2", "sys_exit_creat"})

# System calls the ``file_io`` flag follows: name → (kind, fd field, explicit position field).
_FILE_SYSCALLS: Mapping[str, tuple[str, str | None, str | None]] = {
    "open": ("open", None, None), "openat": ("open", None, None), "openat2": ("open", None, None),
    "creat": ("open", None, None),
    "read": ("read", "fd", None), "readv": ("read", "fd", None),
    "pread64": ("read", "fd", "pos"), "preadv": ("read", "fd", "pos_l"), "preadv2": ("read", "fd", "pos_l"),
    "write": ("write", "fd", None), "writev": ("write", "fd", None),
    "pwrite64": ("write", "fd", "pos"), "pwritev": ("write", "fd", "pos_l"), "pwritev2": ("write", "fd", "pos_l"),
    "lseek": ("seek", "fd", None),
    "close": ("close", "fd", None), "close_range": ("close_range", "fd", None),
    "fsync": ("flush", "fd", None), "fdatasync": ("flush", "fd", None),
    "dup": ("dup", "fildes", None), "dup2": ("dup", "oldfd", None), "dup3": ("dup", "oldfd", None),
}

FLAG_EVENTS: Mapping[str, tuple[str, ...]] = {
    "process": ("sched/sched_process_fork", "sched/sched_process_exec", "sched/sched_process_exit",
                "task/task_newtask", "syscalls/sys_enter_exit_group", "syscalls/sys_enter_exit",
                "signal/signal_deliver"),
    "thread": ("sched/sched_process_exit", "task/task_newtask"),
    "cswitch": ("sched/sched_switch",),
    "disk_io": ("block/block_rq_issue", "block/block_rq_complete"),
    "network": ("sock/inet_sock_set_state", "sock/sock_send_length", "sock/sock_recv_length"),
    "syscall": ("raw_syscalls/sys_enter", "raw_syscalls/sys_exit"),
    # exec and exit forget a process's descriptors (close-on-exec, exit closes everything)
    "file_io": tuple(f"syscalls/sys_{side}_{call}" for call in _FILE_SYSCALLS for side in ("enter", "exit"))
    + ("sched/sched_process_exec", "sched/sched_process_exit"),
    "page_fault": ("exceptions/page_fault_user", "exceptions/page_fault_kernel"),
}
"""The tracepoints each tracefs kernel flag needs (``system/event``)."""
PERF_FLAGS = frozenset({"image", "profile"})
"""Flags recorded from perf_event_open by the perf source: they need no tracepoints."""
KERNEL_FLAGS = frozenset(FLAG_EVENTS) | PERF_FLAGS
"""Every kernel flag the project knows."""

_TCP_ESTABLISHED, _TCP_SYN_SENT, _TCP_SYN_RECV, _TCP_CLOSE, _TCP_LISTEN = 1, 2, 3, 7, 10
_TCP_CLOSING_STATES = frozenset({4, 5, 6, 8, 9, 11})  # FIN_WAIT1/2, TIME_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING
_AF_INET, _AF_INET6, _IPPROTO_TCP, _IPPROTO_UDP = 2, 10, 6, 17
_MSG_PEEK = 0x2
_O_WRONLY, _O_CREAT, _O_EXCL, _O_TRUNC, _O_APPEND, _O_CLOEXEC = 0o1, 0o100, 0o200, 0o1000, 0o2000, 0o2000000
_FILE_OPEN, _FILE_CREATE, _FILE_OPEN_IF, _FILE_OVERWRITE, _FILE_OVERWRITE_IF = 1, 2, 3, 4, 5
_SHARE_ALL = 0x7  # FILE_SHARE_READ | WRITE | DELETE: Linux never locks a file against other opens
_EBADF = 9
_CLOSE_RANGE_CLOEXEC = 0x4
_PF_PRESENT, _PF_WRITE = 0x1, 0x2
_CLONE_THREAD = 0x00010000
_SIG_DFL = 0
_NON_FATAL_DEFAULT = frozenset({17, 18, 19, 20, 21, 22, 23, 28})  # CHLD CONT STOP TSTP TTIN TTOU URG WINCH
_NULL_SID = b"\0\0\0\0"

_PROCESS_HEAD = struct.Struct("<QIIIiQI")
_THREAD = struct.Struct("<II7QI4B")
_CSWITCH = struct.Struct("<IIbbBbbbbbII")
_DISK = struct.Struct("<IIIIqQQqI")
_TCP_IDS = struct.Struct("<II")
_PORTS = struct.Struct(">HH")
_SEQ_CONN = struct.Struct("<IQ")
_SEND_TIMES = struct.Struct("<II")
_CONNECT_OPTIONS = struct.Struct("<HHHHIhh")
_POINTER = struct.Struct("<Q")
_STATUS = struct.Struct("<I")
_FILE_CREATE_HEAD = struct.Struct("<QQIIII")
_FILE_SIMPLE = struct.Struct("<QQQI")
_FILE_RW = struct.Struct("<QQQQIII")
_FAULT = struct.Struct("<QQ")

# The hot records (system calls, context switches) are packed header and payload in one step;
# the header tuple is what the header layout would unpack from those bytes.
_SYSCALL_ENTER_RAW = struct.Struct(L.PERFINFO_TRACE_HEADER.struct.format + "Q")
_SYSCALL_EXIT_RAW = struct.Struct(L.PERFINFO_TRACE_HEADER.struct.format + "I")
_CSWITCH_RAW = struct.Struct(L.SYSTEM_TRACE_HEADER.struct.format + _CSWITCH.format[1:])
_SYSTEM_HEADER = L.SYSTEM_TRACE_HEADER.struct
_PERFINFO64, _SYSTEM64, _TYPED = L.HEADER_TYPE_PERFINFO64, L.HEADER_TYPE_SYSTEM64, F.TYPED_FLAGS
_SYSCALL_ENTER_HOOK, _SYSCALL_EXIT_HOOK = PERFINFO_GROUP << 8 | SYSCALL_ENTER, PERFINFO_GROUP << 8 | SYSCALL_EXIT
_CSWITCH_HOOK = THREAD_GROUP << 8 | CSWITCH
# System call records built column-wise (map_fixed): Enter (24 bytes) and Exit (20 bytes, padded
# to 24 as a buffer aligns it) share one 24-byte row: the header, then Id or Status + padding.
_P = L.PERFINFO_TRACE_HEADER
_NUMPY_CODES = {"B": "u1", "H": "<u2", "I": "<u4", "q": "<i8", "Q": "<u8"}
_SYSCALL_ROW_SIZE = F.aligned(_SYSCALL_ENTER_RAW.size)
_SYSCALL_ROW = np.dtype({
    "names": ["version", "header_type", "flags", "size", "hook", "timestamp", "value"],
    "formats": [_NUMPY_CODES[code] for _, code in _P.fields] + ["<u8"],
    "offsets": [_P.offset(name) for name, _ in _P.fields] + [_P.size],
    "itemsize": _SYSCALL_ROW_SIZE,
})  # fmt: skip
assert [name for name, _ in _P.fields] == ["Version", "HeaderType", "MarkerFlags", "Size", "HookId", "SystemTime"]
assert _SYSCALL_ROW_SIZE == F.aligned(_SYSCALL_EXIT_RAW.size)  # Enter and Exit share one row size
_FIXED_FIELDS: Mapping[str, tuple[str, ...]] = {"sys_enter": ("id",), "sys_exit": ("ret",)}
_V4_ZERO = bytes(8)
_V6_ZERO = bytes(32)
_NO_PORTS = bytes(4)


class ProcLookup(Protocol):
    """What the mapper asks /proc (see :class:`~openetw.kernel.procfs.ProcSource`)."""

    def command_line(self, pid: int) -> str | None: ...
    def thread_group(self, tid: int) -> int | None: ...
    def image(self, pid: int) -> str | None: ...
    def status(self, tid: int) -> dict[str, str]: ...
    # Optional: ``fd_path(pid, fd) -> str | None``, the target of /proc/<pid>/fd/<fd>, names
    # the files FileIo/Create reports. Without it the file names are empty.


def tracepoints_for(flags: Iterable[str]) -> list[str]:
    """The tracepoints to enable for ``flags``, each once, in a stable order.

    Flags recorded without tracepoints (:data:`PERF_FLAGS`) contribute none; unknown names raise.
    """
    wanted: list[str] = []
    for flag in flags:
        if flag not in KERNEL_FLAGS:
            raise InvalidArgument(f"unknown kernel flag {flag!r}; known: {', '.join(sorted(KERNEL_FLAGS))}")
        for event in FLAG_EVENTS.get(flag, ()):
            if event not in wanted:
                wanted.append(event)
    return wanted


def unix_user_sid(uid: int | None) -> bytes:
    """The kernel SID blob for a Unix user: TOKEN_USER (2 pointers) + ``S-1-22-1-<uid>``.

    S-1-22-1 is the authority Samba and SSSD use for Unix users. ``None`` gives the null SID.
    """
    if uid is None:
        return _NULL_SID
    sid = bytes((1, 2, 0, 0, 0, 0, 0, 22)) + struct.pack("<II", 1, uid & 0xFFFFFFFF)
    # The first pointer of TOKEN_USER points at the SID; any non-zero value marks "SID present".
    return struct.pack("<QQ", 0x10, 0) + sid


def _ansi(text: str) -> bytes:
    return text.encode("utf-8", "replace") + b"\0"


# The largest user data a SYSTEM_TRACE_HEADER record is given: the whole record fits a 64 KB
# buffer after its header (and its Size, a u16).
MAX_SYSTEM_PAYLOAD = (64 << 10) - L.BUFFER_HEADER_SIZE - L.SYSTEM_TRACE_HEADER.size - 8


def _wide(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass") + b"\0\0"


def windows_priority(linux_prio: int) -> int:
    """Linux ``prio`` (0-99 real-time, 100-139 = nice -20..19) as a Windows priority (1-31)."""
    if linux_prio < 100:
        return 16 + (99 - max(linux_prio, 0)) * 15 // 99
    nice = min(linux_prio, 139) - 120
    return max(1, min(15, 8 - round(nice * 7 / 20)))


_WINDOWS_PRIORITY = {prio: windows_priority(prio) for prio in range(140)}


def _exit_code(raw: int) -> int:
    """exit()/exit_group() argument (an ``int`` in an 8-byte slot) as a signed 32-bit code."""
    code = raw & 0xFFFFFFFF
    return code - (1 << 32) if code & 0x80000000 else code


class _Process:
    __slots__ = ("pid", "parent", "image", "command_line", "uid")

    def __init__(self, pid: int, parent: int, image: str, command_line: str, uid: int | None) -> None:
        self.pid = pid
        self.parent = parent
        self.image = image
        self.command_line = command_line
        self.uid = uid


class _Socket:
    __slots__ = ("owner", "family", "saddr", "daddr", "sport", "dport")

    def __init__(self, owner: int, family: int, saddr: bytes, daddr: bytes, sport: int, dport: int) -> None:
        self.owner = owner
        self.family = family
        self.saddr = saddr
        self.daddr = daddr
        self.sport = sport
        self.dport = dport


class _OpenFile:
    """A descriptor the mapper follows: its FileObject key and the description's file position.

    Descriptors made by dup() share the object (one open file description, one position).
    """

    __slots__ = ("key", "position", "close_on_exec")

    def __init__(self, key: int, position: int | None, close_on_exec: bool) -> None:
        self.key = key
        self.position = position  # None: not known (O_APPEND, or moved where the mapper cannot see)
        self.close_on_exec = close_on_exec


def file_key(pid: int, fd: int) -> int:
    """The FileObject/FileKey of descriptor ``fd`` of process ``pid``: ``pid << 32 | fd``."""
    return (pid & 0xFFFFFFFF) << 32 | (fd & 0xFFFFFFFF)


def _is_file_path(path: str) -> bool:
    """A /proc fd target naming a file in the directory tree (not a device, pipe, socket, anon inode)."""
    if not path.startswith("/"):
        return False
    return not path.startswith("/dev/") or path.startswith("/dev/shm/")


def _create_disposition(flags: int) -> int:
    if flags & _O_CREAT:
        if flags & _O_EXCL:
            return _FILE_CREATE
        return _FILE_OVERWRITE_IF if flags & _O_TRUNC else _FILE_OPEN_IF
    return _FILE_OVERWRITE if flags & _O_TRUNC else _FILE_OPEN


class KernelEventMapper:
    """Turns decoded tracepoint events into NT Kernel Logger records, keeping the state needed."""

    def __init__(self, flags: Iterable[str], proc: ProcLookup | None = None) -> None:
        self.flags = frozenset(flags)
        unknown = self.flags - KERNEL_FLAGS
        if unknown:
            raise InvalidArgument(f"unknown kernel flags: {', '.join(sorted(unknown))}")
        self.proc = proc
        self._tgid: dict[int, int] = {}
        self._processes: dict[int, _Process] = {}
        self._exit_codes: dict[int, int] = {}   # tgid → exit_group() code
        self._thread_exit: dict[int, int] = {}  # tid → exit() code
        self._fatal_signal: dict[int, int] = {}  # tgid → last default-action fatal signal
        self._disk_in_flight: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        self._sockets: dict[int, _Socket] = {}
        self._listeners: dict[int, int] = {}  # local port → pid
        self._file_calls: dict[int, tuple[str, int, int | None, int | None]] = {}  # tid → (call, fd, position, flags)
        self._files: dict[int, dict[int, _OpenFile]] = {}  # pid → fd → file
        self.unmapped = 0
        self.truncated = 0  # events whose fields were cut to fit ETW's 64 KB record (events_truncated)
        self._registered: set[str] = set()
        # The hot events, packed straight to record bytes for a sink that takes them (map_events).
        self._raw_handlers: dict[str, Callable[[int, Mapping[str, Any]], bytes]] = {
            "sys_enter": self._sys_enter_raw,
            "sys_exit": self._sys_exit_raw,
            "sched_switch": self._switch_raw,
        }
        self._handlers: dict[str, Callable[[int, int, Mapping[str, Any]], list[EventRecord]]] = {
            "sched_process_fork": self._on_fork,
            "task_newtask": self._on_newtask,
            "sched_process_exec": self._on_exec,
            "sched_process_exit": self._on_exit,
            "sys_enter_exit_group": self._on_exit_group,
            "sys_enter_exit": self._on_thread_exit_call,
            "signal_deliver": self._on_signal,
            "sched_switch": self._on_switch,
            "block_rq_issue": self._on_block_issue,
            "block_rq_complete": self._on_block_complete,
            "inet_sock_set_state": self._on_sock_state,
            "sock_send_length": self._on_sock_send,
            "sock_recv_length": self._on_sock_recv,
            "sys_enter": self._on_sys_enter,
            "sys_exit": self._on_sys_exit,
            "page_fault_user": self._on_page_fault,
            "page_fault_kernel": self._on_page_fault,
        }
        for call, (kind, fd_field, position_field) in _FILE_SYSCALLS.items():
            self._handlers[f"sys_enter_{call}"] = self._file_enter_handler(call, kind, fd_field, position_field)
            self._handlers[f"sys_exit_{call}"] = self._file_exit_handler(call, kind)

    def on_arrival(self, events: list[tuple[int, int, str, Mapping[str, Any]]]) -> None:
        """Look up, the moment events are read (before they wait to be mapped in time order),
        what /proc knows only briefly: the file a new descriptor names, kept in the event as
        ``fd_path``. The descriptor may be closed by the time its open is mapped."""
        if "file_io" not in self.flags:
            return
        fd_path = getattr(self.proc, "fd_path", None)
        if fd_path is None:
            return
        for _, _, name, values in events:
            if name in _OPEN_EXITS and values["ret"] >= 0 and isinstance(values, dict):
                values["fd_path"] = fd_path(values["common_pid"], values["ret"])

    def register(self, name: str, handler: Callable[[int, int, Mapping[str, Any]], list[EventRecord]]) -> None:
        """Map raw events called ``name`` (from any source) with ``handler(timestamp, cpu, values)``."""
        self._handlers[name] = handler
        self._registered.add(name)
        self._raw_handlers.pop(name, None)

    def fields_used(self) -> dict[str, frozenset[str]]:
        """Tracepoint name → the fields the built-in handler reads (for a lean
        :class:`~openetw.kernel.ringbuffer.EventDecoder`). Events given to :meth:`register`
        are left out: they are decoded whole."""
        used = dict(_FIELDS_USED)
        for call, (_kind, fd_field, position_field) in _FILE_SYSCALLS.items():
            wanted = {"common_pid"}
            wanted.update(f for f in (fd_field, position_field) if f is not None)
            if call in ("open", "openat", "dup3", "close_range"):
                wanted.add("flags")
            if call in ("dup2", "dup3"):
                wanted.add("newfd")
            if call == "close_range":
                wanted.add("max_fd")
            used[f"sys_enter_{call}"] = frozenset(wanted)
            used[f"sys_exit_{call}"] = frozenset({"common_pid", "ret"})
        for name in self._registered:
            used.pop(name, None)
        return used

    def fixed_events(self) -> dict[str, tuple[str, ...]]:
        """Events this mapper turns into records column-wise (:meth:`map_fixed`), with the fields
        it reads: system call enter and exit, which need no state. Empty when a handler for them
        was registered or the ``syscall`` flag is off."""
        if "syscall" not in self.flags:
            return {}
        return {name: fields for name, fields in _FIXED_FIELDS.items() if name not in self._registered}

    def map_fixed(self, events: FixedEvents) -> tuple[bytes, int, np.ndarray]:
        """The records of column-wise events (see :meth:`fixed_events`) as one block:
        ``(block, row_size, timestamps)``, every record ``row_size`` bytes (its padding
        included), the same bytes as :meth:`map_events` gives ``write_raw`` one by one. Events of
        other names are left out and counted in :attr:`unmapped`."""
        names = events.names
        kinds = events.kinds
        enter = names.index("sys_enter") if "sys_enter" in names and "sys_enter" not in self._registered else -1
        leave = names.index("sys_exit") if "sys_exit" in names and "sys_exit" not in self._registered else -1
        is_enter = kinds == enter
        mapped = is_enter | (kinds == leave)
        timestamps = events.timestamps
        count = len(kinds)
        if not mapped.all():
            self.unmapped += int(count - np.count_nonzero(mapped))
            is_enter, timestamps = is_enter[mapped], timestamps[mapped]
            count = len(timestamps)
        rows = np.empty(count, dtype=_SYSCALL_ROW)
        rows["version"] = SYSCALL_VERSION
        rows["header_type"] = _PERFINFO64
        rows["flags"] = _TYPED
        rows["size"] = np.where(is_enter, _SYSCALL_ENTER_RAW.size, _SYSCALL_EXIT_RAW.size)
        rows["hook"] = np.where(is_enter, _SYSCALL_ENTER_HOOK, _SYSCALL_EXIT_HOOK)
        rows["timestamp"] = timestamps
        zero = np.zeros(len(kinds), dtype=np.uint64)
        ids = events.columns.get("id", zero)
        status = events.columns.get("ret", zero) & np.uint64(0xFFFFFFFF)
        values = np.where(events.kinds == enter, ids, status)
        rows["value"] = values if len(values) == count else values[mapped]
        return rows.tobytes(), _SYSCALL_ROW_SIZE, timestamps

    # -- identity -------------------------------------------------------------------------------
    def process_of(self, tid: int) -> int:
        """The process (thread group) of a thread: learnt from clones, else /proc, else itself."""
        tgid = self._tgid.get(tid)
        if tgid is None:
            tgid = (self.proc.thread_group(tid) if self.proc is not None and tid > 0 else None) or tid
            self._tgid[tid] = tgid
        return tgid

    def _record(self, group: int, opcode: int, version: int, tid: int, ts: int, cpu: int, payload: bytes, pid: int | None = None) -> EventRecord:
        return build_system_record(
            hook_id=group << 8 | opcode, version=version, pid=self.process_of(tid) if pid is None else pid,
            tid=tid, timestamp=ts, cpu=cpu, user_data=payload,
        )

    # -- rundown --------------------------------------------------------------------------------
    def rundown(self, processes: Iterable[ProcessInfo], timestamp: int, cpu: int = 0) -> list[EventRecord]:
        """Process/Thread DCStart records for the processes alive when the session starts."""
        records: list[EventRecord] = []
        for info in processes:
            state = _Process(info.pid, info.parent_pid, info.image, info.command_line, info.uid)
            self._processes[info.pid] = state
            for thread in info.threads:
                self._tgid[thread.tid] = info.pid
            if "process" in self.flags:
                records.append(self._process_record(PROCESS_DC_START, state, 0, info.pid, timestamp, cpu))
            if "thread" in self.flags:
                for thread in info.threads:
                    records.append(self._thread_record(THREAD_DC_START, info.pid, thread.tid, thread.name, timestamp, cpu, thread.tid))
        return records

    # -- dispatch -------------------------------------------------------------------------------
    def map(self, name: str, timestamp: int, cpu: int, values: Mapping[str, Any]) -> list[EventRecord]:
        """Records for one decoded tracepoint event (often none, sometimes several)."""
        handler = self._handlers.get(name)
        if handler is None:
            self.unmapped += 1
            return []
        return handler(timestamp, cpu, values)

    def map_events(
        self,
        events: Iterable[tuple[int, int, str, Mapping[str, Any]]],
        write: Callable[[EventRecord], bool],
        write_raw: Callable[[bytes, int, int], bool] | None = None,
    ) -> int:
        """Maps raw events ``(timestamp, cpu, name, values)`` in order, giving each record to
        ``write``; returns how many records were accepted. The same records as :meth:`map` per event.

        With ``write_raw(raw, cpu, timestamp)`` (a sink's fast path, e.g.
        :meth:`EtlWriter.write_raw <openetw.etl.writer.EtlWriter.write_raw>`), system calls and
        context switches go to it as packed record bytes, without record objects."""
        get = self._handlers.get
        no_raw: dict[str, Callable[[int, Mapping[str, Any]], bytes]] = {}
        raw_get = (self._raw_handlers if write_raw is not None else no_raw).get
        written = unmapped = 0
        for timestamp, cpu, name, values in events:
            raw_handler = raw_get(name)
            if raw_handler is not None:
                written += write_raw(raw_handler(timestamp, values), cpu, timestamp)  # type: ignore[misc]
                continue
            handler = get(name)
            if handler is None:
                unmapped += 1
                continue
            for record in handler(timestamp, cpu, values):
                written += write(record)
        self.unmapped += unmapped
        return written

    # -- process and thread ---------------------------------------------------------------------
    def _process_record(self, opcode: int, state: _Process, exit_status: int, tid: int, ts: int, cpu: int) -> EventRecord:
        head = _PROCESS_HEAD.pack(0, state.pid, state.parent, 0, exit_status, 0, 0) + unix_user_sid(state.uid)
        image = _ansi(state.image)
        command_line = _wide(state.command_line)
        room = MAX_SYSTEM_PAYLOAD - len(head) - 4  # the two empty strings after the command line
        if len(image) + len(command_line) > room:
            # As ETW does with a field over its limits: cut it (the image name first keeps its
            # start), so that one huge command line costs neither the record nor the session.
            self.truncated += 1
            image = image[: min(len(image), room // 4) - 1] + b"\0" if len(image) > room // 4 else image
            chars = max(0, (room - len(image)) // 2 - 1)
            command_line = _wide(state.command_line.encode("utf-16-le", "surrogatepass")[: 2 * chars].decode("utf-16-le", "ignore"))
        payload = head + image + command_line + _wide("") + _wide("")
        return self._record(PROCESS_GROUP, opcode, PROCESS_VERSION, tid, ts, cpu, payload, pid=state.pid)

    def _thread_record(self, opcode: int, pid: int, tid: int, name: str, ts: int, cpu: int, context_tid: int) -> EventRecord:
        del name  # Thread V3 as Windows 8 logs it: no ThreadName
        payload = _THREAD.pack(pid, tid, 0, 0, 0, 0, 0, 0, 0, 0, 8, 5, 2, 0)
        return self._record(THREAD_GROUP, opcode, THREAD_VERSION, context_tid, ts, cpu, payload, pid=pid)

    def _on_newtask(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        creator, tid = v["common_pid"], v["pid"]
        if v["clone_flags"] & _CLONE_THREAD:
            pid = self.process_of(creator)
            self._tgid[tid] = pid
            if "thread" in self.flags:
                return [self._thread_record(THREAD_START, pid, tid, v["comm"], ts, cpu, creator)]
            return []
        self._tgid[tid] = tid
        return []

    def _on_fork(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        parent_tid, child = v["parent_pid"], v["child_pid"]
        if self._tgid.get(child, child) != child:
            return []  # a thread: task_newtask reported it
        self._tgid[child] = child
        parent_pid = self.process_of(parent_tid)
        parent = self._processes.get(parent_pid)
        state = _Process(
            child, parent_pid, parent.image if parent else v["parent_comm"],
            parent.command_line if parent else "", parent.uid if parent else None,
        )
        later = self._processes.get(child)
        if later is not None and later.parent in (0, parent_pid):
            # The child's exec was read first (pages of different CPUs arrive out of order):
            # keep what the exec taught, learn the parent.
            later.parent = parent_pid
        else:
            self._processes[child] = state
        records = []
        if "process" in self.flags:
            records.append(self._process_record(PROCESS_START, state, 0, parent_tid, ts, cpu))
        if "thread" in self.flags:
            records.append(self._thread_record(THREAD_START, child, child, v["child_comm"], ts, cpu, parent_tid))
        return records

    def _on_exec(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        pid = v["pid"]
        self._tgid[pid] = pid
        files = self._files.get(pid)
        if files:
            for fd in [fd for fd, f in files.items() if f.close_on_exec]:
                del files[fd]
        if not self.flags & {"process", "thread"}:
            return []
        state = self._processes.get(pid)
        if state is None:
            parent = self._parent_from_proc(pid)
            state = self._processes[pid] = _Process(pid, parent, "", "", None)
        state.image = os.path.basename(v["filename"]) or v["filename"]
        command_line = self.proc.command_line(pid) if self.proc is not None else None
        state.command_line = command_line if command_line is not None else ""
        if self.proc is not None:
            uid_text = self.proc.status(pid).get("Uid", "").split()
            if uid_text and uid_text[0].isdigit():
                state.uid = int(uid_text[0])
        if "process" not in self.flags:
            return []
        # Linux gives a live process a new image; the process is announced again with it.
        return [self._process_record(PROCESS_START, state, 0, pid, ts, cpu)]

    def _parent_from_proc(self, pid: int) -> int:
        if self.proc is None:
            return 0
        value = self.proc.status(pid).get("PPid", "")
        return int(value) if value.isdigit() else 0

    def _on_exit_group(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._exit_codes[self.process_of(v["common_pid"])] = _exit_code(v["error_code"])
        return []

    def _on_thread_exit_call(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._thread_exit[v["common_pid"]] = _exit_code(v["error_code"])
        return []

    def _on_signal(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if v["sa_handler"] == _SIG_DFL and v["sig"] not in _NON_FATAL_DEFAULT:
            self._fatal_signal[self.process_of(v["common_pid"])] = v["sig"]
        return []

    def _on_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._task_exit(v["pid"], v["comm"], bool(v["group_dead"]), ts, cpu)

    # -- for sources that report threads and exits in their own terms (the proc connector) ----
    def learn_thread(self, tid: int, tgid: int) -> None:
        """Note that thread ``tid`` belongs to process ``tgid`` (a source's event said so)."""
        self._tgid[tid] = tgid

    def thread_ended(self, pid: int, tid: int, ts: int, cpu: int) -> list[EventRecord]:
        """Thread End of thread ``tid`` of process ``pid`` (not the process's last thread), and
        the mapper forgets that thread. Also for threads the session never saw start."""
        self._thread_exit.pop(tid, None)
        self._file_calls.pop(tid, None)
        self._tgid.pop(tid, None)
        if "thread" not in self.flags:
            return []
        return [self._thread_record(THREAD_END, pid, tid, "", ts, cpu, tid)]

    def process_ended(self, pid: int, exit_code: int, ts: int, cpu: int, *, parent: int | None = None) -> list[EventRecord]:
        """The end of process ``pid`` with ``exit_code`` (its last thread exited): Thread End of
        the leader and Process End. ``parent`` names the parent of a process the session did
        not see start (/proc no longer knows an exited process's parent)."""
        self._exit_codes[pid] = exit_code
        return self._task_exit(pid, "", True, ts, cpu, parent=parent)

    def _task_exit(self, tid: int, comm: str, group_dead: bool, ts: int, cpu: int, *, parent: int | None = None) -> list[EventRecord]:
        pid = self.process_of(tid)
        records = []
        if "thread" in self.flags:
            records.append(self._thread_record(THREAD_END, pid, tid, comm, ts, cpu, tid))
        thread_code = self._thread_exit.pop(tid, None)
        self._file_calls.pop(tid, None)
        if group_dead:
            state = self._processes.pop(pid, None)
            code = self._exit_codes.pop(pid, None)
            if code is None:
                code = thread_code
            signal = self._fatal_signal.pop(pid, None)
            if code is None:
                code = 128 + signal if signal is not None else 0
            if "process" in self.flags:
                if state is None:
                    state = _Process(pid, parent if parent is not None else self._parent_from_proc(pid), comm, "", None)
                records.append(self._process_record(PROCESS_END, state, code, tid, ts, cpu))
            self._files.pop(pid, None)
            for known_tid in [t for t, g in self._tgid.items() if g == pid]:
                del self._tgid[known_tid]
        else:
            self._tgid.pop(tid, None)
        return records

    def _switch_raw(self, ts: int, v: Mapping[str, Any]) -> bytes:
        prev_state = v["prev_state"]
        if prev_state == 0:
            state, reason, mode = 1, 32, 0  # preempted: Ready, WrPreempted, KernelMode
        elif prev_state & 0x2:  # TASK_UNINTERRUPTIBLE
            state, reason, mode = 5, 0, 0   # Waiting, Executive, KernelMode
        else:
            state, reason, mode = 5, 6, 1   # Waiting, UserRequest, UserMode
        prev = v["prev_pid"]
        pid = self._tgid.get(prev)
        if pid is None:
            pid = self.process_of(prev)
        next_prio, prev_prio = v["next_prio"], v["prev_prio"]
        priorities = _WINDOWS_PRIORITY
        return _CSWITCH_RAW.pack(
            CSWITCH_VERSION, _SYSTEM64, _TYPED, _CSWITCH_RAW.size, _CSWITCH_HOOK, prev, pid, ts, 0, 0,
            v["next_pid"], prev,
            priorities[next_prio] if next_prio in priorities else windows_priority(next_prio),
            priorities[prev_prio] if prev_prio in priorities else windows_priority(prev_prio),
            0, 0, reason, mode, state, 0, 0, 0,
        )

    def _on_switch(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        raw = self._switch_raw(ts, v)
        return [SystemRecord(_SYSTEM_HEADER.unpack_from(raw), raw, 0, _CSWITCH_RAW.size, cpu, DEFAULT_CONTEXT)]

    # -- disk -----------------------------------------------------------------------------------
    @staticmethod
    def _request_key(v: Mapping[str, Any]) -> tuple[int, int]:
        # A flush carries no sector (0 at issue, all ones at completion): one per device.
        return (v["dev"], -1) if "F" in v["rwbs"] and v["nr_sector"] == 0 else (v["dev"], v["sector"])

    def _on_block_issue(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._disk_in_flight[self._request_key(v)] = (ts, v["common_pid"], v["bytes"], v["nr_sector"])
        if len(self._disk_in_flight) > 65536:  # completions lost: forget the oldest
            self._disk_in_flight.pop(next(iter(self._disk_in_flight)))
        return []

    def _on_block_complete(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        rwbs = v["rwbs"]
        issued = self._disk_in_flight.pop(self._request_key(v), None)
        if "F" in rwbs and v["nr_sector"] == 0:
            opcode = DISK_FLUSH
        elif v["nr_sector"] == 0:
            return []  # the data-less tail of a FUA/pre-flush write: its data was reported
        elif "R" in rwbs:
            opcode = DISK_READ
        elif "W" in rwbs:
            opcode = DISK_WRITE
        else:
            return []  # discards and other requests have no NT counterpart
        if issued is None:
            issue_ts, issuer, size = ts, 0, v["nr_sector"] * 512
        else:
            issue_ts, issuer, issued_bytes, sectors = issued
            size = issued_bytes or sectors * 512
        response = max(0, ts - issue_ts)
        if opcode == DISK_FLUSH:
            payload = struct.pack("<IIqQI", v["dev"], 0, response, 0, issuer)
        else:
            offset = v["sector"] * 512 if v["sector"] != 0xFFFFFFFFFFFFFFFF else 0
            payload = _DISK.pack(v["dev"], 0, size, 0, offset, 0, 0, response, issuer)
        tid = issuer or v["common_pid"]
        return [self._record(DISK_GROUP, opcode, DISK_VERSION, tid, ts, cpu, payload)]

    # -- network --------------------------------------------------------------------------------
    def _endpoints(self, v: Mapping[str, Any]) -> tuple[int, bytes, bytes]:
        if v["family"] == _AF_INET6:
            return _AF_INET6, bytes(v["saddr_v6"]), bytes(v["daddr_v6"])
        return _AF_INET, bytes(v["saddr"]), bytes(v["daddr"])

    def _tcp_record(self, opcode: int, sk: int, size: int, tid: int, ts: int, cpu: int, pid: int) -> EventRecord | None:
        sock = self._sockets.get(sk)
        if sock is None:
            return None
        if sock.family == _AF_INET6:
            opcode += TCP_IPV6_OFFSET
        head = _TCP_IDS.pack(pid, size) + sock.daddr + sock.saddr + _PORTS.pack(sock.dport, sock.sport)
        if opcode in (TCP_SEND, TCP_SEND + TCP_IPV6_OFFSET):
            head += _SEND_TIMES.pack(0, 0)
        elif opcode in (TCP_CONNECT, TCP_ACCEPT, TCP_CONNECT + TCP_IPV6_OFFSET, TCP_ACCEPT + TCP_IPV6_OFFSET):
            head += _CONNECT_OPTIONS.pack(0, 0, 0, 0, 0, 0, 0)
        payload = head + _SEQ_CONN.pack(0, sk)
        return self._record(TCPIP_GROUP, opcode, TCPIP_VERSION, tid, ts, cpu, payload, pid=pid)

    def _on_sock_state(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if v["protocol"] != _IPPROTO_TCP:
            return []
        sk, old, new, tid = v["skaddr"], v["oldstate"], v["newstate"], v["common_pid"]
        family, saddr, daddr = self._endpoints(v)
        known = self._sockets.get(sk)
        owner = known.owner if known is not None else 0
        if new == _TCP_LISTEN:
            self._listeners[v["sport"]] = self.process_of(tid)
            return []
        if old == _TCP_LISTEN and new == _TCP_CLOSE:
            self._listeners.pop(v["sport"], None)
            return []
        if old == _TCP_CLOSE and new == _TCP_SYN_SENT:
            owner = self.process_of(tid)  # connect() runs in the caller's context
        elif new == _TCP_SYN_RECV:
            owner = self._listeners.get(v["sport"], 0)
        self._sockets[sk] = _Socket(owner, family, saddr, daddr, v["sport"], v["dport"])
        record: EventRecord | None = None
        if new == _TCP_ESTABLISHED and old == _TCP_SYN_SENT:
            record = self._tcp_record(TCP_CONNECT, sk, 0, tid, ts, cpu, owner)
        elif new == _TCP_ESTABLISHED and old == _TCP_SYN_RECV:
            record = self._tcp_record(TCP_ACCEPT, sk, 0, tid, ts, cpu, owner)
        elif old == _TCP_ESTABLISHED and (new in _TCP_CLOSING_STATES or new == _TCP_CLOSE):
            record = self._tcp_record(TCP_DISCONNECT, sk, 0, tid, ts, cpu, owner)
        if new == _TCP_CLOSE:
            self._sockets.pop(sk, None)
        return [record] if record is not None else []

    def _on_sock_send(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._sock_length(TCP_SEND, ts, cpu, v)

    def _on_sock_recv(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._sock_length(TCP_RECV, ts, cpu, v)

    def _sock_length(self, opcode: int, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        protocol = v["protocol"]
        if protocol == _IPPROTO_UDP:
            return self._udp_record(opcode, ts, cpu, v)
        sock = self._sockets.get(v["sk"])
        if protocol != _IPPROTO_TCP or v["ret"] <= 0 or sock is None:
            return []
        tid = v["common_pid"]
        pid = self.process_of(tid)
        if sock.owner == 0:
            sock.owner = pid
        record = self._tcp_record(opcode, v["sk"], v["ret"], tid, ts, cpu, pid)
        return [record] if record is not None else []

    def _udp_record(self, opcode: int, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        # UDP_SEND/RECV equal TCP_SEND/RECV (10/11); the tracepoints carry no addresses or ports.
        size = v["ret"]
        if size <= 0 or (opcode == UDP_RECV and v["flags"] & _MSG_PEEK):
            return []
        tid = v["common_pid"]
        pid = self.process_of(tid)
        if v["family"] == _AF_INET6:
            opcode += TCP_IPV6_OFFSET
            addresses = _V6_ZERO
        else:
            addresses = _V4_ZERO
        payload = _TCP_IDS.pack(pid, size) + addresses + _NO_PORTS + _SEQ_CONN.pack(0, v["sk"])
        return [self._record(UDPIP_GROUP, opcode, UDPIP_VERSION, tid, ts, cpu, payload, pid=pid)]

    # -- files ----------------------------------------------------------------------------------
    # The enter event gives the arguments (descriptor, explicit position, open flags), the exit
    # event the result; one call per thread is in progress at a time.
    def _file_enter_handler(
        self, call: str, kind: str, fd_field: str | None, position_field: str | None
    ) -> Callable[[int, int, Mapping[str, Any]], list[EventRecord]]:
        calls = self._file_calls
        no_records: list[EventRecord] = []
        fd_key = fd_field or ""  # (every kind that reads a descriptor has its field)

        def on_enter(ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
            position = v[position_field] if position_field is not None else None
            if position is not None and position >= 1 << 63:
                position = None  # preadv2/pwritev2 with -1: the file position
            if kind == "open":
                flags = v["flags"] if call in ("open", "openat") else (_O_CREAT | _O_WRONLY | _O_TRUNC if call == "creat" else None)
                calls[v["common_pid"]] = (call, -1, None, flags)
            elif kind == "dup":
                new_fd = v["newfd"] if call != "dup" else -1
                calls[v["common_pid"]] = (call, v[fd_key], new_fd, v["flags"] if call == "dup3" else None)
            elif kind == "close_range":
                calls[v["common_pid"]] = (call, v["fd"], v["max_fd"], v["flags"])
            else:
                calls[v["common_pid"]] = (call, v[fd_key], position, None)
            return no_records

        return on_enter

    def _file_exit_handler(self, call: str, kind: str) -> Callable[[int, int, Mapping[str, Any]], list[EventRecord]]:
        calls = self._file_calls
        no_records: list[EventRecord] = []

        def on_exit(ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
            tid = v["common_pid"]
            pending = calls.pop(tid, None)
            if pending is None or pending[0] != call:
                return no_records  # the enter was before the session (or lost)
            ret = v["ret"]
            _, fd, argument, flags = pending
            pid = self.process_of(tid)
            if kind == "open":
                return self._file_opened(pid, tid, ts, cpu, ret, flags, v.get("fd_path"))
            files = self._files.get(pid)
            if kind == "close_range":
                if ret == 0 and files:
                    assert argument is not None
                    for known in [f for f in files if fd <= f <= argument]:
                        if flags is not None and flags & _CLOSE_RANGE_CLOEXEC:
                            files[known].close_on_exec = True
                        else:
                            del files[known]
                return no_records
            if kind == "dup":
                if ret >= 0 and files is not None:
                    if ret in files:
                        del files[ret]  # dup2/dup3 closed what the new descriptor named
                    source = files.get(fd)
                    if source is not None and ret != fd:
                        files[ret] = source
                return no_records
            if not files:
                return no_records
            opened = files.get(fd)
            if opened is None:
                return no_records
            if kind == "close":
                if ret != -_EBADF:
                    del files[fd]  # closed even when close() fails with EINTR or EIO
                if ret != 0:
                    return no_records
                simple = _FILE_SIMPLE.pack(0, opened.key, opened.key, tid)
                return [
                    self._record(FILEIO_GROUP, FILE_CLEANUP, FILEIO_VERSION, tid, ts, cpu, simple, pid=pid),
                    self._record(FILEIO_GROUP, FILE_CLOSE, FILEIO_VERSION, tid, ts, cpu, simple, pid=pid),
                ]
            if ret < 0:
                return no_records
            if kind == "seek":
                opened.position = ret
                return no_records
            if kind == "flush":
                if ret != 0:
                    return no_records
                payload = _FILE_SIMPLE.pack(0, opened.key, opened.key, tid)
                return [self._record(FILEIO_GROUP, FILE_FLUSH, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]
            if argument is not None:
                offset = argument
            else:
                offset = opened.position if opened.position is not None else 0
                if opened.position is not None:
                    opened.position += ret
            opcode = FILE_READ if kind == "read" else FILE_WRITE
            payload = _FILE_RW.pack(offset, 0, opened.key, opened.key, tid, ret & 0xFFFFFFFF, 0)
            return [self._record(FILEIO_GROUP, opcode, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]

        return on_exit

    def _file_opened(self, pid: int, tid: int, ts: int, cpu: int, fd: int, flags: int | None, path: str | None = None) -> list[EventRecord]:
        if fd < 0:
            return []
        files = self._files.setdefault(pid, {})
        files.pop(fd, None)
        if path is None:
            fd_path = getattr(self.proc, "fd_path", None)
            path = fd_path(pid, fd) if fd_path is not None else None
        if path is not None and not _is_file_path(path):
            return []
        known_flags = flags if flags is not None else 0
        key = file_key(pid, fd)
        # openat2's flags sit behind a user pointer: position and close-on-exec are unknown.
        position = None if flags is None or flags & _O_APPEND else 0
        files[fd] = _OpenFile(key, position, flags is None or bool(flags & _O_CLOEXEC))
        options = _create_disposition(known_flags) << 24 if flags is not None else 0
        payload = _FILE_CREATE_HEAD.pack(0, key, tid, options, 0, _SHARE_ALL) + _wide(path or "")
        return [self._record(FILEIO_GROUP, FILE_CREATE, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]

    # -- page faults ----------------------------------------------------------------------------
    def _on_page_fault(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        error = v["error_code"]
        if not error & _PF_PRESENT:
            opcode = FAULT_DEMAND_ZERO
        elif error & _PF_WRITE:
            opcode = FAULT_COPY_ON_WRITE
        else:
            opcode = FAULT_ACCESS_VIOLATION
        payload = _FAULT.pack(v["address"], v["ip"])
        return [self._record(PAGEFAULT_GROUP, opcode, PAGEFAULT_VERSION, v["common_pid"], ts, cpu, payload)]

    # -- system calls ---------------------------------------------------------------------------
    @staticmethod
    def _sys_enter_raw(ts: int, v: Mapping[str, Any]) -> bytes:
        return _SYSCALL_ENTER_RAW.pack(SYSCALL_VERSION, _PERFINFO64, _TYPED, _SYSCALL_ENTER_RAW.size, _SYSCALL_ENTER_HOOK, ts, v["id"] & 0xFFFFFFFFFFFFFFFF)

    @staticmethod
    def _sys_exit_raw(ts: int, v: Mapping[str, Any]) -> bytes:
        return _SYSCALL_EXIT_RAW.pack(SYSCALL_VERSION, _PERFINFO64, _TYPED, _SYSCALL_EXIT_RAW.size, _SYSCALL_EXIT_HOOK, ts, v["ret"] & 0xFFFFFFFF)

    def _on_sys_enter(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        size = _SYSCALL_ENTER_RAW.size
        raw = self._sys_enter_raw(ts, v)
        return [PerfInfoRecord((SYSCALL_VERSION, _PERFINFO64, _TYPED, size, _SYSCALL_ENTER_HOOK, ts), raw, 0, size, cpu, DEFAULT_CONTEXT)]

    def _on_sys_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        size = _SYSCALL_EXIT_RAW.size
        raw = self._sys_exit_raw(ts, v)
        return [PerfInfoRecord((SYSCALL_VERSION, _PERFINFO64, _TYPED, size, _SYSCALL_EXIT_HOOK, ts), raw, 0, size, cpu, DEFAULT_CONTEXT)]


# Fields each built-in handler reads (the file system calls are added by fields_used()).
_FIELDS_USED: Mapping[str, frozenset[str]] = {name: frozenset(fields) for name, fields in {
    "sched_process_fork": ("parent_pid", "child_pid", "parent_comm", "child_comm"),
    "task_newtask": ("common_pid", "pid", "clone_flags", "comm"),
    "sched_process_exec": ("pid", "filename"),
    "sched_process_exit": ("pid", "comm", "group_dead"),
    "sys_enter_exit_group": ("common_pid", "error_code"),
    "sys_enter_exit": ("common_pid", "error_code"),
    "signal_deliver": ("common_pid", "sa_handler", "sig"),
    "sched_switch": ("prev_state", "prev_pid", "next_pid", "prev_prio", "next_prio"),
    "block_rq_issue": ("common_pid", "dev", "rwbs", "nr_sector", "sector", "bytes"),
    "block_rq_complete": ("common_pid", "dev", "rwbs", "nr_sector", "sector"),
    "inet_sock_set_state": ("common_pid", "skaddr", "protocol", "family", "oldstate", "newstate",
                            "saddr", "daddr", "saddr_v6", "daddr_v6", "sport", "dport"),
    "sock_send_length": ("common_pid", "sk", "family", "protocol", "ret", "flags"),
    "sock_recv_length": ("common_pid", "sk", "family", "protocol", "ret", "flags"),
    "sys_enter": ("id",),
    "sys_exit": ("ret",),
    "page_fault_user": ("common_pid", "address", "ip", "error_code"),
    "page_fault_kernel": ("common_pid", "address", "ip", "error_code"),
}.items()}
