"""A kernel trace session: kernel event sources → NT Kernel Logger records → a sink (an ``.etl`` file).

::

    with KernelSession(flags={"process", "thread"}, output="kernel.etl") as session:
        run_the_workload()
    print(session.stats)        # events read, records written, events lost per CPU and per source, ...

The session runs one or more :class:`~openetw.kernel.source.KernelEventSource` objects, chosen
from the flags and ``source``:

* ``"auto"`` (default): tracefs for the tracepoint flags, plus perf_event_open for ``image`` and
  ``profile``. Needs root; without it ``start()`` raises :class:`~openetw.errors.AccessDenied`
  naming the sources this account could use instead.
* ``"tracefs"``: tracefs only (root).
* ``"proc_connector"``: process and thread events of the whole machine from the kernel's proc
  connector, for any user.

``start()`` starts the sources in the reader thread (tracefs excludes that thread from
tracing), writes Process/Thread DCStart records for what runs now (from /proc) and returns;
the reader thread merges the sources' events in time order, maps them and writes the records.
``stop()`` stops and drains every source, writes the loss they report into the sink and
releases everything.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from openetw.errors import AccessDenied, InvalidArgument, OpenEtwError, SessionError
from openetw.etl.writer import DEFAULT_BUFFER_SIZE, EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel.bpf_args import BpfArgsSource
from openetw.kernel.capabilities import KernelCapabilities, probe
from openetw.kernel.classes import FLAG_EVENTS, KERNEL_FLAGS, PERF_FLAGS, KernelEventMapper, tracepoints_for
from openetw.kernel.classes_perf import PerfClassMapper, install_perf_handlers
from openetw.kernel.classes_proc import ProcConnectorHandlers, install_proc_connector_handlers
from openetw.kernel.perf import PerfSource
from openetw.kernel.priority import boost_reader
from openetw.kernel.proc_connector import ProcConnectorSource
from openetw.kernel.procfs import ProcSource
from openetw.kernel.source import KernelEventSource, RawKernelEvent, RecordSink
from openetw.kernel.tracefs import mount_tracefs
from openetw.kernel.tracefs_source import TracefsSource

__all__ = [
    "PERF_CHILDREN_FLAGS", "PROC_CONNECTOR_FLAGS", "SOURCE_CHOICES", "KernelSession", "KernelSessionConfig", "normalize_source",
    "privilege_refusal",
]  # fmt: skip

KERNEL_LOGGER_NAME = "NT Kernel Logger"
SOURCE_CHOICES = ("auto", "tracefs", "proc_connector", "perf_children")
"""What ``KernelSession(source=...)`` accepts (``proc-connector`` is taken for ``proc_connector``)."""
PROC_CONNECTOR_FLAGS = frozenset({"process", "thread"})
"""The flags the proc connector can record: it reports forks, execs and exits, nothing else."""
PERF_CHILDREN_FLAGS = PERF_FLAGS
"""The flags a perf session of one process tree records (image loads, CPU samples)."""
_LOSS_INTERVAL = 1.0  # ETW's default flush timer
_DEFAULT_PROFILE_RATE_HZ = 1000  # Windows' default sampling interval is 1 ms


def normalize_source(source: str) -> str:
    """``"proc-connector"`` → ``"proc_connector"``; refuses names that are not a source choice."""
    name = source.strip().lower().replace("-", "_")
    if name not in SOURCE_CHOICES:
        raise InvalidArgument(f"unknown kernel event source {source!r}; choose one of {', '.join(SOURCE_CHOICES)}")
    return name


def _alternatives(capabilities: KernelCapabilities) -> list[str]:
    """The sources an unprivileged account can record with, as the refusal lists them."""
    found = []
    connector = capabilities.get("proc_connector")
    if connector is not None and connector.available:
        found.append(
            f"source proc_connector (--source proc-connector): process and thread start/exit events of the whole"
            f" machine, with exit codes ({connector.reason})"
        )
    perf = capabilities.get("perf")
    if perf is not None and perf.available:
        found.append(
            "source perf_children (KernelSession(source=\"perf_children\", target_pid=...), the command held by"
            f" openetw.kernel.perf.HeldCommand): image loads and CPU samples of a command and its children ({perf.reason})"
        )
    return found


def privilege_refusal(capabilities: KernelCapabilities) -> OpenEtwError | None:
    """Why this process cannot record tracefs kernel events, naming what it could use instead; ``None`` when it can."""
    tracefs = capabilities.get("tracefs")
    if tracefs is not None and tracefs.available:
        return None
    reason = tracefs.reason if tracefs is not None else "tracefs: unknown"
    if "not mounted" in reason:
        return SessionError(
            f"kernel sessions record tracepoints from tracefs, and {reason}; as root, a kernel session mounts it"
            " (mount -t tracefs nodev /sys/kernel/tracing)"
        )
    instead = _alternatives(capabilities)
    other = "; ".join(instead) if instead else "no other kernel event source"
    return AccessDenied(f"kernel sessions need root ({reason}; euid {capabilities.euid}). Available to this account instead: {other}")


@dataclass(frozen=True)
class KernelSessionConfig:
    """The settings of one kernel trace (what ``KernelSession`` records, how and where to).

    ``flags`` name the kernel events (``KERNEL_FLAGS``); ``source`` where they come from
    (:data:`SOURCE_CHOICES`); ``buffer_size_kb`` the kernel ring buffer per CPU; ``output`` the
    ``.etl`` file (unless the session is given a sink) of ``etl_buffer_size`` buffers, written
    circularly with ``circular``; ``flush_interval`` seconds between the reader's passes;
    ``rundown`` the DCStart records of what runs at the start; ``profile_rate_hz`` the CPU samples
    per second of the ``profile`` flag (``None``: 1000); ``target_pid`` the process whose tree
    ``source="perf_children"`` records; ``raise_priority`` lets the reader ask for more CPU
    (:func:`~openetw.kernel.priority.boost_reader`); ``tracefs_root`` a tracefs mount to use;
    ``syscall_args`` the system calls whose arguments the ``syscall_args`` flag records (names or
    patterns, ``"*"`` every call; ``None``: the path-taking calls, see
    :class:`~openetw.kernel.bpf_args.BpfArgsSource`), ``syscall_args_pids`` the processes whose calls
    it records (and their children; ``None``: every process's), ``syscall_args_execnames`` the
    thread names (``None``: any).
    """

    flags: frozenset[str] = frozenset({"process", "thread"})
    output: Path = Path("kernel.etl")
    name: str = "kernel"
    source: str = "auto"
    buffer_size_kb: int = 4096
    circular: bool = False
    flush_interval: float = 0.25
    etl_buffer_size: int = DEFAULT_BUFFER_SIZE
    rundown: bool = True
    tracefs_root: Path | None = None
    profile_rate_hz: int | None = None
    target_pid: int | None = None
    raise_priority: bool = True
    syscall_args: tuple[str, ...] | None = None
    syscall_args_pids: tuple[int, ...] | None = None
    syscall_args_execnames: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        flags = frozenset(self.flags)
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "output", Path(self.output))
        if not flags:
            raise InvalidArgument("a kernel session needs at least one flag")
        unknown = flags - KERNEL_FLAGS
        if unknown:
            raise InvalidArgument(f"unknown kernel flag(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KERNEL_FLAGS))}")
        if self.buffer_size_kb < 4 or self.flush_interval <= 0:
            raise InvalidArgument("buffer_size_kb must be at least 4 and flush_interval positive")
        if self.profile_rate_hz is not None and (self.profile_rate_hz <= 0 or "profile" not in flags):
            raise InvalidArgument("profile_rate_hz is a positive rate and needs the profile flag")
        object.__setattr__(self, "source", normalize_source(self.source))
        if (self.target_pid is not None) != (self.source == "perf_children"):
            raise InvalidArgument("target_pid goes with source perf_children, and perf_children needs target_pid")
        chosen = (self.syscall_args, self.syscall_args_pids, self.syscall_args_execnames)
        if chosen != (None, None, None) and "syscall_args" not in flags:
            raise InvalidArgument("syscall_args, syscall_args_pids and syscall_args_execnames (whose arguments are recorded) need the syscall_args flag")
        for name in ("syscall_args", "syscall_args_pids", "syscall_args_execnames"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))


class KernelSession:
    """One kernel trace to one sink. Not restartable: make a new one for the next trace."""

    def __init__(
        self,
        config: KernelSessionConfig | Iterable[str] | None = None,
        output: str | os.PathLike[str] | None = None,
        *,
        sink: RecordSink | None = None,
        proc: ProcSource | None = None,
        sources: Sequence[KernelEventSource] | None = None,
        capabilities: KernelCapabilities | None = None,
        **settings: Any,
    ) -> None:
        """The trace ``config`` describes, written to ``sink`` (default: an ``.etl`` writer of
        ``config.output``).

        ``sources`` replaces the choice made from the flags and source (tests, embedders);
        ``capabilities`` replaces :func:`~openetw.kernel.capabilities.probe` for the privilege check;
        ``proc`` is where the rundown and the mapper read ``/proc``.

        The keyword form, ``KernelSession(flags, output, name=..., source=..., ...)`` (the fields
        of :class:`KernelSessionConfig`), is kept for one release."""
        if isinstance(config, KernelSessionConfig):
            if output is not None or settings:
                raise InvalidArgument("give the kernel session's settings in its KernelSessionConfig, or as keywords; not both")
        else:
            if config is not None:
                settings["flags"] = config
            if output is not None:
                settings["output"] = output
            config = KernelSessionConfig(**settings)
        self.config = config
        self.flags = config.flags
        self.source = config.source
        self.tracepoints = tracepoints_for(sorted(self.flags & FLAG_EVENTS.keys()))
        self.output = config.output
        self.name = config.name
        self.buffer_size_kb = config.buffer_size_kb
        self.circular = config.circular
        self.flush_interval = config.flush_interval
        self.etl_buffer_size = config.etl_buffer_size
        self.do_rundown = config.rundown
        self.tracefs_root = config.tracefs_root
        self.profile_rate_hz = config.profile_rate_hz
        self.target_pid = config.target_pid
        self.raise_priority = config.raise_priority
        self.syscall_args = config.syscall_args
        self.syscall_args_pids = config.syscall_args_pids
        self.syscall_args_execnames = config.syscall_args_execnames
        self.proc = proc or ProcSource()
        self.mapper = KernelEventMapper(self.flags, self.proc)
        self._capabilities = capabilities
        self._tracefs_mounted: str | None = None
        self._sources: list[KernelEventSource] = list(sources) if sources is not None else self._choose_sources()
        if not self._sources:
            raise InvalidArgument("a kernel session needs at least one event source")
        self._install_handlers()
        self._plan_decoding(sink)
        self._sink = sink
        self._writer: RecordSink | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._pending: list[RawKernelEvent] = []
        self._lost_by_source: dict[str, int] = {}
        self._lost_reported = 0
        self._started_at = 0.0
        self._stopped_at = 0.0
        self._counts: dict[str, Any] = {"events_read": 0, "records_written": 0, "rundown_records": 0}
        self._reader_priority: str | None = None
        self.state = "new"

    def _install_handlers(self) -> None:
        """The mapper's handlers for what perf and the proc connector deliver, once each."""
        self._perf_classes: PerfClassMapper | None = None
        self._proc_handlers: ProcConnectorHandlers | None = None
        for chosen in self._sources:
            if isinstance(chosen, PerfSource) and self._perf_classes is None:
                build_id = getattr(self.proc, "build_id", None)
                self._perf_classes = install_perf_handlers(self.mapper, self.flags & PERF_FLAGS, chosen.interval_ns, build_id)
            elif isinstance(chosen, ProcConnectorSource) and self._proc_handlers is None:
                self._proc_handlers = install_proc_connector_handlers(self.mapper)

    def _plan_decoding(self, sink: RecordSink | None) -> None:
        """After every handler is registered: a lean decoder reads only what the built-in handlers
        use. A sink that takes blocks of records (a file) gets system calls column-wise, unmerged:
        they need no state, and each CPU's go to that CPU's own buffers in time order."""
        fields_used = self.mapper.fields_used()
        fixed = self.mapper.fixed_events() if sink is None or callable(getattr(sink, "write_block", None)) else {}
        for chosen in self._sources:
            if isinstance(chosen, TracefsSource) and chosen.fields is None:
                chosen.fields = fields_used
            if isinstance(chosen, TracefsSource) and chosen.fixed is None:
                chosen.fixed = fixed

    # -- choosing sources -----------------------------------------------------------------------
    def _choose_sources(self) -> list[KernelEventSource]:
        if self.source == "proc_connector":
            return [self._proc_connector_source()]
        if self.source == "perf_children":
            extra = self.flags - PERF_CHILDREN_FLAGS
            if extra:
                raise InvalidArgument(
                    f"source perf_children records only {', '.join(sorted(PERF_CHILDREN_FLAGS))};"
                    f" {', '.join(sorted(extra))} need(s) another source"
                )
            return [self._perf_source(self.flags, target_pid=self.target_pid)]
        perf_flags = self.flags & PERF_FLAGS
        if self.source == "tracefs" and perf_flags:
            raise InvalidArgument(
                f"flag(s) {', '.join(sorted(perf_flags))} are recorded by perf_event_open, not tracefs; use source auto"
            )
        chosen: list[KernelEventSource] = []
        if self.tracepoints or not perf_flags:
            chosen.append(TracefsSource(self.name, self.tracepoints, root=self.tracefs_root,
                                        buffer_size_kb=self.buffer_size_kb, circular=self.circular))  # fmt: skip
        if perf_flags:
            chosen.append(self._perf_source(perf_flags))
        if "syscall_args" in self.flags:
            chosen.append(BpfArgsSource(self.tracefs_root, calls=self.syscall_args, pids=self.syscall_args_pids, execnames=self.syscall_args_execnames))
        return chosen

    def _proc_connector_source(self) -> KernelEventSource:
        extra = self.flags - PROC_CONNECTOR_FLAGS
        if extra:
            raise InvalidArgument(
                f"the proc connector records only {', '.join(sorted(PROC_CONNECTOR_FLAGS))};"
                f" {', '.join(sorted(extra))} need(s) tracefs or perf (root, source auto)"
            )
        return ProcConnectorSource()

    def _perf_source(self, perf_flags: frozenset[str], target_pid: int | None = None) -> KernelEventSource:
        rate = self.profile_rate_hz if self.profile_rate_hz is not None else _DEFAULT_PROFILE_RATE_HZ
        return PerfSource(image="image" in perf_flags, profile="profile" in perf_flags, frequency=rate, target_pid=target_pid)

    @property
    def reads_tracefs(self) -> bool:
        """Whether one of this session's sources is tracefs."""
        return self._tracefs() is not None

    @property
    def needs_root(self) -> bool:
        """Whether this session reads tracefs or system-wide perf events (root only)."""
        return any(isinstance(s, TracefsSource | BpfArgsSource) or (isinstance(s, PerfSource) and s.target_pid is None) for s in self._sources)

    # -- public ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self.state != "new":
            raise SessionError(f"kernel session {self.name!r} is {self.state}, not new")
        if self.needs_root:
            if self._capabilities is None and self.tracefs_root is None and os.geteuid() == 0 and self.reads_tracefs:
                try:
                    self._tracefs_mounted = mount_tracefs().mounted  # as root, mounted when it is not (and said in stats)
                except OpenEtwError:
                    self.state = "failed"
                    raise
            refusal = privilege_refusal(self._capabilities if self._capabilities is not None else probe())
            if refusal is not None:
                self.state = "failed"
                raise refusal
        try:
            if self._sink is not None:
                self._writer = self._sink
            else:
                header = new_logfile_header(clock=linux_trace_clock(), buffer_size=self.etl_buffer_size,
                                            logger_name=KERNEL_LOGGER_NAME, logfile_name=str(self.output))  # fmt: skip
                # Every process's command line is in it: readable by its owner only, as session files are.
                self._writer = EtlWriter(self.output, header=header, file_mode=0o600)
            self._thread = threading.Thread(target=self._run, name=f"openetw-kernel-{self.name}", daemon=True)
            self._thread.start()
            self._ready.wait()
            if self._failure is not None:
                raise self._failure
            self._started_at = time.monotonic()
            self.state = "running"
            if self.do_rundown:
                self._rundown()
        except BaseException:
            self.state = "failed"
            self._abort()
            raise

    def stop(self) -> dict[str, Any]:
        """Stops and drains every source, writes what is left and releases everything; returns :attr:`stats`."""
        if self.state != "running":
            return self.stats
        try:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
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
    def sources(self) -> tuple[KernelEventSource, ...]:
        return tuple(self._sources)

    @property
    def instance_path(self) -> Path | None:
        """The tracefs instance directory while it exists, else ``None``."""
        tracefs = self._tracefs()
        return None if tracefs is None else tracefs.instance_path

    @property
    def stats(self) -> dict[str, Any]:
        """Counters of the session. ``events_lost`` sums what every source reported lost."""
        stats: dict[str, Any] = dict(self._counts)
        stats.update(pages_read=0, page_errors=0, unknown_events=0, discarded_events=0, reads=0,
                     missing_tracepoints=[], stale_instances_removed=[])  # fmt: skip
        per_source: dict[str, dict[str, Any]] = {}
        for source in self._sources:
            details = _source_statistics(source)
            details["events_lost"] = self._lost_by_source.get(source.name, 0)
            per_source[source.name] = details
        tracefs = self._tracefs()
        if tracefs is not None:
            stats.update({k: v for k, v in tracefs.statistics().items() if k != "events_lost_per_cpu"})
        stats["events_lost"] = sum(self._lost_by_source.values())
        stats["events_lost_per_cpu"] = tracefs.lost_per_cpu() if tracefs is not None else {}
        stats["events_lost_per_source"] = dict(self._lost_by_source)
        stats["sources"] = per_source
        stats["source"] = self.source
        profiling = next((s for s in self._sources if isinstance(s, PerfSource) and s.profile), None)
        stats["profile_rate_hz"] = profiling.frequency if profiling is not None else None
        stats["unmapped_events"] = self.mapper.unmapped
        stats["events_truncated"] = self.mapper.truncated
        stats["strings_unread"] = self.mapper.strings_unread
        stats["reader_priority"] = self._reader_priority
        stats["tracefs_mounted"] = self._tracefs_mounted
        stats["state"] = self.state
        if self._failure is not None and self.state == "running":
            # The reader thread ended on an error: the session records nothing any more.
            stats["state"] = "failed"
            stats["failure"] = f"the reader failed: {type(self._failure).__name__}: {self._failure}"
        end = self._stopped_at or time.monotonic()
        stats["duration_s"] = round(end - self._started_at, 6) if self._started_at else 0.0
        return stats

    # -- inside ---------------------------------------------------------------------------------
    def _tracefs(self) -> TracefsSource | None:
        return next((s for s in self._sources if isinstance(s, TracefsSource)), None)

    def _rundown(self) -> None:
        assert self._writer is not None
        processes = self.proc.processes()
        now = time.monotonic_ns()
        with self._lock:
            records = self.mapper.rundown(processes, now)
            if self._proc_handlers is not None:
                self._proc_handlers.note_processes(processes)
            if self._perf_classes is not None:
                pids = None if self.target_pid is None else [self.target_pid]
                records += self._perf_classes.rundown(self.proc, now, pids=pids)
            for record in records:
                self._writer.write(record)
            self._counts["rundown_records"] += len(records)
            self._counts["records_written"] += len(records)

    def _symbol_rundown(self) -> None:
        """At the end: the kernel symbols the samples' kernel frames fell in (names from the trace)."""
        perf = self._perf_classes
        if perf is None or not perf.kernel_addresses:
            return
        records = perf.symbol_rundown(self.proc.kernel_symbols(), time.monotonic_ns())
        with self._lock:
            assert self._writer is not None
            for record in records:
                self._writer.write(record)
        self._counts["rundown_records"] += len(records)
        self._counts["records_written"] += len(records)

    def _run(self) -> None:
        """The reader thread: every call on the sources happens here."""
        if self.raise_priority:
            # In the reader thread: without autogroup only this thread's nice value changes.
            self._reader_priority = boost_reader()
        try:
            for source in self._sources:
                source.start()
        except BaseException as error:  # noqa: BLE001 - raised again by start()
            self._failure = error
            self._ready.set()
            return
        self._ready.set()
        try:
            last_loss_check = time.monotonic()
            wait = self.flush_interval
            while not self._stop.is_set():
                events: list[RawKernelEvent] = []
                for index, source in enumerate(self._sources):
                    # The first source waits for data (not while another has more to give); the others give what they have.
                    events.extend(source.read(wait if index == 0 else 0.0))
                wait = 0.0 if any(getattr(source, "behind", False) for source in self._sources) else self.flush_interval
                self._write_fixed()
                self.mapper.on_arrival(events)
                self._consume(events, final=False)
                if time.monotonic() - last_loss_check >= _LOSS_INTERVAL:
                    self._account_loss()
                    last_loss_check = time.monotonic()
                    with self._lock:
                        assert self._writer is not None
                        self._writer.flush()
            for source in self._sources:
                source.stop()
            rest: list[RawKernelEvent] = []
            for source in self._sources:
                rest.extend(source.drain())
            self._write_fixed()
            self.mapper.on_arrival(rest)
            self._consume(rest, final=True)
            self._account_loss()
            self._symbol_rundown()
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self._failure = error

    def _consume(self, events: list[RawKernelEvent], *, final: bool) -> None:
        pending = self._pending
        if pending or len(self._sources) > 1:
            pending.extend(events)
            pending.sort(key=_timestamp)
        else:
            pending = events  # one source, nothing held back: its events are in time order already
        if final:
            ready, self._pending = pending, []
        else:
            # An event newer than a source's watermark may still have an older one unread in
            # that source (a fork read late on another CPU): hold those back, so that the fork
            # is still mapped before the child's exec and exit.
            watermark = min(source.watermark for source in self._sources)
            cut = bisect_right(pending, watermark, key=_timestamp)
            if cut == len(pending):
                ready, self._pending = pending, []
            else:
                ready, self._pending = pending[:cut], pending[cut:]
        self._map(ready)

    def _map(self, events: list[RawKernelEvent]) -> None:
        assert self._writer is not None
        with self._lock:
            # A sink with write_raw takes system calls and context switches as bytes (no record objects).
            written = self.mapper.map_events(events, self._writer.write, getattr(self._writer, "write_raw", None))
        self._counts["events_read"] += len(events)
        self._counts["records_written"] += written

    def _write_fixed(self) -> None:
        """Writes the column-wise events the sources read (see ``TracefsSource(fixed=...)``)."""
        for source in self._sources:
            if not isinstance(source, TracefsSource):
                continue
            for batch in source.take_fixed():
                with self._lock:
                    assert self._writer is not None
                    block, row_size, timestamps = self.mapper.map_fixed(batch)
                    written = self._writer.write_block(block, batch.cpu, row_size, timestamps)  # type: ignore[attr-defined]
                self._counts["events_read"] += len(batch)
                self._counts["records_written"] += written

    def _account_loss(self) -> None:
        for source in self._sources:
            self._lost_by_source[source.name] = source.lost()
        total = sum(self._lost_by_source.values())
        if total > self._lost_reported and self._writer is not None:
            with self._lock:
                self._writer.add_lost(events=total - self._lost_reported)
            self._lost_reported = total

    def _abort(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        for source in self._sources:
            try:
                source.close()
            except OpenEtwError as error:  # reported by stop(); the other sources still close
                self._failure = self._failure or error
        if self._writer is not None:
            with self._lock:
                self._writer.close()


def _source_statistics(source: KernelEventSource) -> dict[str, Any]:
    """A source's own counters (the protocol has none; the sources of this package do)."""
    if isinstance(source, TracefsSource):
        return source.statistics()
    if isinstance(source, ProcConnectorSource):
        return dict(source.stats)
    if isinstance(source, PerfSource):
        return dict(source.counts)
    if isinstance(source, BpfArgsSource):
        return source.statistics()
    return {}


_timestamp = itemgetter(0)
