"""Building ``EventRecord``s for index rows: the records ``EtlReader`` would give, read on demand.

Buffers are read by offset (``os.pread``) and inflated when compressed; the last few are kept,
since time order interleaves the buffers of each processor. A record keeps its buffer's bytes,
as the reader's records do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from openetw.errors import EtlFormatError
from openetw.etl import layouts as L
from openetw.etl.record import RECORD_CLASSES, EventRecord, MessageRecord, UnknownRecord

if TYPE_CHECKING:
    from openetw.consumer.index import EtlIndex

__all__ = ["RecordLoader"]

_KIND_WPP, _KIND_UNKNOWN = 6, 7
_BUFFER_CACHE = 64
_CACHE_BYTES = 32 << 20  # and at most this much data (compressed buffers inflate to megabytes each)
_COLUMNS = ("header_type", "kind", "buffer", "offset", "size", "cpu")


class RecordLoader:
    """Reads the records of one indexed file by row number (rows in the index's time order)."""

    def __init__(self, index: EtlIndex, *, cached_buffers: int = _BUFFER_CACHE) -> None:
        self.index = index
        self.context = index.context
        self._limit = max(1, cached_buffers)
        self._cache: dict[int, bytes] = {}
        self._cached_bytes = 0
        self._position = {int(b): row for row, b in enumerate(index.buffers["index"].tolist())}
        self._fd: int | None = os.open(index.path, os.O_RDONLY)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._cache.clear()
        self._cached_bytes = 0

    def __enter__(self) -> RecordLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def buffer_data(self, buffer_index: int) -> bytes:
        """A buffer's data as the reader gives it (inflated when compressed)."""
        data = self._cache.get(buffer_index)
        if data is None:
            data = self._read_buffer(buffer_index)
            while self._cache and (len(self._cache) >= self._limit or self._cached_bytes + len(data) > _CACHE_BYTES):
                self._cached_bytes -= len(self._cache.pop(next(iter(self._cache))))
            self._cache[buffer_index] = data
            self._cached_bytes += len(data)
        return data

    def _read_buffer(self, buffer_index: int) -> bytes:
        if self._fd is None:
            raise EtlFormatError("the record loader is closed", path=self.index.path)
        entry = self.index.buffers[self._position[buffer_index]]
        offset, length = int(entry["file_offset"]), int(entry["length"])
        if not int(entry["flags"]) & L.BUFFER_FLAG_COMPRESSED:
            data = os.pread(self._fd, length, offset)
        else:
            from openetw.etl.lzxpress import decompress

            raw = os.pread(self._fd, int(entry["buffer_size"]), offset)
            data = raw[: L.BUFFER_HEADER_SIZE] + decompress(raw[L.BUFFER_HEADER_SIZE :], int(entry["data_end"]) - L.BUFFER_HEADER_SIZE)
        if len(data) != length:
            raise EtlFormatError("the file changed since it was indexed", offset=offset, buffer_index=buffer_index, path=self.index.path)
        return data

    def record(self, row: int) -> EventRecord:
        return next(self.records(np.asarray([row])))

    def records(self, rows: np.ndarray) -> Iterator[EventRecord]:
        """The records of ``rows`` (row numbers), in that order."""
        table = self.index.records
        header_types, kinds, buffers, offsets, sizes, cpus = (table[name][rows].tolist() for name in _COLUMNS)
        context = self.context
        cache = self._cache
        classes = RECORD_CLASSES
        reasons = self.index.unknown_reasons
        for n, (header_type, buffer, offset, size, cpu) in enumerate(zip(header_types, buffers, offsets, sizes, cpus, strict=True)):
            data = cache.get(buffer)
            if data is None:
                data = self.buffer_data(buffer)
            kind = kinds[n]
            if kind < _KIND_WPP:
                cls = classes[header_type]
                yield cls(cls.layout.unpack_from(data, offset), data, offset, size, cpu, context, buffer)  # type: ignore[union-attr]
            elif kind == _KIND_WPP:
                yield MessageRecord(L.MESSAGE_TRACE_HEADER.unpack_from(data, offset), data, offset, size, cpu, context, buffer)
            else:
                reason = reasons.get(int(rows[n]), "not a record")
                yield UnknownRecord(data, offset, size, cpu, context, buffer, reason)

    def user_data(self, row: int) -> bytes:
        entry = self.index.records[row]
        data = self.buffer_data(int(entry["buffer"]))
        start = int(entry["offset"]) + int(entry["user_data_offset"])
        return data[start : start + int(entry["user_data_length"])]
