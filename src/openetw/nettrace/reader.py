"""``NettraceReader``: an EventPipe trace's bytes in, its events (with metadata and stacks) out.

Pure: the caller hands the bytes (``bytes``, an ``mmap``, anything sliceable with ``len``);
nothing is opened here. Events come in time order: versions 1-3 wrote them sorted; from
version 4 they are sorted between sequence points (the writer guarantees every event between
two sequence points has a timestamp between theirs), a bounded number at a time.

Damage policy: the stream header and the Trace object must be readable (``NettraceFormatError``
from the constructor). After that every good event is kept: a row that does not parse costs
the rest of its block (the walk goes on with the next block, whose framing was checked), a
broken object framing or a truncated file ends the walk; each is one entry of ``losses``.
Events whose metadata never appeared and sequence-number gaps (events the runtime dropped)
are counted (``stats``) and reported in ``notices``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from openetw.errors import NettraceFormatError
from openetw.nettrace.container import Block, TraceInfo, iter_blocks, read_trace
from openetw.nettrace.cursor import Cursor
from openetw.nettrace.events import (
    EventHeader,
    columns_v3,
    has_compiled_walk,
    iter_headers,
    read_sequence_point,
    read_stacks,
    rows_v3,
    stack_addresses,
)
from openetw.nettrace.metadata import EventMetadata, read_metadata
from openetw.nettrace.v6 import (
    KIND_EVENT,
    KIND_LABELS,
    KIND_METADATA,
    KIND_REMOVE_THREAD,
    KIND_SEQUENCE_POINT,
    KIND_STACK,
    KIND_THREAD,
    Thread6,
    iter_blocks_v6,
    read_event_rows_v6,
    read_label_lists,
    read_metadata_block_v6,
    read_removed_threads,
    read_sequence_point_v6,
    read_threads,
    read_trace_v6,
)

__all__ = ["NettraceEvent", "NettraceReader", "NettraceStats"]

MAX_SORT_WINDOW = 1 << 18  # events held for sorting between sequence points, at most
MAX_METADATA = 1 << 20
MAX_CACHED_STACKS = 1 << 22


class NettraceEvent:
    """One event: its header, the metadata describing it, its payload and its stack.

    The stack is kept as the trace wrote it (``raw_stack``, whole pointers of ``pointer_size``
    bytes) and made a tuple of addresses only when ``stack`` is read."""

    __slots__ = ("header", "metadata", "payload", "_stack", "block", "raw_stack", "pointer_size")

    def __init__(
        self, header: EventHeader, metadata: EventMetadata, payload: bytes, stack: tuple[int, ...] | None = (), block: int = 0,
        raw_stack: bytes = b"", pointer_size: int = 8,
    ) -> None:  # fmt: skip
        self.header = header
        self.metadata = metadata
        self.payload = payload
        self._stack = stack
        self.block = block
        self.raw_stack = raw_stack
        self.pointer_size = pointer_size

    @property
    def stack(self) -> tuple[int, ...]:
        stack = self._stack
        if stack is None:
            stack = self._stack = stack_addresses(self.raw_stack, self.pointer_size)
        return stack

    @property
    def timestamp(self) -> int:
        return self.header.timestamp

    def __repr__(self) -> str:
        meta = self.metadata
        return f"<NettraceEvent {meta.provider_name}/{meta.event_name or meta.event_id} t={self.header.timestamp} tid={self.header.thread_id}>"


@dataclass(slots=True)
class NettraceStats:
    blocks: int = 0
    events: int = 0
    metadata: int = 0
    stacks: int = 0
    sequence_points: int = 0
    unknown_metadata: int = 0  # events whose metadata id was never defined (not kept)
    dropped: int = 0  # events the runtime reported dropped (sequence-number gaps)
    bytes_read: int = 0


class NettraceReader:
    """The events of one EventPipe trace (``.nettrace`` or ``.netperf``)."""

    def __init__(self, data: Any, path: str | None = None) -> None:
        self.data = data
        self.path = path
        try:
            self.info: TraceInfo = read_trace_v6(data) if _is_v6(data) else read_trace(data)
        except NettraceFormatError as exc:
            exc.path = path
            raise
        self.metadata: dict[int, EventMetadata] = {}
        self.stats = NettraceStats()
        self.losses: list[NettraceFormatError] = []
        self.notices: list[NettraceFormatError] = []
        self._stacks: dict[int, bytes] = {}
        self._sequences: dict[int, int] = {}
        self._stop_span = False

    @property
    def version(self) -> int:
        return self.info.version

    def _lose(self, exc: NettraceFormatError) -> None:
        exc.path = self.path
        self.losses.append(exc)

    def events(self) -> Iterator[NettraceEvent]:
        """Every event, in time order (``losses``/``notices`` are complete once it is exhausted)."""
        try:
            if self.info.version < 3:
                yield from self._legacy_events()
            elif self.info.version >= 6:
                yield from self._v6_events()
            else:
                yield from self._block_events()
        finally:
            self._finish()

    def _finish(self) -> None:
        if self.stats.unknown_metadata:
            message = f"{self.stats.unknown_metadata} events refer to metadata the trace never defined (not kept)"
            self.losses.append(NettraceFormatError(message, structure="metadata", path=self.path))
        if self.stats.dropped:
            self.notices.append(
                NettraceFormatError(f"the runtime dropped {self.stats.dropped} events (sequence-number gaps)", structure="event header", path=self.path)
            )
            self.stats.dropped = 0
        self.stats.unknown_metadata = 0

    # -- versions 1-3: metadata inline, stacks inline, events in order --------------------------
    def _legacy_events(self) -> Iterator[NettraceEvent]:
        info = self.info
        cur = Cursor(self.data, info.events_start, info.events_end, block=0, structure="event header")
        yield from self._inline_rows(cur, 0)
        self._legacy_end()

    def _legacy_end(self) -> None:
        info = self.info
        if info.events_end < len(self.data) and self.data[info.events_end] != 6:
            self._lose(NettraceFormatError("the events do not end at the Trace object's forward reference", offset=info.events_end, block=0, structure="Trace"))
        if info.events_end >= len(self.data):
            self._lose(NettraceFormatError("the stream ends inside the Trace object (truncated)", offset=len(self.data), block=0, structure="Trace"))

    def _rows(self, cur: Cursor, block: int) -> Iterator[NettraceEvent]:
        version = self.info.version
        if version < 4:
            yield from self._inline_rows(cur, block)
            return
        try:
            for header in iter_headers(cur, version):
                if header.metadata_id == 0:
                    self._learn(header, block)
                    continue
                event = self._event(header, block)
                if event is not None:
                    yield event
        except NettraceFormatError as exc:
            self._lose(exc)

    def _inline_rows(self, cur: Cursor, block: int) -> Iterator[NettraceEvent]:
        """``_rows`` for versions 1-3 (metadata and stacks inline), ``_event`` made in the loop:
        the largest traces are of these versions, and this runs once per event."""
        metadata, data, stats, pointer_size = self.metadata, self.data, self.stats, self.info.pointer_size
        try:
            for header in rows_v3(cur):
                metadata_id = header.metadata_id
                if metadata_id == 0:
                    self._learn(header, block)
                    continue
                meta = metadata.get(metadata_id)
                if meta is None:
                    stats.unknown_metadata += 1
                    continue
                start = header.payload_start
                payload = bytes(data[start : start + header.payload_size])
                stats.events += 1
                raw = header.inline_stack
                if raw:
                    whole = len(raw) - len(raw) % pointer_size
                    if whole:
                        yield NettraceEvent(header, meta, payload, None, block, raw if whole == len(raw) else raw[:whole], pointer_size)
                        continue
                yield NettraceEvent(header, meta, payload, (), block)
        except NettraceFormatError as exc:
            self._lose(exc)

    # -- versions 1-3 as columns (the compiled walk) -----------------------------------------
    @property
    def has_row_columns(self) -> bool:
        """Whether ``row_columns`` serves this trace (versions 1-3, the compiled walk built)."""
        return self.info.version < 4 and has_compiled_walk()

    def row_columns(self) -> Iterator[tuple[tuple[list[Any], ...], int]]:
        """``events`` before it becomes events, for versions 1-3: each run of rows as the compiled
        walk's columns (``EventHeader``'s positional fields) with its block index, metadata rows
        included. The caller learns metadata rows (``learn``), resolves the rest against
        ``metadata`` and counts them in ``stats``; an error it meets in a span is handed to
        ``stop_span``, which costs the rest of that span as the per-event walk would."""
        try:
            if self.info.version < 3:
                info = self.info
                yield from self._column_span(Cursor(self.data, info.events_start, info.events_end, block=0, structure="event header"), 0)
                self._legacy_end()
                return
            for block in self._counted_blocks(iter_blocks(self.data, self.info)):
                yield from self._column_span(self._cursor(block), block.index)
        finally:
            self._finish()

    def _column_span(self, cur: Cursor, block: int) -> Iterator[tuple[tuple[list[Any], ...], int]]:
        self._stop_span = False
        try:
            for columns in columns_v3(cur):
                yield columns, block
                if self._stop_span:
                    return
        except NettraceFormatError as exc:
            self._lose(exc)

    def stop_span(self, exc: NettraceFormatError) -> None:
        """``exc`` cost the rest of the span ``row_columns`` is in (a loss)."""
        self._lose(exc)
        self._stop_span = True

    def learn(self, header: EventHeader, block: int) -> None:
        """A metadata row: its record read and kept (``NettraceFormatError`` if it does not parse)."""
        self._learn(header, block)

    def _learn(self, header: EventHeader, block: int) -> None:
        cur = Cursor(self.data, header.payload_start, header.payload_start + header.payload_size, block=block, structure="metadata")
        meta = read_metadata(cur, self.info.version, header.offset)
        if len(self.metadata) >= MAX_METADATA and meta.metadata_id not in self.metadata:
            raise cur.error(f"more than {MAX_METADATA} metadata records")
        self.metadata[meta.metadata_id] = meta
        self.stats.metadata += 1

    def _event(self, header: EventHeader, block: int) -> NettraceEvent | None:
        meta = self.metadata.get(header.metadata_id)
        if meta is None:
            self.stats.unknown_metadata += 1
            return None
        start = header.payload_start
        payload = bytes(self.data[start : start + header.payload_size])
        pointer_size = self.info.pointer_size
        if self.info.version < 4:
            raw = header.inline_stack
        else:
            raw = self._stacks.get(header.stack_id, b"") if header.stack_id else b""
            self._sequence(header)
        self.stats.events += 1
        if not raw:
            return NettraceEvent(header, meta, payload, (), block)
        whole = len(raw) - len(raw) % pointer_size
        if whole != len(raw):
            raw = raw[:whole]
        return NettraceEvent(header, meta, payload, None if raw else (), block, raw, pointer_size)

    def _sequence(self, header: EventHeader) -> None:
        thread = header.capture_thread_id
        last = self._sequences.get(thread)
        if last is not None and header.sequence != 1:
            gap = (header.sequence - last - 1) & 0xFFFFFFFF
            if 0 < gap < 1 << 31:
                self.stats.dropped += gap
        self._sequences[thread] = header.sequence

    # -- versions 4-5: blocks -----------------------------------------------------------------
    def _counted_blocks(self, blocks: Iterator[Any]) -> Iterator[Any]:
        """``blocks`` in file order, each counted; a block that cannot be read ends the walk, its
        damage recorded (every event before it is kept)."""
        while True:
            try:
                block = next(blocks, None)
            except NettraceFormatError as exc:
                self._lose(exc)
                return
            if block is None:
                return
            self.stats.blocks += 1
            self.stats.bytes_read = block.end
            yield block

    def _block_events(self) -> Iterator[NettraceEvent]:
        window: list[NettraceEvent] = []
        for block in self._counted_blocks(iter_blocks(self.data, self.info)):
            if self.info.version < 4:
                yield from self._rows(self._cursor(block), block.index)
            elif block.kind == "EventBlock":
                window.extend(self._rows(self._cursor(block), block.index))
                if len(window) >= MAX_SORT_WINDOW:
                    yield from _sorted(window)
            elif block.kind == "MetadataBlock":
                for _ in self._rows(self._cursor(block), block.index):
                    pass  # a metadata block holds only metadata rows
            elif block.kind == "StackBlock":
                self._read_block(block, self._stack_block)
            elif block.kind == "SPBlock":
                yield from _sorted(window)
                self._read_block(block, self._sequence_point)
        yield from _sorted(window)

    # -- version 6: blocks, threads and label lists by index -----------------------------------
    def _v6_events(self) -> Iterator[NettraceEvent]:
        window: list[NettraceEvent] = []
        threads: dict[int, Thread6] = {}
        labels: dict[int, tuple[bytes, bytes]] = {}
        for block in self._counted_blocks(iter_blocks_v6(self.data, self.info)):
            cur = Cursor(self.data, block.start, block.end, block=block.index, structure=block.name)
            try:
                if block.kind == KIND_EVENT:
                    for header, label in read_event_rows_v6(cur):
                        _resolve(header, threads)
                        if label:
                            header.activity_id, header.related_activity_id = labels.get(label, (header.activity_id, header.related_activity_id))
                        event = self._event(header, block.index)
                        if event is not None:
                            window.append(event)
                    if len(window) >= MAX_SORT_WINDOW:
                        yield from _sorted(window)
                elif block.kind == KIND_METADATA:
                    for meta in read_metadata_block_v6(cur):
                        if len(self.metadata) >= MAX_METADATA and meta.metadata_id not in self.metadata:
                            raise cur.error(f"more than {MAX_METADATA} metadata records")
                        self.metadata[meta.metadata_id] = meta
                        self.stats.metadata += 1
                elif block.kind == KIND_STACK:
                    self._stack_block(cur)
                elif block.kind == KIND_SEQUENCE_POINT:
                    yield from _sorted(window)
                    self._sequence_point_v6(cur, threads, labels)
                elif block.kind == KIND_THREAD:
                    if len(threads) >= MAX_METADATA:
                        threads.clear()
                    read_threads(cur, threads)
                elif block.kind == KIND_REMOVE_THREAD:
                    for index, sequence in read_removed_threads(cur):
                        removed = threads.pop(index, None)
                        self._dropped_before(removed.os_thread_id if removed is not None else index, sequence)
                elif block.kind == KIND_LABELS:
                    if len(labels) >= MAX_CACHED_STACKS:
                        labels.clear()
                    read_label_lists(cur, labels)
            except NettraceFormatError as exc:
                self._lose(exc)
        yield from _sorted(window)

    def _sequence_point_v6(self, cur: Cursor, threads: dict[int, Thread6], labels: dict[int, tuple[bytes, bytes]]) -> None:
        self.stats.sequence_points += 1
        _, flags, sequences = read_sequence_point_v6(cur)
        for index, sequence in sequences.items():
            thread = threads.get(index)
            self._dropped_before(thread.os_thread_id if thread is not None and thread.os_thread_id >= 0 else index, sequence)
        self._stacks.clear()
        labels.clear()
        if flags & 1:
            threads.clear()
        if flags & 2:
            self.metadata.clear()

    def _dropped_before(self, thread: int, sequence: int) -> None:
        last = self._sequences.get(thread)
        if last is not None:
            gap = (sequence - last) & 0xFFFFFFFF
            if 0 < gap < 1 << 31:
                self.stats.dropped += gap
        self._sequences[thread] = sequence

    def _cursor(self, block: Block) -> Cursor:
        return Cursor(self.data, block.start, block.end, block=block.index, structure=block.kind)

    def _read_block(self, block: Block, read: Any) -> None:
        try:
            read(self._cursor(block))
        except NettraceFormatError as exc:
            self._lose(exc)

    def _stack_block(self, cur: Cursor) -> None:
        if len(self._stacks) >= MAX_CACHED_STACKS:
            self._stacks.clear()
        before = len(self._stacks)
        read_stacks(cur, self._stacks)
        self.stats.stacks += len(self._stacks) - before

    def _sequence_point(self, cur: Cursor) -> None:
        self.stats.sequence_points += 1
        self._stacks.clear()
        _, threads = read_sequence_point(cur)
        for thread, sequence in threads.items():
            last = self._sequences.get(thread)
            if last is not None:
                gap = (sequence - last) & 0xFFFFFFFF
                if 0 < gap < 1 << 31:
                    self.stats.dropped += gap
            self._sequences[thread] = sequence


def _is_v6(data: Any) -> bool:
    return len(data) >= 16 and bytes(data[:8]) == b"Nettrace" and bytes(data[8:12]) == b"\0\0\0\0"


def _resolve(header: EventHeader, threads: dict[int, Thread6]) -> None:
    """Thread indexes to OS thread ids (an index with no thread row stays as it is)."""
    thread = threads.get(header.thread_id)
    if thread is not None:
        if thread.os_process_id >= 0:
            header.process_id = thread.os_process_id & 0xFFFFFFFF
        if thread.os_thread_id >= 0:
            header.thread_id = thread.os_thread_id
    capture = threads.get(header.capture_thread_id)
    if capture is not None and capture.os_thread_id >= 0:
        header.capture_thread_id = capture.os_thread_id


def _sorted(window: list[NettraceEvent]) -> Iterator[NettraceEvent]:
    """The window's events by timestamp (stable: file order among equal times), emptying it."""
    if not window:
        return
    ordered = sorted(window, key=_timestamp)
    window.clear()
    yield from ordered


def _timestamp(event: NettraceEvent) -> int:
    return event.header.timestamp
