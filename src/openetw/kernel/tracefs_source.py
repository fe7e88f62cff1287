"""Tracepoints from a private ftrace instance as a :class:`~openetw.kernel.source.KernelEventSource`.

::

    source = TracefsSource("web", tracepoints_for({"process"}))
    source.start()                      # call it from the thread that will read
    events = source.read(0.25)          # [(timestamp_ns, cpu, "sched_process_fork", {...}), ...]
    source.stop(); rest = source.drain(); source.close()

``start()`` removes instances left by crashed sessions, creates ``instances/openetw_<name>``
(own ring buffer, ``trace_clock=mono``) with the calling thread excluded from tracing (its
read() calls would otherwise be traced when system calls are), enables the tracepoints this
kernel has (the others are listed in :attr:`missing_tracepoints`) and turns tracing on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

from openetw import _native
from openetw.errors import SessionError, TraceDataError
from openetw.kernel.ringbuffer import EventDecoder, FixedEvents, FixedLayouts, PageParser
from openetw.kernel.source import RawKernelEvent
from openetw.kernel.tracefs import RingReader, TracefsInstance, remove_stale_instances

__all__ = ["LATE_PAGE_ALLOWANCE_NS", "TracefsSource"]

LATE_PAGE_ALLOWANCE_NS = 1_000_000_000  # how long the watermark waits for a partly read page


class TracefsSource:
    """Reads the per-CPU ``trace_pipe_raw`` pages of one ftrace instance and decodes them.

    Watermark: a read drains every CPU up to the page the kernel is writing; events newer than
    the start of that drain may still sit unread on another CPU, so :attr:`watermark` is at most
    the drain's start time. It is also held at the last event read from a CPU whose last page
    was partly filled: the kernel can hand over the rest of such a page late (seen here: a
    system call's enter read hundreds of milliseconds after its exit, which had moved to the
    other CPU), and those events must still be mapped in time order. The hold lasts at most
    ``LATE_PAGE_ALLOWANCE_NS`` behind the drain's start, so an idle CPU never stops mapping.
    Loss is what ``per_cpu/cpuN/stats`` reports (dropped events, overruns and commit overruns),
    per CPU in :meth:`lost_per_cpu`.
    """

    name = "tracefs"

    def __init__(
        self,
        session_name: str,
        tracepoints: Sequence[str],
        *,
        root: Path | None = None,
        buffer_size_kb: int = 4096,
        circular: bool = False,
        remove_stale: bool = True,
        fields: Mapping[str, Iterable[str]] | None = None,
        fixed: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """``fields`` (tracepoint name → field names) makes the decoder lean: it decodes only
        those fields of those events (see :meth:`KernelEventMapper.fields_used
        <openetw.kernel.classes.KernelEventMapper.fields_used>`); events not named are decoded whole.

        ``fixed`` (tracepoint name → integer fields, see :meth:`KernelEventMapper.fixed_events
        <openetw.kernel.classes.KernelEventMapper.fixed_events>`) names events decoded
        column-wise: :meth:`read` and :meth:`drain` leave them out, :meth:`take_fixed` gives them
        per CPU, each CPU's in time order."""
        self.session_name = session_name
        self.tracepoints = list(tracepoints)
        self.root = root
        self.buffer_size_kb = buffer_size_kb
        self.circular = circular
        self.remove_stale = remove_stale
        self.fields = fields
        self.fixed = fixed
        self.missing_tracepoints: list[str] = []
        self.stale_instances_removed: list[str] = []
        self.stale_instances_error: str | None = None
        self._instance: TracefsInstance | None = None
        self._reader: RingReader | None = None
        self._parser: PageParser | None = None
        self._decoder: EventDecoder | None = None
        self._fixed_layouts: FixedLayouts | None = None
        self._fixed_read: list[FixedEvents] = []
        self._watermark = 0
        self._partial_page_last: dict[int, int] = {}  # cpu → last event time of its partly filled page
        self._closed_reads = 0
        self._cpu_lost: dict[int, int] = {}
        self._counts = {"pages_read": 0, "page_errors": 0, "unknown_events": 0, "discarded_events": 0}

    # -- the protocol ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._instance is not None:
            raise SessionError(f"tracefs source of {self.session_name!r} was already started")
        reader = threading.get_native_id()
        if self.remove_stale:
            try:
                self.stale_instances_removed = remove_stale_instances(self.root)
            except SessionError as error:  # another session's instance went away meanwhile: not ours to fail on
                self.stale_instances_error = str(error)
        instance = TracefsInstance.create(
            self.session_name, root=self.root, buffer_size_kb=self.buffer_size_kb, circular=self.circular,
            exclude_pids=[reader],
        )  # fmt: skip
        self._instance = instance
        try:
            self.missing_tracepoints = instance.enable(self.tracepoints)
            self._parser = instance.page_parser()
            self._decoder = instance.decoder(self.tracepoints, fields=self.fields)
            if self.fixed:
                self._fixed_layouts = FixedLayouts(self._decoder, self.fixed) or None
            self._reader = instance.reader(self._parser)
            instance.start()
        except BaseException:
            self.close()
            raise

    def read(self, timeout: float) -> list[RawKernelEvent]:
        reader = self._running_reader()
        events = self._decode(reader.read(timeout))
        started = reader.watermark
        held = min(self._partial_page_last.values(), default=started)
        self._watermark = max(self._watermark, started - LATE_PAGE_ALLOWANCE_NS, min(started, held))
        return events

    @property
    def watermark(self) -> int:
        return self._watermark

    def stop(self) -> None:
        if self._instance is not None:
            self._instance.stop()

    def drain(self) -> list[RawKernelEvent]:
        reader = self._running_reader()
        events = self._decode(reader.read_now(until_empty=True))
        self._watermark = max(self._watermark, reader.watermark, events[-1][0] if events else 0)
        return events

    def lost(self) -> int:
        if self._instance is not None:
            try:
                stats = self._instance.cpu_stats()
            except OSError:
                stats = None
            if stats is not None:
                self._cpu_lost = {cpu: s.lost for cpu, s in stats.items()}
        return sum(self._cpu_lost.values())

    def close(self) -> None:
        if self._reader is not None:
            self._closed_reads = self._reader.reads
            self._reader.close()
            self._reader = None
        if self._instance is not None:
            instance, self._instance = self._instance, None
            instance.remove()

    # -- beyond the protocol --------------------------------------------------------------------
    @property
    def instance_path(self) -> Path | None:
        return None if self._instance is None else self._instance.path

    def lost_per_cpu(self) -> dict[int, int]:
        """Per-CPU loss as of the last :meth:`lost` call."""
        return dict(self._cpu_lost)

    def statistics(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self._counts)
        stats["reads"] = self._reader.reads if self._reader is not None else self._closed_reads
        stats["missing_tracepoints"] = list(self.missing_tracepoints)
        stats["stale_instances_removed"] = list(self.stale_instances_removed)
        if self.stale_instances_error is not None:
            stats["stale_instances_error"] = self.stale_instances_error
        stats["events_lost_per_cpu"] = dict(self._cpu_lost)
        return stats

    def take_fixed(self) -> list[FixedEvents]:
        """The column-wise events (see ``fixed``) read since the last call, one batch per CPU and read."""
        taken, self._fixed_read = self._fixed_read, []
        return taken

    # -- inside ---------------------------------------------------------------------------------
    def _running_reader(self) -> RingReader:
        if self._reader is None:
            raise SessionError(f"tracefs source of {self.session_name!r} is not started")
        return self._reader

    def _decode(self, pages: list[tuple[int, bytes]]) -> list[RawKernelEvent]:
        parser, decoder = self._parser, self._decoder
        assert parser is not None and decoder is not None
        if self._fixed_layouts is not None or (_native.module("_tracefs") is not None and isinstance(parser, PageParser)):
            return self._decode_batches(pages)  # the compiled decoder walks whole batches of pages
        decode_into = parser.decode_into
        counts = self._counts
        events: list[RawKernelEvent] = []
        discarded_total = unknown_total = damaged_total = 0
        reader = self._reader
        partial_last = self._partial_page_last
        for cpu, page in pages:
            before = len(events)
            try:
                discarded, unknown, damaged = decode_into(page, cpu, decoder, events)  # type: ignore[arg-type]
            except TraceDataError:
                damaged_total += 1  # the page is dropped whole: one page error
                continue
            if reader is not None and reader.is_partial(page):
                if len(events) > before:
                    partial_last[cpu] = events[-1][0]
            else:
                partial_last.pop(cpu, None)
            discarded_total += discarded
            unknown_total += unknown
            damaged_total += damaged
        counts["pages_read"] += len(pages)
        counts["discarded_events"] += discarded_total
        counts["unknown_events"] += unknown_total
        counts["page_errors"] += damaged_total
        events.sort(key=_timestamp)
        return events

    def _decode_batches(self, pages: list[tuple[int, bytes]]) -> list[RawKernelEvent]:
        """:meth:`_decode` with the fixed events (if any) column-wise: the pages of each CPU at once."""
        parser, decoder = self._parser, self._decoder
        assert parser is not None and decoder is not None
        by_cpu: dict[int, list[bytes]] = {}
        for cpu, page in pages:
            by_cpu.setdefault(cpu, []).append(page)
        events: list[RawKernelEvent] = []
        counts = self._counts
        reader = self._reader
        partial_last = self._partial_page_last
        for cpu, cpu_pages in by_cpu.items():
            result = parser.decode_batch(cpu_pages, cpu, decoder, events, self._fixed_layouts)  # type: ignore[arg-type]
            if result.fixed is not None:
                self._fixed_read.append(result.fixed)
            if reader is not None:
                # Only the newest page that sets or clears the hold counts: walk back to it.
                for page, last in zip(reversed(cpu_pages), reversed(result.last_timestamps), strict=True):
                    if not reader.is_partial(page):
                        partial_last.pop(cpu, None)
                        break
                    if last is not None:
                        partial_last[cpu] = last
                        break
            elif cpu_pages:
                partial_last.pop(cpu, None)
            counts["discarded_events"] += result.discarded
            counts["unknown_events"] += result.unknown
            counts["page_errors"] += result.damaged + result.page_errors
        counts["pages_read"] += len(pages)
        if len(by_cpu) > 1:
            events.sort(key=_timestamp)
        return events


_timestamp = itemgetter(0)
