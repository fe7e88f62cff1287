"""Streaming ETL reader: buffers, then records, in file order or in time order.

Memory stays bounded by a few buffers, not by the file. Damage never costs the good records
before it: in strict mode (the default) the reader yields every good record and then raises
``EtlFormatError`` naming the file offset, the buffer and the structure; with ``strict=False`` it
records the error, skips the rest of the damaged buffer, counts the skipped bytes and goes on.
"""

from __future__ import annotations

import heapq
import io
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from openetw.errors import CompressionError, EtlFormatError
from openetw.etl import layouts as L
from openetw.etl.clock import SYSTEM_TIME_CLOCK
from openetw.etl.logfile import LOGFILE_HEADER_HOOK_ID, LogfileHeader, parse_logfile_header
from openetw.etl.record import (
    RECORD_CLASSES,
    EventRecord,
    MessageRecord,
    RecordContext,
    UnknownRecord,
)

_NO_CONTEXT = RecordContext(SYSTEM_TIME_CLOCK)

# Largest buffer we accept. ETW's own limit is far lower (1 MiB for most sessions); anything
# bigger is damage, and refusing it bounds the memory a hostile file can make us take.
MAX_BUFFER_SIZE = 64 << 20

_u32 = struct.Struct("<I").unpack_from
_BUFFER_HEADER = L.WMI_BUFFER_HEADER
_BH_SIZE = L.BUFFER_HEADER_SIZE
_BH = _BUFFER_HEADER.index


@dataclass(frozen=True, slots=True)
class BufferInfo:
    """Where a buffer sits and what its WMI_BUFFER_HEADER says."""

    index: int
    file_offset: int
    buffer_size: int
    data_end: int  # WMI_BUFFER_HEADER.Offset: end of valid data, header included
    flags: int
    buffer_type: int
    cpu: int
    timestamp: int
    sequence_number: int
    logger_id: int
    saved_offset: int

    @property
    def compressed(self) -> bool:
        return bool(self.flags & L.BUFFER_FLAG_COMPRESSED)


@dataclass(slots=True)
class ReadStatistics:
    """What a read saw: counts, and what it had to skip (loss is data, never silent)."""

    buffers: int = 0
    compressed_buffers: int = 0
    records: int = 0
    unknown_records: int = 0
    skipped_bytes: int = 0
    buffers_with_events_lost_flag: int = 0
    buffers_with_buffer_lost_flag: int = 0
    time_order_violations: int = 0
    errors: list[EtlFormatError] = field(default_factory=list)


def _open(source: str | os.PathLike[str] | BinaryIO | bytes) -> tuple[BinaryIO, str | None, bool]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source)), None, True
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            return open(path, "rb"), path, True  # noqa: SIM115 - closed by EtlReader.close
        except OSError as exc:
            raise EtlFormatError(f"cannot open: {exc.strerror}", path=path) from exc
    return source, getattr(source, "name", None) if isinstance(getattr(source, "name", None), str) else None, False


class EtlReader:
    """Reads one ETL file.

    ``EtlReader(path_or_file)``; ``header`` is the logfile header, ``context`` the clock and
    pointer size records share; iterate for records in file order, or call
    ``records(time_order=True)``.
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO | bytes, *, strict: bool = True) -> None:
        self._file, self.path, self._owns_file = _open(source)
        self.strict = strict
        self._quiet = False
        self.stats = ReadStatistics()
        try:
            self._start = self._file.tell()
        except (OSError, AttributeError):
            self._start = 0
        self.header, self.context = self._read_logfile_header()

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        if self._owns_file:
            self._file.close()

    def __enter__(self) -> EtlReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, message: str, offset: int | None, buffer_index: int | None, structure: str) -> EtlFormatError:
        return EtlFormatError(message, offset=offset, buffer_index=buffer_index, structure=structure, path=self.path)

    def _fail(self, err: EtlFormatError, skipped: int = 0) -> None:
        """Strict: raise. Lenient: remember and count, then the caller goes on. Quiet: nothing."""
        if self._quiet:
            return
        self.stats.errors.append(err)
        self.stats.skipped_bytes += max(skipped, 0)
        if self.strict:
            raise err

    # -- buffers --------------------------------------------------------------------------
    def _read_buffer_at(self, offset: int, index: int) -> tuple[BufferInfo, bytes] | None:
        """One buffer: its info and its bytes (inflated when compressed; header included).

        ``None`` at the end of the file or when the buffer cannot be framed (the next one
        cannot be found either, so the read ends there).
        """
        f = self._file
        f.seek(offset)
        head = f.read(_BH_SIZE)
        if not head:
            return None
        if len(head) < _BH_SIZE:
            self._fail(self._error(f"file ends inside a buffer header ({len(head)} of {_BH_SIZE} bytes)", offset, index, _BUFFER_HEADER.name), len(head))
            return None
        info = _buffer_info(head, offset, index)
        size, data_end = info.buffer_size, info.data_end
        if size < _BH_SIZE or size > MAX_BUFFER_SIZE:
            self._fail(self._error(f"BufferSize {size:#x} is out of range", offset, index, "WMI_BUFFER_HEADER.BufferSize"))
            return None
        rest = f.read(size - _BH_SIZE)
        if not self._quiet:
            stats = self.stats
            stats.buffers += 1
            stats.buffers_with_events_lost_flag += bool(info.flags & L.BUFFER_FLAG_EVENTS_LOST)
            stats.buffers_with_buffer_lost_flag += bool(info.flags & L.BUFFER_FLAG_BUFFER_LOST)
        if info.flags & L.BUFFER_FLAG_COMPRESSED:
            if len(rest) < size - _BH_SIZE:
                self._fail(self._error("file ends inside a compressed buffer", offset, index, "compressed buffer"), len(head) + len(rest))
                return None
            if data_end < _BH_SIZE or data_end > MAX_BUFFER_SIZE:
                self._fail(self._error(f"Offset {data_end:#x} is out of range for a compressed buffer", offset + 0x30, index, "WMI_BUFFER_HEADER.Offset"), size)
                return info, head
            from openetw.etl.lzxpress import decompress

            try:
                inflated = decompress(rest, data_end - _BH_SIZE)
            except CompressionError as exc:
                where = offset + _BH_SIZE + (exc.offset or 0)
                self._fail(self._error(f"compressed data is damaged: {exc.message}", where, index, "LZXPRESS stream"), size)
                return info, head
            if not self._quiet:
                self.stats.compressed_buffers += 1
            return info, head + inflated
        data = head + rest
        if len(data) < size:
            # A truncated last buffer: keep the records that are whole, then report it.
            self._fail(self._error(f"file ends inside a buffer ({len(data)} of {size} bytes)", offset + len(data), index, "buffer"), 0)
            info = _buffer_info(head, offset, index, truncated_to=len(data))
        return info, data

    def buffers(self) -> Iterator[tuple[BufferInfo, bytes]]:
        """Every buffer in file order. Compressed buffers are packed; others all share one size."""
        offset, index = self._start, 0
        while True:
            got = self._read_buffer_at(offset, index)
            if got is None:
                return
            info, data = got
            yield info, data
            if info.buffer_size < _BH_SIZE:
                return
            offset += info.buffer_size
            index += 1

    # -- records --------------------------------------------------------------------------
    def _walk(self, info: BufferInfo, data: bytes) -> Iterator[EventRecord]:
        """The records of one buffer, following the 8-byte-aligned chain up to ``Offset``."""
        end = info.data_end
        if end > len(data):
            if not info.compressed and len(data) == info.buffer_size:
                self._fail(self._error(f"Offset {end:#x} is past the buffer end {len(data):#x}", info.file_offset + 0x30, info.index, "WMI_BUFFER_HEADER.Offset"))
            end = len(data)
        pos = _BH_SIZE
        cpu, ctx, bidx = info.cpu, self.context, info.index
        classes = RECORD_CLASSES
        u32 = _u32
        count = 0
        while pos + 4 <= end:
            marker = u32(data, pos)[0]
            if marker == 0xFFFFFFFF:
                break
            mflags = marker >> 24
            if mflags & 0xC0 == 0xC0:
                cls = classes.get((marker >> 16) & 0xFF)
                if cls is None:
                    yield self._unknown(data, pos, end, info, f"unknown header type {(marker >> 16) & 0xFF:#04x}")
                    break
                layout = cls.layout
                if pos + cls.header_size > end:
                    self._fail(self._error("record header runs past the buffer's data", self._abs(info, pos), bidx, layout.name), end - pos)  # type: ignore[union-attr]
                    break
                h = layout.unpack_from(data, pos)  # type: ignore[union-attr]
                size = h[cls.size_index]
                if size < cls.header_size or pos + size > end:
                    self._fail(self._error(f"record size {size:#x} is out of range", self._abs(info, pos), bidx, f"{layout.name}.Size"), end - pos)  # type: ignore[union-attr]
                    break
                count += 1
                yield cls(h, data, pos, size, cpu, ctx, bidx)
            elif mflags & 0xD0 == 0x90:
                if pos + L.MESSAGE_TRACE_HEADER.size > end:
                    self._fail(self._error("record header runs past the buffer's data", self._abs(info, pos), bidx, "MESSAGE_TRACE_HEADER"), end - pos)
                    break
                h = L.MESSAGE_TRACE_HEADER.unpack_from(data, pos)
                size = h[0]
                if size < L.MESSAGE_TRACE_HEADER.size or pos + size > end:
                    self._fail(self._error(f"record size {size:#x} is out of range", self._abs(info, pos), bidx, "MESSAGE_TRACE_HEADER.Size"), end - pos)
                    break
                count += 1
                yield MessageRecord(h, data, pos, size, cpu, ctx, bidx)
            else:
                yield self._unknown(data, pos, end, info, f"no record header at this position (marker {marker:#010x})")
                break
            pos += (size + 7) & ~7
        self.stats.records += count

    def _abs(self, info: BufferInfo, pos: int) -> int:
        """File offset of a position in a buffer (the buffer's own offset when it was inflated)."""
        return info.file_offset + (pos if not info.compressed else 0)

    def _unknown(self, data: bytes, pos: int, end: int, info: BufferInfo, reason: str) -> UnknownRecord:
        self.stats.unknown_records += 1
        self.stats.records += 1
        self.stats.skipped_bytes += end - pos
        return UnknownRecord(data, pos, end - pos, info.cpu, self.context, info.index, reason)

    def __iter__(self) -> Iterator[EventRecord]:
        return self.records()

    def records(self, *, time_order: bool = False) -> Iterator[EventRecord]:
        """Every record: in file order, or merged across buffers into time order."""
        if time_order:
            return self._records_in_time_order()
        return self._records_in_file_order()

    def _records_in_file_order(self) -> Iterator[EventRecord]:
        walk = self._walk
        for info, data in self.buffers():
            yield from walk(info, data)

    # -- time order -----------------------------------------------------------------------
    def _buffer_index(self) -> Iterator[tuple[int, int, int, bytes | None]]:
        """(first timestamp, buffer index, file offset, inflated data or None) per buffer.

        Read quietly: errors are reported when the buffer is read for real. Uncompressed buffers
        are read again when their turn comes, so only their first timestamp is kept.
        """
        offset, index, last_first = self._start, 0, 0
        while True:
            self._quiet = True
            try:
                got = self._read_buffer_at(offset, index)
            finally:
                self._quiet = False
            if got is None:
                # Let the real read meet (and report) whatever ended the index.
                yield last_first, index, offset, None
                return
            info, data = got
            first = _first_timestamp(data, info.data_end)
            if first is None:
                first = last_first  # no readable first record: keep the buffer near its file position
            last_first = first
            keep = data if info.compressed and len(data) > _BH_SIZE else None
            yield first, index, offset, keep
            if info.buffer_size < _BH_SIZE:
                return
            offset += info.buffer_size
            index += 1

    def _records_in_time_order(self, window: int | None = None) -> Iterator[EventRecord]:
        """A k-way merge of buffers: a buffer joins the merge before any record later than its first.

        Buffers are made known in file order through a look-ahead window (unbounded for
        uncompressed seekable files, where only first timestamps are kept; a few buffers per
        processor otherwise). A buffer that starts earlier than a record already given out defeats
        the window: it is counted in ``stats.time_order_violations``, never dropped.
        """
        keeps_data = self.header.compressed or not _seekable(self._file)
        lookahead = window or (max(8, 4 * max(self.header.number_of_processors, 1)) if keeps_data else 1 << 62)
        source = self._buffer_index()
        pending: list[tuple[int, int, int, bytes | None]] = []
        active: list[tuple[int, int, int, EventRecord, Iterator[EventRecord]]] = []
        exhausted = False
        last_emitted: int | None = None
        stats = self.stats
        seq = 0
        while True:
            while not exhausted and len(pending) < lookahead:
                entry = next(source, None)
                if entry is None:
                    exhausted = True
                    break
                if last_emitted is not None and entry[0] < last_emitted:
                    stats.time_order_violations += 1
                heapq.heappush(pending, entry)
            while pending and (not active or pending[0][0] <= active[0][0]):
                _, index, offset, data = heapq.heappop(pending)
                if data is None:
                    got = self._read_buffer_at(offset, index)
                    if got is None:
                        continue
                    info, data = got
                else:
                    info = _buffer_info(data, offset, index)
                    stats.buffers += 1
                    stats.compressed_buffers += 1
                it = self._walk(info, data)
                record = next(it, None)
                if record is not None:
                    seq += 1
                    heapq.heappush(active, (record.timestamp, index, seq, record, it))
            if not active:
                if exhausted and not pending:
                    return
                continue
            ts, index, _, record, it = active[0]
            last_emitted = ts
            yield record
            following = next(it, None)
            if following is None:
                heapq.heappop(active)
            else:
                seq += 1
                # An unknown record has no timestamp of its own: it keeps its place in the buffer.
                next_ts = following.timestamp if following.kind != "unknown" else ts
                heapq.heapreplace(active, (next_ts, index, seq, following, it))

    # -- the logfile header -----------------------------------------------------------------
    def _read_logfile_header(self) -> tuple[LogfileHeader, RecordContext]:
        self._quiet = True
        try:
            got = self._read_buffer_at(self._start, 0)
        finally:
            self._quiet = False
        if got is None:
            raise self._error("empty file: no header buffer", self._start, 0, _BUFFER_HEADER.name)
        info, data = got
        end = min(info.data_end if info.data_end >= _BH_SIZE else len(data), len(data))
        if end < _BH_SIZE + L.SYSTEM_TRACE_HEADER.size:
            raise self._error("header buffer holds no logfile header record", info.file_offset, 0, "SYSTEM_TRACE_HEADER")
        marker = _u32(data, _BH_SIZE)[0]
        htype = (marker >> 16) & 0xFF
        if marker >> 24 & 0xC0 != 0xC0 or htype not in (L.HEADER_TYPE_SYSTEM32, L.HEADER_TYPE_SYSTEM64):
            raise self._error(f"first record is not a logfile header (marker {marker:#010x})", info.file_offset + _BH_SIZE, 0, "SYSTEM_TRACE_HEADER")
        h = L.SYSTEM_TRACE_HEADER.unpack_from(data, _BH_SIZE)
        size, hook = h[L.SYSTEM_TRACE_HEADER.index("Size")], h[L.SYSTEM_TRACE_HEADER.index("HookId")]
        if hook != LOGFILE_HEADER_HOOK_ID or size < L.SYSTEM_TRACE_HEADER.size or _BH_SIZE + size > end:
            raise self._error(f"logfile header record has hook {hook:#06x} and size {size:#x}", info.file_offset + _BH_SIZE, 0, "SYSTEM_TRACE_HEADER")
        payload = data[_BH_SIZE + L.SYSTEM_TRACE_HEADER.size : _BH_SIZE + size]
        pointer_size = 4 if htype == L.HEADER_TYPE_SYSTEM32 else 8
        header = parse_logfile_header(payload, pointer_size, h[L.SYSTEM_TRACE_HEADER.index("SystemTime")], file_offset=info.file_offset + _BH_SIZE + L.SYSTEM_TRACE_HEADER.size)
        file_pointer_size = header.pointer_size if header.pointer_size in (4, 8) else pointer_size
        context = RecordContext(header.clock, file_pointer_size, self.path, header.logger_name)
        return header, context


def _buffer_info(head: bytes, offset: int, index: int, truncated_to: int | None = None) -> BufferInfo:
    h = _BUFFER_HEADER.unpack_from(head, 0)
    flags = h[_BH("BufferFlag")]
    cpu = h[_BH("ProcessorIndex")] if flags & L.BUFFER_FLAG_PROCESSOR_INDEX else h[_BH("ProcessorIndex")] & 0xFF
    size, data_end = h[_BH("BufferSize")], h[_BH("Offset")]
    if truncated_to is not None:
        size, data_end = truncated_to, min(data_end, truncated_to)
    return BufferInfo(
        index, offset, size, data_end, flags, h[_BH("BufferType")], cpu, h[_BH("TimeStamp")],
        h[_BH("SequenceNumber")], h[_BH("LoggerId")], h[_BH("SavedOffset")],
    )


def _first_timestamp(data: bytes, data_end: int) -> int | None:
    """The timestamp of a buffer's first record, or ``None`` when it has no readable one."""
    end = min(data_end, len(data))
    if _BH_SIZE + 4 > end:
        return None
    marker = _u32(data, _BH_SIZE)[0]
    if marker == 0xFFFFFFFF or marker >> 24 & 0xC0 != 0xC0:
        return None
    cls = RECORD_CLASSES.get((marker >> 16) & 0xFF)
    if cls is None or _BH_SIZE + cls.header_size > end:
        return None
    return cls(cls.layout.unpack_from(data, _BH_SIZE), data, _BH_SIZE, cls.header_size, 0, _NO_CONTEXT).timestamp  # type: ignore[union-attr]


def _seekable(f: BinaryIO) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def read_records(source: str | os.PathLike[str] | BinaryIO | bytes, *, time_order: bool = False, strict: bool = True) -> Iterator[EventRecord]:
    """Every record of one file (see ``EtlReader``)."""
    with EtlReader(source, strict=strict) as reader:
        yield from reader.records(time_order=time_order)


def merge_records(readers: Iterable[EtlReader]) -> Iterator[EventRecord]:
    """Records of several files in one time order (by wall-clock time, since clocks differ)."""
    streams = [reader.records(time_order=True) for reader in readers]
    return heapq.merge(*streams, key=lambda record: record.filetime)
