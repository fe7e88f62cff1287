"""Kernel probes over openetw's kernel trace: ``syscall``, ``proc``, ``sched``, ``io``, ``tcp``
and ``profile-N``, fired from the records of a live kernel session.

The kernel trace writes Windows' kernel records (SysClEnter/SysClExit, Process Start/End,
CSwitch, DiskIo, TcpIp, SampledProfile). System call and sample records carry no thread, as on
Windows: each CPU's running thread is known from its context switches (the ``cswitch`` flag is
always on for ``syscall`` probes), and a thread's process from the switches, the process
events, or ``/proc``. The kernel trace hands a CPU's records over in batches not quite in
time order, so those records are held up to ``REORDER_WINDOW`` and replayed in time order. A system call's name is its number looked up in the kernel headers
(``asm/unistd_64.h``; ``sys_<n>`` when they are missing); its return value is the low 32 bits the
kernel record keeps, sign-extended (``arg0``), and ``errno`` is set when that is ``-1..-4095``.

A probe fires with a ``KernelFiring`` as the clause's record (kind ``kprobe``): ``pid``,
``tid``, ``cpu``, ``filetime``, ``args`` (``arg0``..``arg9``), ``errno``, ``execname``.
"""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import re
import struct
from collections.abc import Callable, Iterable
from typing import Any

from openetw.errors import InvalidArgument
from openetw.probe.descriptions import Description

__all__ = ["FAMILIES", "KernelFiring", "KernelProbes", "kernel_flags_for", "syscall_names"]

FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # family -> (probe names, kernel flags the session needs)
    "syscall": (("entry", "return"), ("syscall", "cswitch", "process", "thread")),
    "proc": (("exec-success", "exit", "create"), ("process",)),
    "sched": (("on-cpu", "off-cpu"), ("cswitch", "process", "thread")),
    "io": (("start", "done"), ("disk_io", "process", "thread")),
    "tcp": (("send", "receive"), ("network", "process")),
    "profile": ((), ("profile", "process", "thread")),
}
"""Each kernel probe provider: its probe names and the kernel flags its probes need."""

_PROCESS, _THREAD, _DISK, _TCPIP, _PERFINFO = 0x03, 0x05, 0x01, 0x06, 0x0F
_CSWITCH, _SYS_ENTER, _SYS_EXIT, _SAMPLE = 36, 51, 52, 46
_PROCESS_START, _PROCESS_END = 1, 2
_DISK_READ, _DISK_WRITE, _DISK_FLUSH = 10, 11, 14
_TCP_SEND, _TCP_RECV, _IPV6 = 10, 11, 16
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_TWO_U32 = struct.Struct("<II").unpack_from
_UNKNOWN = 0xFFFFFFFF
REORDER_WINDOW = 20_000_000  # 2 s of FILETIME: how late a CPU's record may come behind the newest
_UNISTD = ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h")
_NR = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", re.MULTILINE)


def kernel_flags_for(families: Iterable[str], profile_hz: int | None = None) -> list[str]:
    """The kernel flags a session needs for probes of these families, in a stable order."""
    flags: list[str] = []
    for family in families:
        for flag in FAMILIES[family][1]:
            if flag not in flags:
                flags.append(flag)
    return flags


_names_cache: dict[int, str] | None = None


def syscall_names() -> dict[int, str]:
    """System call number -> name (x86-64), from the kernel headers."""
    global _names_cache
    if _names_cache is None:
        names: dict[int, str] = {}
        for path in _UNISTD:
            try:
                with open(path, encoding="ascii", errors="replace") as header:
                    text = header.read()
            except OSError:
                continue
            names = {int(number): name for name, number in _NR.findall(text)}
            break
        _names_cache = names
    return _names_cache


class KernelFiring:
    """What a kernel probe's clause sees as its record."""

    __slots__ = ("kind", "pid", "tid", "cpu", "filetime", "args", "errno", "execname", "ppid")

    def __init__(self, pid: int, tid: int, cpu: int, filetime: int, args: tuple[int, ...], errno: int, execname: str) -> None:
        self.kind = "kprobe"
        self.pid, self.tid, self.cpu, self.filetime = pid, tid, cpu, filetime
        self.args = args + (0,) * (10 - len(args))
        self.errno = errno
        self.execname = execname
        self.ppid = 0


Clause = Callable[[Any, tuple[str, str, str, str]], Any]


class KernelProbes:
    """Fires the kernel probes of ``events`` ((description, clause) pairs) from kernel records.

    ``fire(fn, firing, probe)`` runs one clause; ``pid_filter`` keeps firings to one process and
    the processes it starts while traced (``-p``/``-c``). ``unattributed`` counts records whose thread was not yet known (before the
    first context switch on their CPU)."""

    def __init__(self, events: list[tuple[Description, Clause]], fire: Callable[[Clause, Any, tuple[str, str, str, str]], None],
                 *, pid_filter: int | None = None, strsize: int = 256) -> None:  # fmt: skip
        self.events = [(d, fn) for d, fn in events if d.provider in FAMILIES or _is_profile(d)]
        self.fire = fire
        self.allowed: set[int] | None = {pid_filter} if pid_filter is not None else None
        self.strsize = strsize - 1
        self.families = {("profile" if _is_profile(d) else d.provider) for d, _ in self.events}
        self.running: dict[int, int] = {}  # cpu -> tid
        self.thread_pid: dict[int, int] = {}
        self.entered: dict[int, int] = {}  # tid -> system call number
        self.names = syscall_names() if "syscall" in self.families else {}
        self.comm: dict[int, str] = {}
        self.unattributed = 0
        self._cache: dict[tuple[str, str, str], list[tuple[Clause, tuple[str, str, str, str]]]] = {}
        self.context: Any = None
        self._pending: list[tuple[int, int, int, int, bytes, int]] = []
        self._sequence = itertools.count()
        self._latest = 0

    # -- matching -------------------------------------------------------------------------------
    def matching(self, family: str, function: str, name: str) -> list[tuple[Clause, tuple[str, str, str, str]]]:
        key = (family, function, name)
        found = self._cache.get(key)
        if found is None:
            found = []
            for desc, fn in self.events:
                if family == "profile":
                    if _is_profile(desc):
                        found.append((fn, ("profile", "", "", desc.name)))
                    continue
                if desc.provider != family or (desc.module and not fnmatch.fnmatchcase("", desc.module) and desc.module != "*"):
                    continue
                if desc.function and not fnmatch.fnmatchcase(function, desc.function):
                    continue
                if desc.name and not fnmatch.fnmatchcase(name, desc.name):
                    continue
                found.append((fn, (family, "", function, name)))
            self._cache[key] = found
        return found

    # -- processes ------------------------------------------------------------------------------
    def pid_of(self, tid: int) -> int:
        pid = self.thread_pid.get(tid)
        if pid is None:
            known = self.context.decode_context.thread_process(tid) if self.context is not None else None
            pid = known if known is not None else _tgid_from_proc(tid)
            if pid is not None:
                self.thread_pid[tid] = pid
        return pid if pid is not None else tid

    def execname(self, pid: int, filetime: int) -> str:
        name = None
        if self.context is not None:
            info = self.context.decode_context.process(pid, filetime)
            if info is not None and info.image:
                name = info.image.replace("\\", "/").rsplit("/", 1)[-1]
        if not name:
            name = self.comm.get(pid)
            if name is None:
                name = self.comm[pid] = _comm_from_proc(pid)
        return name[: self.strsize]

    def _emit(self, family: str, function: str, name: str, pid: int, tid: int, record: Any, args: tuple[int, ...],
              errno: int = 0, filetime: int | None = None, execname: str | None = None) -> None:  # fmt: skip
        found = self.matching(family, function, name)
        if not found or (self.allowed is not None and pid not in self.allowed):
            return
        when = record.filetime if filetime is None else filetime
        firing = KernelFiring(pid, tid, record.cpu, when, args, errno, execname if execname is not None else self.execname(pid, when))
        for fn, probe in found:
            self.fire(fn, firing, probe)

    # -- records --------------------------------------------------------------------------------
    def on_record(self, record: Any, context: Any) -> None:
        hook = getattr(record, "hook_id", None)
        if hook is None:
            return
        self.context = context
        group, opcode = hook >> 8, hook & 0xFF
        if group == _PERFINFO or (group == _THREAD and opcode == _CSWITCH):
            # Thread-less records follow their CPU's context switches: put in time order first.
            if opcode in (_SYS_ENTER, _SYS_EXIT, _CSWITCH) or (opcode == _SAMPLE and "profile" in self.families):
                when = record.filetime
                heapq.heappush(self._pending, (when, next(self._sequence), hook, record.cpu, bytes(record.user_data[:16]), record.pid))
                if when > self._latest:
                    self._latest = when
                    self._release(when - REORDER_WINDOW)
            return
        if group == _PROCESS and opcode in (_PROCESS_START, _PROCESS_END) and ("proc" in self.families or self.allowed is not None):
            self._process(record, context, opcode)
        elif group == _DISK and "io" in self.families and opcode in (_DISK_READ, _DISK_WRITE, _DISK_FLUSH):
            self._disk(record, context, opcode)
        elif group == _TCPIP and "tcp" in self.families and opcode in (_TCP_SEND, _TCP_RECV, _TCP_SEND + _IPV6, _TCP_RECV + _IPV6):
            self._tcp(record, context, opcode)

    def _release(self, before: int) -> None:
        pending = self._pending
        pop = heapq.heappop
        while pending and pending[0][0] < before:
            when, _, hook, cpu, data, pid = pop(pending)
            record = _Held(when, cpu, data, pid)
            opcode = hook & 0xFF
            if hook >> 8 == _THREAD:
                self._switch(record)
            elif opcode == _SAMPLE:
                self._sample(record)
            else:
                self._syscall(record, opcode)

    def flush(self, until: int | None = None) -> None:
        """Fire what the reordering still holds (the sessions ended), up to FILETIME ``until``."""
        self._release(1 << 63 if until is None else until + 1)
        self._pending.clear()

    def _switch(self, record: Any) -> None:
        new, old = _TWO_U32(record.user_data, 0)
        cpu = record.cpu
        self.running[cpu] = new
        if record.pid != _UNKNOWN and old:
            self.thread_pid[old] = record.pid
        if "sched" in self.families:
            if old:
                self._emit("sched", "", "off-cpu", self.pid_of(old), old, record, ())
            if new:
                self._emit("sched", "", "on-cpu", self.pid_of(new), new, record, ())

    def _syscall(self, record: Any, opcode: int) -> None:
        tid = self.running.get(record.cpu)
        if tid is None:
            self.unattributed += 1
            return
        data = record.user_data
        if opcode == _SYS_ENTER:
            number = _U64(data, 0)[0]
            self.entered[tid] = number
            if "syscall" in self.families:
                name = self.names.get(number) or f"sys_{number}"
                self._emit("syscall", name, "entry", self.pid_of(tid), tid, record, (number,))
            return
        number = self.entered.get(tid, -1)
        name = self.names.get(number) or (f"sys_{number}" if number >= 0 else "unknown")
        value = _I32(data, 0)[0]
        self._emit("syscall", name, "return", self.pid_of(tid), tid, record, (value, value), errno=-value if -4096 < value < 0 else 0)

    def _process(self, record: Any, context: Any, opcode: int) -> None:
        parser = context.parser_for(record)
        pid = int(parser.parse("ProcessID"))
        if opcode == _PROCESS_END:
            status = int(parser.parse("ExitStatus"))
            self._emit("proc", "", "exit", pid, record.tid, record, (status,))
            self.comm.pop(pid, None)
            return
        image = str(parser.parse("ImageFileName") or "")
        name = image.replace("\\", "/").rsplit("/", 1)[-1]
        if record.tid == pid:  # the kernel trace announces an exec by the process itself
            self.comm[pid] = name
            self._emit("proc", "", "exec-success", pid, record.tid, record, (pid,), execname=name[: self.strsize])
        else:  # a fork, announced on the parent's thread
            parent = int(parser.parse("ParentID"))
            self.thread_pid.setdefault(pid, pid)
            if self.allowed is not None and parent in self.allowed:
                self.allowed.add(pid)  # the target's children are traced with it
            self._emit("proc", "", "create", parent, record.tid, record, (pid,))

    def _disk(self, record: Any, context: Any, opcode: int) -> None:
        parser = context.parser_for(record)
        size = int(parser.parse("TransferSize")) if opcode != _DISK_FLUSH else 0
        offset = int(parser.parse("ByteOffset")) if opcode != _DISK_FLUSH else 0
        disk = int(parser.parse("DiskNumber"))
        response = int(parser.parse("HighResResponseTime"))
        issuer = int(parser.parse("IssuingThreadId"))
        tid = issuer or record.tid
        pid = self.pid_of(tid) if tid and tid != _UNKNOWN else 0
        function = {_DISK_READ: "read", _DISK_WRITE: "write", _DISK_FLUSH: "flush"}[opcode]
        args = (size, offset, disk, response)
        # The kernel trace records a request when it completes, with how long it took: ``start``
        # fires then, stamped with the time the request was issued.
        self._emit("io", function, "start", pid, tid, record, args, filetime=record.filetime - response // 100)
        self._emit("io", function, "done", pid, tid, record, args)

    def _tcp(self, record: Any, context: Any, opcode: int) -> None:
        parser = context.parser_for(record)
        pid = int(parser.parse("PID"))
        size = int(parser.parse("size"))
        name = "send" if opcode in (_TCP_SEND, _TCP_SEND + _IPV6) else "receive"
        self._emit("tcp", "", name, pid, record.tid if record.tid != _UNKNOWN else 0, record, (size,))

    def _sample(self, record: Any) -> None:
        address, tid = struct.unpack_from("<QI", record.user_data, 0)
        pid = self.pid_of(tid) if tid else 0
        kernel = address if address >= 0xFFFF800000000000 else 0
        for fn, probe in self.matching("profile", "", ""):
            if self.allowed is not None and pid not in self.allowed:
                continue
            firing = KernelFiring(pid, tid, record.cpu, record.filetime, (kernel, address if not kernel else 0), 0, self.execname(pid, record.filetime))
            self.fire(fn, firing, probe)


class _Held:
    """A thread-less record kept for reordering: what firing it needs."""

    __slots__ = ("filetime", "cpu", "user_data", "pid", "tid")

    def __init__(self, filetime: int, cpu: int, user_data: bytes, pid: int) -> None:
        self.filetime, self.cpu, self.user_data, self.pid, self.tid = filetime, cpu, user_data, pid, _UNKNOWN


def _is_profile(desc: Description) -> bool:
    return desc.provider == "profile" and desc.name.startswith("profile-")


def profile_rate(events: Iterable[Description]) -> int | None:
    """The sampling rate (per second) the ``profile-N`` probes ask for: the highest."""
    rates = [max(1, 10**9 // d.period) for d in events if _is_profile(d) and d.period]
    if not rates:
        return None
    rate = max(rates)
    if not 1 <= rate <= 100000:
        raise InvalidArgument(f"profile probes sample 1 to 100000 times a second, not {rate}")
    return rate


def _tgid_from_proc(tid: int) -> int | None:
    try:
        with open(f"/proc/{tid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _comm_from_proc(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            return comm.read().strip()
    except OSError:
        return ""

