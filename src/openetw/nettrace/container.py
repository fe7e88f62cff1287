"""The EventPipe container: the stream header, the Trace object, and the blocks that follow.

Two generations share this module (both documented in microsoft/perfview's
``src/TraceEvent/EventPipe/NetPerfFormat.md`` and ``NetTraceFormat_v5.md``):

* ``.netperf`` (object versions 1-3, .NET Core 2.x): the FastSerialization header
  ``!FastSerialization.1`` then a Trace object (``Microsoft.DotNet.Runtime.EventPipeFile`` in
  versions 1-2, whose events follow the Trace fields inline up to a forward reference; ``Trace``
  in version 3, followed by ``EventBlock`` objects);
* ``.nettrace`` (object versions 4-5, .NET Core 3 to .NET 8): the ``Nettrace`` magic, the same
  FastSerialization header, a Trace object, then ``EventBlock``, ``MetadataBlock``,
  ``StackBlock`` and ``SPBlock`` objects, ended by a NullReference tag.

Every object is a BeginObject tag, its type (a nested object: NullReference, version, minimum
reader version, name), its payload and an EndObject tag. Blocks carry an int32 size and pad to
a 4-byte file offset before their content. ``iter_blocks`` yields each block's content range,
never copying more than one block; a damaged object stops the walk with a
``NettraceFormatError`` (what came before it was already yielded).

Version 6 (the block format of .NET 9+) starts ``Nettrace`` followed by a zero word and a
major version: ``openetw.nettrace.v6`` reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openetw.etl.intypes import datetime_to_filetime
from openetw.nettrace.cursor import Cursor

__all__ = ["Block", "TraceInfo", "iter_blocks", "read_trace"]

NETTRACE_MAGIC = b"Nettrace"
SERIALIZATION_MAGIC = b"!FastSerialization.1"
STREAM_HEADER = len(SERIALIZATION_MAGIC).to_bytes(4, "little") + SERIALIZATION_MAGIC

TAG_NULL_REFERENCE = 1
TAG_BEGIN_OBJECT = 4
TAG_BEGIN_PRIVATE_OBJECT = 5
TAG_END_OBJECT = 6
_BEGIN_TAGS = (TAG_BEGIN_OBJECT, TAG_BEGIN_PRIVATE_OBJECT)

MAX_TYPE_NAME = 256
MAX_BLOCK_SIZE = 1 << 30  # a block larger than this is damage (the runtime writes ~100 KB blocks)

LEGACY_TRACE_TYPE = "Microsoft.DotNet.Runtime.EventPipeFile"
BLOCK_TYPES = ("EventBlock", "MetadataBlock", "StackBlock", "SPBlock")


@dataclass(slots=True)
class TraceInfo:
    """The Trace object: the file's version and the clock that converts its timestamps."""

    version: int  # the Trace object's version: 1-3 .netperf, 4-5 .nettrace
    sync_time_filetime: int  # FILETIME (UTC) of ``sync_qpc``
    sync_qpc: int
    qpc_frequency: int
    pointer_size: int = 8
    process_id: int = 0
    processors: int = 1
    sampling_rate: int = 0
    nettrace: bool = False
    events_start: int = 0  # versions 1-2: where the inline events begin ...
    events_end: int = 0  # ... and end (the forward reference's target)
    end: int = 0  # where the Trace object ends (the first block's BeginObject tag)
    sync_time: tuple[int, ...] = field(default_factory=tuple)  # SYSTEMTIME fields as written


@dataclass(frozen=True, slots=True)
class Block:
    """One block object: its type name and version, and where its content lies in the file."""

    index: int  # counting the Trace object as 0
    kind: str
    version: int
    offset: int  # the object's BeginObject tag
    start: int  # the first content byte (after the size and the alignment padding)
    end: int


def _expect_tag(cur: Cursor, tags: tuple[int, ...], what: str) -> int:
    at = cur.offset
    tag = cur.u8(what)
    if tag not in tags:
        raise cur.error(f"{what}: tag {tag} where {' or '.join(map(str, tags))} was expected", at)
    return tag


def _read_type(cur: Cursor) -> tuple[str, int]:
    """A type object (after the object's BeginObject tag): its name and version."""
    cur.structure = "type"
    _expect_tag(cur, _BEGIN_TAGS, "type object")
    _expect_tag(cur, (TAG_NULL_REFERENCE,), "type of a type")
    version = cur.i32("type version")
    cur.i32("minimum reader version")
    at = cur.offset
    size = cur.i32("type name length")
    if not 0 < size <= MAX_TYPE_NAME:
        raise cur.error(f"type name length {size}", at)
    name = cur.take(size, "type name").decode("utf-8", errors="replace")
    _expect_tag(cur, (TAG_END_OBJECT,), "end of type object")
    return name, version


def _sync_time(cur: Cursor) -> tuple[tuple[int, ...], int]:
    fields = tuple(cur.i16("SyncTimeUTC") for _ in range(8))
    year, month, _, day, hour, minute, second, millisecond = fields
    from datetime import UTC, datetime

    try:
        when = datetime(year, month, day, hour, minute, second, millisecond * 1000, tzinfo=UTC)
    except ValueError as exc:
        raise cur.error(f"SyncTimeUTC {fields} is not a date: {exc}") from None
    return fields, datetime_to_filetime(when)


def _forward_reference_target(data: Any, index: int) -> int | None:
    """Versions 1-2 end their events at a forward reference, resolved through the table the
    stream ends with: its last word locates a word that locates ``count, label[count]``."""
    size = len(data)
    if size < 8:
        return None
    tail = Cursor(data, size - 4, size)
    pointer = tail.u32()
    if not 0 <= pointer <= size - 4:
        return None
    table_at = Cursor(data, pointer, size).u32()
    if not 0 <= table_at <= size - 4:
        return None
    table = Cursor(data, table_at, size)
    count = table.i32()
    if not 0 <= index < count or table.remaining < 4 * count:
        return None
    table.skip(4 * index)
    target = table.u32()
    return target if 0 < target <= size else None


def read_trace(data: Any) -> TraceInfo:
    """The stream header and the Trace object (raises ``NettraceFormatError`` when damaged)."""
    cur = Cursor(data, structure="stream header")
    nettrace = bytes(data[:8]) == NETTRACE_MAGIC
    if nettrace:
        cur.skip(8)
    at = cur.offset
    if cur.take(len(STREAM_HEADER), "FastSerialization header") != STREAM_HEADER:
        raise cur.error("not an EventPipe trace: no '!FastSerialization.1' header", at)
    cur.block = 0
    _expect_tag(cur, _BEGIN_TAGS, "Trace object")
    name, version = _read_type(cur)
    cur.structure = "Trace"
    if name not in ("Trace", LEGACY_TRACE_TYPE):
        raise cur.error(f"the first object is a {name!r}, not the Trace")
    if not 1 <= version <= 5:
        raise cur.error(f"Trace object version {version} is not supported (1-5 are)")
    if (version >= 4) != nettrace:
        raise cur.error(f"Trace object version {version} {'with' if nettrace else 'without'} the Nettrace magic")
    forward = cur.i32("forward reference") if version < 3 else 0
    fields, filetime = _sync_time(cur)
    info = TraceInfo(version=version, sync_time_filetime=filetime, sync_qpc=0, qpc_frequency=0, nettrace=nettrace, sync_time=fields)
    info.sync_qpc = cur.i64("SyncTimeQPC")
    at = cur.offset
    info.qpc_frequency = cur.i64("QPCFrequency")
    if info.qpc_frequency <= 0:
        raise cur.error(f"QPC frequency {info.qpc_frequency}", at)
    if version >= 3:
        at = cur.offset
        info.pointer_size = cur.i32("PointerSize")
        if info.pointer_size not in (4, 8):
            raise cur.error(f"pointer size {info.pointer_size}", at)
        info.process_id = cur.i32("ProcessId") & 0xFFFFFFFF
        info.processors = cur.i32("NumberOfProcessors")
        info.sampling_rate = cur.i32("ExpectedCPUSamplingRate")
        _expect_tag(cur, (TAG_END_OBJECT,), "end of Trace object")
        info.end = cur.pos
        return info
    info.events_start = cur.pos
    target = _forward_reference_target(data, forward)
    info.events_end = target if target is not None and target >= cur.pos else len(data)
    info.end = info.events_end
    return info


def iter_blocks(data: Any, info: TraceInfo) -> Iterator[Block]:
    """Every block object after the Trace object, up to the NullReference that ends the stream.

    A stream that stops without it ends the walk with a ``NettraceFormatError`` (a truncated
    file); so does any object that does not follow the format."""
    if info.version < 3:
        return
    pos = info.end
    index = 0
    while True:
        index += 1
        cur = Cursor(data, pos, block=index, structure="object")
        if cur.remaining == 0:
            raise cur.error("the stream ends without its NullReference end tag (truncated)")
        tag = _expect_tag(cur, (*_BEGIN_TAGS, TAG_NULL_REFERENCE), "object")
        if tag == TAG_NULL_REFERENCE:
            return
        name, version = _read_type(cur)
        cur.structure = name if name in BLOCK_TYPES else "object"
        at = cur.offset
        size = cur.i32(f"{name} size")
        if not 0 <= size <= MAX_BLOCK_SIZE:
            raise cur.error(f"{name} size {size}", at)
        cur.align(4)
        start = cur.pos
        if size > cur.remaining and name in BLOCK_TYPES:
            # A cut file: the rows the block still has are read, then the walk ends here.
            yield Block(index, name, version, pos, start, cur.end)
        cur.skip(size, f"{name} content")
        _expect_tag(cur, (TAG_END_OBJECT,), f"end of {name}")
        if name in BLOCK_TYPES:
            yield Block(index, name, version, pos, start, start + size)
        pos = cur.pos
