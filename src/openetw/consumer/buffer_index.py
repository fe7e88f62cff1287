"""ETL buffers held in memory, indexed: how a trace consumes the buffers of a live session.

A real-time session hands over whole buffers. The buffers waiting together are indexed together
(a consumer that fell behind catches up in large batches; one that keeps up takes each buffer as
it comes), as a file is: ``index_walk`` finds their records, ``index_build`` gathers their
header columns. The same ``IndexedPlan`` as for an indexed file then decides on the columns
(enable rules, time window, state records, filters) and builds records only for those a
callback, a payload predicate or an iterator needs. A live trace and a file trace therefore
deliver the same events with the same counts.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from openetw.consumer.index_build import file_order_rows, filetimes, provider_table
from openetw.consumer.index_walk import memory_buffers, walk_chains
from openetw.consumer.loader import RecordLoader
from openetw.etl.record import RecordContext

__all__ = ["BufferIndex"]


class BufferIndex:
    """The index of uncompressed buffers held in memory, ``(number, data)`` each (header
    included), records in buffer order.

    It offers what ``IndexedPlan`` asks of an ``EtlIndex``: ``records``, ``providers``,
    ``provider_row``, ``unknown_reasons``, ``context`` and ``loader()``.
    """

    def __init__(self, buffers: list[tuple[int, bytes]], context: RecordContext) -> None:
        self.data = dict(buffers)
        self.numbers = [number for number, _ in buffers]
        self.context = context
        laid = memory_buffers(buffers)
        chains = walk_chains(laid)
        rows, lo, hi, has, reasons = file_order_rows(laid, chains)
        column, self.providers = provider_table(lo, hi, has)
        rows["provider"] = column
        rows["filetime"] = filetimes(rows["timestamp"], context.clock)
        self.records: np.ndarray = rows
        self.unknown_reasons: dict[int, str] = reasons
        self.errors: list[str] = laid.errors
        self._provider_rows = {guid: row for row, guid in enumerate(self.providers)}

    def __len__(self) -> int:
        return len(self.records)

    def provider_row(self, provider: Any) -> int | None:
        guid = provider if isinstance(provider, uuid.UUID) else getattr(provider, "guid", None)
        return self._provider_rows.get(guid) if guid is not None else None

    def loader(self) -> RecordLoader:
        return _BufferLoader(self)


class _BufferLoader(RecordLoader):
    """``RecordLoader`` over the one buffer in memory."""

    def __init__(self, index: BufferIndex) -> None:  # no file to open
        self.index = index  # type: ignore[assignment]
        self.context = index.context
        self._limit = len(index.data)
        self._cache = index.data
        self._position = {number: row for row, number in enumerate(index.numbers)}
        self._fd = None

    def buffer_data(self, buffer_index: int) -> bytes:
        return self._cache[buffer_index]

    def close(self) -> None:
        self._fd = None
