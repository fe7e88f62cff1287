"""``UserTrace``: krabsetw's trace in Python, over files now and live sessions later.

::

    trace = UserTrace(files=["boot.etl"])
    provider = Provider("Microsoft-Windows-Kernel-Process").any(0x10)
    provider.add_on_event_callback(lambda record, context: ...)
    trace.enable(provider)
    trace.start()                      # processes on this thread, returns at the end of the files

Several files are merged in time order (as ``openetw relog`` merges them); ``start_time`` /
``end_time`` keep event callbacks to a window (state records before it still build the decode
context and reach ``set_rundown_callback``). Files are read through their index (built on the
first pass, which delivers events as it indexes; see ``EtlIndex``), kept in the user's cache
(beside the file with ``index_beside=True`` or ``$OPENETW_INDEX_BESIDE``), unless
``index=False`` (a single pass with ``EtlReader`` that writes nothing). ``reuse_objects=False`` turns off taking
over records and parsers nothing else holds (the path of Python 3.14 and later).

``UserTrace(sessions=["Name"])`` consumes running real-time sessions;
``UserTrace(streams=["nats://HOST:PORT"])`` the fleet's stream (``openetw.fleet.source``); ``UserTrace()`` (or
``UserTrace("Name")``) starts a private real-time session with the enabled providers and stops it
when the trace closes. Both need the trace service (``LiveSessionUnavailable`` when it cannot be
reached; it is started on first use unless ``OPENETW_NO_AUTOSTART=1``). ``KernelTrace`` (in
``openetw.consumer.kernel_trace``) is this trace over a kernel session.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from openetw.consumer._engine.plan import IndexedPlan, admitted_rows, run_indexed
from openetw.consumer.batches import Batch, iter_batches
from openetw.consumer.context import TraceContext
from openetw.consumer.dispatch import Dispatcher, ErrorHandler
from openetw.consumer.errors import TraceStateError
from openetw.consumer.formats import open_source
from openetw.consumer.index import EtlIndex
from openetw.consumer.iteration import Event, HandOff, WhenFull
from openetw.consumer.live import LiveSessionSource, private_session_name
from openetw.consumer.provider import EventCallback, Provider
from openetw.consumer.sources import Source
from openetw.consumer.stats import TraceStatistics
from openetw.consumer.window import TimeWindow
from openetw.errors import EtlFormatError, InvalidArgument, ManifestError
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry

__all__ = ["UserTrace"]


def _registry(manifests: Any, errors: list[ManifestError]) -> tuple[SchemaRegistry, dict[str, Any]]:
    """The schema registry of a trace and the provider names it knows (lower-cased): the
    installed manifests when ``manifests`` is ``None``, else the manifests and manifest paths
    given (a later one wins), through the one registry builder, every file parsed now."""
    if isinstance(manifests, SchemaRegistry):
        return manifests, {}
    from openetw.manifest.builtin import builtin_providers
    from openetw.tdh.from_files import build_registry

    loaded: list[Any] = []
    paths: list[str | Path] = []
    for item in manifests or ():
        if isinstance(item, (str, os.PathLike)):
            paths.append(os.fspath(item))
        else:
            loaded.append(item)
    if manifests is None:
        from openetw.manifest.store.manifests import installed_manifests

        loaded = installed_manifests(errors)
    registry = build_registry(paths, manifests=loaded, empty_is_error=True)
    # the shipped layouts' providers first: any manifest given or installed wins for a name
    names: dict[str, Any] = {name.lower(): guid for guid, (name, _) in builtin_providers().items()}
    names.update(registry.provider_guids_by_name())
    errors.extend(registry.errors)
    return registry, names


class UserTrace:
    """A trace of user-mode providers over ``files`` (see the module doc)."""

    def __init__(
        self,
        name: str | None = None,
        *,
        files: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = None,
        sessions: Sequence[str] | None = None,
        streams: Sequence[Any] | None = None,
        start_time: datetime | int | None = None,
        end_time: datetime | int | None = None,
        manifests: Any = None,
        stop_on_callback_error: bool = False,
        index: bool = True,
        index_dir: str | os.PathLike[str] | None = None,
        index_beside: bool | None = None,
        learn_state: bool = True,
        socket: str | os.PathLike[str] | None = None,
        flush_timer: int = 1,
        reuse_objects: bool | None = None,
    ) -> None:
        self.name = name
        self.reuse_objects = reuse_objects
        if isinstance(files, (str, os.PathLike)):
            files = [files]
        self.files = [os.fspath(path) for path in files or ()]
        self.sessions = list(sessions or ())
        self.streams = list(streams or ())  # the fleet's streams: StreamSource, or their nats:// URLs
        if sum(1 for given in (self.files, self.sessions, self.streams) if given) > 1:
            raise InvalidArgument("a trace reads files, live sessions or the fleet's streams, one of them (merge them later with relog)")
        self.window = TimeWindow.of(start_time, end_time)
        self.manifests = manifests
        self.stop_on_callback_error = stop_on_callback_error
        self.use_index = index
        self.index_dir = index_dir
        self.index_beside = index_beside
        self.learn_state = learn_state
        self.socket = socket
        self.flush_timer = flush_timer
        self.providers: list[Provider] = []
        self._default_callback: EventCallback | None = None
        self._rundown_callback: EventCallback | None = None
        self._error_handlers: list[ErrorHandler] = []
        self.stats = TraceStatistics()
        self.sources: list[Source] = []
        self.manifest_errors: list[ManifestError] = []
        self._context: TraceContext | None = None
        self._dispatcher: Dispatcher | None = None
        self._provider_names: dict[str, Any] = {}
        self._registry: SchemaRegistry | None = None
        self._opened = False
        self._processed = False
        self._stop = threading.Event()
        self._handoffs: list[HandOff] = []
        self._after_batch: Callable[[], None] | None = None  # the iterator's hand-off, after each live batch

    # -- configuring ----------------------------------------------------------------------------
    def enable(self, provider: Provider) -> None:
        if not isinstance(provider, Provider):
            raise InvalidArgument(f"enable takes a Provider, not {provider!r}")
        if self._opened:
            raise TraceStateError("enable providers before the trace opens")
        provider.enable_rule  # noqa: B018 - an out-of-range setting fails here, not mid-trace
        self.providers.append(provider)

    def set_default_event_callback(self, callback: EventCallback | None) -> None:
        """``callback(record, context)`` for events no enabled provider claims."""
        self._default_callback = callback

    def set_rundown_callback(self, callback: EventCallback | None) -> None:
        """``callback(record, context)`` for state records (process, thread and image rundown,
        manifests and metadata carried in the trace) that come before the window's start."""
        self._rundown_callback = callback

    def on_error(self, handler: ErrorHandler) -> None:
        """``handler(error, record_or_None)`` for decode and format errors, exceptions from
        callbacks and predicates, and dropped events. Processing goes on afterwards."""
        self._error_handlers.append(handler)

    # -- running --------------------------------------------------------------------------------
    @property
    def context(self) -> TraceContext:
        """Schemas, parsers and process names for this trace's records."""
        return self._prepare().context

    def _prepare(self) -> Dispatcher:
        """Manifests, decode context and delivery rules (no sources yet), brought up to date
        with the providers and callbacks set so far."""
        dispatcher = self._dispatcher
        if dispatcher is None:
            registry, names = _registry(self.manifests, self.manifest_errors)
            self._registry, self._provider_names = registry, names
            context = TraceContext(DecodeContext(registry), trace=self, report=self._report, reuse_objects=self.reuse_objects)
            dispatcher = Dispatcher(
                context, self.stats, [], window=self.window, learn_state=self.learn_state,
                error_handlers=self._error_handlers, stop_on_callback_error=self.stop_on_callback_error,
            )  # fmt: skip
            self._context, self._dispatcher = context, dispatcher
            for error in self.manifest_errors:
                dispatcher.report(error)
        for provider in self.providers:
            if provider.guid is None:
                provider.guid = self._resolve(provider.name or "")
        dispatcher.configure(self.providers, self._default_callback, self._rundown_callback)
        return dispatcher

    def _report(self, error: BaseException, record: Any) -> None:
        if self._dispatcher is not None:
            self._dispatcher.report(error, record)

    def _resolve(self, name: str) -> Any:
        """A provider name (``openetw.provider_names``): the trace's manifests, the installed
        ones, then ETW's name hash, announced with a ``ProviderNameWarning``."""
        from openetw.manifest.store.lookup import resolve_provider

        resolved = resolve_provider(
            name, installed=self.manifests is None, manifests=lambda text: self._provider_names.get(text.lower())
        )
        if not (resolved.hashed and self._reads_evtx()):  # .evtx records are matched by the name they carry
            resolved.warn(stacklevel=4)
        return resolved.guid

    def _reads_evtx(self) -> bool:
        from openetw.consumer.formats import trace_format

        return any(trace_format(path).names_providers for path in self.files)

    def open(self) -> UserTrace:
        """Open the sources: build or load file indexes; start or attach to live sessions
        (``LiveSessionUnavailable`` when the trace service cannot be reached). Damage found in
        files is reported to the error handlers now (and counted in ``format_errors``)."""
        if self._opened:
            return self
        dispatcher = self._prepare()
        if self.files:
            sources: list[Source] = [open_source(path, index=self.use_index, index_dir=self.index_dir, index_beside=self.index_beside) for path in self.files]
        elif self.sessions:
            sources = [LiveSessionSource(name, socket=self.socket) for name in self.sessions]
        elif self.streams:
            sources = [item if isinstance(item, Source) else _stream_at(item) for item in self.streams]
        else:
            name = self.name or private_session_name()
            sources = [LiveSessionSource(name, own=True, providers=self.providers, socket=self.socket, flush_timer=self.flush_timer)]
        opened: list[Source] = []
        try:
            for source in sources:
                source.open()
                opened.append(source)
        except BaseException:
            for source in opened:
                source.close()
            raise
        self.sources = sources
        self.stats.sources = [source.statistics() for source in sources]
        for source in sources:
            for error in source.errors():
                dispatcher.report(error)
        self._opened = True
        return self

    def process(self) -> None:
        """Deliver every record of the opened sources, on this thread; returns at their end
        (or after ``stop()``). Re-raises the first callback error with ``stop_on_callback_error``."""
        self._run(None)

    def start(self) -> None:
        """``open()`` then ``process()``, then ``close()``."""
        self.open()
        try:
            self.process()
        finally:
            self.close()

    def stop(self) -> None:
        """End processing soon; safe from any thread and from a signal handler."""
        self._stop.set()
        if self._dispatcher is not None:
            self._dispatcher.stopping = True
        for source in self.sources:
            source.stop()

    def close(self) -> None:
        for source in self.sources:
            source.close()

    def _run(self, sink: Any) -> None:
        if not self._opened:
            raise TraceStateError("open() the trace before processing it")
        if self._processed:
            raise TraceStateError("a trace processes its sources once; make a new trace to read them again")
        self._processed = True
        dispatcher = self._prepare()
        dispatcher.sink = sink
        if self._stop.is_set():
            return  # stopped before it started
        indexes = [source.index for source in self.sources]
        if all(index is not None for index in indexes):
            run_indexed(indexes, dispatcher)  # type: ignore[arg-type]
            for source in self.sources:
                if source.index is not None and source.index.built:  # built on this pass: its damage is known now
                    for error in source.errors():
                        dispatcher.report(error)
        elif len(self.sources) == 1 and isinstance(self.sources[0], LiveSessionSource):
            self._consume_buffers(dispatcher, self.sources[0])
        else:
            self._stream(dispatcher)
        self.stats.sources = [source.statistics() for source in self.sources]
        if dispatcher.failure is not None:
            raise dispatcher.failure

    def _consume_buffers(self, dispatcher: Dispatcher, source: LiveSessionSource) -> None:
        """A live session's buffers, each processed whole on its columns (``BufferIndex``)."""
        end = self.window.end
        for index in source.buffer_indexes():
            for fields in index.errors:
                dispatcher.report(EtlFormatError(**fields, path=source.name))
            if dispatcher.stopping:
                dispatcher.stats.events_not_processed += len(index)
                break
            if not len(index):
                continue
            IndexedPlan([index], dispatcher).run()  # type: ignore[list-item]
            if self._after_batch is not None:
                self._after_batch()
            if end is not None and int(index.records["filetime"].max()) > end:
                self.stop()  # a live trace ends at its end time, as ProcessTrace does

    def _stream(self, dispatcher: Dispatcher) -> None:
        streams = [source.records() for source in self.sources]
        records: Iterable[Any] = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda r: r.filetime)
        deliver = dispatcher.deliver
        live = any(source.live for source in self.sources)
        end = self.window.end
        for record in records:
            if dispatcher.stopping:
                break
            if live and end is not None and record.filetime > end:
                self.stop()  # a live trace ends at its end time, as ProcessTrace does
            deliver(record)
        for source in self.sources:
            if source.index is None:
                for error in source.errors():
                    dispatcher.report(error)

    # -- statistics -----------------------------------------------------------------------------
    def query_stats(self) -> dict[str, Any]:
        """ControlTrace's statistics of the sources (for files: from their logfile headers and
        what reading them saw) and the trace's own counts (``TraceStatistics``)."""
        if any(source.live for source in self.sources):
            self.stats.sources = [source.statistics() for source in self.sources]
        out = self.stats.as_dict()
        for handoff in self._handoffs:
            out["events_handled"] += handoff.handed
            out["events_dropped"] += handoff.dropped
        return out

    # -- iterating ------------------------------------------------------------------------------
    def _start_handoff(self, queue_size: int, when_full: WhenFull | None) -> tuple[HandOff, threading.Thread]:
        self.open()
        dispatcher = self._prepare()
        live = any(source.live for source in self.sources)
        handoff = HandOff(queue_size, when_full or ("drop" if live else "block"), dispatcher.report, live=live)
        self._handoffs.append(handoff)
        context = dispatcher.context
        if len(self.sources) == 1 and isinstance(self.sources[0], LiveSessionSource) and self.sources[0].index is None:
            handoff.flushes_batches()  # _consume_buffers flushes after each batch of buffers
            self._after_batch = handoff.flush
        closed = handoff._closed.is_set
        put = handoff.offer

        def offer(record: Any) -> None:
            if closed():
                self.stop()
            # Event(record, context, context.primed_entry(record)), inlined
            put(Event(record, context, context._primed if record is context._primed_record else None))

        def work() -> None:
            error: BaseException | None = None
            try:
                self._run(offer)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer's thread
                error = exc
            finally:
                self.close()
                handoff.finish(error)

        thread = threading.Thread(target=work, name=f"openetw-trace-{self.name or 'files'}", daemon=True)
        thread.start()
        return handoff, thread

    def events(self, *, queue_size: int = 4096, when_full: WhenFull | None = None) -> Iterator[Event]:
        """Every accepted event (admitted by an enabled provider; every event when none is
        enabled) as an ``Event``, processed on a thread of the trace (callbacks run there too).

        A full queue makes the trace wait (``when_full="block"``, the default for files) or drop
        events, counted and reported (``"drop"``, the default for live sessions, which must keep
        up with their producers)."""
        handoff, thread = self._start_handoff(queue_size, when_full)
        try:
            yield from handoff
        finally:
            handoff.close()
            self.stop()
            thread.join()
            handoff.close()  # what the processing thread still put in while it was stopping

    async def events_async(self, *, queue_size: int = 4096, when_full: WhenFull | None = None) -> AsyncIterator[Event]:
        """``events()`` for ``async for``: the event loop never waits on the trace."""
        handoff, thread = self._start_handoff(queue_size, when_full)
        try:
            async for event in handoff.aiter():
                yield event
        finally:
            handoff.close()
            self.stop()
            thread.join()
            handoff.close()  # what the processing thread still put in while it was stopping

    # -- batches --------------------------------------------------------------------------------
    def indexes(self, *, built: bool = True) -> list[EtlIndex]:
        """The index of every file, each built now if it is not yet (``built=False``: as it
        is; one not built yet is built by its first pass, ``segments()`` or ``column_blocks()``)."""
        if not self.files:
            raise TraceStateError("batches and indexes need files")
        if not self._opened:
            if not self.use_index:
                raise TraceStateError("this trace was made with index=False")
            self.open()
        found = [source.index for source in self.sources]
        if any(index is None for index in found):
            raise TraceStateError("this trace was made with index=False")
        for index in found if built else ():
            index.ensure_built()  # type: ignore[union-attr]
        return found  # type: ignore[return-value]

    def batches(self, *, columns: Sequence[str] | None = None, batch_size: int = 65536) -> Iterator[Batch]:
        """The trace's events as numpy batches (``Batch``): the enabled providers' rules and the
        time window are applied on the index; callbacks are not called."""
        indexes = self.indexes()
        self._prepare()
        providers, window = self.providers, self.window

        def selected(number: int, segment: Any) -> np.ndarray:
            mask = admitted_rows(segment, providers)
            filetime = segment.records["filetime"]
            if window.start is not None:
                mask &= filetime >= window.start
            if window.end is not None:
                mask &= filetime <= window.end
            return mask

        skip: dict[str, Any] = {"start": window.start, "end": window.end}
        if providers and all(getattr(provider, "guid", None) is not None for provider in providers):
            skip["provider"] = [provider.guid for provider in providers]
        return iter_batches(indexes, selected, columns=columns, batch_size=batch_size, skip=skip)

    def __enter__(self) -> UserTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.close()

    def __repr__(self) -> str:
        what = ", ".join(self.files) if self.files else ", ".join(self.sessions) or "private real-time session"
        return f"<UserTrace {self.name or ''} [{what}] providers={len(self.providers)}>"


def _stream_at(servers: Any) -> Source:
    """The fleet's stream on ``servers`` (``nats://HOST:PORT[,...]``), read live from now on."""
    from openetw.fleet.source import StreamSource  # opening a source by its address: the read model's, once it has it

    return StreamSource(servers)
