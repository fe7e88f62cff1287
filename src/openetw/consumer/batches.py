"""Batches: index rows of a trace as numpy arrays, at memory speed.

``UserTrace.batches()`` yields ``Batch``es: the header columns of the trace's events (the
enabled providers' rules and the time window applied, in merged time order) as a numpy
structured array, and where each event's user data is in its file. Nothing is decoded and no
record is built unless asked (``Batch.records``, ``Batch.user_data``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from openetw.consumer.index import EtlIndex
from openetw.consumer.index_build import RECORD_COLUMNS, take
from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.record import EventRecord

__all__ = ["Batch", "iter_batches"]


def _buffer_offsets(index: EtlIndex) -> np.ndarray:
    """File offset of each buffer's data by buffer index; -1 for compressed buffers."""
    buffers = index.buffers
    table = np.full(int(buffers["index"].max()) + 1 if len(buffers) else 0, -1, dtype=np.int64)
    plain = (buffers["flags"] & L.BUFFER_FLAG_COMPRESSED) == 0
    table[buffers["index"][plain]] = buffers["file_offset"][plain]
    return table


class Batch:
    """Up to ``batch_size`` events: ``rows`` (header columns), ``file`` (which source each is from)."""

    __slots__ = ("rows", "file", "_positions", "_indexes", "_data")

    def __init__(self, rows: np.ndarray, file: np.ndarray, positions: np.ndarray, indexes: Sequence[EtlIndex]) -> None:
        self.rows = rows
        self.file = file
        self._positions = positions  # row numbers inside each file's index
        self._indexes = indexes
        self._data: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def paths(self) -> list[str]:
        return [index.path for index in self._indexes]

    def _user_data_places(self) -> tuple[np.ndarray, np.ndarray]:
        if self._data is None:
            offsets = np.full(len(self.rows), -1, dtype=np.int64)
            lengths = np.zeros(len(self.rows), dtype=np.int64)
            for number, index in enumerate(self._indexes):
                mine = np.flatnonzero(self.file == number)
                if not len(mine):
                    continue
                records = index.records
                rows = self._positions[mine]
                starts = _buffer_offsets(index)[records["buffer"][rows]]
                known = starts >= 0
                offsets[mine] = np.where(known, starts + records["offset"][rows] + records["user_data_offset"][rows], -1)
                lengths[mine] = records["user_data_length"][rows]
            self._data = (offsets, lengths)
        return self._data

    @property
    def data_offset(self) -> np.ndarray:
        """Absolute file offset of each event's user data (-1 inside a compressed buffer)."""
        return self._user_data_places()[0]

    @property
    def data_length(self) -> np.ndarray:
        return self._user_data_places()[1]

    def user_data(self, i: int) -> bytes:
        """The user data of event ``i`` (read from its file; compressed buffers are inflated)."""
        index = self._indexes[int(self.file[i])]
        with index.loader(cached_buffers=1) as loader:
            return loader.user_data(int(self._positions[i]))

    def records(self) -> Iterator[EventRecord]:
        """The ``EventRecord`` of every event of the batch, in order."""
        loaders = [index.loader() for index in self._indexes]
        try:
            streams = [loader.records(self._positions[self.file == number]) for number, loader in enumerate(loaders)]
            for number in self.file.tolist():
                yield next(streams[number])
        finally:
            for loader in loaders:
                loader.close()


def iter_batches(
    indexes: Sequence[EtlIndex], selected: Sequence[np.ndarray], *, columns: Sequence[str] | None = None, batch_size: int = 65536,
) -> Iterator[Batch]:  # fmt: skip
    """Batches of the rows ``selected`` (a boolean mask per index), merged in time order."""
    if batch_size < 1:
        raise InvalidArgument(f"batch_size must be at least 1, not {batch_size}")
    names = list(columns) if columns is not None else None
    if names is not None:
        unknown = [name for name in names if name not in RECORD_COLUMNS]
        if unknown:
            raise InvalidArgument(f"no column(s) {unknown}; columns are {list(RECORD_COLUMNS)}")
    if len(indexes) == 1:
        yield from _one_file(indexes[0], selected[0], names, batch_size)
        return
    table = np.concatenate([index.records for index in indexes])
    files = np.concatenate([np.full(len(index.records), n, dtype=np.int64) for n, index in enumerate(indexes)])
    positions = np.concatenate([np.arange(len(index.records), dtype=np.int64) for index in indexes])
    chosen = np.flatnonzero(np.concatenate(list(selected)))
    chosen = chosen[np.argsort(table["filetime"][chosen], kind="stable")]
    for start in range(0, len(chosen), batch_size):
        part = chosen[start : start + batch_size]
        rows = take(table, part)
        yield Batch(_columns(rows, names), files[part], positions[part], indexes)


def _one_file(index: EtlIndex, selected: np.ndarray, names: list[str] | None, batch_size: int) -> Iterator[Batch]:
    table = index.records
    everything = bool(selected.all())
    chosen = None if everything else np.flatnonzero(selected)
    total = len(table) if chosen is None else len(chosen)
    for start in range(0, total, batch_size):
        stop = min(start + batch_size, total)
        if chosen is None:
            rows, positions = table[start:stop], np.arange(start, stop)
        else:
            positions = chosen[start:stop]
            rows = take(table, positions)
        yield Batch(_columns(rows, names), np.zeros(stop - start, dtype=np.int64), positions, [index])


def _columns(rows: np.ndarray, names: list[str] | None) -> Any:
    return rows if names is None else rows[names]
