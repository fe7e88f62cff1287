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
``tid``, ``cpu``, ``filetime``, ``args`` (``arg0``..``arg9``), ``errno``, ``execname``.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
import struct
import time
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
    "profile": ((), ("profile", "process", "thread", "image")),
}
"""Each kernel probe provider: its probe names and the kernel flags its probes need."""

_PROCESS, _THREAD, _DISK, _TCPIP, _PERFINFO, _STACKWALK = 0x03, 0x05, 0x01, 0x06, 0x0F, 0x18
_STACK, _IMAGE = 32, 0x14
_KERNEL_START = 0xFFFF800000000000
_CSWITCH, _SYS_ENTER, _SYS_EXIT, _SAMPLE = 36, 51, 52, 46
_PROCESS_START, _PROCESS_END = 1, 2
_DISK_READ, _DISK_WRITE, _DISK_FLUSH = 10, 11, 14
_TCP_SEND, _TCP_RECV, _IPV6 = 10, 11, 16
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_TWO_U32 = struct.Struct("<II").unpack_from
_UNKNOWN = 0xFFFFFFFF
_CSWITCH_HOOK, _SYS_ENTER_HOOK, _SYS_EXIT_HOOK = _THREAD << 8 | _CSWITCH, _PERFINFO << 8 | _SYS_ENTER, _PERFINFO << 8 | _SYS_EXIT
_BULK_HOOKS = (_CSWITCH_HOOK, _SYS_ENTER_HOOK, _SYS_EXIT_HOOK)
_EVENT_KIND = 5  # index rows of EVENT_HEADER records (their id column is not a hook)
_BULK_DTYPE = [("filetime", "<i8"), ("value", "<u8"), ("hook", "<u2"), ("cpu", "<u4"), ("pid", "<u4")]
REORDER_WINDOW = 20_000_000  # 2 s of FILETIME: how far a CPU's own records may be out of order
CATCH_UP_SLACK = 10_000_000  # 1 s: how far past the end every CPU's records must come before the end
HELD_LIMIT = 20_000_000  # system call and switch records held back at most (about 600 MB)
IDLE_SECONDS = 3.0  # a CPU silent this long does not hold back the others
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
    """What a kernel probe's clause sees as its record (``frames``: a sample's call chain)."""

    __slots__ = ("kind", "pid", "tid", "cpu", "filetime", "args", "errno", "execname", "ppid", "frames")

    def __init__(self, pid: int, tid: int, cpu: int, filetime: int, args: tuple[int, ...], errno: int, execname: str) -> None:
        self.kind = "kprobe"
        self.pid, self.tid, self.cpu, self.filetime = pid, tid, cpu, filetime
        self.args = args + (0,) * (10 - len(args))
        self.errno = errno
        self.execname = execname
        self.ppid = 0
        self.frames: tuple[int, ...] = ()


Clause = Callable[[Any, tuple[str, str, str, str]], Any]


class KernelProbes:
    """Fires the kernel probes of ``events`` ((description, clause) pairs) from kernel records.

    ``fire(fn, firing, probe)`` runs one clause; ``pid_filter`` keeps firings to one process and
    the processes it starts while traced (``-p``/``-c``). ``unattributed`` counts records whose thread was not yet known (before the
    first context switch on their CPU)."""

    def __init__(self, events: list[tuple[Description, Clause]], fire: Callable[[Clause, Any, tuple[str, str, str, str]], None],
                 *, pid_filter: int | None = None, strsize: int = 256, exit_box: list[Any] | None = None) -> None:  # fmt: skip
        self.exit_box = exit_box if exit_box is not None else [None]
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
        self.firings = 0
        self.counting: tuple[dict[str, list[tuple[str, tuple[str, ...]]]], dict[str, Any], list[int], int] | None = None
        self._cache: dict[tuple[str, str, str], list[tuple[Clause, tuple[str, str, str, str]]]] = {}
        self.context: Any = None
        self._pending_blocks: list[Any] = []
        self._pending_records: list[Any] = []
        self._sample_waiting: dict[int, tuple[Any, int]] = {}  # cpu -> (sample, its time): its stack may follow
        self._latest = 0
        self._cpu_latest: dict[int, int] = {}
        self._cpu_heard: dict[int, float] = {}
        self.stopped_at: int | None = None  # FILETIME of exit(): nothing after it fires
        self.decoding = _Decoding()

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
        self.firings += len(found)
        for fn, probe in found:
            self.fire(fn, firing, probe)
        if self.exit_box[0] is not None and self.stopped_at is None:
            self.stopped_at = when

    # -- batches of the kernel session ------------------------------------------------------------
    def on_batch(self, index: Any) -> None:
        """One batch of the kernel session's buffers (a ``BufferIndex``). System calls and context
        switches (the bulk) are handled on columns: put in time order (held back until every CPU's
        records came past them), each system call given its CPU's running thread,
        and only those of the traced process built into firings. Other records are built and
        handled one by one."""
        import numpy as np

        rows = index.records
        if not len(rows):
            return
        hooks = rows["hook_id"]
        bulk = np.isin(hooks, _BULK_HOOKS) & (rows["kind"] != _EVENT_KIND)
        others = np.flatnonzero(~bulk & (hooks != 0) & (rows["kind"] != _EVENT_KIND))
        if len(others):
            self._pending_records.extend(index.loader().records(others))
        picked = np.flatnonzero(bulk)
        if len(picked):
            self._take_bulk(index, rows, picked)
        self._release(self._watermark(rows))

    def seen_through(self) -> int:
        """The time (FILETIME) every CPU's records have reached (0 before any came)."""
        now = time.monotonic()
        active = [latest for cpu, latest in list(self._cpu_latest.items()) if now - self._cpu_heard.get(cpu, 0.0) < IDLE_SECONDS]
        return min(active) if active else self._latest

    def caught_up(self, when: int) -> bool:
        """Whether the kernel trace delivered everything up to FILETIME ``when`` (or to exit()'s):
        every CPU's records came ``CATCH_UP_SLACK`` past it."""
        stopped = self.stopped_at
        return self.seen_through() >= (when if stopped is None else min(when, stopped)) + CATCH_UP_SLACK

    def _watermark(self, rows: Any) -> int:
        """How far every CPU's records have come: the records before it are all here. The kernel
        trace reads each CPU's ring on its own, so one CPU may be seconds behind another; a CPU
        that sent nothing for ``IDLE_SECONDS`` does not hold the others back, and no more than
        ``HELD_LIMIT`` records wait (past it the oldest go, however late a CPU is)."""
        import numpy as np

        now = time.monotonic()
        cpus = rows["cpu"]
        times = rows["filetime"]
        for cpu in np.unique(cpus).tolist():
            latest = int(times[cpus == cpu].max())
            if latest > self._cpu_latest.get(cpu, 0):
                self._cpu_latest[cpu] = latest
            self._cpu_heard[cpu] = now
        active = [latest for cpu, latest in self._cpu_latest.items() if now - self._cpu_heard[cpu] < IDLE_SECONDS]
        # A CPU's own records are not quite in order either (a block of system calls follows the
        # other events the recorder read with them): keep REORDER_WINDOW behind the slowest CPU.
        mark = (min(active) if active else self._latest) - REORDER_WINDOW
        held = sum(len(block) for block in self._pending_blocks)
        if held > HELD_LIMIT:
            mark = max(mark, self._latest - REORDER_WINDOW)
        return mark

    def _take_bulk(self, index: Any, rows: Any, picked: Any) -> None:
        import numpy as np

        chosen = rows[picked]
        values = np.zeros(len(picked), dtype=np.uint64)  # SysClEnter's number, SysClExit's status, CSwitch's two tids
        starts = chosen["offset"].astype(np.int64) + chosen["user_data_offset"]
        buffers = chosen["buffer"]
        for number in np.unique(buffers).tolist():
            mine = buffers == number
            data = np.frombuffer(index.data[number], dtype=np.uint8)
            places = starts[mine]
            values[mine] = data[places[:, None] + np.arange(8)].reshape(-1).view("<u8")
        block = np.empty(len(picked), dtype=_BULK_DTYPE)
        block["filetime"] = chosen["filetime"]
        block["hook"] = chosen["hook_id"]
        block["cpu"] = chosen["cpu"]
        block["value"] = values
        block["pid"] = chosen["pid"]
        self._pending_blocks.append(block)
        latest = int(block["filetime"].max())
        if latest > self._latest:
            self._latest = latest

    def flush(self, until: int | None = None) -> None:
        """Fire what the reordering still holds (the sessions ended), up to FILETIME ``until``."""
        self._release(1 << 62 if until is None else until + 1)
        self._pending_blocks = []
        self._pending_records = []
        self.flush_samples()

    def _release(self, before: int) -> None:
        """Handle the held system calls and switches older than ``before``, in time order."""

        if self._pending_records:
            # Process events first: they say which processes are traced and whose threads are whose.
            ready = sorted((r for r in self._pending_records if r.filetime < before), key=_filetime)

            if ready:
                self._pending_records = [r for r in self._pending_records if r.filetime >= before]
                decoding = self.decoding
                for record in ready:
                    if (record.hook_id or 0) >> 8 == _PROCESS:
                        self.on_record(record, decoding)
                self._run_held(before)
                for record in ready:
                    if (record.hook_id or 0) >> 8 != _PROCESS:
                        self.on_record(record, decoding)
                return
        self._run_held(before)

    def _run_held(self, before: int) -> None:
        import numpy as np

        if not self._pending_blocks:
            return
        held = np.concatenate(self._pending_blocks) if len(self._pending_blocks) > 1 else self._pending_blocks[0]
        held = held[np.argsort(held["filetime"], kind="stable")]
        cut = int(np.searchsorted(held["filetime"], before, side="left"))
        self._pending_blocks = [held[cut:]] if cut < len(held) else []
        if cut:
            self._run_bulk(held[:cut])

    def _run_bulk(self, block: Any) -> None:
        import numpy as np

        hooks = block["hook"]
        cpus = block["cpu"]
        is_switch = hooks == _CSWITCH_HOOK
        value = block["value"]
        new_tid = (value & np.uint64(0xFFFFFFFF)).astype(np.int64)
        tids = np.full(len(block), -1, dtype=np.int64)
        for cpu in np.unique(cpus).tolist():
            mine = np.flatnonzero(cpus == cpu)
            switches = is_switch[mine]
            last = np.maximum.accumulate(np.where(switches, np.arange(len(mine)), -1))
            running = self.running.get(cpu, -1)
            tids[mine] = np.where(last >= 0, new_tid[mine][np.maximum(last, 0)], running)
            if switches.any():
                self.running[cpu] = int(new_tid[mine][np.flatnonzero(switches)[-1]])
        if is_switch.any():
            old_tid = (value[is_switch] >> np.uint64(32)).astype(np.int64)
            header_pid = block["pid"][is_switch].astype(np.int64)
            known = (header_pid != _UNKNOWN) & (old_tid != 0)
            self.thread_pid.update(zip(old_tid[known].tolist(), header_pid[known].tolist(), strict=True))
        calls = ~is_switch
        self.unattributed += int(np.count_nonzero(calls & (tids < 0)))
        # The process of each thread, looked up once per thread.
        unique_tids, inverse = np.unique(tids, return_inverse=True)
        pid_of = self.pid_of
        known_pids = [pid_of(t) if t > 0 else (0 if t == 0 else -1) for t in unique_tids.tolist()]
        pids = np.array(known_pids, dtype=np.int64)[inverse.reshape(-1)]
        entries = calls & (hooks == _SYS_ENTER_HOOK)
        # The number of the system call each thread is in: the thread's last entry before each row.
        order = np.lexsort((np.arange(len(block)), tids))
        sorted_tids = tids[order]
        count = len(order)
        positions = np.arange(count)
        first = np.concatenate(([True], sorted_tids[1:] != sorted_tids[:-1]))
        start_at = np.maximum.accumulate(np.where(first, positions, 0))
        last_entry = np.maximum.accumulate(np.where(entries[order], positions, -1))
        in_group = last_entry >= start_at
        entered = self.entered
        carried = np.array([entered.get(t, -1) for t in sorted_tids.tolist()], dtype=np.int64)
        from_entry = value.astype(np.int64)[order][np.maximum(last_entry, 0)]
        sorted_numbers = np.where(in_group, from_entry, carried)
        numbers = np.empty(count, dtype=np.int64)
        numbers[order] = sorted_numbers
        last = np.flatnonzero(np.concatenate((sorted_tids[1:] != sorted_tids[:-1], [True])))
        for tid, number in zip(sorted_tids[last].tolist(), sorted_numbers[last].tolist(), strict=True):
            if tid >= 0 and number >= 0:
                entered[tid] = number
        wanted = calls & (tids >= 0)
        if "syscall" not in self.families:
            wanted[:] = False
        elif self.allowed is not None:
            wanted &= np.isin(pids, np.fromiter(self.allowed, dtype=np.int64))
        if "sched" in self.families:
            wanted |= is_switch
        if self.counting is not None:
            self._count_bulk(block, np.flatnonzero(wanted), tids, pids, numbers)
            return
        self._fire_bulk(block, np.flatnonzero(wanted), is_switch, tids, pids, numbers)

    def count_with(self, plan: dict[str, list[tuple[str, tuple[str, ...]]]], aggregations: dict[str, Any],
                   drops: list[int], aggsize: int) -> None:  # fmt: skip
        """Count system calls on columns into ``aggregations`` (``count_plan``'s plan)."""
        self.counting = (plan, aggregations, drops, aggsize)

    def _count_bulk(self, block: Any, rows: Any, tids: Any, pids: Any, numbers: Any) -> None:
        """What the counting clauses would do for each of ``rows``, a group of rows at a time."""
        import numpy as np

        assert self.counting is not None
        plan, aggregations, drops, aggsize = self.counting
        if not len(rows):
            return
        if self.stopped_at is not None:
            rows = rows[block["filetime"][rows] <= self.stopped_at]
        entry = (block["hook"][rows] == _SYS_ENTER_HOOK).astype(np.int64)
        columns = np.stack([pids[rows], tids[rows], block["cpu"][rows].astype(np.int64), numbers[rows], entry], axis=1)
        groups, inverse, counts = np.unique(columns, axis=0, return_inverse=True, return_counts=True)
        last_times = np.zeros(len(groups), dtype=np.int64)
        np.maximum.at(last_times, inverse.reshape(-1), block["filetime"][rows])  # the process ran then: its name
        names = self.names
        for (pid, tid, cpu, number, is_entry), count, when in zip(groups.tolist(), counts.tolist(), last_times.tolist(), strict=True):
            name = names.get(number) or (f"sys_{number}" if number >= 0 else "unknown")
            probe_name = "entry" if is_entry else "return"
            found = self.matching("syscall", name, probe_name)
            if not found:
                continue
            values = {"pid": pid, "tid": tid, "cpu": cpu, "probeprov": "syscall", "probemod": "", "probefunc": name, "probename": probe_name}
            self.firings += count * len(found)
            for fn, _probe in found:
                for agg, keys in plan[fn.__name__]:
                    if "execname" in keys and "execname" not in values:
                        values["execname"] = self.execname(pid, when)
                    parts = [values[k] for k in keys]
                    key: Any = parts[0] if len(parts) == 1 else tuple(parts)
                    data = aggregations[agg][1]
                    old = data.get(key)
                    if old is not None:
                        data[key] = old + count
                    elif len(data) < aggsize:
                        data[key] = count
                    else:
                        drops[0] += count

    def _fire_bulk(self, block: Any, rows: Any, is_switch: Any, tids: Any, pids: Any, numbers: Any) -> None:
        if not len(rows):
            return
        names = self.names
        filetimes = block["filetime"][rows].tolist()
        cpus = block["cpu"][rows].tolist()
        values = block["value"][rows].tolist()
        switch = is_switch[rows].tolist()
        row_tids = tids[rows].tolist()
        row_pids = pids[rows].tolist()
        row_numbers = numbers[rows].tolist()
        hooks = block["hook"][rows].tolist()
        headers = block["pid"][rows].tolist()
        emit = self._emit_at
        for n in range(len(filetimes)):
            if self.stopped_at is not None and filetimes[n] > self.stopped_at:
                return
            if switch[n]:
                new, old = values[n] & 0xFFFFFFFF, values[n] >> 32
                if old:
                    emit("sched", "", "off-cpu", headers[n] if headers[n] != _UNKNOWN else self.pid_of(old), old, cpus[n], filetimes[n], ())
                if new:
                    emit("sched", "", "on-cpu", self.pid_of(new), new, cpus[n], filetimes[n], ())
                continue
            number = row_numbers[n]
            name = names.get(number) or (f"sys_{number}" if number >= 0 else "unknown")
            if hooks[n] == _SYS_ENTER_HOOK:
                emit("syscall", name, "entry", row_pids[n], row_tids[n], cpus[n], filetimes[n], (number,))
            else:
                status = values[n] & 0xFFFFFFFF
                ret = status - (1 << 32) if status >> 31 else status
                emit("syscall", name, "return", row_pids[n], row_tids[n], cpus[n], filetimes[n], (ret, ret),
                     -ret if -4096 < ret < 0 else 0)  # fmt: skip

    def _emit_at(self, family: str, function: str, name: str, pid: int, tid: int, cpu: int, filetime: int,
                 args: tuple[int, ...], errno: int = 0) -> None:  # fmt: skip
        found = self.matching(family, function, name)
        if not found or (self.allowed is not None and pid not in self.allowed):
            return
        firing = KernelFiring(pid, tid, cpu, filetime, args, errno, self.execname(pid, filetime))
        self.firings += len(found)
        for fn, probe in found:
            self.fire(fn, firing, probe)
        if self.exit_box[0] is not None and self.stopped_at is None:
            self.stopped_at = filetime  # exit(): the run ends after this firing

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
        if address >= _KERNEL_START:
            return kernel_symbol(address)
        image = self.context.decode_context.image_at(pid, address, when) if self.context is not None else None
        if image is None:
            return f"0x{address:x}"
        name = image.file_name.replace("\\", "/").rsplit("/", 1)[-1]
        return f"{name}`0x{address - image.base:x}"

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
    and threads the session's process events teach (``DecodeContext``)."""

    def __init__(self) -> None:
        from openetw.tdh.context import DecodeContext

        self.decode_context = DecodeContext()

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


_kallsyms: tuple[list[int], list[str]] | None = None


def kernel_symbol(address: int) -> str:
    """``kernel`symbol+0xoff`` from ``/proc/kallsyms`` (root sees the addresses), else the address."""
    global _kallsyms
    if _kallsyms is None:
        entries: list[tuple[int, str]] = []
        try:
            with open("/proc/kallsyms", encoding="ascii", errors="replace") as table:
                for line in table:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in "tTwW":
                        value = int(parts[0], 16)
                        if value:
                            entries.append((value, parts[2]))
        except OSError:
            pass
        entries.sort()
        _kallsyms = ([a for a, _ in entries], [n for _, n in entries])
    addresses, names = _kallsyms
    at = bisect.bisect_right(addresses, address) - 1
    if at < 0:
        return f"0x{address:x}"
    return f"kernel`{names[at]}+0x{address - addresses[at]:x}"


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



_COUNT_KEYS = frozenset({"execname", "pid", "tid", "cpu", "probeprov", "probemod", "probefunc", "probename"})


def count_plan(tree: Any, clauses: list[Any], declared: set[str]) -> dict[str, list[tuple[str, tuple[str, ...]]]] | None:
    """When every ``syscall`` clause has no predicate and only counts (``@name[keys] = count()``
    keyed by execname, pid, tid, cpu and the probe names) and no clause is a ``sched`` one, the
    aggregations of each of them by clause function: the system calls are then counted on
    columns (other kernel clauses fire record by record)."""
    from openetw.probe import ast as A

    plan: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for clause, info in zip(tree.clauses, clauses, strict=True):
        kernel = [d for d in info.descriptions if d.provider in FAMILIES or _is_profile(d)]
        if not any(d.provider in ("syscall", "sched") for d in kernel):
            continue  # fired record by record
        if len(kernel) != len(info.descriptions) or any(d.provider != "syscall" for d in kernel) or clause.predicate is not None:
            return None
        aggs = []
        for stmt in clause.body:
            if not (isinstance(stmt, A.ExprStmt) and isinstance(stmt.expr, A.AggCall) and stmt.expr.func == "count"):
                return None
            keys = []
            for key in stmt.expr.keys:
                if not isinstance(key, A.Ident) or key.scope or key.name not in _COUNT_KEYS or key.name in declared:
                    return None
                keys.append(key.name)
            aggs.append((stmt.expr.name, tuple(keys)))
        plan[info.function] = aggs
    return plan or None
