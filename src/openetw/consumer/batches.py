"""Batches: index rows of a trace as numpy arrays, at memory speed.

``UserTrace.batches()`` yields ``Batch``es: the header columns of the trace's events (the
enabled providers' rules and the time window applied, in merged time order) as a numpy
structured array, and where each event's user data is in its file. Nothing is decoded and no
record is built unless asked (``Batch.records``, ``Batch.user_data``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from openetw.consumer._engine.index_build import RECORD_DTYPE, take
from openetw.consumer._engine.segments import Segment, merge_windows
from openetw.consumer.index import EtlIndex
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

    __slots__ = ("rows", "file", "_full", "_positions", "_indexes", "_data")

    def __init__(self, rows: np.ndarray, file: np.ndarray, positions: np.ndarray, indexes: Sequence[EtlIndex], full: np.ndarray | None = None) -> None:
        self.rows = rows
        self._full = rows if full is None else full
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
                rows = self._full[mine]
                starts = _buffer_offsets(index)[rows["buffer"]]
                known = starts >= 0
                offsets[mine] = np.where(known, starts + rows["offset"] + rows["user_data_offset"], -1)
                lengths[mine] = rows["user_data_length"]
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
        with index.loader() as loader:
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
    indexes: Sequence[EtlIndex], selected: Callable[[int, Segment], np.ndarray], *, columns: Sequence[str] | None = None,
    batch_size: int = 65536, skip: dict[str, Any] | None = None,
) -> Iterator[Batch]:  # fmt: skip
    """Batches of the rows ``selected(file number, segment)`` picks (a boolean mask over the
    segment), merged in time order, a window of blocks at a time (``skip``: what lets whole
    blocks be skipped on their summaries, as ``EtlIndex.segments`` takes it)."""
    if batch_size < 1:
        raise InvalidArgument(f"batch_size must be at least 1, not {batch_size}")
    names = list(columns) if columns is not None else None
    if names is not None:
        unknown = [name for name in names if name not in RECORD_DTYPE.names]  # type: ignore[operator]
        if unknown:
            raise InvalidArgument(f"no column(s) {unknown}; columns are {list(RECORD_DTYPE.names)}")  # type: ignore[arg-type]
    streams = [index.segments(**(skip or {})) for index in indexes]
    rows_parts: list[np.ndarray] = []
    file_parts: list[np.ndarray] = []
    position_parts: list[np.ndarray] = []
    held = 0
    for window in merge_windows(streams):
        rows_w, files_w, positions_w = [], [], []
        for number, segment in enumerate(window):
            if not len(segment):
                continue
            chosen = np.flatnonzero(selected(number, segment))
            if not len(chosen):
                continue
            rows_w.append(take(segment.records, chosen))
            files_w.append(np.full(len(chosen), number, dtype=np.int64))
            positions_w.append(chosen + segment.first_row)
        if not rows_w:
            continue
        rows, files, positions = np.concatenate(rows_w), np.concatenate(files_w), np.concatenate(positions_w)
        if len(rows_w) > 1:
            order = np.argsort(rows["filetime"], kind="stable")
            rows, files, positions = take(rows, order), files[order], positions[order]
        rows_parts.append(rows)
        file_parts.append(files)
        position_parts.append(positions)
        held += len(rows)
        while held >= batch_size:
            all_rows, all_files, all_positions = np.concatenate(rows_parts), np.concatenate(file_parts), np.concatenate(position_parts)
            part = all_rows[:batch_size]
            yield Batch(_columns(part, names), all_files[:batch_size], all_positions[:batch_size], indexes, part)
            rows_parts, file_parts, position_parts = [all_rows[batch_size:]], [all_files[batch_size:]], [all_positions[batch_size:]]
            held -= batch_size
    if held:
        all_rows = np.concatenate(rows_parts)
        yield Batch(_columns(all_rows, names), np.concatenate(file_parts), np.concatenate(position_parts), indexes, all_rows)


def _columns(rows: np.ndarray, names: list[str] | None) -> Any:
    return rows if names is None else rows[names]
