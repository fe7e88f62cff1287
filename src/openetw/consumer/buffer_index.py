"""One ETL buffer held in memory, indexed: how a trace consumes the buffers of a live session.

A real-time session hands over whole buffers. Each is indexed as a file is (``index_walk``
finds its records, ``index_build`` gathers their header columns) and then processed by the same
``IndexedPlan`` as an indexed file: enable rules, time window, state records and filters are
decided on the columns, and records are built only for those a callback, a payload predicate or
an iterator needs. A live trace and a file trace therefore deliver the same events with the same
counts.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from openetw.consumer.index_build import RECORD_DTYPE, filetimes, file_order_rows, provider_table
from openetw.consumer.index_walk import single_buffer, walk_chains
from openetw.consumer.loader import RecordLoader
from openetw.etl.record import RecordContext

__all__ = ["BufferIndex"]


class BufferIndex:
    """The index of one uncompressed buffer (header included), records in buffer order.

    It offers what ``IndexedPlan`` asks of an ``EtlIndex``: ``records``, ``providers``,
    ``provider_row``, ``unknown_reasons``, ``context`` and ``loader()``.
    """

    def __init__(self, data: bytes, number: int, context: RecordContext) -> None:
        self.data = data
        self.number = number
        self.context = context
        buffers = single_buffer(data, number)
        chains = walk_chains(buffers)
        rows, lo, hi, has, reasons = file_order_rows(buffers, chains)
        column, self.providers = provider_table(lo, hi, has)
        rows["provider"] = column
        rows["filetime"] = filetimes(rows["timestamp"], context.clock)
        self.records: np.ndarray = rows
        self.unknown_reasons: dict[int, str] = reasons
        self.errors: list[str] = buffers.errors
        self._provider_rows = {guid: row for row, guid in enumerate(self.providers)}

    @classmethod
    def empty(cls, number: int, context: RecordContext) -> BufferIndex:
        index = cls.__new__(cls)
        index.data, index.number, index.context = b"", number, context
        index.records, index.providers, index.unknown_reasons, index.errors = np.zeros(0, dtype=RECORD_DTYPE), [], {}, []
        index._provider_rows = {}
        return index

    def __len__(self) -> int:
        return len(self.records)

    def provider_row(self, provider: Any) -> int | None:
        return self._provider_rows.get(provider if isinstance(provider, uuid.UUID) else getattr(provider, "guid", None))

    def loader(self) -> RecordLoader:
        return _BufferLoader(self)


class _BufferLoader(RecordLoader):
    """``RecordLoader`` over the one buffer in memory."""

    def __init__(self, index: BufferIndex) -> None:  # noqa: D107 - no file to open
        self.index = index  # type: ignore[assignment]
        self.context = index.context
        self._limit = 1
        self._cache = {index.number: index.data}
        self._position = {index.number: 0}
        self._fd = None

    def buffer_data(self, buffer_index: int) -> bytes:
        return self.index.data  # type: ignore[attr-defined, no-any-return]
