"""Live sessions as a trace's source: a real-time consumer of the trace service.

``LiveSessionSource("Name")`` attaches to a running real-time session someone else started;
``LiveSessionSource("Name", own=True, providers=[...])`` starts a private real-time session
enabling the trace's providers (their level, keywords, enable properties and event id / process
/ executable filters go to the service, which applies them where events are written) and stops
it when the trace closes, as krabsetw's ``user_trace`` does.

Records come in the order the service hands over their buffers (each buffer in time order).
The session's logfile header event (EventTrace/Header), which a trace of a file delivers first,
is not delivered live, as on Windows; its facts are in ``header``/``context``. A trace
consumes the buffers whole (``buffer_indexes``): each batch is indexed and processed on its
columns, as an indexed file is. A batch holds the buffers already waiting, and, when it began
with a full buffer (a busy session), those arriving within ``gather`` seconds
(``GATHER_SECONDS``; 0 turns that off).
``stop()`` ends the record stream from any thread (or a signal handler): the consumer's
connection is shut down, and the reading thread sees the end of the stream.
"""

from __future__ import annotations

import itertools
import os
import struct
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from openetw.consumer._engine.buffer_index import BufferIndex
from openetw.consumer.errors import LiveSessionUnavailable
from openetw.consumer.provider import Provider
from openetw.consumer.sources import Source, records_from_buffer
from openetw.consumer.stats import SourceStatistics
from openetw.errors import OpenEtwError, ServiceError
from openetw.etl import layouts as L
from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord

if TYPE_CHECKING:
    from openetw.controller import RealtimeConsumer

__all__ = ["LiveSessionSource", "private_session_name"]

_counter = itertools.count(1)
BATCH_BYTES = 4 << 20  # buffers indexed together at most (a consumer catching up)
# A buffer handed over because it filled up says the session is busy: the next ones follow
# within milliseconds. Processing each alone costs several times the CPU per event of a batch
# (indexing and planning a batch have a fixed cost), so a batch that began with a full buffer
# waits up to GATHER_SECONDS for those behind it. A buffer the flush timer handed over partly
# filled (a quiet session) goes at once.
GATHER_SECONDS = 0.02
FULL_SHARE = 0.75
_USED_AT = L.WMI_BUFFER_HEADER.offset("SavedOffset")
_u32 = struct.Struct("<I").unpack_from


def private_session_name() -> str:
    """A session name no other trace of this process uses."""
    return f"openetw-trace-{os.getpid()}-{next(_counter)}"


def _enable_options(provider: Provider) -> dict[str, Any]:
    rule = provider.enable_rule
    return {"level": rule.level, "any": rule.match_any, "all": rule.match_all, "properties": rule.properties, "filters": rule.filters}


def _is_full(data: bytes) -> bool:
    """Whether a buffer was handed over full (rather than partly filled, by the flush timer)."""
    return len(data) >= L.BUFFER_HEADER_SIZE and _u32(data, _USED_AT)[0] >= FULL_SHARE * len(data)


class LiveSessionSource(Source):
    """A real-time session of the trace service (see the module doc)."""

    live = True

    def __init__(
        self, session_name: str, *, own: bool = False, providers: Sequence[Provider] = (), socket: str | os.PathLike[str] | None = None,
        flush_timer: int = 1, buffer_size_kb: int = 64,
    ) -> None:  # fmt: skip
        self.session_name = session_name
        self.name = session_name
        self.own = own
        self.providers = list(providers)
        self.socket = socket
        self.flush_timer = flush_timer
        self.buffer_size_kb = buffer_size_kb
        self._session: Any = None
        self._consumer: RealtimeConsumer | None = None
        self._final: dict[str, int] | None = None
        self._stopped = False
        self.gather = GATHER_SECONDS

    def open(self) -> None:
        try:
            from openetw.controller import RealtimeConsumer, Session
        except ImportError as error:  # an installation without the controller
            raise LiveSessionUnavailable(f"live sessions need the trace service and its controller: {error}") from error
        try:
            if self.own:
                enables = [(str(p.guid), _enable_options(p)) for p in self.providers if p.guid is not None]
                self._session = Session.start(
                    self.session_name, mode="realtime", flush_timer=self.flush_timer, buffer_size=self.buffer_size_kb,
                    providers=enables, socket=self.socket, end_with_connection=True,
                )  # fmt: skip
            self._consumer = RealtimeConsumer(self.session_name, socket=self.socket)
        except ServiceError as error:
            self._stop_session()
            if type(error) is ServiceError:  # the service itself could not be reached
                raise LiveSessionUnavailable(f"live sessions need the trace service: {error}") from error
            raise
        except OpenEtwError:
            self._stop_session()
            raise
        with EtlReader(bytes(self._consumer.header_buffer), strict=False) as reader:
            self.header, self.context = reader.header, reader.context

    def buffers(self) -> Iterator[tuple[int, bytes]]:
        """(number, data) of every buffer the service hands over (numbered from 1), as they come;
        ends when the session stops or ``stop()`` is called.

        The session's header buffer (number 0) is not among them: its logfile header event is
        what a log file holds and a real-time session does not deliver, as on Windows (the
        header's facts are in :attr:`header` and :attr:`context`)."""
        if self._consumer is None:
            self.open()
        consumer = self._consumer
        assert consumer is not None  # open() made it, or raised
        number = 0
        while True:
            try:
                data = consumer.next_buffer()
            except OSError:
                if self._stopped:
                    return  # stop() closed the link while this thread was about to read from it
                raise
            if data is None:
                return
            number += 1
            yield number, data

    def buffer_batches(self, limit: int = BATCH_BYTES, gather: float | None = None) -> Iterator[list[tuple[int, bytes]]]:
        """``buffers()`` in batches: each buffer with those that already wait behind it (up to
        about ``limit`` bytes), so that a consumer that fell behind catches up in large steps.
        A batch whose first buffer is full also waits up to ``gather`` seconds for the buffers
        that follow (see ``GATHER_SECONDS``)."""
        if gather is None:
            gather = self.gather
        batch: list[tuple[int, bytes]] = []
        size = 0
        deadline = 0.0
        for number, data in self.buffers():
            if not batch:
                deadline = time.monotonic() + gather if gather > 0 and _is_full(data) else 0.0
            batch.append((number, data))
            size += len(data)
            if size < limit and self._more_waiting(deadline):
                continue
            yield batch
            batch, size = [], 0
        if batch:
            yield batch

    def buffer_indexes(self, limit: int = BATCH_BYTES) -> Iterator[BufferIndex]:
        """``buffer_batches()`` indexed, ready for ``IndexedPlan``."""
        context = self.context
        assert context is not None
        for batch in self.buffer_batches(limit):
            yield BufferIndex(batch, context)

    def _more_waiting(self, deadline: float = 0.0) -> bool:
        """Whether the service already sent more (a buffer, or the end of the session), or does
        by ``deadline`` (``time.monotonic()``)."""
        if self._consumer is None:
            return False
        return self._consumer.buffer_waiting(max(0.0, deadline - time.monotonic()) if deadline else 0.0)

    def records(self) -> Iterator[EventRecord]:
        """Every record of each buffer in buffer order (no logfile header event: see :meth:`buffers`)."""
        context = self.context
        if context is None:
            self.open()
            context = self.context
        assert context is not None
        for number, data in self.buffers():
            yield from records_from_buffer(data, context, number)

    def stop(self) -> None:
        self._stopped = True
        consumer = self._consumer
        if consumer is not None:
            consumer.close()

    def close(self) -> None:
        self.stop()
        self._stop_session()

    def _stop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                self._final = session.stop()
            except OpenEtwError:
                pass

    def statistics(self) -> SourceStatistics:
        """The session's ControlTrace statistics (the final ones once it stopped)."""
        numbers = self._final
        if numbers is None and self._session is not None:
            try:
                numbers = self._session.query()
            except OpenEtwError:
                numbers = None
        stats = SourceStatistics()
        for name, value in (numbers or {}).items():
            if name in SourceStatistics.__slots__:
                setattr(stats, name, int(value))
        if self._consumer is not None:
            stats.records = self._consumer.buffers_received  # buffers taken (records are counted by the trace)
        return stats

    def __repr__(self) -> str:
        return f"<LiveSessionSource {self.session_name}{' (own)' if self.own else ''}>"
