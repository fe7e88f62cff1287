"""Event rows: the headers of events in ``EventBlock``s (and of metadata records), stacks, sequence points.

Header layouts by Trace object version:

* 1-3: ``EventSize, MetadataId, ThreadId (int32), TimeStamp, ActivityId, RelatedActivityId,
  PayloadSize`` (56 bytes), the payload, then ``StackSize`` and the stack inline;
* 4-5, uncompressed: ``EventSize, MetadataId (high bit: sorted), SequenceNumber, ThreadId,
  CaptureThreadId (int64), ProcessorNumber, StackId, TimeStamp, ActivityId, RelatedActivityId,
  PayloadSize`` then the payload, padded to 4 bytes;
* 4-5, header compression (block flag 1): a flags byte says which fields follow (varints,
  some as deltas from the previous header of the same block).

On the native engine the rows of versions 1-5 are read by the compiled twin
(``_native/_nettrace.c walk``) as columns, many rows per call; the pure walks here stay the
reference, and name the error of the first row the compiled walk stops at.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from openetw._native import module as native_module
from openetw.nettrace.cursor import Cursor

__all__ = ["EventHeader", "columns_v3", "has_compiled_walk", "iter_headers", "rows_v3", "read_sequence_point", "read_stacks"]

NULL_ACTIVITY = bytes(16)
_V3 = struct.Struct("<iiiq16s16si")
_V4 = struct.Struct("<iIiqqiiq16s16si")
_I32 = struct.Struct("<i")
MAX_STACK_BYTES = 1 << 20
MAX_STACKS_PER_BLOCK = 1 << 22

FLAG_METADATA_ID = 1
FLAG_CAPTURE_THREAD_AND_SEQUENCE = 2
FLAG_THREAD_ID = 4
FLAG_STACK_ID = 8
FLAG_ACTIVITY_ID = 16
FLAG_RELATED_ACTIVITY_ID = 32
FLAG_SORTED = 64
FLAG_DATA_LENGTH = 128

# The modes of the compiled walk (``_native/_nettrace.c walk``): rows of versions 1-3, of 4-5, of 4-5 compressed.
WALK_V3 = 0
WALK_V4 = 1
WALK_V4_COMPRESSED = 2
WALK_CHUNK = 4096  # rows of versions 1-3 per call of the compiled walk (their events region is one span)

_NATIVE = native_module("_nettrace")


@dataclass(slots=True)
class EventHeader:
    """One event row's header, and where its payload (and, up to version 3, its stack) lie."""

    offset: int = 0  # file offset of the row
    metadata_id: int = 0
    sequence: int = 0
    thread_id: int = 0
    capture_thread_id: int = -1
    processor: int = -1
    stack_id: int = 0
    timestamp: int = 0
    activity_id: bytes = NULL_ACTIVITY
    related_activity_id: bytes = NULL_ACTIVITY
    sorted: bool = False
    payload_start: int = 0  # index into the data
    payload_size: int = 0
    inline_stack: bytes = b""  # versions 1-3
    process_id: int = -1  # version 6: the OS process of the event's thread (-1: the trace's)

    def copy(self) -> EventHeader:
        return EventHeader(
            self.offset, self.metadata_id, self.sequence, self.thread_id, self.capture_thread_id, self.processor, self.stack_id,
            self.timestamp, self.activity_id, self.related_activity_id, self.sorted, self.payload_start, self.payload_size,
        )  # fmt: skip


def rows_v3(cur: Cursor) -> Iterator[EventHeader]:
    """The rows of versions 1-3 (``iter_headers`` of those versions: no block header)."""
    if _NATIVE is not None:
        return _compiled_rows(cur, WALK_V3)
    return _rows_v3(cur)


def _compiled_rows(cur: Cursor, mode: int) -> Iterator[EventHeader]:
    """The rows as the compiled walk reads them, in columns; from the first row it stops at, the
    pure walk (which raises that row's error, or for compressed headers replays the block)."""
    data, end, base, walk = cur.data, cur.end, cur.base, _NATIVE.walk  # type: ignore[union-attr]
    start = pos = cur.pos
    limit = WALK_CHUNK if mode == WALK_V3 else 0
    done = 0
    while True:
        columns, pos, failed = walk(data, pos, end, base, mode, limit, NULL_ACTIVITY)
        done += len(columns[0])
        yield from map(EventHeader, *columns)
        cur.pos = pos
        if failed or pos >= end:
            break
    if not failed:
        return
    if mode == WALK_V3:
        yield from _rows_v3(cur)
    elif mode == WALK_V4:
        yield from _v4_rows(cur, False)
    else:
        cur.pos = start
        yield from islice(_compressed_rows(cur), done, None)


def has_compiled_walk() -> bool:
    """Whether the compiled walk runs here (native engine, ``_nettrace`` built)."""
    return _NATIVE is not None


def columns_v3(cur: Cursor) -> Iterator[tuple[list[Any], ...]]:
    """The rows of versions 1-3 as the compiled walk's columns (``EventHeader``'s positional
    fields in order), up to ``WALK_CHUNK`` rows at a time; ``cur.pos`` follows. The first row
    that does not parse raises the pure walk's ``NettraceFormatError`` after the rows before it."""
    data, end, base, walk = cur.data, cur.end, cur.base, _NATIVE.walk  # type: ignore[union-attr]
    pos = cur.pos
    while pos < end:
        columns, pos, failed = walk(data, pos, end, base, WALK_V3, WALK_CHUNK, NULL_ACTIVITY)
        cur.pos = pos
        if columns[0]:
            yield columns
        if failed:
            for _ in _rows_v3(cur):  # raises the row's error
                pass
            return


def _rows_v3(cur: Cursor) -> Iterator[EventHeader]:
    # One row per turn with locals only (this runs once per event of the largest traces);
    # ``cur.pos`` is kept current so an error names the row's offset as the Cursor reads would.
    data, end, base = cur.data, cur.end, cur.base
    unpack, fixed, stack_size_of = _V3.unpack_from, _V3.size, _I32.unpack_from
    pos = cur.pos
    while pos < end:
        if fixed > end - pos:
            cur.need(fixed, "event header")
        size, metadata_id, thread_id, timestamp, activity, related, payload_size = unpack(data, pos)
        if not fixed - 4 <= size <= end - pos - 4:
            raise cur.error(f"event size {size}", base + pos)
        if not 0 <= payload_size <= size - (fixed - 4):
            raise cur.error(f"payload size {payload_size} in an event of {size} bytes", base + pos)
        payload_start = pos + fixed
        header = EventHeader(base + pos, metadata_id, 0, thread_id & 0xFFFFFFFF, -1, -1, 0, timestamp, activity, related, False, payload_start, payload_size)
        stack_at = payload_start + payload_size
        pos += 4 + size
        if pos - stack_at >= 4:
            stack_size = stack_size_of(data, stack_at)[0]
            if 0 <= stack_size <= pos - stack_at - 4:
                header.inline_stack = bytes(data[stack_at + 4 : stack_at + 4 + stack_size])
        cur.pos = pos
        yield header


def _v4_rows(cur: Cursor, compressed: bool) -> Iterator[EventHeader]:
    if compressed:
        yield from _compressed_rows(cur)
        return
    data = cur.data
    while cur.remaining > 0:
        at = cur.offset
        start = cur.pos
        cur.need(_V4.size, "event header")
        (size, metadata_id, sequence, thread_id, capture_thread, processor, stack_id, timestamp,
         activity, related, payload_size) = _V4.unpack_from(data, cur.pos)  # fmt: skip
        if not _V4.size - 4 <= size <= cur.remaining - 4 or not 0 <= payload_size <= size - (_V4.size - 4):
            raise cur.error(f"event size {size}, payload size {payload_size}", at)
        header = EventHeader(
            at, metadata_id & 0x7FFFFFFF, sequence, thread_id, capture_thread, processor, stack_id, timestamp, activity, related,
            not metadata_id & 0x80000000, start + _V4.size, payload_size,
        )  # fmt: skip
        cur.pos = start + 4 + size
        if cur.remaining > 0:
            cur.pos = min(cur.end, cur.pos + (-cur.offset % 4))
        yield header


def _compressed_rows(cur: Cursor) -> Iterator[EventHeader]:
    """Rows with header compression: each field the flags name follows as a varint, the rest
    carry over from the previous row (the sequence number and timestamp as deltas).

    The fields live in locals and a one-byte varint (most of them) is read in line; longer
    ones, and every error, go through the Cursor with ``cur.pos`` brought up to date first."""
    data, end, base = cur.data, cur.end, cur.base
    varuint = cur.varuint
    metadata_id = sequence = thread_id = stack_id = timestamp = payload_size = 0
    capture_thread = processor = -1
    activity = related = NULL_ACTIVITY
    pos = cur.pos
    while pos < end:
        at = base + pos
        flags = data[pos]
        pos += 1
        if flags & FLAG_METADATA_ID:
            if pos < end and data[pos] < 0x80:
                metadata_id = data[pos]
                pos += 1
            else:
                cur.pos = pos
                metadata_id = varuint("metadata id", 32)
                pos = cur.pos
        if flags & FLAG_CAPTURE_THREAD_AND_SEQUENCE:
            if pos < end and data[pos] < 0x80:
                delta = data[pos]
                pos += 1
            else:
                cur.pos = pos
                delta = varuint("sequence number", 32)
                pos = cur.pos
            sequence = (sequence + delta + 1) & 0xFFFFFFFF
            cur.pos = pos
            capture_thread = varuint("capture thread id", 64)
            if cur.pos < end and data[cur.pos] < 0x80:
                processor = data[cur.pos]
                pos = cur.pos + 1
            else:
                processor = varuint("processor number", 32)
                pos = cur.pos
        elif metadata_id != 0:
            sequence = (sequence + 1) & 0xFFFFFFFF
        if flags & FLAG_THREAD_ID:
            cur.pos = pos
            thread_id = varuint("thread id", 64)
            pos = cur.pos
        if flags & FLAG_STACK_ID:
            if pos < end and data[pos] < 0x80:
                stack_id = data[pos]
                pos += 1
            else:
                cur.pos = pos
                stack_id = varuint("stack id", 32)
                pos = cur.pos
        if pos < end and data[pos] < 0x80:
            timestamp = (timestamp + data[pos]) & 0xFFFFFFFFFFFFFFFF
            pos += 1
        else:
            cur.pos = pos
            timestamp = (timestamp + varuint("timestamp delta", 64)) & 0xFFFFFFFFFFFFFFFF
            pos = cur.pos
        if flags & FLAG_ACTIVITY_ID:
            if end - pos < 16:
                cur.pos = pos
                cur.need(16, "activity id")
            activity = bytes(data[pos : pos + 16])
            pos += 16
        if flags & FLAG_RELATED_ACTIVITY_ID:
            if end - pos < 16:
                cur.pos = pos
                cur.need(16, "related activity id")
            related = bytes(data[pos : pos + 16])
            pos += 16
        if flags & FLAG_DATA_LENGTH:
            if pos < end and data[pos] < 0x80:
                payload_size = data[pos]
                pos += 1
            else:
                cur.pos = pos
                payload_size = varuint("payload size", 32)
                pos = cur.pos
        if payload_size > end - pos:
            cur.pos = pos
            cur.need(payload_size, "event payload")
        header = EventHeader(
            at, metadata_id, sequence, thread_id, capture_thread, processor, stack_id, timestamp, activity, related,
            bool(flags & FLAG_SORTED), pos, payload_size,
        )  # fmt: skip
        pos += payload_size
        cur.pos = pos
        yield header


def iter_headers(cur: Cursor, version: int) -> Iterator[EventHeader]:
    """The rows of an event or metadata block's content (``cur`` spans exactly the content).

    From version 4 the content starts with a header (size, flags, timestamps); the rows follow.
    A row that does not fit raises ``NettraceFormatError`` after the rows before it."""
    if version < 4:
        yield from rows_v3(cur)
        return
    cur.structure = "block header"
    at = cur.offset
    header_size = cur.i16("header size")
    if not 4 <= header_size <= cur.remaining + 2:
        raise cur.error(f"block header size {header_size}", at)
    flags = cur.i16("block flags")
    cur.skip(header_size - 4, "block header")
    cur.structure = "event header"
    if _NATIVE is not None:
        yield from _compiled_rows(cur, WALK_V4_COMPRESSED if flags & 1 else WALK_V4)
    else:
        yield from _v4_rows(cur, bool(flags & 1))


def read_stacks(cur: Cursor, stacks: dict[int, bytes]) -> None:
    """A ``StackBlock``: ``first id, count`` then ``count`` stacks of ``size, bytes``."""
    first = cur.i32("first stack id")
    count = cur.count("stack count", 4)
    if count > MAX_STACKS_PER_BLOCK:
        raise cur.error(f"{count} stacks in a block")
    for index in range(count):
        at = cur.offset
        size = cur.i32("stack size")
        if not 0 <= size <= min(cur.remaining, MAX_STACK_BYTES):
            raise cur.error(f"stack size {size}", at)
        stacks[(first + index) & 0xFFFFFFFF] = cur.take(size, "stack")


def read_sequence_point(cur: Cursor) -> tuple[int, dict[int, int]]:
    """An ``SPBlock``: its timestamp and each capture thread's lowest sequence number."""
    timestamp = cur.i64("sequence point timestamp")
    count = cur.count("thread count", 12)
    threads: dict[int, int] = {}
    for _ in range(count):
        thread = cur.i64("thread id")
        threads[thread] = cur.u32("sequence number")
    return timestamp, threads


def stack_addresses(raw: bytes, pointer_size: int) -> tuple[int, ...]:
    """A stack's instruction pointers (whole pointers; a trailing fragment is dropped)."""
    count = len(raw) // pointer_size
    code = "Q" if pointer_size == 8 else "I"
    return struct.unpack_from(f"<{count}{code}", raw) if count else ()


def payload_of(data: Any, header: EventHeader) -> bytes:
    return bytes(data[header.payload_start : header.payload_start + header.payload_size])
