"""Rows put in time order in bounded memory: an external merge for the first pass.

``RowMerge`` takes rows in file order, each with its merge key (the time the reader's merge
orders it by) and its file-order number, and gives them out in (key, number) order: a stable sort
by time, which is the reader's merge when every buffer's records are in time order. Rows whose
key is at or before a threshold (``release``) go out as soon as they can; the rest wait. What
waits in memory is bounded (``budget`` bytes): past it, the waiting rows are sorted and written to
an unnamed temporary file as a *run*, and ``release`` merges the runs with what is in memory,
reading each run a piece at a time. Memory is then the budget plus a piece per run (at least
``MIN_PIECE_ROWS`` rows), whatever the trace: a trace whose buffers go back in time, or that
repeats its times, costs temporary disk, not memory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from openetw.consumer._engine.index_build import concat, take

__all__ = ["MIN_PIECE_ROWS", "RowMerge"]

MIN_PIECE_ROWS = 256
_KEY = np.dtype("<i8")


@dataclass
class _Run:
    """A sorted run in the spill file (rows, then keys, then numbers) and what of it is loaded."""

    at: int  # where its rows start in the spill file
    count: int
    read: int = 0  # rows loaded so far
    rows: np.ndarray | None = None
    keys: np.ndarray | None = None
    seqs: np.ndarray | None = None

    @property
    def more(self) -> bool:
        return self.read < self.count


class RowMerge:
    """See the module doc. ``add`` rows in file order; ``release(threshold)`` yields
    ``(rows, numbers)`` pieces in order, every row whose key is at most ``threshold``
    (``None``: every row left); ``close`` drops the spill file."""

    def __init__(self, dtype: np.dtype, budget: int) -> None:
        self.dtype = dtype
        self.row_bytes = dtype.itemsize + 16
        self.budget_rows = max(MIN_PIECE_ROWS, budget // self.row_bytes)
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._held = 0
        self._runs: list[_Run] = []
        self._spill: IO[bytes] | None = None
        self._spill_end = 0
        self.spilled_rows = 0  # how many rows went through the spill file

    def add(self, rows: np.ndarray, keys: np.ndarray, seqs: np.ndarray) -> None:
        if not len(rows):
            return
        self._parts.append((rows, keys, seqs))
        self._held += len(rows)
        if self._held > self.budget_rows:
            self._write_run()

    def _memory(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What waits in memory, as one set of arrays (in the order it came)."""
        if not self._parts:
            return np.zeros(0, dtype=self.dtype), np.zeros(0, dtype=_KEY), np.zeros(0, dtype=np.int64)
        if len(self._parts) > 1:
            rows = concat([part[0] for part in self._parts])
            keys = np.concatenate([part[1] for part in self._parts])
            seqs = np.concatenate([part[2] for part in self._parts])
            self._parts = [(rows, keys, seqs)]
        return self._parts[0]

    def _write_run(self) -> None:
        rows, keys, seqs = self._memory()
        order = np.lexsort((seqs, keys))
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="openetw-index-")  # noqa: SIM115 - closed by close()
        at = self._spill_end
        fd = self._spill.fileno()
        for array in (take(rows, order), keys[order], seqs[order]):
            _write_at(fd, array, self._spill_end)
            self._spill_end += array.nbytes
        self._runs.append(_Run(at, len(rows)))
        self.spilled_rows += len(rows)
        self._parts, self._held = [], 0

    def _load(self, run: _Run) -> None:
        """The next piece of a run: the memory budget shared among the runs."""
        assert self._spill is not None
        piece = min(run.count - run.read, max(MIN_PIECE_ROWS, self.budget_rows // max(1, len(self._runs))))
        fd, n, at, first = self._spill.fileno(), run.count, run.at, run.read
        row_size = self.dtype.itemsize
        run.rows = _read_at(fd, at + first * row_size, piece, self.dtype)
        run.keys = _read_at(fd, at + n * row_size + first * 8, piece, _KEY)
        run.seqs = _read_at(fd, at + n * (row_size + 8) + first * 8, piece, np.dtype("<i8"))
        run.read += piece

    def release(self, threshold: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if not self._runs:
            yield from self._release_memory(threshold)
            return
        while True:
            for run in self._runs:
                if (run.keys is None or not len(run.keys)) and run.more:
                    self._load(run)
            self._runs = [run for run in self._runs if run.more or (run.keys is not None and len(run.keys))]
            rows, keys, seqs = self._memory()
            if not self._runs:
                yield from self._release_memory(threshold)
                return
            # Every row up to the last loaded one of a run with more to load is final: no row
            # still on disk comes before it.
            bound_key, bound_seq = min(((int(run.keys[-1]), int(run.seqs[-1])) for run in self._runs if run.more), default=(None, None))  # type: ignore[index]
            if threshold is not None and (bound_key is None or threshold < bound_key):
                bound_key, bound_seq = threshold, None
            taken_rows, taken_keys, taken_seqs = [], [], []
            for run in self._runs:
                assert run.rows is not None and run.keys is not None and run.seqs is not None
                cut = _count_until(run.keys, run.seqs, bound_key, bound_seq)
                if cut:
                    taken_rows.append(run.rows[:cut])
                    taken_keys.append(run.keys[:cut])
                    taken_seqs.append(run.seqs[:cut])
                    run.rows, run.keys, run.seqs = run.rows[cut:], run.keys[cut:], run.seqs[cut:]
            if len(keys):
                ready = _at_most(keys, seqs, bound_key, bound_seq)
                if np.any(ready):
                    taken_rows.append(rows[ready])
                    taken_keys.append(keys[ready])
                    taken_seqs.append(seqs[ready])
                    left = ~ready
                    self._parts = [(rows[left], keys[left], seqs[left])] if np.any(left) else []
                    self._held = int(np.count_nonzero(left))
            if not taken_keys:
                return  # every row left comes after the threshold
            all_keys, all_seqs = np.concatenate(taken_keys), np.concatenate(taken_seqs)
            order = np.lexsort((all_seqs, all_keys))
            yield take(concat(taken_rows), order), all_seqs[order]

    def _release_memory(self, threshold: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        rows, keys, seqs = self._memory()
        if not len(keys):
            return
        ready = np.arange(len(keys)) if threshold is None else np.flatnonzero(keys <= threshold)
        if not len(ready):
            return
        order = ready[np.lexsort((seqs[ready], keys[ready]))]
        out, out_seqs = take(rows, order), seqs[order]
        if len(ready) == len(keys):
            self._parts, self._held = [], 0
        else:
            left = np.ones(len(keys), dtype=bool)
            left[ready] = False
            self._parts = [(rows[left], keys[left], seqs[left])]
            self._held = len(keys) - len(ready)
        yield out, out_seqs

    def drain(self) -> tuple[np.ndarray, np.ndarray]:
        """Every row left, in memory, in file order, with its number (for a replay of the
        reader's merge: the one case that holds every row)."""
        parts = list(self.release(None))
        rows = concat([part[0] for part in parts]) if parts else np.zeros(0, dtype=self.dtype)
        seqs = np.concatenate([part[1] for part in parts]) if parts else np.zeros(0, dtype=np.int64)
        order = np.argsort(seqs, kind="stable")
        return take(rows, order), seqs[order]

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._runs, self._parts, self._held = [], [], 0


def _count_until(keys: np.ndarray, seqs: np.ndarray, key: int | None, seq: int | None) -> int:
    """How many of a run's sorted rows come at or before (key, seq) (``seq`` None: any number)."""
    if key is None:
        return len(keys)
    if seq is None:
        return int(np.searchsorted(keys, key, side="right"))
    below = int(np.searchsorted(keys, key, side="left"))
    equal_end = int(np.searchsorted(keys, key, side="right"))
    return below + int(np.searchsorted(seqs[below:equal_end], seq, side="right"))


def _at_most(keys: np.ndarray, seqs: np.ndarray, key: int | None, seq: int | None) -> np.ndarray:
    if key is None:
        return np.ones(len(keys), dtype=bool)
    if seq is None:
        return keys <= key
    result: np.ndarray = (keys < key) | ((keys == key) & (seqs <= seq))
    return result


def _write_at(fd: int, array: np.ndarray, offset: int) -> None:
    view = np.ascontiguousarray(array).data.cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _read_at(fd: int, offset: int, count: int, dtype: np.dtype) -> np.ndarray:
    want = count * dtype.itemsize
    data = bytearray(want)
    view = memoryview(data)
    got = 0
    while got < want:
        n = os.preadv(fd, [view[got:]], offset + got)
        if not n:
            raise OSError("the index's temporary file is shorter than what was written to it")
        got += n
    return np.frombuffer(data, dtype=dtype)
