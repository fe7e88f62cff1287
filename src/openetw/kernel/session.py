"""A kernel trace session to an ``.etl`` file: tracefs → NT Kernel Logger records → EtlWriter.

::

    with KernelSession(flags={"process", "thread"}, output="kernel.etl") as session:
        run_the_workload()
    print(session.stats)        # events read, records written, events lost per CPU, ...

``start()`` removes instances left by crashed sessions, creates this session's ftrace
instance, writes Process/Thread DCStart records for what runs now (from /proc) and starts a
reader thread; ``stop()`` stops tracing, drains every CPU, writes the loss the kernel reported
into the file header and removes the instance.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from openetw.errors import InvalidArgument, SessionError, TraceDataError
from openetw.etl.writer import DEFAULT_BUFFER_SIZE, EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel.classes import KernelEventMapper, tracepoints_for
from openetw.kernel.procfs import ProcSource
from openetw.kernel.source import RecordSink
from openetw.kernel.ringbuffer import EventDecoder, PageParser
from openetw.kernel.tracefs import RingReader, TracefsInstance, remove_stale_instances

__all__ = ["KernelSession"]

KERNEL_LOGGER_NAME = "NT Kernel Logger"


class KernelSession:
    """One kernel trace to one file. Not restartable: make a new one for the next trace."""

    def __init__(
        self,
        flags: Iterable[str] = ("process", "thread"),
        output: str | os.PathLike[str] = "kernel.etl",
        *,
        name: str = "kernel",
        buffer_size_kb: int = 4096,
        circular: bool = False,
        flush_interval: float = 0.25,
        etl_buffer_size: int = DEFAULT_BUFFER_SIZE,
        rundown: bool = True,
        tracefs_root: Path | None = None,
        proc: ProcSource | None = None,
        sink: RecordSink | None = None,
    ) -> None:
        self.flags = frozenset(flags)
        if not self.flags:
            raise InvalidArgument("a kernel session needs at least one flag")
        self.tracepoints = tracepoints_for(sorted(self.flags))
        if buffer_size_kb < 4 or flush_interval <= 0:
            raise InvalidArgument("buffer_size_kb must be at least 4 and flush_interval positive")
        self.output = Path(output)
        self.name = name
        self.buffer_size_kb = buffer_size_kb
        self.circular = circular
        self.flush_interval = flush_interval
        self.etl_buffer_size = etl_buffer_size
        self.do_rundown = rundown
        self.tracefs_root = tracefs_root
        self.proc = proc or ProcSource()
        self.mapper = KernelEventMapper(self.flags, self.proc)
        self._instance: TracefsInstance | None = None
        self._reader: RingReader | None = None
        self._sink = sink
        self._writer: RecordSink | None = None
        self._parser: PageParser | None = None
        self._decoder: EventDecoder | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader_tid = 0
        self._failure: BaseException | None = None
        self._pending: list[tuple[int, int, str, dict[str, Any]]] = []
        self._lost_reported = 0
        self._started_at = 0.0
        self._stopped_at = 0.0
        self._counts: dict[str, Any] = {
            "events_read": 0, "records_written": 0, "rundown_records": 0, "pages_read": 0,
            "page_errors": 0, "unknown_events": 0, "discarded_events": 0, "missing_tracepoints": [],
            "stale_instances_removed": [],
        }
        self._cpu_lost: dict[int, int] = {}
        self.state = "new"

    # -- public ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self.state != "new":
            raise SessionError(f"kernel session {self.name!r} is {self.state}, not new")
        self._counts["stale_instances_removed"] = remove_stale_instances(self.tracefs_root)
        instance = TracefsInstance.create(
            self.name, root=self.tracefs_root, buffer_size_kb=self.buffer_size_kb, circular=self.circular,
        )
        self._instance = instance
        try:
            self._counts["missing_tracepoints"] = instance.enable(self.tracepoints)
            self._parser = instance.page_parser()
            self._decoder = instance.decoder(self.tracepoints)
            self._reader = instance.reader(self._parser)
            if self._sink is not None:
                self._writer = self._sink
            else:
                clock = linux_trace_clock()
                header = new_logfile_header(clock=clock, buffer_size=self.etl_buffer_size, logger_name=KERNEL_LOGGER_NAME, logfile_name=str(self.output))
                self._writer = EtlWriter(self.output, header=header)
            self._thread = threading.Thread(target=self._run, name=f"openetw-kernel-{self.name}", daemon=True)
            self._thread.start()
            self._ready.wait()
            instance.exclude_tasks([self._reader_tid])
            instance.start()
            self._started_at = time.monotonic()
            self.state = "running"
            if self.do_rundown:
                self._rundown()
        except BaseException:
            self.state = "failed"
            self._abort()
            raise

    def stop(self) -> dict[str, Any]:
        """Stops tracing, writes what is left and removes the instance; returns :attr:`stats`."""
        if self.state != "running":
            return self.stats
        assert self._instance is not None and self._reader is not None and self._writer is not None
        try:
            self._instance.stop()
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            self._consume(self._reader.read_now(until_empty=True), final=True)
            self._account_loss()
            self._stopped_at = time.monotonic()
        finally:
            self._abort()
        self.state = "stopped"
        if self._failure is not None:
            raise SessionError(f"kernel session {self.name!r} reader failed: {self._failure}") from self._failure
        return self.stats

    def __enter__(self) -> KernelSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def instance_path(self) -> Path | None:
        return None if self._instance is None else self._instance.path

    @property
    def stats(self) -> dict[str, Any]:
        """Counters of the session. ``events_lost`` is what the kernel's per-CPU stats reported."""
        stats = dict(self._counts)
        stats["events_lost"] = sum(self._cpu_lost.values())
        stats["events_lost_per_cpu"] = dict(self._cpu_lost)
        stats["unmapped_events"] = self.mapper.unmapped
        stats["state"] = self.state
        if self._reader is not None:
            stats["reads"] = self._reader.reads
        end = self._stopped_at or time.monotonic()
        stats["duration_s"] = round(end - self._started_at, 6) if self._started_at else 0.0
        return stats

    # -- inside ---------------------------------------------------------------------------------
    def _rundown(self) -> None:
        assert self._writer is not None
        records = self.mapper.rundown(self.proc.processes(), time.monotonic_ns())
        with self._lock:
            for record in records:
                self._writer.write(record)
            self._counts["rundown_records"] += len(records)
            self._counts["records_written"] += len(records)

    def _run(self) -> None:
        self._reader_tid = threading.get_native_id()
        self._ready.set()
        assert self._reader is not None and self._writer is not None
        last_loss_check = time.monotonic()
        try:
            while not self._stop.is_set():
                pages = self._reader.read(self.flush_interval)
                self._consume(pages, final=False)
                if time.monotonic() - last_loss_check >= 1.0:  # ETW's default flush timer
                    self._account_loss()
                    last_loss_check = time.monotonic()
                    with self._lock:
                        self._writer.flush()
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self._failure = error

    def _consume(self, pages: list[tuple[int, bytes]], *, final: bool) -> None:
        assert self._parser is not None and self._decoder is not None and self._reader is not None
        decode = self._decoder.decode
        pending = self._pending
        for cpu, page in pages:
            self._counts["pages_read"] += 1
            try:
                sub = self._parser.parse(page)
            except TraceDataError:
                self._counts["page_errors"] += 1
                continue
            self._counts["discarded_events"] += sub.discarded
            for event in sub.events:
                try:
                    decoded = decode(page[event.offset : event.offset + event.length])
                except TraceDataError:
                    self._counts["page_errors"] += 1
                    continue
                if decoded is None:
                    self._counts["unknown_events"] += 1
                    continue
                pending.append((event.timestamp, cpu, decoded[0].name, decoded[1]))
        pending.sort(key=lambda item: item[0])
        if final:
            ready, self._pending = pending, []
        else:
            # Events newer than the drain's start may still sit unread on another CPU: keep them
            # so that a fork read late is still mapped before the child's exec and exit.
            cut = len(pending)
            watermark = self._reader.watermark
            while cut and pending[cut - 1][0] > watermark:
                cut -= 1
            ready, self._pending = pending[:cut], pending[cut:]
        self._map(ready)

    def _map(self, events: list[tuple[int, int, str, dict[str, Any]]]) -> None:
        assert self._writer is not None
        mapper = self.mapper
        written = 0
        with self._lock:
            write = self._writer.write
            for timestamp, cpu, name, values in events:
                for record in mapper.map(name, timestamp, cpu, values):
                    written += write(record)
        self._counts["events_read"] += len(events)
        self._counts["records_written"] += written

    def _account_loss(self) -> None:
        if self._instance is None or self._writer is None:
            return
        try:
            stats = self._instance.cpu_stats()
        except OSError:
            return
        self._cpu_lost = {cpu: s.lost for cpu, s in stats.items()}
        total = sum(self._cpu_lost.values())
        if total > self._lost_reported:
            with self._lock:
                self._writer.add_lost(events=total - self._lost_reported)
            self._lost_reported = total

    def _abort(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        if self._reader is not None:
            self._reader.close()
        if self._writer is not None:
            with self._lock:
                self._writer.close()
        if self._instance is not None:
            self._instance.remove()
