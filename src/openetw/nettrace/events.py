"""Event rows: the headers of events in ``EventBlock``s (and of metadata records), stacks, sequence points.

Header layouts by Trace object version:

* 1-3: ``EventSize, MetadataId, ThreadId (int32), TimeStamp, ActivityId, RelatedActivityId,
  PayloadSize`` (56 bytes), the payload, then ``StackSize`` and the stack inline;
* 4-5, uncompressed: ``EventSize, MetadataId (high bit: sorted), SequenceNumber, ThreadId,
  CaptureThreadId (int64), ProcessorNumber, StackId, TimeStamp, ActivityId, RelatedActivityId,
  PayloadSize`` then the payload, padded to 4 bytes;
* 4-5, header compression (block flag 1): a flags byte says which fields follow (varints,
  some as deltas from the previous header of the same block).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from openetw.nettrace.cursor import Cursor

__all__ = ["EventHeader", "iter_headers", "read_sequence_point", "read_stacks"]

NULL_ACTIVITY = bytes(16)
_V3 = struct.Struct("<iiiq16s16si")
_V4 = struct.Struct("<iIiqqiiq16s16si")
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


def _v3_rows(cur: Cursor) -> Iterator[EventHeader]:
    data = cur.data
    while cur.remaining > 0:
        at = cur.offset
        start = cur.pos
        cur.need(_V3.size, "event header")
        size, metadata_id, thread_id, timestamp, activity, related, payload_size = _V3.unpack_from(data, cur.pos)
        if not _V3.size - 4 <= size <= cur.remaining - 4:
            raise cur.error(f"event size {size}", at)
        if not 0 <= payload_size <= size - (_V3.size - 4):
            raise cur.error(f"payload size {payload_size} in an event of {size} bytes", at)
        header = EventHeader(at, metadata_id, 0, thread_id & 0xFFFFFFFF, -1, -1, 0, timestamp, activity, related)
        header.payload_start = start + _V3.size
        header.payload_size = payload_size
        end = start + 4 + size
        rest = Cursor(data, header.payload_start + payload_size, end, base=cur.base, block=cur.block, structure="event stack")
        if rest.remaining >= 4:
            stack_size = rest.i32("stack size")
            if 0 <= stack_size <= rest.remaining:
                header.inline_stack = rest.take(stack_size)
        cur.pos = end
        yield header


def _v4_rows(cur: Cursor, compressed: bool) -> Iterator[EventHeader]:
    data = cur.data
    previous = EventHeader()
    while cur.remaining > 0:
        at = cur.offset
        start = cur.pos
        if not compressed:
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
            continue
        header = previous.copy()
        header.offset = at
        flags = cur.u8("header flags")
        if flags & FLAG_METADATA_ID:
            header.metadata_id = cur.varuint("metadata id", 32)
        if flags & FLAG_CAPTURE_THREAD_AND_SEQUENCE:
            header.sequence = (header.sequence + cur.varuint("sequence number", 32) + 1) & 0xFFFFFFFF
            header.capture_thread_id = cur.varuint("capture thread id", 64)
            header.processor = cur.varuint("processor number", 32)
        elif header.metadata_id != 0:
            header.sequence = (header.sequence + 1) & 0xFFFFFFFF
        if flags & FLAG_THREAD_ID:
            header.thread_id = cur.varuint("thread id", 64)
        if flags & FLAG_STACK_ID:
            header.stack_id = cur.varuint("stack id", 32)
        header.timestamp = (header.timestamp + cur.varuint("timestamp delta", 64)) & 0xFFFFFFFFFFFFFFFF
        if flags & FLAG_ACTIVITY_ID:
            header.activity_id = cur.take(16, "activity id")
        if flags & FLAG_RELATED_ACTIVITY_ID:
            header.related_activity_id = cur.take(16, "related activity id")
        header.sorted = bool(flags & FLAG_SORTED)
        if flags & FLAG_DATA_LENGTH:
            header.payload_size = cur.varuint("payload size", 32)
        header.payload_start = cur.pos
        cur.skip(header.payload_size, "event payload")
        previous = header
        yield header


def iter_headers(cur: Cursor, version: int) -> Iterator[EventHeader]:
    """The rows of an event or metadata block's content (``cur`` spans exactly the content).

    From version 4 the content starts with a header (size, flags, timestamps); the rows follow.
    A row that does not fit raises ``NettraceFormatError`` after the rows before it."""
    if version < 4:
        yield from _v3_rows(cur)
        return
    cur.structure = "block header"
    at = cur.offset
    header_size = cur.i16("header size")
    if not 4 <= header_size <= cur.remaining + 2:
        raise cur.error(f"block header size {header_size}", at)
    flags = cur.i16("block flags")
    cur.skip(header_size - 4, "block header")
    cur.structure = "event header"
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
