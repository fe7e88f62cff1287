"""Kernel probes over openetw's kernel trace: ``syscall``, ``proc``, ``sched``, ``io``, ``tcp``
and ``profile-N``, fired from the records of a live kernel session.

The kernel trace writes Windows' kernel records (SysClEnter/SysClExit, Process Start/End,
CSwitch, DiskIo, TcpIp, SampledProfile). System call and sample records carry no thread, as on
Windows: each CPU's running thread is known from its context switches (the ``cswitch`` flag is
always on for ``syscall`` probes), and a thread's process from the switches, the process
events, or ``/proc``. The kernel trace hands a CPU's records over in batches not quite in
time order (each CPU's ring is read on its own), so records are held until every CPU's have come
past them, and replayed in time order. A system call's name is its number looked up in the kernel headers
(``asm/unistd_64.h``; ``sys_<n>`` when they are missing); its return value is the low 32 bits the
kernel record keeps, sign-extended (``arg0``), and ``errno`` is set when that is ``-1..-4095``.

A probe fires with a ``KernelFiring`` as the clause's record (kind ``kprobe``): ``pid``,
``tid``, ``cpu``, ``filetime``, ``args`` (``arg0``..``arg9``), ``errno``, ``execname``, and
``strings`` (a path argument's value → its string, for ``copyinstr``). An entry's ``arg0``..``arg5``
are the call's arguments where the kernel trace recorded them (the ``syscall_args`` flag, for
exactly the calls the program's ``syscall`` probes name, :func:`syscall_args_calls`; their path
strings for the path-taking ones, ``openetw.kernel.classes_args``), else 0, counted in
``syscall_args_unrecorded`` (an arguments record lost, or a call whose tracepoint is missing).
"""

from __future__ import annotations

import bisect
import fnmatch
import re
import struct
from collections.abc import Callable, Iterable
from typing import Any

from openetw.errors import InvalidArgument
from openetw.probe.lang.descriptions import Description
from openetw.probe.run.kernel_columns import UNKNOWN, Clause, ColumnStage, Found, KernelFiring, count_plan
from openetw.probe.run.kernel_symbols import comm_from_proc, kernel_symbol, syscall_names, tgid_from_proc
from openetw.probe.run.providers import FAMILIES

__all__ = ["FAMILIES", "KernelFiring", "KernelProbes", "count_plan", "kernel_flags_for", "profile_rate", "syscall_args_calls",
           "syscall_args_execnames", "syscall_names", "uses_call_arguments"]


_PROCESS, _THREAD, _DISK, _TCPIP, _PERFINFO, _STACKWALK = 0x03, 0x05, 0x01, 0x06, 0x0F, 0x18
_STACK, _IMAGE = 32, 0x14
_KERNEL_START = 0xFFFF800000000000
_CSWITCH, _SYS_ENTER, _SYS_EXIT, _SAMPLE = 36, 51, 52, 46
_PROCESS_START, _PROCESS_END = 1, 2
_DISK_READ, _DISK_WRITE, _DISK_FLUSH = 10, 11, 14
_TCP_SEND, _TCP_RECV, _IPV6 = 10, 11, 16
_UNKNOWN = UNKNOWN


def kernel_flags_for(families: Iterable[str], *, syscall_args: bool = False) -> list[str]:
    """The kernel flags a session needs for probes of these families, in a stable order
    (``syscall_args``: the ``syscall`` probes read ``argN`` or ``copyinstr`` on entry)."""
    flags: list[str] = []
    for family in families:
        for flag in FAMILIES[family][1]:
            if flag not in flags:
                flags.append(flag)
        if family == "syscall" and syscall_args:
            flags.append("syscall_args")
    return flags


def uses_call_arguments(text: str) -> bool:
    """Whether a D program reads system call arguments (``argN``, ``args[N]``) or ``copyinstr``."""
    return re.search(r"\b(arg[0-9]|args\s*\[|copyinstr)\b", text) is not None


def syscall_args_calls(descriptions: Iterable[Description]) -> list[str]:
    """The system calls whose arguments the kernel trace records for these probes: the calls the
    ``syscall`` descriptions name (patterns kept), or ``["*"]`` when one names every call."""
    calls: list[str] = []
    for desc in descriptions:
        if desc.provider != "syscall":
            continue
        if desc.function in ("", "*"):
            return ["*"]
        if desc.function not in calls:
            calls.append(desc.function)
    return calls


def syscall_args_execnames(tree: Any, clauses: list[Any]) -> list[str] | None:
    """The process names every ``syscall`` clause's predicate requires (``execname == "dd"``, one
    of the conditions it joins with ``&&``): the only threads whose arguments the kernel trace
    need record. ``None`` when a ``syscall`` clause fires for any name."""
    from openetw.probe.lang import ast as A

    names: list[str] = []
    for clause, info in zip(tree.clauses, clauses, strict=True):
        if not any(d.provider == "syscall" for d in info.descriptions):
            continue
        required = _names_required(clause.predicate, A) if clause.predicate is not None else []
        if not required:
            return None
        names += [name for name in required[:1] if name not in names]
    return names or None


def _names_required(expr: Any, A: Any) -> list[str]:
    if isinstance(expr, A.Binary) and expr.op == "&&":
        return _names_required(expr.left, A) + _names_required(expr.right, A)
    if isinstance(expr, A.Binary) and expr.op == "==":
        for one, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(one, A.Ident) and one.name == "execname" and not one.scope and isinstance(other, A.StrLit):
                return [other.value]
    return []





class KernelProbes(ColumnStage):
    """Fires the kernel probes of ``events`` ((description, clause) pairs) from kernel records.

    ``fire(fn, firing, probe)`` runs one clause; ``pid_filter`` keeps firings to one process and
    the processes it starts while traced (``-p``/``-c``). ``unattributed`` counts system calls whose
    thread could not be known (their CPU's switches never said), ``switches_inferred`` the context
    switches the kernel did not record, inferred from the next one (see ``kernel_columns``)."""

    def __init__(self, events: list[tuple[Description, Clause]], fire: Callable[[Clause, Any, tuple[str, str, str, str]], None],
                 *, pid_filter: int | None = None, strsize: int = 256, exit_box: list[Any] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.exit_box = exit_box if exit_box is not None else [None]
        self.events = [(d, fn) for d, fn in events if d.provider in FAMILIES or _is_profile(d)]
        self.fire = fire
        self.allowed = {pid_filter} if pid_filter is not None else None
        self.running, self.thread_pid, self.entered = {}, {}, {}
        self.counting = None
        self.strsize = strsize - 1
        self.families = {("profile" if _is_profile(d) else d.provider) for d, _ in self.events}
        self.names = syscall_names() if "syscall" in self.families else {}
        self.comm: dict[int, str] = {}
        self.unattributed = 0
        self.switches_inferred = 0
        self.exec_times: dict[int, list[int]] = {}  # pid -> FILETIMEs of its execs: execname changes there
        self.firings = 0
        self._cache: dict[tuple[str, str, str], list[tuple[Clause, tuple[str, str, str, str]]]] = {}
        self.context: Any = None
        self._sample_waiting: dict[int, tuple[Any, int]] = {}  # cpu -> (sample, its time): its stack may follow
        self._frame_namer: Any = None  # names user frames (made when a stack is first printed)
        self.stopped_at: int | None = None  # FILETIME of exit(): nothing after it fires
        self.decoding = _Decoding()

    # -- matching -------------------------------------------------------------------------------
    def matching(self, family: str, function: str, name: str) -> Found:
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
            pid = known if known is not None else tgid_from_proc(tid)
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
                name = self.comm[pid] = comm_from_proc(pid)
        return name[: self.strsize]

    def _emit(self, family: str, function: str, name: str, pid: int, tid: int, record: Any, args: tuple[int, ...],
              errno: int = 0, filetime: int | None = None, execname: str | None = None) -> None:  # fmt: skip
        found = self.matching(family, function, name)
        if not found or (self.allowed is not None and pid not in self.allowed):
            return
        when = record.filetime if filetime is None else filetime
        firing = KernelFiring(pid, tid, record.cpu, when, args, errno, execname if execname is not None else self.execname(pid, when))
        self.firings += len(found)
        for fn, probe in found:
            self.fire(fn, firing, probe)
        if self.exit_box[0] is not None and self.stopped_at is None:
            self.stopped_at = when

    # -- records one by one ---------------------------------------------------------------------
    def on_record(self, record: Any, context: Any) -> None:
        hook = getattr(record, "hook_id", None)
        if hook is None:
            return
        self.context = context
        if self.stopped_at is not None and record.filetime > self.stopped_at:
            return
        group, opcode = hook >> 8, hook & 0xFF
        if group in (_PROCESS, _THREAD, _IMAGE):
            context.decode_context.observe(record)
        if group == _PERFINFO and opcode == _SAMPLE and "profile" in self.families:
            self._sample(record)
        elif group == _STACKWALK and opcode == _STACK and "profile" in self.families:
            self._stack_walk(record)
        elif group == _PROCESS and opcode in (_PROCESS_START, _PROCESS_END) and ("proc" in self.families or self.allowed is not None):
            self._process(record, context, opcode)
        elif group == _DISK and "io" in self.families and opcode in (_DISK_READ, _DISK_WRITE, _DISK_FLUSH):
            self._disk(record, context, opcode)
        elif group == _TCPIP and "tcp" in self.families and opcode in (_TCP_SEND, _TCP_RECV, _TCP_SEND + _IPV6, _TCP_RECV + _IPV6):
            self._tcp(record, context, opcode)

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
            if len(self.exec_times) > 100_000:
                self.exec_times.clear()
            bisect.insort(self.exec_times.setdefault(pid, []), int(record.filetime))
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

    def _stack_walk(self, record: Any) -> None:
        """A sample's call chain (StackWalk, right after its sample): the held sample fires with it."""
        held = self._sample_waiting.pop(record.cpu, None)
        if held is None:
            return
        data = record.user_data
        when = struct.unpack_from("<q", data, 0)[0]
        if when != held[1]:
            self._fire_sample(held[0], ())
            return
        count = (len(data) - 16) // 8
        self._fire_sample(held[0], struct.unpack_from(f"<{count}Q", data, 16))

    def stack_text(self, firing: Any, user: bool, limit: int) -> str:
        """The kernel (or user) frames of a sample, innermost first, symbolized where known."""
        frames = [f for f in firing.frames if (f < _KERNEL_START) == user]
        if limit > 0:
            frames = frames[:limit]
        return "\n".join(self._symbol(firing.pid, frame, firing.filetime) for frame in frames)

    def _symbol(self, pid: int, address: int, when: int) -> str:
        """DTrace's ``module`function+0xoffset`` (the module's ELF symbols, .NET methods, perf
        maps: ``openetw.events.frames``), else ``module`0xoffset``, else the address."""
        if address >= _KERNEL_START:
            return kernel_symbol(address)
        if self.context is None:
            return f"0x{address:x}"
        namer = self._frame_namer
        if namer is None:
            from openetw.events.frames import FrameNamer

            namer = self._frame_namer = FrameNamer(self.context.decode_context, perf_map_dir="/tmp")
        frame = namer.name(pid, address, when)
        if frame.module == "?":
            return f"0x{address:x}"
        if frame.function is not None:
            return f"{frame.module}`{frame.function}+0x{frame.offset:x}"
        return f"{frame.module}`0x{frame.offset:x}"

    def _sample(self, record: Any) -> None:
        held = self._sample_waiting.pop(record.cpu, None)
        if held is not None:
            self._fire_sample(held[0], ())
        if any(_wants_stack(d) for d, _ in self.events):
            self._sample_waiting[record.cpu] = (record, record.timestamp if hasattr(record, "timestamp") else record.filetime)
            return
        self._fire_sample(record, ())

    def flush_samples(self) -> None:
        for record, _ in list(self._sample_waiting.values()):
            self._fire_sample(record, ())
        self._sample_waiting.clear()

    def _fire_sample(self, record: Any, frames: tuple[int, ...]) -> None:
        address, tid = struct.unpack_from("<QI", record.user_data, 0)
        pid = self.pid_of(tid) if tid else 0
        kernel = address if address >= 0xFFFF800000000000 else 0
        for fn, probe in self.matching("profile", "", ""):
            if self.allowed is not None and pid not in self.allowed:
                continue
            firing = KernelFiring(pid, tid, record.cpu, record.filetime, (kernel, address if not kernel else 0), 0, self.execname(pid, record.filetime))
            firing.frames = frames
            self.fire(fn, firing, probe)
            if self.exit_box[0] is not None and self.stopped_at is None:
                self.stopped_at = record.filetime


def _filetime(record: Any) -> int:
    return int(record.filetime)


class _Decoding:
    """What the kernel handlers decode records with: the kernel's MOF schemas, and the processes
    and threads the session's process events teach (the trace-state tracker, ``events.trace_state``)."""

    def __init__(self) -> None:
        from openetw.events.trace_state import TraceState

        self.decode_context = TraceState()

    def parser_for(self, record: Any) -> Any:
        return _Fields(self.decode_context, record)


class _Fields:
    def __init__(self, context: Any, record: Any) -> None:
        from openetw.tdh import decode_all

        schema = context.schema_for(record)
        if schema is None:
            raise InvalidArgument(f"no schema for kernel record {record.hook_id:#x}")
        self.values = decode_all(schema, record.user_data, record.pointer_size)

    def parse(self, name: str) -> Any:
        return self.values[name]


def _wants_stack(desc: Description) -> bool:
    return _is_profile(desc)


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
