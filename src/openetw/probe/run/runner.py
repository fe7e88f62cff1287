"""Running a compiled D program over trace files: firing clauses, timers, errors, the exit dump."""

from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from openetw.errors import OpenEtwError
from openetw.etl import layouts as L
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.probe.lang.aggregate import add_count
from openetw.probe.lang.columnar import compare_values
from openetw.probe.lang.descriptions import Description, EventIdentity
from openetw.probe.lang.errors import ProbeRuntimeError
from openetw.probe.lang.output import Output
from openetw.probe.lang.program import ProbeProgram
from openetw.probe.run.adapter import TraceFiles, header_batches, identity_of
from openetw.probe.run.etw_writer import EtwTraceWriter
from openetw.probe.run.fields import ColumnsUnreadable
from openetw.probe.run.providers import FAMILIES

if TYPE_CHECKING:  # (the kernel and live runners are imported when a run needs them: a file run never does)
    from openetw.probe.run.kernel_probes import KernelProbes
    from openetw.probe.run.live import LiveSessions

__all__ = ["ARG0_BASE", "ProbeRun", "event_header_bytes", "run_probe_program"]

ARG0_BASE = 0x7FFE00000000
"""The address ``arg0`` holds: the record's EVENT_HEADER, its user data right after."""
_NO_GUID = bytes(16)
_LINE = re.compile(r"# line (\d+)")
_MASK64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1


def event_header_bytes(record: Any) -> bytes:
    """The record as a consumer's EVENT_RECORD presents it: EVENT_HEADER (64-bit form) + user data.

    A consumer's copy carries no header type or marker (both bytes zero); ProcessorTime is
    KernelTime then UserTime, 32 bits each."""
    data = record.user_data if record.kind != "evtx" else b""
    kernel, user = (record.kernel_time, record.user_time) if record.kind == "event" else (0, 0)
    header = L.EVENT_HEADER.pack(
        min(0xFFFF, L.EVENT_HEADER.size + len(data)), 0, 0,
        (record.flags | L.EVENT_HEADER_FLAG_64_BIT_HEADER) & 0xFFFF, record.event_property & 0xFFFF,
        record.tid & 0xFFFFFFFF, record.pid & 0xFFFFFFFF, record.filetime, record.provider_guid_bytes or _NO_GUID,
        record.id & 0xFFFF, record.version & 0xFF, record.channel & 0xFF, record.level & 0xFF, record.opcode & 0xFF,
        record.task & 0xFFFF, record.keyword & 0xFFFFFFFFFFFFFFFF, (kernel & 0xFFFFFFFF) | (user & 0xFFFFFFFF) << 32,
        record.activity_guid_bytes or _NO_GUID,
    )  # fmt: skip
    return header + bytes(data)


class _NoRecord:
    """What ``rec`` is in BEGIN, END and timer clauses."""

    pid = tid = cpu = filetime = 0
    kind = "none"


class ProbeRun:
    """One run of ``program`` over ``files``: ``run()`` returns the exit status."""

    def __init__(self, program: ProbeProgram, files: TraceFiles | LiveSessions, *, write: Callable[[str], Any],
                 json_mode: bool = False, quiet: bool = False, warn: Callable[[str], Any] | None = None,
                 columnar: bool = True, catalog: Any = None, target_pid: int | None = None,
                 destructive: bool = False) -> None:  # fmt: skip
        options = program.options
        self.program = program
        self.files = files
        self.output = Output(write, json_mode=json_mode, quiet=quiet or options["quiet"],
                             sort_by_key=options["aggsortkey"], sort_reverse=options["aggsortrev"])  # fmt: skip
        self.warn = warn or (lambda text: sys.stderr.write(text + "\n"))
        self.strsize = options["strsize"]
        self.runtime_errors = 0
        self.context: Any = None
        self.first_time: int | None = None
        self._mem_record: Any = None
        self._mem = b""
        self.firings = 0
        self.columnar = columnar
        self.catalog = catalog
        self.ran_columnar = False
        self.target_pid = target_pid
        self.exit_horizon: int | None = None  # live: the time exit() was called (FILETIME)
        self.destructive = destructive
        self.kernel_probes: KernelProbes | None = None
        self.etw_writer = EtwTraceWriter(warn=self.warn)

    # -- what compiled code calls -----------------------------------------------------------------
    def _env(self) -> dict[str, Any]:
        strsize = self.strsize - 1

        def field(rec: Any, path: tuple[str, ...], as_string: bool) -> Any:
            if rec.kind == "none":
                raise ProbeRuntimeError(f"args->{'.'.join(path)} outside an event probe")
            try:
                if rec.kind == "evtx":
                    values = rec.properties()
                    if path[0] not in values:
                        raise ProbeRuntimeError("no such field in this event")
                    value = values[path[0]]
                else:
                    value = self.context.parser_for(rec).parse(path[0])
            except OpenEtwError as error:
                raise ProbeRuntimeError(f"args->{'.'.join(path)}: {error}") from None
            for part in path[1:]:
                if not isinstance(value, dict) or part not in value:
                    raise ProbeRuntimeError(f"args->{'.'.join(path)}: no member {part!r} in this event")
                value = value[part]
            if as_string:
                text = value if isinstance(value, str) else "" if value is None else str(value)
                return text[:strsize]
            if isinstance(value, int):
                return int(value)
            raise ProbeRuntimeError(f"args->{'.'.join(path)} is not an integer in this event ({value!r})")

        def load(rec: Any, address: int, code: str, size: int) -> int:
            if rec.kind == "kprobe":
                raise ProbeRuntimeError(f"invalid address 0x{address:x} (a kernel probe has no event in memory)")
            if rec is not self._mem_record:
                self._mem = event_header_bytes(rec) if rec.kind != "none" else b""
                self._mem_record = rec
            offset = address - ARG0_BASE
            if offset < 0 or offset + size > len(self._mem):
                raise ProbeRuntimeError(f"invalid address 0x{address:x} (arg0 holds {len(self._mem)} bytes)")
            value: int = struct.unpack_from("<" + code, self._mem, offset)[0]
            return value

        def execname(rec: Any) -> str:
            if rec.kind == "none":
                return "openetw"
            if rec.kind == "kprobe":
                return str(rec.execname)
            return (self.context.executable_of(rec) or self.context.process_name_of(rec) or "")[:strsize]

        def ppid(rec: Any) -> int:
            if rec.kind == "none":
                return 0
            if rec.kind == "kprobe":
                info = self.context.decode_context.process(rec.pid, rec.filetime) if self.context is not None else None
                return (info.parent_pid or 0) if info is not None else 0
            info = self.context.decode_context.process(rec.pid, rec.filetime)
            return (info.parent_pid or 0) if info is not None else 0

        def timestamp(rec: Any) -> int:
            if rec.kind == "none":
                return self._now_ns
            if self.first_time is None:
                self.first_time = int(rec.filetime)  # a kernel probe fired first: the run's time starts there
            return int(rec.filetime - self.first_time) * 100

        def walltime(rec: Any) -> int:
            filetime = rec.filetime if rec.kind != "none" else (self._now_ns // 100 + (self.first_time or 0))
            return max(0, (filetime - UNIX_EPOCH_FILETIME) * 100)

        def system(command: str) -> None:
            if not self.destructive:
                raise ProbeRuntimeError("system() is a destructive action: allow destructive actions with -w")
            sys.stdout.flush()
            subprocess.run(command, shell=True, check=False)

        def stop(rec: Any) -> None:
            if not self.destructive:
                raise ProbeRuntimeError("stop() is a destructive action: allow destructive actions with -w")
            if rec.kind in ("none",) or not rec.pid:
                raise ProbeRuntimeError("stop() needs a probe that fired in a process")
            os.kill(rec.pid, signal.SIGSTOP)

        return {"_field": field, "_ld": load, "_execname": execname, "_ppid": ppid, "_timestamp": timestamp,
                "_walltime": walltime, "_ARG0": ARG0_BASE, "_etw_trace": self.etw_writer.write, "_system": system,
                "_stop": stop, "_stack": self._stack, "_copyinstr": _copyinstr}  # fmt: skip

    def _stack(self, rec: Any, user: bool, frames: int) -> str:
        """``stack()``/``ustack()``: the sample's kernel or user frames, one a line (empty where
        the firing has no stack: events, and kernel probes other than profile-N)."""
        if rec.kind != "kprobe" or self.kernel_probes is None:
            return ""
        return self.kernel_probes.stack_text(rec, user, frames)

    _now_ns = 0

    # -- running --------------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return self._run()
        finally:
            close = getattr(self.files, "close", None)
            if close is not None:
                close()

    def _run(self) -> int:
        functions, namespace = self.program.load(self._env(), self.output)
        self.namespace = namespace
        exit_box = namespace["_EXIT"]
        begin, end, errors, timers, events = [], [], [], [], []
        live = bool(getattr(self.files, "live", False))
        for clause in self.program.clauses:
            fn = functions[clause.function]
            for desc in clause.descriptions:
                special = desc.special
                if special == "BEGIN":
                    begin.append((fn, ("dtrace", "", "", "BEGIN")))
                elif special == "END":
                    end.append((fn, ("dtrace", "", "", "END")))
                elif special == "ERROR":
                    errors.append((fn, ("dtrace", "", "", "ERROR")))
                elif special == "timer" and not (live and desc.name.startswith("profile-")):
                    timers.append([desc.period, fn, (desc.provider, "", "", desc.name), None])
                else:
                    events.append((desc, fn))
        self.error_clauses = errors
        kernel = [(d, fn) for d, fn in events if d.provider in FAMILIES or d.special == "timer"]
        events = [(d, fn) for d, fn in events if (d, fn) not in kernel]
        if kernel:
            from openetw.probe.run.kernel_probes import KernelProbes, count_plan

            self.kernel_probes = KernelProbes(kernel, self._fire, pid_filter=self.target_pid, strsize=self.strsize, exit_box=namespace["_EXIT"])
            self.kernel_probes.recording_args = "syscall_args" in getattr(self.files, "kernel_flags", ())
            execnames = getattr(self.files, "kernel_syscall_args_execnames", None)
            self.kernel_probes.args_execnames = {name[:15] for name in execnames} if execnames else None
            self.kernel_probes.awaited_exit = self.target_pid
            counting = count_plan(self.program.tree, self.program.clauses, self.program.declared) if self.columnar else None
            if counting is not None:
                self.kernel_probes.count_with(counting, self.output.aggregations, namespace["_DROPS"], namespace["_AGGSIZE"])
        none = _NoRecord()
        for fn, probe in begin:
            self._fire(fn, none, probe)
        stats: dict[str, Any] = {}
        plan = self.program.columnar() if self.columnar and self.files.index and events else None
        if plan is not None and (self.files.evtx or not self._fields_in_place(plan)):
            plan = None
        if exit_box[0] is None and plan is not None:
            stats = self._columns_else_records(plan, events, exit_box)
        elif exit_box[0] is None and live:
            stats = self._run_live(events, timers, exit_box)
        elif exit_box[0] is None:
            stats = self._replay(events, timers, exit_box)
        self._now_ns = self._last_ns
        for fn, probe in end:
            self._fire(fn, none, probe)
        for name, (_spec, data, _normal) in self.output.aggregations.items():
            if name not in self.output.printed and (data or self.output.json):
                self.output.dump(name)
        self.etw_writer.close()
        self._report_losses(stats, namespace["_DROPS"][0])
        failed = self._report_live_errors()
        self.exited = exit_box[0] is not None
        if exit_box[0] is not None:
            return int(exit_box[0]) & 0xFF
        return 1 if self.runtime_errors or failed else 0

    _last_ns = 0

    def _replay(self, events: list[tuple[Description, Any]], timers: list[list[Any]], exit_box: list[Any]) -> dict[str, Any]:
        cache: dict[Any, list[tuple[Any, tuple[str, str, str, str]]]] = {}
        by_name = any(_needs_names(desc) for desc, _ in events)
        fire = self._fire
        files = self.files
        none = _NoRecord()
        next_due = [None]

        def resolve(record: Any, context: Any, key: Any) -> list[tuple[Any, tuple[str, str, str, str]]]:
            identity, _ = identity_of(record, context) if by_name else (_plain_identity(record), None)
            found = []
            for desc, fn in events:
                probe = desc.match(identity)
                if probe is not None:
                    found.append((fn, probe))
            cache[key] = found
            return found

        def tick(now: int) -> None:
            for timer in timers:
                period, fn, probe, due = timer
                if due is None:
                    timer[3] = due = now + period
                while due <= now and exit_box[0] is None:
                    self._now_ns = due
                    fire(fn, none, probe)
                    due += period
                timer[3] = due
            next_due[0] = min(t[3] for t in timers)

        def on_record(record: Any, context: Any) -> None:
            raw = record.provider_guid_bytes
            if exit_box[0] is not None:
                horizon = self.exit_horizon
                if horizon is None or record.filetime > horizon:
                    return  # after exit(): a live run's sessions still deliver what came before it
            if self.first_time is None:
                self.first_time = record.filetime
                self.context = context
            if timers:
                now = (record.filetime - self.first_time) * 100
                self._last_ns = now
                if next_due[0] is None or now >= next_due[0]:
                    tick(now)
            if raw is None:
                return
            key: tuple[Any, ...]
            if by_name:
                key = (raw, record.id, record.level, record.keyword, record.opcode, id(context.tdh_schema_for(record)))
            else:
                key = (raw, record.id, record.level, record.keyword, record.opcode)
            found = cache.get(key)
            if found is None:
                found = resolve(record, context, key)
            fired[0] += len(found)
            for fn, probe in found:
                try:
                    fn(record, probe)
                except BrokenPipeError as error:
                    broken.append(error)  # the reader went away: stop, and say so after the trace closes
                    files.stop()
                    return
                except Exception as error:  # noqa: BLE001 - the program's runtime error: reported, the run goes on
                    self.output.end_firing()
                    self._runtime_error(error, record, probe)
            if exit_box[0] is not None and self.exit_horizon is None:
                self.exit_horizon = record.filetime
                if self.kernel_probes is not None and self.kernel_probes.stopped_at is None:
                    self.kernel_probes.stopped_at = record.filetime
                files.stop()

        fired = [0]
        broken: list[BrokenPipeError] = []
        try:
            if self.kernel_probes is not None:
                stats = cast("LiveSessions", files).run(on_record, self._kernel_batch, self.kernel_probes.caught_up)
                self.kernel_probes.flush(self.kernel_probes.stopped_at)
                self.firings += self.kernel_probes.firings
            else:
                stats = files.run(on_record)
        finally:
            self.firings += fired[0]
        if broken:
            raise broken[0]
        if self.first_time is not None:
            self._last_ns = max(self._last_ns, 0)
        return stats

    def _kernel_batch(self, index: Any) -> None:
        kernel = self.kernel_probes
        assert kernel is not None
        kernel.on_batch(index)
        if kernel.stopped_at is not None:
            self.files.stop()

    def _run_live(self, events: list[tuple[Description, Any]], timers: list[list[Any]], exit_box: list[Any]) -> dict[str, Any]:
        """A live run: records as the sessions deliver them; ``tick-N`` and ``interval`` timers on
        the wall clock, fired from a thread of their own under the sessions' delivery lock."""
        import time

        files = cast("LiveSessions", self.files)
        done = threading.Event()
        started = time.monotonic_ns()

        def clock() -> None:
            none = _NoRecord()
            due = [started + timer[0] for timer in timers]
            while not done.is_set():
                wait = max(0, min(due) - time.monotonic_ns()) / 1e9
                if done.wait(wait):
                    return
                with files.lock:
                    now = time.monotonic_ns()
                    for number, timer in enumerate(timers):
                        if due[number] <= now and exit_box[0] is None:
                            self._now_ns = now - started
                            self._fire(timer[1], none, timer[2])
                            due[number] += timer[0] * max(1, (now - due[number]) // timer[0] + 1)
                    if exit_box[0] is not None:
                        self.exit_horizon = UNIX_EPOCH_FILETIME + time.time_ns() // 100
                        if self.kernel_probes is not None and self.kernel_probes.stopped_at is None:
                            self.kernel_probes.stopped_at = self.exit_horizon
                        files.stop()
                        return

        thread = threading.Thread(target=clock, daemon=True) if timers else None
        if thread is not None:
            thread.start()
        try:
            stats = self._replay(events, [], exit_box)
        finally:
            done.set()
            if thread is not None:
                thread.join()
        self._last_ns = time.monotonic_ns() - started
        return stats

    def _fields_in_place(self, plan: list[Any]) -> bool:
        """Whether every event the field-reading clauses match has a schema (known from the
        catalog) whose fields the field columns read (``openetw.probe.run.fields``), in
        uncompressed files: then they can be read column-wise."""
        catalog = self.catalog
        named = any(_needs_names(d) for clause in plan for d in clause.descriptions)
        if named and (catalog is None or any(key[-1] for key in catalog.entries)):
            return False  # names come from the catalog; TraceLogging events share headers, not names
        wanted = [(clause, name, name in clause.text_fields()) for clause in plan for name in sorted(clause.fields())]
        if not wanted:
            return True
        if catalog is None or not isinstance(self.files, TraceFiles) or self.files.compressed():
            return False
        for key, (identity, _fields, _count) in catalog.entries.items():
            for clause, name, text in wanted:
                if not any(d.match(identity) for d in clause.descriptions):
                    continue
                reader = (catalog.text_reader if text else catalog.field_reader)(identity.guid, identity.id, key[2], name)
                if key[-1] or reader is None:
                    return False
        return True

    def _columns_else_records(self, plan: list[Any], events: list[tuple[Description, Any]], exit_box: list[Any]) -> dict[str, Any]:
        """The run column-wise; when some event's field cannot be read so exactly as record by
        record (``ColumnsUnreadable``), the aggregations are put back as BEGIN left them and the
        events are read record by record."""
        import copy

        aggregations = self.output.aggregations
        kept = {name: copy.deepcopy(entry[1]) for name, entry in aggregations.items()}
        drops = self.namespace["_DROPS"]
        kept_drops, kept_firings = drops[0], self.firings
        try:
            return self._replay_columns(plan)
        except ColumnsUnreadable:
            for name, data in kept.items():
                aggregations[name][1].clear()
                aggregations[name][1].update(data)
            drops[0], self.firings, self.ran_columnar = kept_drops, kept_firings, False
            trace = getattr(self.files, "trace", None)
            if trace is not None:
                trace.close()
            return self._replay(events, [], exit_box)

    def _replay_columns(self, plan: list[Any]) -> dict[str, Any]:
        """Header-only aggregations over the index's columns (``openetw.probe.lang.columnar``)."""
        import numpy as np

        self.ran_columnar = True
        aggregations = self.output.aggregations
        drops = self.namespace["_DROPS"]
        aggsize = self.namespace["_AGGSIZE"]
        matched: dict[tuple[int, int, int, int], list[tuple[Any, tuple[str, str, str, str]]]] = {}
        named = {(i.guid, i.id, i.level, i.keyword): i for i, _, _ in self.catalog.items()} if self.catalog is not None else {}
        guids: list[str] = []
        assert isinstance(self.files, TraceFiles)  # column-wise runs are over files

        def matched_kind(combo: tuple[int, int, int, int]) -> list[tuple[Any, tuple[str, str, str, str]]]:
            found = matched.get(combo)
            if found is None:
                identity = named.get((guids[combo[0]], combo[1], combo[2], combo[3])) or EventIdentity(
                    guids[combo[0]], None, combo[2], combo[3], combo[1], None)  # fmt: skip
                found = matched[combo] = _first_per_clause([(c, p) for c in plan for d in c.descriptions for p in [d.match(identity)] if p is not None])
            return found

        whole = _BlockCounts.of(plan, aggregations, drops, aggsize)
        for batch in header_batches(self.files, header_only=not any(clause.fields() for clause in plan)):
            guids = batch.guids
            valid = np.flatnonzero(batch.provider >= 0)
            if not len(valid):
                continue
            combos_of, counts, row_code = _kinds_of_rows(batch, valid)
            if whole is not None:
                whole.add_block(batch, valid, row_code, [matched_kind(combo) for combo in combos_of])
            order = None
            ends = np.cumsum(counts)
            count_list = counts.tolist()
            for number, combo in enumerate(combos_of):
                found = matched_kind(combo)
                if not found:
                    continue
                size = count_list[number]
                rows = None
                for clause, probe in found:
                    self.firings += size
                    chosen = None
                    for agg in clause.aggregations:
                        if whole is not None and whole.takes(clause):
                            break  # counted a block at a time
                        data = aggregations[agg.name][1]
                        simple = agg.func == "count" and all(kind == "probe" for kind, _ in agg.keys)
                        if simple and clause.predicate is None:
                            _add_count(agg, probe, size, data, drops, aggsize)  # count() by probe names: no rows needed
                            continue
                        if rows is None:
                            if order is None:
                                small = row_code.astype(np.uint16) if len(combos_of) <= 1 << 16 else row_code  # (radix sorted)
                                order = valid[np.argsort(small, kind="stable")]
                            rows = order[ends[number] - size : ends[number]]
                        if chosen is None:
                            chosen = _Rows(rows, batch, probe, self.catalog)
                            chosen.strsize = self.strsize - 1  # what the compiled clause cuts text to
                            if clause.predicate is not None:
                                chosen = chosen.where(_evaluate(clause.predicate, chosen))
                        if simple and len(chosen.rows):
                            _add_count(agg, probe, len(chosen.rows), data, drops, aggsize)
                        elif len(chosen.rows):
                            _column_aggregate(agg, probe, chosen, data, drops, aggsize)
        if whole is not None:
            whole.flush()
        stats = self.files.trace.query_stats() if self.files.trace is not None else {}
        return stats

    def _fire(self, fn: Any, record: Any, probe: tuple[str, str, str, str]) -> None:
        try:
            fn(record, probe)
        except BrokenPipeError:
            raise
        except Exception as error:  # noqa: BLE001 - the program's runtime error: reported, the run goes on
            self.output.end_firing()
            self._runtime_error(error, record, probe)

    def _runtime_error(self, error: BaseException, record: Any, probe: tuple[str, str, str, str]) -> None:
        self.runtime_errors += 1
        line = getattr(error, "line", None) or self._d_line(error)
        message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
        where = f"{probe[0]}:{probe[1]}:{probe[2]}:{probe[3]}"
        if self.output.json:
            self.output.error({"probe": where, "line": line, "message": message})
        elif self.runtime_errors <= 10:
            self.warn(f"openetw probe: error on probe {where}" + (f" (line {line})" if line else "") + f": {message}")
        if probe[3] != "ERROR":
            for fn, error_probe in self.error_clauses:
                self._fire(fn, record, error_probe)

    def _d_line(self, error: BaseException) -> int | None:
        source = self.program.python_source.splitlines()
        for frame in reversed(traceback.extract_tb(error.__traceback__)):
            if frame.filename.startswith("<probe ") and frame.lineno is not None and 0 < frame.lineno <= len(source):
                for text in reversed(source[: frame.lineno]):  # the statement's first line names it
                    match = _LINE.search(text)
                    if match:
                        return int(match.group(1))
        return None

    def _report_live_errors(self) -> bool:
        """What ended a live run's sessions before the run did (the service's death, say): said
        on stderr (an ``error`` record in JSON); whether there was any."""
        if not getattr(self.files, "live", False):
            return False
        seen: list[str] = []
        for error in self.files.errors:
            text = str(error)
            if text not in seen:
                seen.append(text)
        for text in seen[:5]:
            if self.output.json:
                self.output.error({"probe": "", "line": None, "message": text})
            else:
                self.warn(f"openetw probe: {text}")
        return bool(seen)

    def _report_losses(self, stats: dict[str, Any], drops: int) -> None:
        counts = {
            "events_lost": int(stats.get("events_lost", 0)),
            "buffers_lost": int(stats.get("log_buffers_lost", 0)) + int(stats.get("realtime_buffers_lost", 0)),
            "aggregation_drops": drops,
            "runtime_errors": self.runtime_errors,
            "decode_errors": int(stats.get("decode_errors", 0)),
            "format_errors": int(stats.get("format_errors", 0)),
        }
        if self.kernel_probes is not None:
            counts["syscalls_unattributed"] = self.kernel_probes.unattributed
            counts["switches_inferred"] = self.kernel_probes.switches_inferred
            if getattr(self.files, "kernel_behind", False):
                # the kernel trace had not delivered everything up to the run's end (DRAIN_SECONDS)
                counts["kernel_trace_unfinished"] = 1
            if self.kernel_probes.recording_args:
                counts["syscall_args_unrecorded"] = self.kernel_probes.args_unrecorded
                counts["strings_unread"] = self.kernel_probes.strings_unread
        messages: list[str] = []
        self.output.lost(counts, messages)
        for message in messages:
            self.warn(f"openetw probe: {message}")


def _copyinstr(rec: Any, address: int, limit: int | None = None) -> str:
    """``copyinstr(addr)``: the string the kernel trace recorded for a system call's path
    argument ``addr`` (the ``syscall_args`` record); other memory cannot be read."""
    address = address - (1 << 64) if address >> 63 & 1 and address > 0 else address
    strings = getattr(rec, "strings", None) or {}
    if address not in strings:
        raise ProbeRuntimeError(f"copyinstr(0x{address & (1 << 64) - 1:x}): no string recorded at this address (the kernel trace"
                                " records the path arguments of the path-taking system calls at their entry)")  # fmt: skip
    text: str | None = strings[address]
    if text is None:
        raise ProbeRuntimeError(f"copyinstr(0x{address & (1 << 64) - 1:x}): the path could not be read from the process's"
                                " memory (it had exited or unmapped it)")  # fmt: skip
    return text if limit is None or limit < 0 else text[:limit]


class _BlockCounts:
    """``count()`` by probe names and header columns (pid, tid, cpu) for clauses with no
    predicate, counted over a whole block at once (the kind of event's probe as one more key
    column) and the counts of several blocks summed in numpy before the aggregations' dicts are
    updated (a bounded number of groups at a time; at once, in block order, when the
    aggregation could reach its size limit, where the order decides which keys are dropped)."""

    _PENDING_GROUPS = 1 << 16

    def __init__(self, clauses: list[Any], aggregations: dict[str, Any], drops: list[int], aggsize: int) -> None:
        self.clauses = {id(clause): clause for clause in clauses}
        self.aggregations = aggregations
        self.drops = drops
        self.aggsize = aggsize
        self.probe_parts: dict[int, dict[tuple[str, ...], int]] = {}  # id(agg) -> probe parts -> number
        self.pending: dict[int, tuple[Any, list[Any], list[Any], int]] = {}  # id(agg) -> (agg, groups, counts, how many)

    @classmethod
    def of(cls, plan: list[Any], aggregations: dict[str, Any], drops: list[int], aggsize: int) -> _BlockCounts | None:
        def counted(agg: Any) -> bool:
            return agg.func == "count" and agg.field is None and agg.value is None and all(k in ("probe", "column") for k, _ in agg.keys)

        chosen = [c for c in plan if c.predicate is None and c.aggregations and all(counted(a) for a in c.aggregations)
                  and any(k == "column" for a in c.aggregations for k, _ in a.keys)]  # fmt: skip
        return cls(chosen, aggregations, drops, aggsize) if chosen else None

    def takes(self, clause: Any) -> bool:
        return id(clause) in self.clauses

    def add_block(self, batch: Any, valid: Any, kind_of_row: Any, found: list[list[tuple[Any, tuple[str, str, str, str]]]]) -> None:
        """Count ``batch``'s ``valid`` rows, of kinds ``kind_of_row`` (``_kinds_of_rows``);
        ``found[k]``: the clauses (and probes) kind ``k`` fires."""
        import numpy as np

        for clause in self.clauses.values():
            probes = {number: probe for number, pairs in enumerate(found) for c, probe in pairs if c is clause}
            if not probes:
                continue
            for agg in clause.aggregations:
                numbers = self.probe_parts.setdefault(id(agg), {})
                table = np.full(len(found), -1, dtype=np.int64)
                for number, probe in probes.items():
                    parts = tuple(probe[what] for kind, what in agg.keys if kind == "probe")
                    table[number] = numbers.setdefault(parts, len(numbers))
                key = table[kind_of_row]
                rows = valid if bool((key >= 0).all()) else valid[key >= 0]
                if len(rows) != len(valid):
                    key = key[key >= 0]
                columns = [key] + [getattr(batch, what)[rows].astype(np.int64) for kind, what in agg.keys if kind == "column"]
                groups, _, counts = _groups(columns, inverse=False)
                self._add(agg, np.asarray(groups, dtype=np.int64).reshape(len(counts), len(columns)), counts.astype(np.int64))

    def _add(self, agg: Any, groups: Any, counts: Any) -> None:
        held = self.pending.get(id(agg))
        if held is None:
            held = self.pending[id(agg)] = (agg, [], [], 0)
        _, group_list, count_list, size = held
        group_list.append(groups)
        count_list.append(counts)
        size += len(counts)
        self.pending[id(agg)] = (agg, group_list, count_list, size)
        data = self.aggregations[agg.name][1]
        if size >= self._PENDING_GROUPS or len(data) + size >= self.aggsize:
            self._flush(id(agg))

    def flush(self) -> None:
        for key in list(self.pending):
            self._flush(key)

    def _flush(self, key: int) -> None:
        import numpy as np

        agg, group_list, count_list, _ = self.pending.pop(key)
        groups = np.concatenate(group_list)
        counts = np.concatenate(count_list)
        if len(group_list) > 1:
            merged, inverse, _ = _groups([groups[:, i] for i in range(groups.shape[1])])
            sums = np.zeros(len(merged), dtype=np.int64)
            np.add.at(sums, inverse, counts)
            rows, counts_out = merged, sums.tolist()
        else:
            rows, counts_out = groups.tolist(), counts.tolist()
        parts_of = {number: parts for parts, number in self.probe_parts[key].items()}
        data = self.aggregations[agg.name][1]
        for group, size in zip(rows, counts_out, strict=True):
            probe_parts = iter(parts_of[group[0]])
            values = iter(group[1:])
            parts = [next(probe_parts) if kind == "probe" else next(values) for kind, _ in agg.keys]
            add_count(data, parts[0] if len(parts) == 1 else tuple(parts), size, self.drops, self.aggsize)


def _first_per_clause(found: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    seen: set[int] = set()
    out = []
    for clause, probe in found:
        if id(clause) not in seen:
            seen.add(id(clause))
            out.append((clause, probe))
    return out


def _kinds_of_rows(batch: Any, valid: Any) -> tuple[list[tuple[int, int, int, int]], Any, Any]:
    """The kinds of event (provider, id, level, keyword) among ``valid`` rows: (kinds, rows of
    each kind, each row's kind as its place in the kinds; sorting rows by it groups them by
    kind). Counting by ``bincount`` when the codes are dense, else by sorting."""
    import numpy as np

    every_row = len(valid) == len(batch.provider)  # no fancy indexing then (the usual case)
    provider = batch.provider if every_row else batch.provider[valid]
    ids = (batch.id if every_row else batch.id[valid]).astype(np.int64)
    level = (batch.level if every_row else batch.level[valid]).astype(np.int64)
    keyword = batch.keyword if every_row else batch.keyword[valid]
    first = keyword[0]
    span = (int(ids.max()) + 1) << 8
    size = (int(provider.max()) + 1) * span
    if size <= 1 << 22 and bool((keyword == first).all()):
        code = provider * span + (ids << 8) + level
        every = np.bincount(code, minlength=size)
        codes = np.flatnonzero(every)
        kinds = [(c // span, (c % span) >> 8, c & 0xFF, int(first)) for c in codes.tolist()]
        counts = every[codes]
        every[codes] = np.arange(len(codes))  # now each code's place among the kinds
        return kinds, counts, every[code]
    # One int64 per row: sorting plain integers is fast (structured arrays sort field by field).
    keywords, rank = np.unique(keyword, return_inverse=True)
    combined = ((provider << 24) | (ids << 8) | level) * len(keywords) + rank.reshape(-1)
    codes, inverse, counts = np.unique(combined, return_inverse=True, return_counts=True)
    listed = keywords.tolist()
    kinds = []
    for c in codes.tolist():
        head, r = divmod(c, len(listed))
        kinds.append((head >> 24, (head >> 8) & 0xFFFF, head & 0xFF, listed[r]))
    return kinds, counts, inverse.reshape(-1)


def _add_count(agg: Any, probe: tuple[str, str, str, str], size: int, data: dict[Any, Any], drops: list[int], aggsize: int) -> None:
    parts = [probe[name] for _, name in agg.keys]
    add_count(data, parts[0] if len(parts) == 1 else tuple(parts), size, drops, aggsize)


class _Rows:
    """The rows of one kind of event a clause fired for, and their columns read once each."""

    def __init__(self, rows: Any, batch: Any, probe: tuple[str, str, str, str], catalog: Any) -> None:
        self.rows = rows
        self.batch = batch
        self.probe = probe
        self.catalog = catalog
        self.read: dict[Any, Any] = {}

    def where(self, mask: Any) -> _Rows:
        chosen = _Rows(self.rows[mask], self.batch, self.probe, self.catalog)
        chosen.read = {name: values if isinstance(values, _Table) else values[mask] for name, values in self.read.items()}
        chosen.strsize = self.strsize
        return chosen

    strsize = 255

    def text(self, name: str) -> tuple[Any, list[str]]:
        """A string event field as (int64 code of each row, the text of each code), cut to
        ``strsize`` characters as the compiled clause cuts it."""
        import numpy as np

        found = self.read.get(("text", name))
        if found is None:
            values = _field_column((name, 0, False), self.rows, self.batch, self.catalog, text=True)
            table: dict[str, int] = {}
            size = self.strsize
            codes = np.fromiter((table.setdefault(v[:size], len(table)) for v in values.tolist()), dtype=np.int64, count=len(values))
            found = self.read[("text", name)] = codes
            self.read[("table", name)] = _Table(table)
        return found, self.read[("table", name)].texts

    def column(self, name: str) -> Any:
        """A header column (uint32 in D) as int64."""
        import numpy as np

        found = self.read.get(name)
        if found is None:
            found = self.read[name] = getattr(self.batch, name)[self.rows].astype(np.int64)
        return found

    def field(self, field: tuple[str, int, bool]) -> Any:
        """An event field as a value of its declared type: int64, or uint64 for 64-bit unsigned."""
        found = self.read.get(field)
        if found is None:
            found = self.read[field] = _field_column(field, self.rows, self.batch, self.catalog)
        return found


class _Table:
    """The texts of a string field's codes (``_Rows.text``)."""

    def __init__(self, codes: dict[str, int]) -> None:
        self.texts = list(codes)


def _field_column(field: tuple[str, int, bool], rows: Any, batch: Any, catalog: Any, *, text: bool = False) -> Any:
    """The event field ``field`` (name, size, signed) for ``rows`` (one kind of event, maybe several
    versions), decoded column-wise (``openetw.probe.run.fields``), as a value of its declared
    type: int64, or uint64 for 64-bit unsigned."""
    import numpy as np

    name, size, signed = field
    unsigned64 = not signed and size >= 8
    out = np.empty(len(rows), dtype=object if text else np.uint64 if unsigned64 else np.int64)
    if not len(rows):
        return out
    versions = batch.version[rows]
    guid, event_id = batch.guids[int(batch.provider[rows[0]])], int(batch.id[rows[0]])
    first = int(versions[0])
    single = bool((versions == first).all())
    for version in [first] if single else np.unique(versions).tolist():
        reader = (catalog.text_reader if text else catalog.field_reader)(guid, event_id, version, name)
        if reader is None:
            raise ColumnsUnreadable(f"args->{name}: not read column-wise in event {event_id} version {version}")
        mine = None if single else versions == version
        values = batch.field_values(rows if mine is None else rows[mine], reader)
        if not text and values.dtype == np.uint64 and not unsigned64 and len(values) and int(values.max()) > _INT64_MAX:
            raise ColumnsUnreadable(f"args->{name}: a 64-bit unsigned value past the signed range")
        if mine is None:
            return values.astype(out.dtype, copy=False)
        out[mine] = values
    return out


def _operand(expr: Any, chosen: _Rows) -> Any:
    kind = expr[0]
    if kind == "lit":
        return expr[1]
    if kind == "column":
        return chosen.column(expr[1])
    if kind == "field":
        return chosen.field(expr[1:])
    if kind in ("arith", "unary"):
        return _arithmetic(expr, chosen)
    return _evaluate(expr, chosen)


_ARITHMETIC = {"+": "add", "-": "subtract", "*": "multiply", "&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor"}


def _bits(value: Any) -> Any:
    """A value's 64 bits as int64 (two's complement): an int, an int64 or a uint64 column."""
    import numpy as np

    if isinstance(value, int):
        return np.int64((value + (1 << 63)) % (1 << 64) - (1 << 63))
    return value.view(np.int64) if value.dtype == np.uint64 else value.astype(np.int64, copy=False)


def _arithmetic(expr: Any, chosen: _Rows) -> Any:
    """Lowered arithmetic (``ColumnExpr`` ``arith``/``unary``) over ``chosen``: each row's value
    in the expression's type as the compiled clause wraps it (int64; uint64 for 64-bit
    unsigned). ``+ - * & | ^ ~`` and negation commute with taking the result modulo 2**64, so
    computing in int64 (wrapping) and then in the type's width gives the same bits."""
    import numpy as np

    if expr[0] == "arith":
        _, op, left, right, size, signed = expr
        with np.errstate(over="ignore"):
            bits = getattr(np, _ARITHMETIC[op])(_bits(_operand(left, chosen)), _bits(_operand(right, chosen)))
    else:
        _, op, inner, size, signed = expr
        with np.errstate(over="ignore"):
            bits = np.negative(_bits(_operand(inner, chosen))) if op == "-" else np.invert(_bits(_operand(inner, chosen)))
    bits = np.broadcast_to(np.asarray(bits, dtype=np.int64), (len(chosen.rows),))
    if size >= 8:
        return bits.view(np.uint64).copy() if not signed else bits.copy()
    width = 8 * size
    low = bits & np.int64((1 << width) - 1)
    return np.where(low >= (1 << (width - 1)), low - (1 << width), low) if signed else low


def _in_common_type(value: Any, size: int, signed: bool) -> Any:
    """A comparison's side in its common type: unsigned ones wrap, as the compiled clause's do."""
    import numpy as np

    if signed:
        return value
    mask = (1 << (8 * size)) - 1
    if isinstance(value, int):
        return np.uint64(value & mask)
    value = value.astype(np.uint64)  # two's complement: the wrap to 64 bits
    return value if size >= 8 else value & np.uint64(mask)


def _evaluate(expr: Any, chosen: _Rows) -> Any:
    """A lowered predicate (``openetw.probe.lang.columnar.ColumnExpr``) over ``chosen``: one bool per row."""
    import numpy as np

    kind = expr[0]
    if kind == "cmp":
        _, op, left, right, size, signed = expr
        a = _in_common_type(_operand(left, chosen), size, signed)
        b = _in_common_type(_operand(right, chosen), size, signed)
        return np.broadcast_to(np.asarray(compare_values(op, a, b)), (len(chosen.rows),))
    if kind == "and":
        return _evaluate(expr[1], chosen) & _evaluate(expr[2], chosen)
    if kind == "or":
        return _evaluate(expr[1], chosen) | _evaluate(expr[2], chosen)
    return ~_evaluate(expr[1], chosen)


def _bit_length(values: Any) -> Any:
    """``int.bit_length`` of each non-negative value (exact for all 64 bits)."""
    import numpy as np

    left = values.astype(np.uint64)
    out = np.zeros(len(left), dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        high = left >= np.uint64(1 << shift)
        out[high] += shift
        left = np.where(high, left >> np.uint64(shift), left)
    return out + (left > 0)


def _buckets(func: str, values: Any, params: tuple[int, ...]) -> Any:
    """``quantize_bucket``/``lquantize_bucket`` of each int64 value."""
    import numpy as np

    if func == "quantize":
        magnitude = np.where(values < 0, -(values + 1), values).astype(np.uint64) + (values < 0)  # |v| without overflow
        bits = _bit_length(magnitude)
        power = np.where(bits > 0, np.left_shift(np.uint64(1), np.maximum(bits - 1, 0).astype(np.uint64)), np.uint64(0))
        return np.where(values < 0, -(power.astype(np.int64)), power.astype(np.int64))  # -(1 << 63) wraps to itself
    low, high, step = params
    inside = np.clip(values, low, high - 1)
    stepped = low + (inside - low) // step * step
    return np.where(values < low, low - 1, np.where(values >= high, high, stepped))


def _groups(columns: list[Any], *, inverse: bool = True) -> tuple[list[list[int]], Any, Any]:
    """The distinct rows of int64 ``columns`` in ascending order (the first column first), each
    row's group (``None`` unless ``inverse``) and each group's size, as ``np.unique(axis=0)``
    gives them: by one code per row
    (the columns' offsets from their least values, mixed) counted by ``bincount`` when the codes
    are few, else sorted; by ``np.unique(axis=0)`` when the code would not fit 62 bits."""
    import numpy as np

    n = len(columns[0])
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    total = 1
    for span in spans:
        total *= span
    if total >= 1 << 62:
        groups, group_of_row, counts = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True, return_counts=True)
        return groups.tolist(), group_of_row.reshape(-1), counts
    code = np.zeros(n, dtype=np.int64)
    for column, low, span in zip(columns, lows, spans, strict=True):
        code *= span
        code += column - low
    rows: Any = None
    if total <= max(1 << 16, 4 * n):
        every = np.bincount(code, minlength=total)
        codes = np.flatnonzero(every)
        counts = every[codes]
        if inverse:
            rows = np.cumsum(every > 0)[code] - 1
    else:
        codes, rows, counts = np.unique(code, return_inverse=True, return_counts=True)
        rows = rows.reshape(-1)
    parts = []
    left = codes
    for low, span in zip(reversed(lows), reversed(spans), strict=True):
        parts.append(left % span + low)
        left = left // span
    return np.stack(parts[::-1], axis=1).tolist(), rows, counts


def _column_aggregate(agg: Any, probe: tuple[str, str, str, str], chosen: _Rows, data: dict[Any, Any], drops: list[int],
                      aggsize: int) -> None:  # fmt: skip
    """One aggregation over the rows of one event kind: the dict updates the clause would make."""
    import numpy as np

    columns: list[tuple[Any, Any]] = []  # (int64 column, whether it holds uint64 values, or the texts of its codes)
    for kind, what in agg.keys:
        if kind == "column":
            columns.append((chosen.column(what), False))
        elif kind == "field":
            values = chosen.field(what)
            columns.append((values.view(np.int64), values.dtype == np.uint64))
        elif kind == "text":
            columns.append(chosen.text(what))
    if agg.field is not None:
        values = chosen.field(agg.field)
    elif agg.expr is not None:
        values = _arithmetic(agg.expr, chosen)
    else:
        values = chosen.column(agg.value) if agg.value is not None else None
    func = agg.func
    distribution = func in ("quantize", "lquantize")
    if distribution:
        columns.append((_buckets(func, values, agg.params), False))
    total = len(chosen.rows)
    if columns:
        group_rows, inverse, counts = _groups([c for c, _ in columns])
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sizes = counts.tolist()
        if values is None or distribution:
            results: list[Any] = sizes
        else:
            ordered = values[np.argsort(inverse, kind="stable")]
            if func == "avg":
                results = [[n, s] for n, s in zip(sizes, np.add.reduceat(ordered, starts).tolist(), strict=True)]
            else:
                results = {"sum": np.add, "min": np.minimum, "max": np.maximum}[func].reduceat(ordered, starts).tolist()
    else:
        group_rows, sizes = [[]], [total]
        if values is None:
            results = [total]
        elif func == "avg":
            results = [[total, int(values.sum())]]
        else:
            results = [int({"sum": values.sum, "min": values.min, "max": values.max}[func]())]
    unsigned = [u for _, u in columns]
    for group, result, size in zip(group_rows, results, sizes, strict=True):
        parts: list[Any] = []
        columns_left = iter(zip(group, unsigned, strict=False))
        for kind, name in agg.keys:
            if kind == "probe":
                parts.append(probe[name])
            else:
                value, is_unsigned = next(columns_left)
                parts.append(is_unsigned[value] if isinstance(is_unsigned, list) else value & _MASK64 if is_unsigned else value)
        key: Any = parts[0] if len(parts) == 1 else tuple(parts) if parts else ()
        if distribution:
            bucket = group[-1]
            old = data.get(key)
            if old is not None:
                old[bucket] = old.get(bucket, 0) + size
            elif len(data) < aggsize:
                data[key] = {bucket: size}
            else:
                drops[0] += size
            continue
        old = data.get(key)
        if old is not None:
            if func == "avg":
                old[0] += result[0]
                old[1] += result[1]
            else:
                data[key] = old + result if func in ("count", "sum") else (min(old, result) if func == "min" else max(old, result))
        elif len(data) < aggsize:
            data[key] = result
        else:
            drops[0] += size


def _plain_identity(record: Any) -> EventIdentity:
    event_id = record.id if record.kind in ("event", "evtx") else record.opcode
    return EventIdentity(str(record.provider_id), None, record.level, record.keyword, event_id, None)


def _needs_names(desc: Description) -> bool:
    module = desc.module
    guid_like = not module or module == "*" or re.fullmatch(r"[0-9a-fA-F*?\-]+", module) is not None
    name = desc.name
    numeric = re.fullmatch(r"[0-9*?\[\]!-]*", name) is not None  # ids and wildcards over ids
    return not guid_like or not (name == "generic_event" or numeric)


def run_probe_program(program: ProbeProgram, files: TraceFiles, **options: Any) -> int:
    return ProbeRun(program, files, **options).run()
