"""Streaming ETL reader: buffers, then records, in file order or in time order.

Memory stays bounded by a few buffers, not by the file. Damage never costs the good records
before it: in strict mode (the default) the reader yields every good record and then raises
``EtlFormatError`` naming the file offset, the buffer and the structure; with ``strict=False`` it
records the error, skips the rest of the damaged buffer, counts the skipped bytes and goes on.
"""

from __future__ import annotations

import dataclasses
import heapq
import io
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple, TypeVar

from openetw._native import module as native_module
from openetw.errors import CompressionError, EtlFormatError, InvalidArgument
from openetw.etl import framing as F
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

# The common case in one dict lookup: the marker key (typed flags and the header type) -> framing.
assert RECORD_CLASSES.keys() == F.HEADER_KINDS.keys()
_FAST_PATH = {
    F.typed_key(header_type): (RECORD_CLASSES[header_type], row.layout.unpack_from, row.header_size, row.size_index)
    for header_type, row in F.HEADER_KINDS.items()
}
_KEY_SHIFT, _FLAGS_SHIFT, _END_OF_DATA = F.MARKER_KEY_SHIFT, F.MARKER_FLAGS_SHIFT, F.END_OF_DATA
_TYPED_MASK, _MESSAGE_MASK, _MESSAGE_FLAGS = F.TYPED_FLAGS_MASK, F.MESSAGE_FLAGS_MASK, F.MESSAGE_FLAGS
_PAD, _ALIGN = F.RECORD_ALIGNMENT - 1, -F.RECORD_ALIGNMENT
_MESSAGE = F.MESSAGE_KIND

# The compiled twin of ``_walk``'s loop (None: the pure loop below runs); tests hold the two together.
_NATIVE = native_module("_read")
if _NATIVE is not None:
    _NATIVE.configure(EventRecord, dict(RECORD_CLASSES), MessageRecord)
    _STOP_MORE, _STOP_HEADER_PAST, _STOP_SIZE = _NATIVE.STOP_MORE, _NATIVE.STOP_HEADER_PAST, _NATIVE.STOP_SIZE
    _STOP_UNKNOWN_TYPE, _STOP_NO_HEADER = _NATIVE.STOP_UNKNOWN_TYPE, _NATIVE.STOP_NO_HEADER
_NATIVE_BATCH = 4096  # records built per call: memory stays bounded by a few buffers' records

# Largest buffer we accept. ETW's own limit is far lower (1 MiB for most sessions); anything
# bigger is damage, and refusing it bounds the memory a hostile file can make us take.
MAX_BUFFER_SIZE = 64 << 20
_READ_PIECE = 1 << 20
# Compressed buffers inflate to at most this many times the bytes read (real traces: 3-10 times),
# and at least INFLATION_FLOOR in all: a file of a few kilobytes declaring gigabytes of tiny
# records is refused before it is inflated, not after minutes of work.
MAX_INFLATION = 64
INFLATION_FLOOR = 16 << 20
_RESYNC_PIECE = 1 << 20  # a lenient read looks for the next compressed buffer this much at a time
_STREAM_SLACK = 4  # bytes an LZXPRESS stream may leave unread at its end
# Time order keeps the data of buffers it cannot read again (compressed ones; all of them from a
# stream that cannot seek) in a look-ahead window of at least a few buffers per processor and up to
# this many bytes. Quiet processors flush late: a buffer may start long before the ones around it
# (65 buffers earlier in a Windows 7 sample), so the window is generous, but bounded.
TIME_ORDER_WINDOW_BYTES = 16 << 20
_WINDOW_MIN_BUFFERS = (8, 64)  # 4 per processor, within these bounds

_u32 = struct.Struct("<I").unpack_from
_BUFFER_HEADER = L.WMI_BUFFER_HEADER
_BH_SIZE = L.BUFFER_HEADER_SIZE
_BH = _BUFFER_HEADER.index
_Entry = TypeVar("_Entry", bound=tuple[Any, ...])


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
            return open(path, "rb"), path, True  # closed by EtlReader.close
        except OSError as exc:
            raise EtlFormatError(f"cannot open: {exc.strerror}", path=path) from exc
    return source, getattr(source, "name", None) if isinstance(getattr(source, "name", None), str) else None, False


class _Frame(NamedTuple):
    """One buffer as read: what a reader reports about it waits for the buffer's turn."""

    info: BufferInfo | None  # None: no buffer could be framed here
    data: bytes  # header included; inflated when compressed; short when the file ends inside it
    errors: tuple[tuple[EtlFormatError, int], ...]  # (error, bytes skipped)
    next_offset: int | None  # where the next buffer starts; None: reading ends here


class EtlReader:
    """Reads one ETL file.

    ``EtlReader(path_or_file)``; ``header`` is the logfile header, ``context`` the clock and
    pointer size records share; iterate for records in file order, or call
    ``records(time_order=True)``. File order reads the source front to back without seeking
    back, so a pipe or socket works (once); time order on such a stream merges through a
    bounded window of buffers kept in memory. ``max_inflation``: how many times the bytes read
    compressed buffers may inflate to (default ``MAX_INFLATION``, at least ``INFLATION_FLOOR``).
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO | bytes, *, strict: bool = True, max_inflation: int | None = None) -> None:
        if max_inflation is not None and max_inflation < 1:
            raise InvalidArgument(f"max_inflation must be at least 1, not {max_inflation}")
        self._file, self.path, self._owns_file = _open(source)
        self.strict = strict
        self.max_inflation = max_inflation or MAX_INFLATION
        self._inflated = 0  # bytes the compressed buffers inflated to so far
        self.stats = ReadStatistics()
        try:
            self._start = self._file.tell()
        except (OSError, AttributeError, ValueError):
            self._start = 0
        self._position = self._start
        self._can_seek = _seekable(self._file)
        self._resync_size = 0
        self.header_compressed = False
        self._signatures: set[tuple[int, int]] = set()  # (type, logger) of sound compressed buffers
        self._after_inflated = -1  # where the last buffer that inflated ends, as its BufferSize says
        self._logfile_buffer_size = 0
        try:
            self.header, self.context = self._read_logfile_header()
        except EtlFormatError:
            self.close()
            raise

    @property
    def buffer_stride(self) -> int:
        """The size every buffer of an uncompressed file has: the logfile's BufferSize, when its
        header buffer has that size too (0: none; compressed buffers are packed). A buffer that
        says otherwise has a damaged BufferSize and is framed at this stride."""
        return self._resync_size

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
        """Strict: raise. Lenient: remember and count, then the caller goes on."""
        self.stats.errors.append(err)
        self.stats.skipped_bytes += max(skipped, 0)
        if self.strict:
            raise err

    def _report(self, errors: tuple[tuple[EtlFormatError, int], ...]) -> None:
        for err, skipped in errors:
            self._fail(err, skipped)

    # -- bytes ----------------------------------------------------------------------------
    def _read(self, n: int) -> bytes:
        """``n`` bytes, fewer only at the end of the source. Large reads go in pieces, so a
        damaged size never makes us allocate more than the source really holds."""
        f = self._file
        data = f.read(min(n, _READ_PIECE)) or b""
        if 0 < len(data) < n:
            pieces, got = [data], len(data)
            while got < n:
                piece = f.read(min(n - got, _READ_PIECE))
                if not piece:
                    break
                pieces.append(piece)
                got += len(piece)
            data = b"".join(pieces)
        self._position += len(data)
        return data

    def _seek_to(self, offset: int) -> None:
        if offset == self._position:
            return
        if self._can_seek:
            self._file.seek(offset)
            self._position = offset
        elif offset > self._position:
            while self._position < offset and self._read(min(offset - self._position, _READ_PIECE)):
                pass
        else:
            raise InvalidArgument("the source cannot seek: its records can be read only once, in file order")

    # -- buffers --------------------------------------------------------------------------
    def _read_buffer_at(self, offset: int, index: int) -> _Frame | None:
        """One buffer (``None`` at the end of the file)."""
        self._seek_to(offset)
        head = self._read(_BH_SIZE)
        if not head:
            return None
        if len(head) < _BH_SIZE:
            err = self._error(f"file ends inside a buffer header ({len(head)} of {_BH_SIZE} bytes)", offset, index, _BUFFER_HEADER.name)
            return _Frame(None, b"", ((err, len(head)),), None)
        info = _buffer_info(head, offset, index)
        size, data_end = info.buffer_size, info.data_end
        if size < _BH_SIZE or size > MAX_BUFFER_SIZE:
            err = self._error(f"BufferSize {size:#x} is out of range", offset, index, "WMI_BUFFER_HEADER.BufferSize")
            if self.header_compressed:
                return self._resynced(offset, err)
            step = self._resync_step(offset)
            return _Frame(None, b"", ((err, step or _BH_SIZE),), offset + step if step else None)
        if self.header_compressed and not info.compressed and size != self._logfile_buffer_size:
            # A compressed file's buffer written whole has the logfile's BufferSize: one that
            # says another size (a header misread where none starts) is damage.
            err = self._error(
                f"BufferSize {size:#x} of a buffer not compressed is not the logfile's BufferSize {self._logfile_buffer_size:#x}",
                offset, index, "WMI_BUFFER_HEADER.BufferSize",
            )  # fmt: skip
            return self._resynced(offset, err, None, info, head)
        stride = self._resync_size
        if stride and size != stride and not info.compressed:
            # An uncompressed file's buffers all have the logfile's BufferSize: a buffer that says
            # otherwise has a damaged field; it is framed at the file's stride, the buffers after it kept.
            err = self._error(f"BufferSize {size:#x} is not the logfile's BufferSize {stride:#x}", offset, index, "WMI_BUFFER_HEADER.BufferSize")
            info = dataclasses.replace(info, buffer_size=stride)
            size = stride
            damaged: tuple[tuple[EtlFormatError, int], ...] = ((err, 0),)
        else:
            damaged = ()
        rest = self._read(size - _BH_SIZE)
        if not info.flags & L.BUFFER_FLAG_COMPRESSED:
            # A short last buffer is kept: walking it yields the whole records, then reports the cut.
            return _Frame(info, head + rest, damaged, offset + size if len(rest) == size - _BH_SIZE else None)
        if len(rest) < size - _BH_SIZE:
            err = self._error("file ends inside a compressed buffer", offset, index, "compressed buffer")
            return self._resynced(offset, err, None, info, head) if not self.strict else _Frame(info, head, ((err, len(head) + len(rest)),), None)
        if data_end < _BH_SIZE or data_end > L.ETW_MAX_BUFFER_SIZE:
            err = self._error(
                f"Offset {data_end:#x} is out of range for a compressed buffer (at most ETW's {L.ETW_MAX_BUFFER_SIZE:#x})",
                offset + F.BUFFER_OFFSET_AT, index, "WMI_BUFFER_HEADER.Offset",
            )  # fmt: skip
            return self._resynced(offset, err, size, info, head, size_sound=True)
        allowed = max(INFLATION_FLOOR, self.max_inflation * (self._position - self._start))
        if self._inflated + data_end > allowed:
            # The work of a compressed file is what it inflates to: bounded before it is done.
            err = self._error(
                f"compressed buffers would inflate to {self._inflated + data_end:,} bytes from {self._position - self._start:,} read,"
                f" over the bound of {self.max_inflation} times what was read (at least {INFLATION_FLOOR >> 20} MiB):"
                " a decompression bomb, or a trace that needs EtlReader(max_inflation=...)",
                offset, index, "compressed buffer",
            )  # fmt: skip
            return _Frame(info, head, ((err, max(self._file_size() - offset, size) if self._can_seek else size),), None)
        self._inflated += data_end
        from openetw.etl.lzxpress import decompress

        try:
            inflated = decompress(rest, data_end - _BH_SIZE)
        except CompressionError as exc:
            where = offset + _BH_SIZE + (exc.offset or 0)
            err = self._error(f"compressed data is damaged: {exc.message}", where, index, "LZXPRESS stream")
            return self._resynced(offset, err, size, info, head)
        if len(self._signatures) < 16:
            self._signatures.add((info.buffer_type, info.logger_id))
        self._after_inflated = offset + size
        return _Frame(info, head + inflated, (), offset + size)

    def _resynced(
        self, offset: int, err: EtlFormatError, size: int | None = None, info: BufferInfo | None = None, head: bytes = b"", *, size_sound: bool = False,
    ) -> _Frame:  # fmt: skip
        """A compressed buffer that could not be read at ``offset``: lenient reading goes on at
        the next buffer header that frames a buffer which inflates, counting the bytes skipped to
        it. ``size``: the header's BufferSize, followed when another field was found wrong
        (``size_sound``), else tried first. (In an uncompressed file, a buffer flagged compressed
        is damage: reading goes on at the file's stride.)"""
        if not self.header_compressed and not self.strict and self._resync_step(offset):
            step = self._resync_step(offset)
            return _Frame(info, head, ((err, step),), offset + step)
        if self.strict or not self._can_seek or not self.header_compressed:
            return _Frame(info, head, ((err, size if size is not None else _BH_SIZE),), offset + size if size is not None else None)
        if size is not None and (size_sound or self._valid_compressed_at(offset + size)):
            found: int | None = offset + size
        else:
            # A stream may end up to 4 bytes before its buffer's end (a last flag word): a
            # BufferSize a few bytes too long still inflates, and the next buffer starts before it.
            found = self._next_compressed_header(offset - _STREAM_SLACK if offset == self._after_inflated else offset + 1)
        skipped = (found if found is not None else max(self._file_size(), offset + _BH_SIZE)) - offset
        return _Frame(info, head, ((err, skipped),), found)

    def _file_size(self) -> int:
        try:
            return os.fstat(self._file.fileno()).st_size
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            here = self._file.tell()
            end = self._file.seek(0, io.SEEK_END)
            self._file.seek(here)
            return end

    def _valid_compressed_at(self, offset: int) -> bool:
        """Whether a compressed buffer that inflates starts at ``offset`` (the file position is
        left anywhere: callers seek)."""
        self._seek_to(offset)
        head = self._read(_BH_SIZE)
        if len(head) < _BH_SIZE:
            return False
        info = _buffer_info(head, offset, 0)
        if not _plausible_compressed(info):
            return False
        rest = self._read(info.buffer_size - _BH_SIZE)
        if len(rest) < info.buffer_size - _BH_SIZE:
            return False
        from openetw.etl.lzxpress import decompress

        try:
            return _starts_with_a_record(decompress(rest, info.data_end - _BH_SIZE))
        except CompressionError:
            return False

    def _next_compressed_header(self, start: int) -> int | None:
        """The first offset from ``start`` on where a compressed buffer that inflates starts,
        searched a piece of the file at a time (candidates found by their header fields)."""
        at = start
        while True:
            self._seek_to(at)
            piece = self._read(_RESYNC_PIECE + _BH_SIZE)
            if len(piece) < _BH_SIZE:
                return None
            for candidate in _compressed_header_candidates(piece, self._signatures):
                if candidate >= _RESYNC_PIECE:
                    break
                if self._valid_compressed_at(at + candidate):
                    return at + candidate
            if len(piece) < _RESYNC_PIECE + _BH_SIZE:
                return None
            at += _RESYNC_PIECE

    def _resync_step(self, offset: int) -> int:
        """How far lenient reading skips past a buffer it cannot frame: to the next slot of an
        uncompressed file, whose buffers after the first all share one size. 0: it cannot."""
        size = self._resync_size
        if self.strict or not size:
            return 0
        first = self._first.info
        base = self._start + (first.buffer_size if first is not None else 0)
        if offset < base:
            return 0
        return base + ((offset - base) // size + 1) * size - offset

    def _account(self, frame: _Frame) -> None:
        info = frame.info
        if info is None:
            return
        stats = self.stats
        stats.buffers += 1
        stats.buffers_with_events_lost_flag += bool(info.flags & L.BUFFER_FLAG_EVENTS_LOST)
        stats.buffers_with_buffer_lost_flag += bool(info.flags & L.BUFFER_FLAG_BUFFER_LOST)
        stats.compressed_buffers += bool(info.flags & L.BUFFER_FLAG_COMPRESSED) and not frame.errors

    def _frames(self) -> Iterator[tuple[int, int, _Frame]]:
        """(index, file offset, frame) of every buffer, in file order; buffer 0 is kept from the start."""
        offset, index, frame = self._start, 0, self._first
        while True:
            yield index, offset, frame
            if frame.next_offset is None:
                return
            offset, index = frame.next_offset, index + 1
            got = self._read_buffer_at(offset, index)
            if got is None:
                return
            frame = got

    def buffers(self) -> Iterator[tuple[BufferInfo, bytes]]:
        """Every buffer in file order. Compressed buffers are packed; others all share one size.

        The last buffer comes short when the file ends inside it (``info.buffer_size`` is what
        its header says); walking its records reports the cut.
        """
        for _, _, frame in self._frames():
            self._account(frame)
            self._report(frame.errors)
            if frame.info is not None:
                yield frame.info, frame.data

    # -- records --------------------------------------------------------------------------
    def _walk(self, info: BufferInfo, data: bytes) -> Iterator[EventRecord]:
        """The records of one buffer, following the 8-byte-aligned chain up to ``Offset``.

        What is wrong with the buffer is reported after its good records. This is
        ``framing.walk`` made fast (one dict lookup per record in the common case, the header
        unpacked once into the record); a property test holds the two to the same results.
        """
        end, length = info.data_end, len(data)
        truncated = length < info.buffer_size and not info.compressed
        late = None
        if end > length:
            if not truncated and not info.compressed:
                late = self._error(
                    f"Offset {end:#x} is past the buffer end {length:#x}", info.file_offset + F.BUFFER_OFFSET_AT, info.index, "WMI_BUFFER_HEADER.Offset"
                )
            end = length
        elif end < _BH_SIZE and not info.compressed:
            late = self._error(f"Offset {end:#x} is inside the buffer header", info.file_offset + F.BUFFER_OFFSET_AT, info.index, "WMI_BUFFER_HEADER.Offset")
        pos = _BH_SIZE
        cpu, ctx, bidx = info.cpu, self.context, info.index
        fast = _FAST_PATH
        u32 = _u32
        count = 0
        problem: tuple[str, str] | None = None
        if _NATIVE is not None:
            # The same walk in C (openetw._native): records built without running Python, a batch at a time.
            walk = _NATIVE.walk
            while True:
                batch, pos, stop, marker, size, header_type = walk(data, pos, end, cpu, ctx, bidx, _NATIVE_BATCH)
                count += len(batch)
                yield from batch
                if stop != _STOP_MORE:
                    break
            if stop in (_STOP_HEADER_PAST, _STOP_SIZE):
                structure = _MESSAGE.structure if header_type < 0 else RECORD_CLASSES[header_type].layout.name  # type: ignore[union-attr]
                if stop == _STOP_HEADER_PAST:
                    problem = ("record header runs past the buffer's data", structure)
                else:
                    problem = (f"record size {size:#x} is out of range", f"{structure}.Size")
            elif stop == _STOP_UNKNOWN_TYPE:
                yield self._unknown(data, pos, end, info, f"unknown header type {header_type:#04x}")
            elif stop == _STOP_NO_HEADER:
                yield self._unknown(data, pos, end, info, f"no record header at this position (marker {marker:#010x})")
        else:
            key_shift, flags_shift, end_of_data, pad, align = _KEY_SHIFT, _FLAGS_SHIFT, _END_OF_DATA, _PAD, _ALIGN
            while pos + 4 <= end:
                marker = u32(data, pos)[0]
                entry = fast.get(marker >> key_shift)
                if entry is not None:
                    cls, unpack_from, header_size, size_index = entry
                    if pos + header_size > end:
                        problem = ("record header runs past the buffer's data", cls.layout.name)  # type: ignore[union-attr]
                        break
                    h = unpack_from(data, pos)
                    size = h[size_index]
                    if size < header_size or pos + size > end:
                        problem = (f"record size {size:#x} is out of range", f"{cls.layout.name}.Size")  # type: ignore[union-attr]
                        break
                    count += 1
                    yield cls(h, data, pos, size, cpu, ctx, bidx)
                    pos += (size + pad) & align
                    continue
                if marker == end_of_data:
                    break
                mflags = marker >> flags_shift
                if mflags & _TYPED_MASK == _TYPED_MASK:
                    known = RECORD_CLASSES.get(F.header_type_of(marker))
                    if known is None:
                        yield self._unknown(data, pos, end, info, f"unknown header type {F.header_type_of(marker):#04x}")
                        break
                    cls = known
                    # A known header type with uncommon marker flags: the same framing, the slow way.
                    layout = cls.layout
                    if pos + cls.header_size > end:
                        problem = ("record header runs past the buffer's data", layout.name)  # type: ignore[union-attr]
                        break
                    h = layout.unpack_from(data, pos)  # type: ignore[union-attr]
                    size = h[cls.size_index]
                    if size < cls.header_size or pos + size > end:
                        problem = (f"record size {size:#x} is out of range", f"{layout.name}.Size")  # type: ignore[union-attr]
                        break
                    count += 1
                    yield cls(h, data, pos, size, cpu, ctx, bidx)
                elif mflags & _MESSAGE_MASK == _MESSAGE_FLAGS:
                    if pos + _MESSAGE.header_size > end:
                        problem = ("record header runs past the buffer's data", _MESSAGE.structure)
                        break
                    h = _MESSAGE.layout.unpack_from(data, pos)
                    size = h[_MESSAGE.size_index]
                    if size < _MESSAGE.header_size or pos + size > end:
                        problem = (f"record size {size:#x} is out of range", f"{_MESSAGE.structure}.Size")
                        break
                    count += 1
                    yield MessageRecord(h, data, pos, size, cpu, ctx, bidx)
                else:
                    yield self._unknown(data, pos, end, info, f"no record header at this position (marker {marker:#010x})")
                    break
                pos += (size + pad) & align
        self.stats.records += count
        if problem is not None:
            message, structure = problem
            if truncated and end == length:
                message = f"file ends inside a record ({message})"
            self._fail(self._error(message, self._abs(info, pos), bidx, structure), end - pos)
        elif truncated:
            self._fail(self._error(f"file ends inside a buffer ({length} of {info.buffer_size} bytes)", info.file_offset + length, bidx, "buffer"))
        if late is not None:
            self._fail(late)

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
    def _buffer_index(self, keep_data: bool) -> Iterator[tuple[int, int, int, _Frame | None]]:
        """(first timestamp, buffer index, file offset, frame) per buffer, in file order.

        The frame is kept when the buffer cannot (or should not) be read again at its turn:
        compressed buffers, a source that cannot seek, buffer 0, a buffer that could not be
        framed. Otherwise only the first timestamp is kept and the buffer is read again later.
        """
        last_first = 0
        for index, offset, frame in self._frames():
            info = frame.info
            first = first_timestamp(frame.data, info.data_end) if info is not None else None
            if first is None:
                first = last_first  # no readable first record: keep the buffer near its file position
            last_first = first
            yield first, index, offset, frame if keep_data or index == 0 or info is None else None

    def _open_in_turn(self, index: int, offset: int, frame: _Frame | None) -> Iterator[EventRecord] | None:
        """A buffer's records when its turn in the merge comes (reading it again if it was not kept)."""
        if frame is None:
            frame = self._read_buffer_at(offset, index)
            if frame is None:
                return None
        self._account(frame)
        self._report(frame.errors)
        return self._walk(frame.info, frame.data) if frame.info is not None else None

    def _records_in_time_order(self, window: int | None = None) -> Iterator[EventRecord]:
        """A k-way merge of buffers: a buffer joins the merge before any record later than its first.

        Buffers are made known in file order through a look-ahead window (unbounded for
        uncompressed seekable files, where only first timestamps are kept; bounded by
        ``TIME_ORDER_WINDOW_BYTES`` of kept data otherwise, or by ``window`` buffers when given).
        A buffer that joins the merge later than a record already given out (it came after the
        window, or waited while the window was over its byte bound) is counted in
        ``stats.time_order_violations`` when it joins, never dropped.

        Strict reading that meets damage in buffer k still gives out every record of the buffers
        before k, in order, then raises.
        """
        keep_data = self.header.compressed or not self._can_seek
        low, high = _WINDOW_MIN_BUFFERS
        min_buffers = window or min(max(low, 4 * self.header.number_of_processors), high)
        budget = 0 if window else TIME_ORDER_WINDOW_BYTES
        kept = 0  # bytes of data held by pending and active buffers
        source = self._buffer_index(keep_data)
        pending: list[tuple[int, int, int, _Frame | None]] = []
        sizes: dict[int, int] = {}  # buffer index -> bytes of data an active buffer holds
        active: list[tuple[int, int, int, EventRecord, Iterator[EventRecord]]] = []
        exhausted = False
        latest = -(1 << 64)  # the latest timestamp given out so far (none yet: below any)
        failure: EtlFormatError | None = None
        failed_index = 1 << 62
        stats = self.stats
        seq = 0
        while True:
            # The window is bounded in bytes: a few huge buffers (compressed ones declaring
            # megabytes each) hold it full as surely as many small ones.
            while not exhausted and (not (pending or active) or (kept < budget if budget else len(pending) < min_buffers)):
                entry = next(source, None)
                if entry is None:
                    exhausted = True
                    break
                heapq.heappush(pending, entry)
                kept += len(entry[3].data) if entry[3] is not None else 0
            while pending and (not active or pending[0][0] <= active[0][0]):
                if budget and active and sum(sizes.values()) >= budget:
                    break  # over the bound: the active buffers are read out first, freeing their bytes
                first, index, offset, frame = heapq.heappop(pending)
                if first < latest:
                    stats.time_order_violations += 1  # its records come after later ones
                try:
                    it = self._open_in_turn(index, offset, frame)
                    record = next(it, None) if it is not None else None
                except EtlFormatError as err:
                    # Strict: finish the buffers before the damaged one, then raise.
                    if index < failed_index:
                        failure, failed_index = err, index
                    exhausted = True
                    pending, active = _before(pending, failed_index), _before(active, failed_index)
                    continue
                if record is not None and it is not None:  # (a record comes from an iterator)
                    seq += 1
                    heapq.heappush(active, (record.timestamp, index, seq, record, it))
                    sizes[index] = len(frame.data) if frame is not None else 0
                else:
                    kept -= len(frame.data) if frame is not None else 0
            if not active:
                if exhausted and not pending:
                    break
                continue
            ts, index, _, record, it = active[0]
            if ts > latest:
                latest = ts
            yield record
            try:
                following = next(it, None)
            except EtlFormatError as err:
                if index < failed_index:
                    failure, failed_index = err, index
                exhausted = True
                pending, active = _before(pending, failed_index), _before(active, failed_index)
                continue
            if following is None:
                heapq.heappop(active)
                kept -= sizes.pop(index, 0)
            else:
                seq += 1
                # An unknown record has no timestamp of its own: it keeps its place in the buffer.
                next_ts = following.timestamp if following.kind != "unknown" else ts
                heapq.heapreplace(active, (next_ts, index, seq, following, it))
        if failure is not None:
            raise failure

    # -- the logfile header -----------------------------------------------------------------
    def _read_logfile_header(self) -> tuple[LogfileHeader, RecordContext]:
        frame = self._read_buffer_at(self._start, 0)
        if frame is None:
            raise self._error("empty file: no header buffer", self._start, 0, _BUFFER_HEADER.name)
        if frame.errors:
            err = frame.errors[0][0]
            raise self._error(f"not a readable ETL file: {err.message}", err.offset, 0, err.structure or _BUFFER_HEADER.name)
        self._first = frame
        info, data = frame.info, frame.data
        assert info is not None
        end = min(info.data_end if info.data_end >= _BH_SIZE else len(data), len(data))
        if end < _BH_SIZE + L.SYSTEM_TRACE_HEADER.size:
            raise self._error("header buffer holds no logfile header record", info.file_offset, 0, "SYSTEM_TRACE_HEADER")
        marker = _u32(data, _BH_SIZE)[0]
        row = F.kind_of_marker(marker)
        if row is None or row.kind != "system":
            raise self._error(f"first record is not a logfile header (marker {marker:#010x})", info.file_offset + _BH_SIZE, 0, "SYSTEM_TRACE_HEADER")
        h = L.SYSTEM_TRACE_HEADER.unpack_from(data, _BH_SIZE)
        size, hook = h[L.SYSTEM_TRACE_HEADER.index("Size")], h[L.SYSTEM_TRACE_HEADER.index("HookId")]
        if hook != LOGFILE_HEADER_HOOK_ID or size < L.SYSTEM_TRACE_HEADER.size or _BH_SIZE + size > end:
            raise self._error(f"logfile header record has hook {hook:#06x} and size {size:#x}", info.file_offset + _BH_SIZE, 0, "SYSTEM_TRACE_HEADER")
        payload = data[_BH_SIZE + L.SYSTEM_TRACE_HEADER.size : _BH_SIZE + size]
        pointer_size = row.pointer_size
        header = parse_logfile_header(
            payload, pointer_size, h[L.SYSTEM_TRACE_HEADER.index("SystemTime")],
            file_offset=info.file_offset + _BH_SIZE + L.SYSTEM_TRACE_HEADER.size,
        )
        file_pointer_size = header.pointer_size if header.pointer_size in (4, 8) else pointer_size
        context = RecordContext(header.clock, file_pointer_size, self.path, header.logger_name)
        self.header_compressed = header.compressed
        self._logfile_buffer_size = header.buffer_size
        if not header.compressed and _BH_SIZE < header.buffer_size <= MAX_BUFFER_SIZE and info.buffer_size == header.buffer_size:
            self._resync_size = header.buffer_size
        return header, context


def _buffer_info(head: bytes, offset: int, index: int) -> BufferInfo:
    h = _BUFFER_HEADER.unpack_from(head, 0)
    flags = h[_BH("BufferFlag")]
    cpu = h[_BH("ProcessorIndex")] if flags & L.BUFFER_FLAG_PROCESSOR_INDEX else h[_BH("ProcessorIndex")] & 0xFF
    return BufferInfo(
        index, offset, h[_BH("BufferSize")], h[_BH("Offset")], flags, h[_BH("BufferType")], cpu, h[_BH("TimeStamp")],
        h[_BH("SequenceNumber")], h[_BH("LoggerId")], h[_BH("SavedOffset")],
    )


def _starts_with_a_record(inflated: bytes) -> bool:
    """Whether a buffer's inflated data (after its header) starts as a buffer's data does: with a
    record marker or the end of its data."""
    if len(inflated) < 4:
        return True
    marker = _u32(inflated, 0)[0]
    return marker == F.END_OF_DATA or F.kind_of_marker(marker) is not None


def _plausible_compressed(info: BufferInfo) -> bool:
    return bool(info.flags & L.BUFFER_FLAG_COMPRESSED) and _BH_SIZE < info.buffer_size <= MAX_BUFFER_SIZE and _BH_SIZE <= info.data_end <= L.ETW_MAX_BUFFER_SIZE


_FLAG_AT, _OFFSET_AT, _TYPE_AT = L.WMI_BUFFER_HEADER.offset("BufferFlag"), L.WMI_BUFFER_HEADER.offset("Offset"), L.WMI_BUFFER_HEADER.offset("BufferType")
_LOGGER_AT = L.WMI_BUFFER_HEADER.offset("LoggerId")


def _compressed_header_candidates(piece: bytes, signatures: set[tuple[int, int]]) -> list[int]:
    """Positions in ``piece`` where a compressed buffer's header may start: the compressed flag
    set, sizes in range, and the type and logger of a sound buffer of the file (when one was
    read; else a small buffer type)."""
    import numpy as np

    count = len(piece) - _BH_SIZE + 1
    if count <= 0:
        return []
    u8 = np.frombuffer(piece, dtype=np.uint8)

    def u16(at: int) -> np.ndarray:
        return u8[at : at + count].astype(np.uint32) | u8[at + 1 : at + 1 + count].astype(np.uint32) << 8

    def u32(at: int, where: np.ndarray) -> np.ndarray:
        value: np.ndarray = u16(at)[where] | u16(at + 2)[where] << 16
        return value

    flagged = (u8[_FLAG_AT : _FLAG_AT + count] & L.BUFFER_FLAG_COMPRESSED) != 0
    if signatures:
        kind, logger = u16(_TYPE_AT), u16(_LOGGER_AT)
        known = np.zeros(count, dtype=bool)
        for want_type, want_logger in signatures:
            known |= (kind == want_type) & (logger == want_logger)
        flagged &= known
    else:
        flagged &= u8[_TYPE_AT + 1 : _TYPE_AT + 1 + count] == 0
    positions = np.flatnonzero(flagged)
    if not len(positions):
        return []
    size, end = u32(0, positions), u32(_OFFSET_AT, positions)
    keep = (size > _BH_SIZE) & (size <= MAX_BUFFER_SIZE) & (end >= _BH_SIZE) & (end <= L.ETW_MAX_BUFFER_SIZE)
    return [int(p) for p in positions[keep]]


def first_timestamp(data: bytes, data_end: int) -> int | None:
    """The timestamp of a buffer's first record, or ``None`` when it has no readable one."""
    end = min(data_end, len(data))
    if _BH_SIZE + 4 > end:
        return None
    marker = _u32(data, _BH_SIZE)[0]
    if marker == F.END_OF_DATA or not F.is_typed(marker >> F.MARKER_FLAGS_SHIFT):
        return None
    cls = RECORD_CLASSES.get(F.header_type_of(marker))
    if cls is None or _BH_SIZE + cls.header_size > end:
        return None
    return cls(cls.layout.unpack_from(data, _BH_SIZE), data, _BH_SIZE, cls.header_size, 0, _NO_CONTEXT).timestamp  # type: ignore[union-attr]


def _before(heap: list[_Entry], index: int) -> list[_Entry]:
    """The entries of buffers before ``index``, still a heap."""
    kept = [entry for entry in heap if entry[1] < index]
    heapq.heapify(kept)
    return kept


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
