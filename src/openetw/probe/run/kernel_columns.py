"""The kernel probes' column stage: system call and context switch records, the bulk of a kernel
trace, handled on columns of each batch the session hands over.

They are put in time order (held until every CPU's records came past them: the kernel trace reads
each CPU's ring on its own, and a block of system calls follows the other events read with them,
so records are held ``REORDER_WINDOW`` behind the slowest CPU), each system call is given its
CPU's running thread (from the switches) and that thread's last entered call, and only the rows of
the traced process are built into firings, or counted on columns when the program only counts.
``ColumnStage`` is the part of ``KernelProbes`` that does this.

A switch the kernel did not record is inferred. Some kernels drop every event the idle task
records outside interrupts on some CPUs (seen on a 2-CPU Firecracker guest: no ``sched_switch``
out of idle on CPU 1, in ftrace and perf alike, while BPF on the same tracepoint sees them), and a
full ring drops events too. A CPU's next switch names the thread it takes off (``OldThreadId``):
when that is not the thread the CPU was known to run, a switch was missed. Coming out of idle, the
thread ran from the CPU's first record after idle (idle makes no system calls), so the inferred
switch goes there; between two other threads it goes just before the recorded one. An inferred
switch fires ``sched`` probes like a recorded one and is counted in ``switches_inferred``. System
calls on a CPU whose thread is not yet known wait for that CPU's next switch.
Argument records (``syscall_args``) carry their thread: besides giving an entry its arguments,
they narrow the calls a switch missed between two threads leaves to either thread.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from openetw.kernel.classes_args import SYSCALL_ARGS_HOOK, parse_syscall_args, same_call
from openetw.probe.lang.aggregate import add_count

__all__ = ["CATCH_UP_SLACK", "REORDER_WINDOW", "ColumnStage", "KernelFiring", "count_plan"]

PROCESS, THREAD, PERFINFO = 0x03, 0x05, 0x0F
_CSWITCH, _SYS_ENTER, _SYS_EXIT = 36, 51, 52
UNKNOWN = 0xFFFFFFFF
_PROCESS_END_HOOK = PROCESS << 8 | 2
_CSWITCH_HOOK, _SYS_ENTER_HOOK, _SYS_EXIT_HOOK = THREAD << 8 | _CSWITCH, PERFINFO << 8 | _SYS_ENTER, PERFINFO << 8 | _SYS_EXIT
_BULK_HOOKS = (_CSWITCH_HOOK, _SYS_ENTER_HOOK, _SYS_EXIT_HOOK)
_EVENT_KIND = 5  # index rows of EVENT_HEADER records (their id column is not a hook)
_BULK_DTYPE = [("filetime", "<i8"), ("value", "<u8"), ("hook", "<u2"), ("cpu", "<u4"), ("pid", "<u4"), ("origin", "u1")]
RECORDED, INFERRED, ATTRIBUTION_ONLY = 0, 1, 2  # a row's origin: an inferred switch of a thread already running when the trace began fires nothing
REORDER_WINDOW = 20_000_000  # 2 s of FILETIME: how far a CPU's own records may be out of order
CATCH_UP_SLACK = 10_000_000  # 1 s: how far past the end every CPU's records must come before the end
HELD_LIMIT = 20_000_000  # system call and switch records held back at most (about 600 MB)
IDLE_SECONDS = 3.0  # a CPU silent this long does not hold back the others
ARGS_SLACK = 1_000  # 100 µs of FILETIME: how far before its entry a call's arguments record may be stamped
ARGS_LATE = 500_000  # 50 ms: how far after its entry it may come (the thread preempted between the two tracepoints)
WAIT_LIMIT = 50_000_000  # 5 s of FILETIME: how long system calls wait for the switch that names their thread
ARGS_HELD_LIMIT = 2_000_000  # system call argument records held for their entries at most

Clause = Callable[[Any, tuple[str, str, str, str]], Any]
Found = list[tuple[Clause, tuple[str, str, str, str]]]
CountPlan = dict[str, list[tuple[str, tuple[str, ...]]]]


class KernelFiring:
    """What a kernel probe's clause sees as its record (``frames``: a sample's call chain)."""

    __slots__ = ("kind", "pid", "tid", "cpu", "filetime", "args", "errno", "execname", "ppid", "frames", "strings")

    def __init__(self, pid: int, tid: int, cpu: int, filetime: int, args: tuple[int, ...], errno: int, execname: str) -> None:
        self.kind = "kprobe"
        self.pid, self.tid, self.cpu, self.filetime = pid, tid, cpu, filetime
        self.args = args + (0,) * (10 - len(args))
        self.errno = errno
        self.execname = execname
        self.ppid = 0
        self.frames: tuple[int, ...] = ()
        self.strings: dict[int, str | None] = {}  # a system call's path arguments: value → string (None: unread)


class ColumnStage:
    """System calls and switches on columns (see the module doc); the rest of the state and the
    record-by-record handling are ``KernelProbes``'."""

    running: dict[int, int]  # cpu -> tid
    thread_pid: dict[int, int]
    entered: dict[int, int]  # tid -> the system call it is in
    names: dict[int, str]
    allowed: set[int] | None
    families: set[str]
    unattributed: int
    switches_inferred: int
    exec_times: dict[int, list[int]]
    firings: int
    counting: tuple[CountPlan, dict[str, Any], list[int], int] | None
    stopped_at: int | None
    decoding: Any
    exit_box: list[Any]
    fire: Callable[[Clause, Any, tuple[str, str, str, str]], None]

    def __init__(self) -> None:
        self.awaited_exit: int | None = None  # the -c/-p target: the run ends once its exit came
        self.exit_delivered = False
        self.call_args: dict[int, deque[tuple[int, int, bytes, int]]] = {}  # tid -> its calls' (filetime, tid, payload, cpu) records, in time order
        self.args_held = 0  # records in call_args
        self._args_purged_to = 0  # FILETIME: call_args holds no record older than this (but ARGS_SLACK)
        self.recording_args = False  # the kernel trace records arguments (syscall_args)
        self.args_unrecorded = 0  # entries fired without their arguments (a record lost, or no tracepoint for the call)
        self.strings_unread = 0  # path arguments of fired entries the kernel trace could not read
        self.args_execnames: set[str] | None = None  # the process names whose arguments are recorded (None: all)
        self._pending_blocks: list[Any] = []
        self._pending_records: list[Any] = []
        self._pending_args: list[tuple[int, int, bytes, int]] = []  # (filetime, tid, payload, cpu) of argument records not taken yet
        self.args_by_cpu: dict[int, list[tuple[int, int, int]]] = {}  # cpu -> (filetime, tid, call) of the argument records taken, in time order
        self._latest = 0
        self._cpu_latest: dict[int, int] = {}
        self._cpu_heard: dict[int, float] = {}

    def matching(self, family: str, function: str, name: str) -> Found:
        raise NotImplementedError

    def pid_of(self, tid: int) -> int:
        raise NotImplementedError

    def execname(self, pid: int, filetime: int) -> str:
        raise NotImplementedError

    def on_record(self, record: Any, context: Any) -> None:
        raise NotImplementedError

    def flush_samples(self) -> None:
        raise NotImplementedError

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
        arguments = (hooks == SYSCALL_ARGS_HOOK) & (rows["kind"] != _EVENT_KIND)
        others = np.flatnonzero(~bulk & ~arguments & (hooks != 0) & (rows["kind"] != _EVENT_KIND))
        if arguments.any():
            self._take_argument_rows(index, rows[arguments])
        if len(others):
            records = list(index.loader().records(others))
            if self.awaited_exit is not None:
                for record in records:
                    if record.hook_id == _PROCESS_END_HOOK and record.pid == self.awaited_exit:
                        self.exit_delivered = True  # the target's exit has come (it fires in time order)
            self._pending_records.extend(records)
        picked = np.flatnonzero(bulk)
        if len(picked):
            self._take_bulk(index, rows, picked)
        self._release(self._watermark(rows))

    def _take_argument_rows(self, index: Any, chosen: Any) -> None:
        """The system call argument records of a batch, kept as ``(filetime, tid, payload)``
        (no record objects: with every call recorded they are as many as the calls)."""
        import numpy as np

        data = index.data
        starts = (chosen["offset"].astype(np.int64) + chosen["user_data_offset"]).tolist()
        ends = (np.asarray(starts, dtype=np.int64) + chosen["user_data_length"]).tolist()
        pending = self._pending_args
        for filetime, tid, number, start, end, cpu in zip(chosen["filetime"].tolist(), chosen["tid"].tolist(), chosen["buffer"].tolist(),
                                                          starts, ends, chosen["cpu"].tolist(), strict=True):  # fmt: skip
            pending.append((filetime, tid, bytes(data[number][start:end]), cpu))

    def seen_through(self) -> int:
        """The time (FILETIME) every CPU's records have reached (0 before any came)."""
        now = time.monotonic()
        active = [latest for cpu, latest in list(self._cpu_latest.items()) if now - self._cpu_heard.get(cpu, 0.0) < IDLE_SECONDS]
        return min(active) if active else self._latest

    def caught_up(self, when: int, target_exited: bool = False) -> bool:
        """Whether the kernel trace delivered everything up to FILETIME ``when`` (or to exit()'s):
        every CPU's records came ``CATCH_UP_SLACK`` past it; with ``target_exited``, the traced
        command's Process End too (the process events pass through the kernel session's merge,
        which may hold them behind the system calls)."""
        if target_exited and self.awaited_exit is not None and not self.exit_delivered:
            return False
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
            if len(data) % 8 == 0 and not (places % 8).any():  # records are 8-byte aligned in a buffer
                values[mine] = data.view("<u8")[places // 8]
            else:
                values[mine] = data[places[:, None] + np.arange(8)].reshape(-1).view("<u8")
        block = np.empty(len(picked), dtype=_BULK_DTYPE)
        block["filetime"] = chosen["filetime"]
        block["hook"] = chosen["hook_id"]
        block["cpu"] = chosen["cpu"]
        block["value"] = values
        block["pid"] = chosen["pid"]
        block["origin"] = RECORDED
        self._pending_blocks.append(block[np.argsort(block["filetime"], kind="stable")])  # each held block in time order
        latest = int(block["filetime"].max())
        if latest > self._latest:
            self._latest = latest

    def flush(self, until: int | None = None) -> None:
        """Fire what the reordering still holds (the sessions ended), up to FILETIME ``until``."""
        self._release(1 << 62 if until is None else until + 1, final=True)
        self._pending_blocks = []
        self._pending_records = []
        self._pending_args = []
        self.flush_samples()

    def _release(self, before: int, final: bool = False) -> None:
        """Handle the held system calls and switches older than ``before``, in time order
        (``final``: nothing more will come, so no system call waits for its CPU's next switch)."""
        if self.call_args and not final:
            self._purge_args(before)

        if self._pending_args:
            # A system call's arguments first (they come after its entry: up to ARGS_LATE past ``before``).
            until = before + ARGS_LATE
            taken = [a for a in self._pending_args if a[0] < until]
            if taken:
                self._pending_args = [a for a in self._pending_args if a[0] >= until]
                taken.sort(key=_first)
                for arguments in taken:
                    self._take_args(arguments)
        if self._pending_records:
            # Process events first: they say which processes are traced and whose threads are whose.
            ready = sorted((r for r in self._pending_records if r.filetime < before), key=_filetime)

            if ready:
                self._pending_records = [r for r in self._pending_records if r.filetime >= before]
                decoding = self.decoding
                for record in ready:
                    if (record.hook_id or 0) >> 8 == PROCESS:
                        self.on_record(record, decoding)
                self._run_held(before, final)
                for record in ready:
                    if (record.hook_id or 0) >> 8 != PROCESS:
                        self.on_record(record, decoding)
                return
        self._run_held(before, final)

    def _take_args(self, arguments: tuple[int, int, bytes, int]) -> None:
        """Keep a system call's arguments record (``syscall_args``: filetime, thread, payload, cpu)
        for its entry, by thread (until the entry takes it, or its time is long past:
        :meth:`_purge_args`), and as a sign of which thread ran on its CPU then (:meth:`_threads_seen`)."""
        tid = arguments[1]
        seen = self.args_by_cpu.get(arguments[3])
        if seen is None:
            seen = self.args_by_cpu[arguments[3]] = []
        if len(seen) >= ARGS_HELD_LIMIT:
            del seen[: len(seen) // 2]
        sign = (arguments[0], tid, int.from_bytes(arguments[2][:4], "little"))
        if seen and seen[-1][0] > sign[0]:
            bisect.insort(seen, sign)
        else:
            seen.append(sign)
        waiting = self.call_args.get(tid)
        if waiting is None:
            waiting = self.call_args[tid] = deque()
        if self.args_held >= ARGS_HELD_LIMIT:
            self.call_args.clear()  # a safety valve: their entries find nothing, counted unrecorded
            self.args_held = 0
            waiting = self.call_args[tid] = deque()
        waiting.append(arguments)
        self.args_held += 1

    def _purge_args(self, before: int) -> None:
        """Forget the arguments records of calls whose entry can no longer come: older than the
        calls released (``before``) by more than a call may wait for its thread (``WAIT_LIMIT``)."""
        limit = before - WAIT_LIMIT - ARGS_SLACK
        if limit < self._args_purged_to + REORDER_WINDOW // 2:
            return  # at most every second of trace time
        self._args_purged_to = limit
        for tid in list(self.call_args):
            waiting = self.call_args[tid]
            while waiting and waiting[0][0] < limit:
                waiting.popleft()
                self.args_held -= 1
            if not waiting:
                del self.call_args[tid]
        for seen in self.args_by_cpu.values():
            del seen[: bisect.bisect_left(seen, limit, key=_first)]

    def _args_of(self, tid: int, number: int, filetime: int, until: int) -> tuple[tuple[int, ...], dict[int, str | None]] | None:
        """The arguments and path strings recorded for ``tid``'s entry to call ``number`` at
        ``filetime``: the thread's first record of that call from then until its next entry
        (``until``; a thread's calls come one after the other, and its records of one call
        may be stamped apart when it was preempted between them; records before it are of
        calls no probe asked about, or of entries not fired)."""
        waiting = self.call_args.get(tid)
        if not waiting:
            return None
        while waiting and waiting[0][0] < filetime - ARGS_SLACK:
            waiting.popleft()  # an older call's, whose entry is gone
            self.args_held -= 1
        for at, (when, _tid, payload, _cpu) in enumerate(waiting):
            if when >= until:
                return None
            parsed = parse_syscall_args(payload)
            if parsed[0] != number:
                continue
            used = at + 1
            if used < len(waiting) and waiting[used][0] < until:
                following = parse_syscall_args(waiting[used][2])
                if same_call(parsed, following):  # every call recorded: a path-taking one twice, once with its paths
                    parsed = parsed if parsed[2] else following
                    used += 1
            for _ in range(used):
                waiting.popleft()
            self.args_held -= used
            _number, args, strings = parsed
            signed = tuple(a - (1 << 64) if a >> 63 else a for a in args)
            self.strings_unread += sum(1 for text in strings.values() if text is None)
            return signed, {signed[index]: text for index, text in strings.items()}
        return None

    def _args_wanted(self, pid: int, filetime: int) -> bool:
        """Whether the kernel trace records the arguments of this process's calls: with
        ``args_execnames``, of the processes of those names only (every clause's predicate
        requires one, so no clause reads the others' arguments)."""
        names = self.args_execnames
        return names is None or self.execname(pid, filetime)[:15] in names

    def _run_held(self, before: int, final: bool = False) -> None:
        import numpy as np

        # Each held block is in time order: only the rows released are merged (a row is sorted
        # once as its block comes and once as it leaves, however long it waits).
        parts, rest = [], []
        held = 0
        for block in self._pending_blocks:
            held += len(block)
            cut = int(np.searchsorted(block["filetime"], before, side="left"))
            if cut:
                parts.append(block[:cut])
            if cut < len(block):
                rest.append(block[cut:])
        if not parts:
            return
        released = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            released = released[np.argsort(released["filetime"], kind="stable")]
        if len(rest) > 64:  # many small blocks: one
            joined = np.concatenate(rest)
            rest = [joined[np.argsort(joined["filetime"], kind="stable")]]
        lookahead, waiting = self._next_threads(released, rest, final or held > HELD_LIMIT)
        if waiting is not None:
            rest.append(released[waiting])
            released = released[~waiting]
        self._pending_blocks = rest
        if len(released):
            self._run_bulk(released, lookahead)

    def _next_threads(self, released: Any, rest: list[Any], final: bool) -> tuple[dict[int, int], Any]:
        """For each CPU whose thread is unknown (idle, or no switch seen yet) after the released
        rows' last switch while system calls follow it: the thread its next held switch (in
        ``rest``, blocks in time order) takes off (``lookahead``, cpu -> tid), or, when no
        switch of that CPU came yet and more will come, those rows marked to wait (``waiting``,
        a mask of ``released``, or None)."""
        import numpy as np

        lookahead: dict[int, int] = {}
        waiting = None
        if not len(released):
            return lookahead, waiting
        next_old: dict[int, int] | None = None
        cpus = released["cpu"]
        is_switch = released["hook"] == _CSWITCH_HOOK
        for cpu in np.unique(cpus).tolist():
            mine = np.flatnonzero(cpus == cpu)
            switches = mine[is_switch[mine]]
            if len(switches):
                running = int(released["value"][switches[-1]] & np.uint64(0xFFFFFFFF))
                tail = mine[mine > switches[-1]]
            else:
                running, tail = self.running.get(cpu, -1), mine
            if running > 0 or not len(tail):
                continue
            if next_old is None:
                next_old = _first_switches(rest)
            if cpu in next_old:
                lookahead[cpu] = int(next_old[cpu])
            elif not final:
                # A thread that runs on without switching (nothing else to run there) holds them:
                # past WAIT_LIMIT they go, without a thread, so what is held stays bounded.
                recent = tail[released["filetime"][tail] >= self._latest - WAIT_LIMIT]
                if len(recent):
                    if waiting is None:
                        waiting = np.zeros(len(released), dtype=bool)
                    waiting[recent] = True
        return lookahead, waiting

    def _with_missed_switches(self, block: Any, lookahead: dict[int, int]) -> tuple[Any, Any]:
        """``block`` with a switch inserted wherever one was missed (see the module doc), and a
        mask of its rows whose thread is not known: between two other threads a missed switch
        happened somewhere after the CPU's previous switch, so the calls between are either
        thread's (counted unattributed, never given to a guess), but where the argument records of
        either thread on that CPU say which ran then (:meth:`_split_by_arguments`)."""
        import numpy as np

        ambiguous = np.zeros(len(block), dtype=bool)
        cpus = block["cpu"]
        hooks = block["hook"]
        is_switch = hooks == _CSWITCH_HOOK
        value = block["value"]
        times = block["filetime"]
        low = np.uint64(0xFFFFFFFF)
        inserted: list[tuple[Any, Any, Any, Any, int]] = []  # (times, new tids, old tids, origins, cpu)
        for cpu in np.unique(cpus).tolist():
            mine = np.flatnonzero(cpus == cpu)
            places = np.flatnonzero(is_switch[mine])  # the switches, as positions among the CPU's rows
            switch_values = value[mine[places]]
            new = (switch_values & low).astype(np.int64)
            old = (switch_values >> np.uint64(32)).astype(np.int64)
            state = self.running.get(cpu, -1)
            before_each = np.concatenate(([state], new[:-1])) if len(places) else np.empty(0, dtype=np.int64)
            missed = np.flatnonzero((before_each != old) & ((before_each >= 0) | (old > 0)))
            if len(missed):
                first_after = np.concatenate(([0], places[:-1] + 1))[missed]
                out_of_idle = (before_each[missed] <= 0) & (first_after < places[missed])
                at = np.where(out_of_idle, first_after, places[missed])
                for k in np.flatnonzero(~out_of_idle).tolist():
                    begin, end = int(first_after[k]), int(places[missed][k])
                    window = mine[begin:end]
                    entries = np.where(hooks[window] == _SYS_ENTER_HOOK, value[window].astype(np.int64), -1)
                    surely_before, surely_after = self._split_by_arguments(cpu, times[window], entries, int(before_each[missed][k]),
                                                                           int(old[missed][k]))  # fmt: skip
                    ambiguous[window[surely_before:surely_after]] = True
                    at[k] = begin + surely_after
                origins = np.where(before_each[missed] < 0, ATTRIBUTION_ONLY, INFERRED)
                inserted.append((times[mine[at]], old[missed], np.maximum(before_each[missed], 0), origins, cpu))
            final = int(new[-1]) if len(places) else state
            first_tail = int(places[-1]) + 1 if len(places) else 0
            coming = lookahead.get(cpu, 0)
            if final <= 0 and first_tail < len(mine) and coming > 0:
                origin = ATTRIBUTION_ONLY if final < 0 else INFERRED
                inserted.append((times[mine[first_tail : first_tail + 1]], np.array([coming]), np.array([max(final, 0)]), np.array([origin]), cpu))
        if not inserted:
            return block, ambiguous
        extra = np.empty(sum(len(part[0]) for part in inserted), dtype=_BULK_DTYPE)
        start = 0
        for part_times, new_tids, old_tids, origins, cpu in inserted:
            end = start + len(part_times)
            extra["filetime"][start:end] = part_times
            extra["value"][start:end] = new_tids.astype(np.uint64) | (old_tids.astype(np.uint64) << np.uint64(32))
            extra["hook"][start:end] = _CSWITCH_HOOK
            extra["cpu"][start:end] = cpu
            extra["pid"][start:end] = UNKNOWN
            extra["origin"][start:end] = origins
            start = end
        self.switches_inferred += int(np.count_nonzero(extra["origin"] == INFERRED))
        joined = np.concatenate((extra, block))  # an inserted switch goes before the rows of its time
        order = np.argsort(joined["filetime"], kind="stable")
        return joined[order], np.concatenate((np.zeros(len(extra), dtype=bool), ambiguous))[order]

    def _split_by_arguments(self, cpu: int, times: Any, entries: Any, earlier: int, later: int) -> tuple[int, int]:
        """A CPU's rows (``times``; ``entries``: each row's call number if it is an entry, else -1)
        in which a switch from thread ``earlier`` to thread ``later`` was missed: how many of the
        first rows are surely ``earlier``'s, and from which row on they are surely ``later``'s
        (``len(times)`` when none), by the argument records those threads left on this CPU then.
        A thread's record says it ran at its time; the entry just before the first record of
        ``later`` is the call that record belongs to."""
        import numpy as np

        count = len(times)
        seen = self.args_by_cpu.get(cpu)
        if not count or not seen:
            return 0, count
        low, high = int(times[0]), int(times[-1])
        first = bisect.bisect_left(seen, low, key=_first)
        last_earlier, first_later = None, None
        for when, tid, number in seen[first : bisect.bisect_right(seen, high, key=_first)]:
            if tid == earlier:
                last_earlier = when
            elif tid == later and first_later is None:
                first_later = (when, number)
        surely_before = int(np.searchsorted(times, last_earlier, side="right")) if last_earlier is not None else 0
        surely_after = count
        if first_later is not None:
            surely_after = int(np.searchsorted(times, first_later[0], side="left"))
            if surely_after and entries[surely_after - 1] == first_later[1] and first_later[0] - int(times[surely_after - 1]) <= ARGS_LATE:
                surely_after -= 1  # the call whose record that is
        if surely_before > surely_after:
            return 0, count  # the records disagree: nothing is sure
        return surely_before, surely_after

    def _run_bulk(self, block: Any, lookahead: dict[int, int] | None = None) -> None:
        import numpy as np

        block, ambiguous = self._with_missed_switches(block, lookahead or {})
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
            known = (header_pid != UNKNOWN) & (old_tid != 0)
            self.thread_pid.update(zip(old_tid[known].tolist(), header_pid[known].tolist(), strict=True))
        calls = ~is_switch
        tids[calls & (tids == 0)] = -1  # idle makes no system calls: their thread is not known
        tids[calls & ambiguous] = -1  # after a missed switch between two threads: either's
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
        carried_by_thread = np.array([entered.get(t, -1) for t in unique_tids.tolist()], dtype=np.int64)
        carried = carried_by_thread[inverse.reshape(-1)[order]]
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
        times = block["filetime"][rows]
        row_pids = pids[rows]
        # A process's name changes at its exec: calls before and after it are counted apart.
        epochs = np.zeros(len(rows), dtype=np.int64)
        for pid in set(np.unique(row_pids).tolist()) & self.exec_times.keys():
            mine = row_pids == pid
            epochs[mine] = np.searchsorted(np.array(self.exec_times[pid], dtype=np.int64), times[mine], side="right")
        columns = [row_pids, tids[rows], block["cpu"][rows].astype(np.int64), numbers[rows], entry, epochs]
        row_key = _group_key(columns[1:])  # a thread is in one process: its id and the rest name a group
        if row_key is not None:
            _keys, first, inverse, counts = np.unique(row_key, return_index=True, return_inverse=True, return_counts=True)
            groups = np.stack([column[first] for column in columns], axis=1)
        else:
            groups, inverse, counts = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True, return_counts=True)
        last_times = np.zeros(len(groups), dtype=np.int64)
        np.maximum.at(last_times, inverse.reshape(-1), times)  # the process ran then: its name
        names = self.names
        for (pid, tid, cpu, number, is_entry, _epoch), count, when in zip(groups.tolist(), counts.tolist(), last_times.tolist(), strict=True):
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
                    add_count(aggregations[agg][1], parts[0] if len(parts) == 1 else tuple(parts), count, drops, aggsize)

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
        origins = block["origin"][rows].tolist()
        emit = self._emit_at
        next_entry = [0] * len(filetimes)  # each entry's thread's next entry (its arguments come before it)
        if self.recording_args:
            coming: dict[int, int] = {}
            for n in range(len(filetimes) - 1, -1, -1):
                if hooks[n] == _SYS_ENTER_HOOK and not switch[n]:
                    next_entry[n] = min(coming.get(row_tids[n], 1 << 62), filetimes[n] + ARGS_LATE)
                    coming[row_tids[n]] = filetimes[n]
        for n in range(len(filetimes)):
            if self.stopped_at is not None and filetimes[n] > self.stopped_at:
                return
            if switch[n]:
                if origins[n] == ATTRIBUTION_ONLY:
                    continue
                new, old = values[n] & 0xFFFFFFFF, values[n] >> 32
                if old:
                    emit("sched", "", "off-cpu", headers[n] if headers[n] != UNKNOWN else self.pid_of(old), old, cpus[n], filetimes[n], ())
                if new:
                    emit("sched", "", "on-cpu", self.pid_of(new), new, cpus[n], filetimes[n], ())
                continue
            number = row_numbers[n]
            name = names.get(number) or (f"sys_{number}" if number >= 0 else "unknown")
            if hooks[n] == _SYS_ENTER_HOOK:
                recorded = self._args_of(row_tids[n], number, filetimes[n], next_entry[n]) if self.recording_args else None
                if recorded is None:
                    if self.recording_args and self.matching("syscall", name, "entry") and self._args_wanted(row_pids[n], filetimes[n]):
                        self.args_unrecorded += 1
                    emit("syscall", name, "entry", row_pids[n], row_tids[n], cpus[n], filetimes[n], (0,) * 6)
                else:
                    emit("syscall", name, "entry", row_pids[n], row_tids[n], cpus[n], filetimes[n], recorded[0], strings=recorded[1])
            else:
                status = values[n] & 0xFFFFFFFF
                ret = status - (1 << 32) if status >> 31 else status
                emit("syscall", name, "return", row_pids[n], row_tids[n], cpus[n], filetimes[n], (ret, ret),
                     -ret if -4096 < ret < 0 else 0)  # fmt: skip

    def _emit_at(self, family: str, function: str, name: str, pid: int, tid: int, cpu: int, filetime: int,
                 args: tuple[int, ...], errno: int = 0, strings: dict[int, str | None] | None = None) -> None:  # fmt: skip
        found = self.matching(family, function, name)
        if not found or (self.allowed is not None and pid not in self.allowed):
            return
        firing = KernelFiring(pid, tid, cpu, filetime, args, errno, self.execname(pid, filetime))
        if strings:
            firing.strings = strings
        self.firings += len(found)
        for fn, probe in found:
            self.fire(fn, firing, probe)
        if self.exit_box[0] is not None and self.stopped_at is None:
            self.stopped_at = filetime  # exit(): the run ends after this firing


def _filetime(record: Any) -> int:
    return int(record.filetime)


def _first(item: tuple[Any, ...]) -> int:
    return int(item[0])


def _group_key(columns: list[Any]) -> Any:
    """One int64 per row naming its combination of these non-negative-or-minus-one integer
    columns (mixed radix), or None when their ranges do not fit in 62 bits."""
    import numpy as np

    key = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1
    for column in columns:
        low, high = int(column.min()), int(column.max())
        if low < -1:
            return None
        size = high + 2
        span *= size
        if span >= 1 << 62:
            return None
        key = key * size + (column + 1)
    return key


def _first_switches(blocks: list[Any]) -> dict[int, int]:
    """cpu -> the thread the CPU's earliest switch in ``blocks`` takes off."""
    import numpy as np

    earliest: dict[int, tuple[int, int]] = {}
    for block in blocks:
        switches = block[block["hook"] == _CSWITCH_HOOK]
        if not len(switches):
            continue
        cpus, first = np.unique(switches["cpu"], return_index=True)
        times = switches["filetime"][first].tolist()
        olds = (switches["value"][first] >> np.uint64(32)).tolist()
        for cpu, when, old in zip(cpus.tolist(), times, olds, strict=True):
            if cpu not in earliest or when < earliest[cpu][0]:
                earliest[cpu] = (when, old)
    return {cpu: old for cpu, (_when, old) in earliest.items()}


KERNEL_PROVIDERS = frozenset({"syscall", "proc", "sched", "io", "tcp"})
_COUNT_KEYS = frozenset({"execname", "pid", "tid", "cpu", "probeprov", "probemod", "probefunc", "probename"})


def count_plan(tree: Any, clauses: list[Any], declared: set[str]) -> dict[str, list[tuple[str, tuple[str, ...]]]] | None:
    """When every ``syscall`` clause has no predicate and only counts (``@name[keys] = count()``
    keyed by execname, pid, tid, cpu and the probe names) and no clause is a ``sched`` one, the
    aggregations of each of them by clause function: the system calls are then counted on
    columns (other kernel clauses fire record by record)."""
    from openetw.probe.lang import ast as A

    plan: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for clause, info in zip(tree.clauses, clauses, strict=True):
        kernel = [d for d in info.descriptions if d.provider in KERNEL_PROVIDERS or d.name.startswith("profile-")]
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
