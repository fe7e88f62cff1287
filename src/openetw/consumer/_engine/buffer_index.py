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

from openetw.consumer._engine.index_build import file_order_rows, filetimes, provider_table
from openetw.consumer._engine.index_walk import memory_buffers, walk_chains
from openetw.consumer._engine.loader import RecordLoader
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
        self.errors: list[dict[str, Any]] = laid.errors  # the fields of each problem's EtlFormatError
        self._provider_rows = {guid: row for row, guid in enumerate(self.providers)}

    def __len__(self) -> int:
        return len(self.records)

    def provider_row(self, provider: Any) -> int | None:
        return self._provider_rows.get(provider if isinstance(provider, uuid.UUID) else getattr(provider, "guid", None))

    def loader(self) -> RecordLoader:
        return RecordLoader(self.records, self.unknown_reasons, self.context, _MemoryBuffers(self.data))


class _MemoryBuffers:
    """The buffers of a batch, held in memory: what ``RecordLoader`` reads records from."""

    def __init__(self, data: dict[int, bytes]) -> None:
        self._cache = data

    def buffer_data(self, buffer_index: int) -> bytes:
        return self._cache[buffer_index]

    def close(self) -> None:
        pass
