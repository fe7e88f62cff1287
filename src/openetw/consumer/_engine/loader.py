"""Building ``EventRecord``s for index rows: the records ``EtlReader`` would give, read on demand.

The buffers come from a store (a file's ``FileBuffers``: read by offset and inflated when
compressed, the last few kept, since time order interleaves the buffers of each processor; or
the buffers of a live batch in memory). A record keeps its buffer's bytes, as the reader's
records do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from openetw.etl import layouts as L
from openetw.etl.record import RECORD_CLASSES, EventRecord, MessageRecord, RecordContext, UnknownRecord

__all__ = ["RecordLoader"]

_KIND_WPP, _KIND_UNKNOWN = 6, 7
_COLUMNS = ("header_type", "kind", "buffer", "offset", "size", "cpu")


class RecordLoader:
    """Reads the records of index rows (``table``: rows of ``RECORD_DTYPE``) from a store of
    buffers (``buffer_data(index)`` and a ``_cache`` dict of the buffers it keeps)."""

    def __init__(self, table: np.ndarray, reasons: dict[int, str], context: RecordContext, store: Any, *, owns_store: bool = False) -> None:
        self.table = table
        self.reasons = reasons
        self.context = context
        self.store = store
        self._cache: dict[int, bytes] = store._cache
        self._owns_store = owns_store

    @classmethod
    def over(cls, table: np.ndarray, reasons: dict[int, str], context: RecordContext, store: Any) -> RecordLoader:
        """A loader sharing ``store`` (closing the loader leaves the store open)."""
        return cls(table, reasons, context, store)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> RecordLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def buffer_data(self, buffer_index: int) -> bytes:
        """A buffer's data as the reader gives it (inflated when compressed)."""
        data = self._cache.get(buffer_index)
        if data is None:
            data = self.store.buffer_data(buffer_index)
        return data

    def record(self, row: int) -> EventRecord:
        return next(self.records(np.asarray([row])))

    def records(self, rows: np.ndarray) -> Iterator[EventRecord]:
        """The records of ``rows`` (row numbers), in that order."""
        table = self.table
        header_types, kinds, buffers, offsets, sizes, cpus = (table[name][rows].tolist() for name in _COLUMNS)
        context = self.context
        cache = self._cache
        classes = RECORD_CLASSES
        reasons = self.reasons
        for n, (header_type, buffer, offset, size, cpu) in enumerate(zip(header_types, buffers, offsets, sizes, cpus, strict=False)):
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
        entry = self.table[row]
        data = self.buffer_data(int(entry["buffer"]))
        start = int(entry["offset"]) + int(entry["user_data_offset"])
        return data[start : start + int(entry["user_data_length"])]
