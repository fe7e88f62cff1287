"""Iterating a trace: ``for event in trace.events()`` and ``async for``, with back-pressure.

The trace runs on its own processing thread and hands accepted events to the consumer through
a bounded queue, in chunks so that the hand-off costs little per event (a live session's
events are handed over at the latest when the batch of buffers they came in is processed, so
that no event waits for the next batch). When the queue is full the
processing thread either waits (``when_full="block"``, the default, right for files) or drops
the events it cannot hand over (``"drop"``, for live sessions that must keep up). Every event
offered is either handed over (``events_handled``) or dropped (``events_dropped``): handled +
dropped = offered, exactly; drops are reported to the error handlers as ``EventsDropped``.
Leaving the loop early stops the trace; events already queued count as dropped.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any, Literal

from openetw.consumer.errors import EventsDropped
from openetw.consumer.parser import Parser, Schema
from openetw.errors import InvalidArgument

__all__ = ["Event", "HandOff", "WhenFull"]

WhenFull = Literal["block", "drop"]
_END: Any = object()
_POLL = 0.05


class Event:
    """One event handed to an iterator: the record, and its schema and parser on demand."""

    __slots__ = ("record", "context", "_parser", "_entry")

    def __init__(self, record: Any, context: Any, entry: Any = None) -> None:
        self.record = record
        self.context = context
        self._parser: Parser | None = None
        self._entry = entry  # (schema, readers) when the trace already knew them

    @property
    def schema(self) -> Schema:
        return self.parser.schema

    @property
    def parser(self) -> Parser:
        if self._parser is None:
            entry = self._entry
            if entry is not None:
                self._parser = Parser.of(self.record, entry[0], entry[1], self.context)
            else:
                self._parser = Parser(Schema(self.record, self.context))
        return self._parser

    def parse(self, name: str, type: type | tuple[type, ...] | None = None) -> Any:  # noqa: A002 - krabsetw's name
        return self.parser.parse(name, type)

    def try_parse(self, name: str, default: Any = None, type: type | tuple[type, ...] | None = None) -> Any:  # noqa: A002
        return self.parser.try_parse(name, default, type)

    @property
    def properties(self) -> dict[str, Any]:
        return self.parser.as_dict()

    @property
    def event_name(self) -> str | None:
        return self.schema.event_name

    @property
    def provider_name(self) -> str | None:
        return self.schema.provider_name

    @property
    def provider_id(self) -> Any:
        return self.record.provider_id

    @property
    def id(self) -> int:
        return self.record.id  # type: ignore[no-any-return]

    @property
    def version(self) -> int:
        return self.record.version  # type: ignore[no-any-return]

    @property
    def opcode(self) -> int:
        return self.record.opcode  # type: ignore[no-any-return]

    @property
    def level(self) -> int:
        return self.record.level  # type: ignore[no-any-return]

    @property
    def pid(self) -> int:
        return self.record.pid  # type: ignore[no-any-return]

    @property
    def tid(self) -> int:
        return self.record.tid  # type: ignore[no-any-return]

    @property
    def filetime(self) -> int:
        return self.record.filetime  # type: ignore[no-any-return]

    @property
    def time(self) -> datetime:
        return self.record.time  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<Event {self.record!r}>"


class HandOff:
    """The bounded queue between the processing thread (``offer``) and the consumer.

    Events cross in chunks (one lock round per chunk, not per event); the bound is in events:
    at most ``capacity`` events wait. A chunk is handed over when it is full, and whenever the
    processing thread calls ``flush`` (at the end of each batch of live buffers, so no event
    waits for the next batch). When dropping, a chunk that does not fit whole puts in what
    fits; the rest is dropped, counted per event.
    """

    def __init__(self, capacity: int, when_full: WhenFull, report: Callable[[BaseException, Any], None], *, live: bool = False) -> None:
        if capacity < 1:
            raise InvalidArgument(f"queue_size must be at least 1, not {capacity}")
        if when_full not in ("block", "drop"):
            raise InvalidArgument(f"when_full must be 'block' or 'drop', not {when_full!r}")
        self.capacity = capacity
        # A live source that does not say where its batches end hands events over one by one:
        # nothing waits in a half-full chunk then. ``flushes_batches()`` lifts that.
        self.chunk = 1 if live else max(1, min(256, capacity // 4))
        self.block = when_full == "block"
        self._report = report
        self._pending: list[Any] = []
        self._chunks: deque[list[Any]] = deque()
        self._queued = 0  # events in ``_chunks``
        self._end: tuple[BaseException | None] | None = None
        self._ready = threading.Condition(threading.Lock())
        self._closed = threading.Event()
        self.handed = 0  # only the consumer's thread counts these
        self.dropped = 0
        self.notify: Callable[[], object] | None = None  # what it returns is ignored

    def flushes_batches(self) -> None:
        """The processing thread calls ``flush`` at the end of each batch: events may wait in
        chunks until then."""
        self.chunk = max(1, min(256, self.capacity // 4))

    # -- the processing thread ----------------------------------------------------------------
    def offer(self, record: Any) -> None:
        pending = self._pending
        pending.append(record)
        if len(pending) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        """Hand over what was offered so far."""
        chunk, self._pending = self._pending, []
        if chunk:
            self._put(chunk)

    def _put(self, chunk: list[Any]) -> None:
        capacity = self.capacity
        ready = self._ready
        with ready:
            while True:
                if self._closed.is_set():
                    self.dropped += len(chunk)
                    return
                room = capacity - self._queued
                if room >= len(chunk):
                    break
                if not self.block:
                    if room > 0:
                        self._chunks.append(chunk[:room])
                        self._queued += room
                    self.dropped += len(chunk) - max(room, 0)
                    if room > 0:
                        ready.notify()
                        if self.notify is not None:
                            self.notify()
                    return
                if room > 0 and self._queued == 0:
                    break  # a chunk larger than the queue: it goes in alone
                ready.wait(_POLL)
            self._chunks.append(chunk)
            self._queued += len(chunk)
            ready.notify()
        if self.notify is not None:
            self.notify()

    def finish(self, error: BaseException | None = None) -> None:
        """The processing thread is done (``error``: why it stopped early)."""
        self.flush()
        if self.dropped:
            self._report(EventsDropped(f"{self.dropped} events were dropped: the consumer did not keep up", count=self.dropped), None)
        with self._ready:
            self._end = (error,)
            self._ready.notify()
        if self.notify is not None:
            self.notify()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # -- the consumer -------------------------------------------------------------------------
    def close(self) -> None:
        """The consumer leaves: whatever is still queued counts as dropped."""
        with self._ready:
            self._closed.set()
            self.dropped += self._queued
            self._chunks.clear()
            self._queued = 0
            self._ready.notify_all()

    def _take(self, wait: bool) -> list[Any] | None:
        """The next chunk (``None``: none yet); raises ``StopIteration`` at the end."""
        ready = self._ready
        with ready:
            if not self._chunks and wait and self._end is None and not self._closed.is_set():
                ready.wait(_POLL)
            if self._chunks:
                chunk = self._chunks.popleft()
                self._queued -= len(chunk)
                ready.notify()  # a processing thread may wait for room
                return chunk
            if self._end is not None:
                self._closed.set()
                error = self._end[0]
                if error is not None:
                    raise error
                raise StopIteration
            if self._closed.is_set():
                raise StopIteration
            return None

    def _drop(self, count: int) -> None:
        with self._ready:
            self.dropped += count

    def __iter__(self) -> Iterator[Any]:
        left = 0
        try:
            while True:
                try:
                    chunk = self._take(True)
                except StopIteration:
                    return
                if chunk is None:
                    continue
                left = len(chunk)
                for record in chunk:
                    left -= 1
                    self.handed += 1
                    yield record
        finally:
            if left:
                self._drop(left)

    async def aiter(self) -> AsyncIterator[Any]:
        import asyncio  # (here: a synchronous reader never pays its import)

        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        self.notify = lambda: loop.call_soon_threadsafe(ready.set)
        left = 0
        try:
            while True:
                ready.clear()
                try:
                    chunk = self._take(False)
                except StopIteration:
                    return
                if chunk is None:
                    try:
                        await asyncio.wait_for(ready.wait(), _POLL)
                    except TimeoutError:
                        pass
                    continue
                left = len(chunk)
                for record in chunk:
                    left -= 1
                    self.handed += 1
                    yield record
        finally:
            self.notify = None
            if left:
                self._drop(left)
