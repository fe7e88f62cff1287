"""What every NT Kernel Logger event class of :class:`~openetw.kernel.classes.KernelEventMapper`
shares: the hook groups, versions and opcodes written, the state kept between events, and the one
way a record is built (:meth:`MapperState._record`).

The state lives here, in one place, because several event classes read it: which process a
thread belongs to (``_tgid``), what is known of each process, exit codes, and the open files and
system calls in progress that the file, process and thread classes all forget when a task ends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from openetw.etl import layouts as L
from openetw.etl.build import build_system_record
from openetw.etl.record import EventRecord

if TYPE_CHECKING:
    from openetw.kernel.classes_files import OpenFile
    from openetw.kernel.classes_net import Socket
    from openetw.kernel.classes_process import ProcessState

__all__ = [
    "MAX_SYSTEM_PAYLOAD", "MapperState", "ProcLookup", "ansi_string", "unix_user_sid", "wide_string", "windows_priority",
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


_NULL_SID = b"\0\0\0\0"


class ProcLookup(Protocol):
    """What the mapper asks /proc (see :class:`~openetw.kernel.procfs.ProcSource`)."""

    def command_line(self, pid: int) -> str | None: ...
    def thread_group(self, tid: int) -> int | None: ...
    def image(self, pid: int) -> str | None: ...
    def status(self, tid: int) -> dict[str, str]: ...
    # Optional: ``fd_path(pid, fd) -> str | None``, the target of /proc/<pid>/fd/<fd>, names
    # the files FileIo/Create reports. Without it the file names are empty.


def unix_user_sid(uid: int | None) -> bytes:
    """The kernel SID blob for a Unix user: TOKEN_USER (2 pointers) + ``S-1-22-1-<uid>``.

    S-1-22-1 is the authority Samba and SSSD use for Unix users. ``None`` gives the null SID.
    """
    if uid is None:
        return _NULL_SID
    sid = bytes((1, 2, 0, 0, 0, 0, 0, 22)) + struct.pack("<II", 1, uid & 0xFFFFFFFF)
    # The first pointer of TOKEN_USER points at the SID; any non-zero value marks "SID present".
    return struct.pack("<QQ", 0x10, 0) + sid


def ansi_string(text: str) -> bytes:
    """``text`` as a NUL-terminated 8-bit string (UTF-8, as Linux names are)."""
    return text.encode("utf-8", "replace") + b"\0"


# The largest user data a SYSTEM_TRACE_HEADER record is given: the whole record fits a 64 KB
# buffer after its header (and its Size, a u16).
MAX_SYSTEM_PAYLOAD = (64 << 10) - L.BUFFER_HEADER_SIZE - L.SYSTEM_TRACE_HEADER.size - 8


def wide_string(text: str) -> bytes:
    """``text`` as a NUL-terminated UTF-16LE string."""
    return text.encode("utf-16-le", "surrogatepass") + b"\0\0"


def windows_priority(linux_prio: int) -> int:
    """Linux ``prio`` (0-99 real-time, 100-139 = nice -20..19) as a Windows priority (1-31)."""
    if linux_prio < 100:
        return 16 + (99 - max(linux_prio, 0)) * 15 // 99
    nice = min(linux_prio, 139) - 120
    return max(1, min(15, 8 - round(nice * 7 / 20)))


_WINDOWS_PRIORITY = {prio: windows_priority(prio) for prio in range(140)}


class MapperState:
    """The state the event classes share and the record builder they use."""

    def __init__(self, flags: Iterable[str], proc: ProcLookup | None = None) -> None:
        self.flags = frozenset(flags)
        self.proc = proc
        self._tgid: dict[int, int] = {}
        self._processes: dict[int, ProcessState] = {}
        self._exit_codes: dict[int, int] = {}   # tgid → exit_group() code
        self._thread_exit: dict[int, int] = {}  # tid → exit() code
        self._fatal_signal: dict[int, int] = {}  # tgid → last default-action fatal signal
        self._disk_in_flight: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        self._disk_queued: dict[tuple[int, int], int] = {}  # request inserted into a queue -> the thread that submitted it
        self._sockets: dict[int, Socket] = {}
        self._listeners: dict[int, int] = {}  # local port → pid
        self._file_calls: dict[int, tuple[str, int, int | None, int | None]] = {}  # tid → (call, fd, position, flags)
        self._files: dict[int, dict[int, OpenFile]] = {}  # pid → fd → file
        self.unmapped = 0
        self.truncated = 0  # events whose fields were cut to fit ETW's 64 KB record (events_truncated)
        self._registered: set[str] = set()

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

