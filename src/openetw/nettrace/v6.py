"""NetTrace version 6 (.NET 9 and later): a header, then blocks of ``uint24 size, uint8 kind``.

As microsoft/perfview's ``NetTraceFormat.md`` describes it: ``Nettrace``, a zero word, major and
minor versions, then blocks: Trace (1: sync time, tick frequency, pointer size, key/value
pairs), Event (2), Metadata (3: rows with varuint ids, UTF-8 names, a field list of its own and
optional metadata: opcode, keywords, level, version, provider GUID), SequencePoint (4), Stack
(5), Thread (6: thread index to OS thread and process ids), RemoveThread (7), LabelList (8:
activity ids among other labels), EndOfStream (0). Blocks of other kinds are skipped.

Events refer to threads and label lists by index; the reader resolves them here, so a
``NettraceEvent`` of version 6 looks like one of version 5 (OS thread id, activity ids), with
``EventHeader.process_id`` set from the thread's row.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from openetw.errors import NettraceFormatError
from openetw.nettrace.container import TraceInfo, _sync_time
from openetw.nettrace.cursor import Cursor
from openetw.nettrace.events import NULL_ACTIVITY, EventHeader
from openetw.nettrace.metadata import MAX_DEPTH, MAX_FIELDS, EventMetadata, Field, TypeCode

__all__ = ["Block6", "iter_blocks_v6", "read_event_rows_v6", "read_metadata_v6", "read_trace_v6"]

MAJOR = 6
KIND_END, KIND_TRACE, KIND_EVENT, KIND_METADATA, KIND_SEQUENCE_POINT, KIND_STACK, KIND_THREAD, KIND_REMOVE_THREAD, KIND_LABELS = range(9)
KIND_NAMES = {
    KIND_TRACE: "TraceBlock", KIND_EVENT: "EventBlock", KIND_METADATA: "MetadataBlock", KIND_SEQUENCE_POINT: "SequencePointBlock",
    KIND_STACK: "StackBlock", KIND_THREAD: "ThreadBlock", KIND_REMOVE_THREAD: "RemoveThreadBlock", KIND_LABELS: "LabelListBlock",
}  # fmt: skip

# Type codes new in version 6.
VARINT, VARUINT, FIXED_ARRAY, UTF8_CODE_UNIT, REL_LOC, DATA_LOC = 20, 21, 22, 23, 24, 25
_KNOWN_V6 = frozenset({1, *range(3, 15), 16, 17, 18, 19, VARINT, VARUINT, FIXED_ARRAY, UTF8_CODE_UNIT, REL_LOC, DATA_LOC})
_V6_UNCOMPRESSED = struct.Struct("<IIIQQIIQII")


@dataclass(frozen=True, slots=True)
class Block6:
    index: int
    kind: int
    offset: int  # the block header
    start: int
    end: int

    @property
    def name(self) -> str:
        return KIND_NAMES.get(self.kind, f"block kind {self.kind}")


def string(cur: Cursor, what: str = "string") -> str:
    size = cur.varuint(what, 32)
    cur.need(size, what)
    return cur.take(size, what).decode("utf-8", errors="replace")


def read_trace_v6(data: Any) -> TraceInfo:
    """The header and the Trace block of a version 6 stream."""
    cur = Cursor(data, 8, structure="stream header")
    if cur.u32("reserved") != 0:
        raise cur.error("not a version 6 header")
    at = cur.offset
    major = cur.u32("major version")
    cur.u32("minor version")
    if major != MAJOR:
        raise cur.error(f"NetTrace format version {major} is not supported (versions 1-{MAJOR} are)", at)
    cur.block, cur.structure = 0, "TraceBlock"
    word = cur.u32("block header")
    size, kind = word & 0xFFFFFF, word >> 24
    if kind != KIND_TRACE:
        raise cur.error(f"the first block is of kind {kind}, not the Trace block", cur.offset - 4)
    block = Cursor(data, cur.pos, cur.pos + size, block=0, structure="TraceBlock")
    block.need(size, "TraceBlock")
    fields, filetime = _sync_time(block)
    info = TraceInfo(version=MAJOR, sync_time_filetime=filetime, sync_qpc=block.i64("SyncTimeTicks"), qpc_frequency=0, nettrace=True, sync_time=fields)
    at = block.offset
    info.qpc_frequency = block.i64("TickFrequency")
    if info.qpc_frequency <= 0:
        raise block.error(f"tick frequency {info.qpc_frequency}", at)
    at = block.offset
    info.pointer_size = block.i32("PointerSize")
    if info.pointer_size not in (4, 8):
        raise block.error(f"pointer size {info.pointer_size}", at)
    for _ in range(block.count("key/value count", 2)):
        key, value = string(block, "key"), string(block, "value")
        if value.isdigit():
            if key == "ProcessId":
                info.process_id = int(value) & 0xFFFFFFFF
            elif key == "HardwareThreadCount":
                info.processors = int(value)
            elif key == "ExpectedCPUSamplingRate":
                info.sampling_rate = int(value)
    info.end = cur.pos + size
    return info


def iter_blocks_v6(data: Any, info: TraceInfo) -> Iterator[Block6]:
    """Every block after the Trace block, to the EndOfStream block (a cut stream ends with an
    error after the rows of its last, cut, block)."""
    pos, index = info.end, 0
    while True:
        index += 1
        cur = Cursor(data, pos, block=index, structure="block header")
        if cur.remaining == 0:
            raise cur.error("the stream ends without its EndOfStream block (truncated)")
        word = cur.u32("block header")
        size, kind = word & 0xFFFFFF, word >> 24
        if kind == KIND_END:
            return
        start = cur.pos
        if size > cur.remaining:
            yield Block6(index, kind, pos, start, cur.end)
            raise cur.error(f"a {KIND_NAMES.get(kind, 'block')} of {size} bytes, {cur.remaining} left (truncated)")
        yield Block6(index, kind, pos, start, start + size)
        pos = start + size


def _type(cur: Cursor, name: str, depth: int) -> Field:
    if depth > MAX_DEPTH:
        raise cur.error(f"types nested deeper than {MAX_DEPTH}")
    at = cur.offset
    code = cur.u8("type code")
    if code not in _KNOWN_V6:
        raise cur.error(f"field {name!r}: type code {code}", at)
    if code in (TypeCode.ARRAY, FIXED_ARRAY, REL_LOC, DATA_LOC):
        element = _type(cur, name, depth + 1)
        if code == FIXED_ARRAY:
            return Field(name, code, element=element, count=int.from_bytes(cur.take(2, "element count"), "little"))
        return Field(name, code, element=element)
    if code == TypeCode.OBJECT:
        return Field(name, code, members=_fields(cur, depth + 1))
    return Field(name, code)


def _fields(cur: Cursor, depth: int) -> tuple[Field, ...]:
    at = cur.offset
    count = int.from_bytes(cur.take(2, "field count"), "little")
    if count > MAX_FIELDS or count * 4 > cur.remaining:
        raise cur.error(f"field count {count}", at)
    found = []
    for _ in range(count):
        at = cur.offset
        size = int.from_bytes(cur.take(2, "field size"), "little")
        if size > cur.remaining:
            raise cur.error(f"field description of {size} bytes", at)
        field_cur = Cursor(cur.data, cur.pos, cur.pos + size, base=cur.base, block=cur.block, structure=cur.structure)
        name = string(field_cur, "field name")
        found.append(_type(field_cur, name, depth))
        cur.pos += size
    return tuple(found)


def read_metadata_v6(cur: Cursor) -> EventMetadata:
    """One metadata row's content (``cur`` spans exactly it)."""
    metadata_id = cur.varuint("metadata id", 32)
    provider = string(cur, "provider name")
    meta = EventMetadata(metadata_id, provider, cur.varuint("event id", 32) & 0xFFFF, string(cur, "event name"))
    try:
        meta.fields = _fields(cur, 0)
    except NettraceFormatError as exc:
        meta.fields, meta.problem = None, exc.message
        return meta
    if cur.remaining >= 2:
        size = int.from_bytes(cur.take(2, "optional metadata size"), "little")
        options = Cursor(cur.data, cur.pos, cur.pos + min(size, cur.remaining), base=cur.base, block=cur.block, structure="optional metadata")
        try:
            while options.remaining > 0:
                kind = options.u8("optional metadata kind")
                if kind == 1:
                    meta.opcode = options.u8("opcode")
                elif kind == 3:
                    meta.keywords = options.u64("keywords")
                elif kind in (4, 5):
                    string(options)
                elif kind == 6:
                    string(options, "key")
                    string(options, "value")
                elif kind == 7:
                    meta.provider_guid = uuid.UUID(bytes_le=options.take(16, "provider GUID"))
                elif kind == 8:
                    meta.level = options.u8("level")
                elif kind == 9:
                    meta.version = options.u8("version")
                else:
                    break  # a kind this reader does not know: its size is unknown, the rest is skipped
        except NettraceFormatError:
            pass  # optional: what was read is kept
    return meta


def read_metadata_block_v6(cur: Cursor) -> Iterator[EventMetadata]:
    header_size = int.from_bytes(cur.take(2, "header size"), "little")
    cur.skip(header_size, "metadata block header")
    while cur.remaining > 0:
        at = cur.offset
        size = int.from_bytes(cur.take(2, "metadata row size"), "little")
        if size > cur.remaining:
            raise cur.error(f"metadata row of {size} bytes", at)
        row = Cursor(cur.data, cur.pos, cur.pos + size, base=cur.base, block=cur.block, structure="metadata")
        cur.pos += size
        yield read_metadata_v6(row)


def read_event_rows_v6(cur: Cursor) -> Iterator[tuple[EventHeader, int]]:
    """The rows of an event block: each header, with the thread index in ``thread_id`` and the
    capture thread index in ``capture_thread_id``, and its label list id."""
    at = cur.offset
    header_size = cur.i16("header size")
    if not 4 <= header_size <= cur.remaining + 2:
        raise cur.error(f"block header size {header_size}", at)
    flags = cur.i16("block flags")
    cur.skip(header_size - 4, "block header")
    cur.structure = "event header"
    data = cur.data
    if not flags & 1:
        while cur.remaining > 0:
            at, start = cur.offset, cur.pos
            cur.need(_V6_UNCOMPRESSED.size, "event header")
            size, metadata_id, sequence, thread, capture, processor, stack, timestamp, labels, payload = _V6_UNCOMPRESSED.unpack_from(data, start)
            if not _V6_UNCOMPRESSED.size - 4 <= size <= cur.remaining - 4 or payload > size - (_V6_UNCOMPRESSED.size - 4):
                raise cur.error(f"event size {size}, payload size {payload}", at)
            header = EventHeader(at, metadata_id & 0x7FFFFFFF, sequence, thread, capture, processor, stack, timestamp)
            header.sorted, header.payload_start, header.payload_size = bool(metadata_id & 0x80000000), start + _V6_UNCOMPRESSED.size, payload
            cur.pos = start + 4 + size
            yield header, labels
        return
    previous, labels = EventHeader(), 0
    while cur.remaining > 0:
        header = previous.copy()
        header.offset = cur.offset
        bits = cur.u8("header flags")
        if bits & 1:
            header.metadata_id = cur.varuint("metadata id", 32)
        if bits & 2:
            header.sequence = (header.sequence + cur.varuint("sequence number", 32)) & 0xFFFFFFFF
            header.capture_thread_id = cur.varuint("capture thread index", 64)
            header.processor = cur.varuint("processor number", 32)
        header.sequence = (header.sequence + 1) & 0xFFFFFFFF
        if bits & 4:
            header.thread_id = cur.varuint("thread index", 64)
        if bits & 8:
            header.stack_id = cur.varuint("stack id", 32)
        header.timestamp = (header.timestamp + cur.varuint("timestamp delta", 64)) & 0xFFFFFFFFFFFFFFFF
        if bits & 16:
            labels = cur.varuint("label list id", 32)
        header.sorted = bool(bits & 64)
        if bits & 128:
            header.payload_size = cur.varuint("payload size", 32)
        header.payload_start = cur.pos
        cur.skip(header.payload_size, "event payload")
        previous = header.copy()  # the reader resolves the yielded header's thread indexes in place
        yield header, labels


@dataclass(slots=True)
class Thread6:
    os_thread_id: int = -1
    os_process_id: int = -1
    name: str = ""


def read_threads(cur: Cursor, threads: dict[int, Thread6]) -> None:
    while cur.remaining > 0:
        at = cur.offset
        size = int.from_bytes(cur.take(2, "thread row size"), "little")
        if size > cur.remaining:
            raise cur.error(f"thread row of {size} bytes", at)
        row = Cursor(cur.data, cur.pos, cur.pos + size, base=cur.base, block=cur.block, structure="thread row")
        cur.pos += size
        index = row.varuint("thread index", 64)
        thread = threads.setdefault(index, Thread6())
        while row.remaining > 0:
            kind = row.u8("thread info kind")  # a kind this reader does not know ends the row
            if kind == 1:
                thread.name = string(row, "thread name")
            elif kind == 2:
                thread.os_process_id = row.varuint("OS process id", 64)
            elif kind == 3:
                thread.os_thread_id = row.varuint("OS thread id", 64)
            elif kind == 4:
                string(row, "key")
                string(row, "value")
            else:
                break


def read_removed_threads(cur: Cursor) -> list[tuple[int, int]]:
    removed = []
    while cur.remaining > 0:
        removed.append((cur.varuint("thread index", 64), cur.varuint("sequence number", 32)))
    return removed


def read_label_lists(cur: Cursor, lists: dict[int, tuple[bytes, bytes]]) -> None:
    """Label lists: of their labels, the activity and related activity ids are kept."""
    first = cur.u32("first label list index")
    count = cur.u32("label list count")
    if count > cur.remaining:
        raise cur.error(f"{count} label lists in {cur.remaining} bytes")
    for index in range(count):
        activity = related = NULL_ACTIVITY
        while True:
            kind = cur.u8("label kind")
            code = kind & 0x7F
            if code == 1:
                activity = cur.take(16, "activity id")
            elif code == 2:
                related = cur.take(16, "related activity id")
            elif code == 3:
                cur.skip(16, "trace id")
            elif code == 4:
                cur.skip(8, "span id")
            elif code == 5:
                string(cur, "key")
                string(cur, "value")
            elif code == 6:
                string(cur, "key")
                cur.varuint("value", 64)
            elif code in (7, 9, 10):
                cur.skip(1, "label")
            elif code == 8:
                cur.skip(8, "keywords")
            else:
                raise cur.error(f"label kind {code}")
            if kind & 0x80:
                break
        lists[(first + index) & 0xFFFFFFFF] = (activity, related)


def read_sequence_point_v6(cur: Cursor) -> tuple[int, int, dict[int, int]]:
    timestamp = cur.u64("timestamp")
    flags = cur.u32("flags")
    count = cur.u32("thread count")
    if count > cur.remaining:
        raise cur.error(f"{count} threads in {cur.remaining} bytes")
    threads = {}
    for _ in range(count):
        threads[cur.varuint("thread index", 64)] = cur.varuint("sequence number", 32)
    return timestamp, flags, threads
