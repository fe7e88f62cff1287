"""Iterating a trace: ``for event in trace.events()`` and ``async for``, with back-pressure.

The trace runs on its own processing thread and hands accepted events to the consumer through
a bounded queue (in chunks when reading files, so the hand-off costs little per event; one by
one from live sessions, so that no event waits for others). When the queue is full the
processing thread either waits (``when_full="block"``, the default, right for files) or drops
the events it cannot hand over (``"drop"``, for live sessions that must keep up). Every event
offered is either handed over (``events_handled``) or dropped (``events_dropped``): handled +
dropped = offered, exactly; drops are reported to the error handlers as ``EventsDropped``.
Leaving the loop early stops the trace; events already queued count as dropped.
"""

from __future__ import annotations

import asyncio
import queue
import threading
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
    """The bounded queue between the processing thread (``offer``) and the consumer."""

    def __init__(self, capacity: int, when_full: WhenFull, report: Callable[[BaseException, Any], None], *, live: bool = False) -> None:
        if capacity < 1:
            raise InvalidArgument(f"queue_size must be at least 1, not {capacity}")
        if when_full not in ("block", "drop"):
            raise InvalidArgument(f"when_full must be 'block' or 'drop', not {when_full!r}")
        # A live source may wait long for its next event: nothing waits in a half-full chunk then.
        self.chunk = 1 if live else max(1, min(256, capacity // 4))
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, capacity // self.chunk))
        self.block = when_full == "block"
        self._report = report
        self._pending: list[Any] = []
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self.handed = 0  # only the consumer's thread counts these
        self.dropped = 0
        self.notify: Callable[[], None] | None = None

    # -- the processing thread ----------------------------------------------------------------
    def offer(self, record: Any) -> None:
        pending = self._pending
        pending.append(record)
        if len(pending) >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        chunk, self._pending = self._pending, []
        if chunk and not self._put(chunk, self.block):
            self._drop(len(chunk))

    def _put(self, item: Any, block: bool) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, block=block, timeout=_POLL if block else None)
            except queue.Full:
                if not block:
                    return False
                continue
            if self.notify is not None:
                self.notify()
            return True
        return False

    def _drop(self, count: int) -> None:
        with self._lock:
            self.dropped += count

    def finish(self, error: BaseException | None = None) -> None:
        """The processing thread is done (``error``: why it stopped early)."""
        self._flush()
        if self.dropped:
            self._report(EventsDropped(f"{self.dropped} events were dropped: the consumer did not keep up", count=self.dropped), None)
        self._put((_END, error), True)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # -- the consumer -------------------------------------------------------------------------
    def close(self) -> None:
        """The consumer leaves: whatever is still queued counts as dropped."""
        self._closed.set()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, list):
                self._drop(len(item))

    def _is_end(self, item: Any) -> bool:
        if isinstance(item, tuple) and item and item[0] is _END:
            self._closed.set()
            if item[1] is not None:
                raise item[1]
            return True
        return False

    def __iter__(self) -> Iterator[Any]:
        left = 0
        try:
            while not self._closed.is_set():
                try:
                    item = self._queue.get(timeout=_POLL)
                except queue.Empty:
                    continue
                if self._is_end(item):
                    return
                left = len(item)
                for record in item:
                    left -= 1
                    self.handed += 1
                    yield record
        finally:
            if left:
                self._drop(left)

    async def aiter(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        self.notify = lambda: loop.call_soon_threadsafe(ready.set)
        left = 0
        try:
            while not self._closed.is_set():
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    ready.clear()
                    if self._queue.empty():
                        try:
                            await asyncio.wait_for(ready.wait(), _POLL)
                        except asyncio.TimeoutError:
                            pass
                    continue
                if self._is_end(item):
                    return
                left = len(item)
                for record in item:
                    left -= 1
                    self.handed += 1
                    yield record
        finally:
            self.notify = None
            if left:
                self._drop(left)
