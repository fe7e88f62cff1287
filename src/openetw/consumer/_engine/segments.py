"""Pieces of an index as the plan and the loader see them, and the merge of several files.

A ``Segment`` is a run of consecutive index rows of one file (a block, or part of one) with
what ``IndexedPlan`` asks of an index: ``records``, ``providers``, ``provider_row``,
``unknown_reasons``, ``context`` and ``loader()``. Its records are read from the file's buffers
through one ``FileBuffers`` per file, whose cache of recent buffers every segment shares.

``merge_windows`` merges the segments of several files in time order, a bounded window at a
time: a window holds, from every file, the rows earlier than the latest time all of them have
reached (ties go to the earlier file, as ``merge_records`` orders them).
"""

from __future__ import annotations

import bisect
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from openetw.consumer._engine.loader import RecordLoader
from openetw.errors import EtlFormatError
from openetw.etl import layouts as L
from openetw.etl.record import RecordContext

__all__ = ["FileBuffers", "Segment", "merge_windows"]

_BUFFER_CACHE = 64
_CACHE_BYTES = 16 << 20  # inflated buffers may be up to 16 MiB each: the cache is bounded in bytes too


class FileBuffers:
    """A file's buffers read by index (inflated when compressed), the last few kept (at most
    ``cached`` buffers and ``_CACHE_BYTES``). Where each buffer is stays in the buffer table's
    arrays, not a Python object per buffer."""

    def __init__(self, path: str, cached: int = _BUFFER_CACHE) -> None:
        self.path = path
        self._limit = max(1, cached)
        self._cache: dict[int, bytes] = {}
        self._cached_bytes = 0
        self._tables: list[np.ndarray] = []
        self._firsts: list[int] = []  # the first buffer index of each table
        self._fd: int | None = None

    def add(self, table: np.ndarray) -> None:
        """Make buffers known (rows of ``BUFFER_DTYPE``, in increasing index order)."""
        if len(table):
            if self._tables and int(table["index"][0]) <= int(self._tables[-1]["index"][-1]):
                merged = np.concatenate([*self._tables, table])
                merged = merged[np.argsort(merged["index"], kind="stable")]
                self._tables, self._firsts = [merged], [int(merged["index"][0])]
            else:
                self._tables.append(table)
                self._firsts.append(int(table["index"][0]))

    def _where(self, buffer_index: int) -> tuple[int, int, int, int, int]:
        part = bisect.bisect_right(self._firsts, buffer_index) - 1
        if part >= 0:
            table = self._tables[part]
            row = int(np.searchsorted(table["index"], buffer_index))
            if row < len(table) and int(table["index"][row]) == buffer_index:
                entry = table[row]
                return int(entry["file_offset"]), int(entry["length"]), int(entry["buffer_size"]), int(entry["data_end"]), int(entry["flags"])
        raise EtlFormatError(f"no buffer {buffer_index} in the index", buffer_index=buffer_index, path=self.path)

    def buffer_data(self, buffer_index: int) -> bytes:
        data = self._cache.get(buffer_index)
        if data is None:
            data = self._read(buffer_index)
            while self._cache and (len(self._cache) >= self._limit or self._cached_bytes + len(data) > _CACHE_BYTES):
                self._cached_bytes -= len(self._cache.pop(next(iter(self._cache))))
            self._cache[buffer_index] = data
            self._cached_bytes += len(data)
        return data

    def _read(self, buffer_index: int) -> bytes:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        offset, length, buffer_size, data_end, flags = self._where(buffer_index)
        if not flags & L.BUFFER_FLAG_COMPRESSED:
            data = os.pread(self._fd, length, offset)
        else:
            from openetw.etl.lzxpress import decompress

            raw = os.pread(self._fd, buffer_size, offset)
            data = raw[: L.BUFFER_HEADER_SIZE] + decompress(raw[L.BUFFER_HEADER_SIZE :], data_end - L.BUFFER_HEADER_SIZE)
        if len(data) != length:
            raise EtlFormatError("the file changed since it was indexed", offset=offset, buffer_index=buffer_index, path=self.path)
        return data

    def close(self) -> None:
        """Close the file (reopened by the next read) and drop the kept buffers."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._cache.clear()
        self._cached_bytes = 0

    def __del__(self) -> None:  # a raw descriptor: closed with its owner even when nobody called close()
        if getattr(self, "_fd", None) is not None:
            self.close()


class Segment:
    """Consecutive rows of one file's index, from row ``first_row`` on (see the module doc)."""

    def __init__(
        self, rows: np.ndarray | Callable[[], np.ndarray], first_row: int, count: int, providers: list[uuid.UUID],
        reasons: dict[int, str], context: RecordContext, buffers: FileBuffers, summary: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self._rows = rows
        self.first_row = first_row
        self.count = count
        self.providers = providers
        self.unknown_reasons = reasons
        self.context = context
        self.buffers = buffers
        self.summary = summary

    @property
    def records(self) -> np.ndarray:
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    def __len__(self) -> int:
        return self.count

    def provider_row(self, provider: Any) -> int | None:
        guid = provider if isinstance(provider, uuid.UUID) else getattr(provider, "guid", None)
        try:
            return self.providers.index(guid)  # type: ignore[arg-type]
        except ValueError:
            return None

    def loader(self, **_: Any) -> RecordLoader:
        return RecordLoader.over(self.records, self.unknown_reasons, self.context, self.buffers)

    def part(self, start: int, stop: int) -> Segment:
        """Rows ``start:stop`` of this segment."""
        reasons = {row - start: reason for row, reason in self.unknown_reasons.items() if start <= row < stop}
        return Segment(self.records[start:stop], self.first_row + start, stop - start, self.providers, reasons, self.context, self.buffers)

    def joined(self, other: Segment) -> Segment:
        """This segment followed by the next one of the same file."""
        reasons = dict(self.unknown_reasons)
        reasons.update({row + self.count: reason for row, reason in other.unknown_reasons.items()})
        rows = np.concatenate([self.records, other.records])
        return Segment(rows, self.first_row, self.count + other.count, self.providers, reasons, self.context, self.buffers)


def merge_windows(streams: list[Iterator[Segment]]) -> Iterator[list[Segment]]:
    """Windows of the files' segments, in merged time order (see the module doc); each window
    has one segment per file (possibly empty)."""
    if len(streams) == 1:
        for segment in streams[0]:
            yield [segment]
        return
    pending: list[Segment | None] = [None] * len(streams)
    ended = [False] * len(streams)

    def fill(number: int) -> None:
        while not ended[number] and (pending[number] is None or not len(pending[number])):  # type: ignore[arg-type]
            following = next(streams[number], None)
            if following is None:
                ended[number] = True
            else:
                pending[number] = following if pending[number] is None else pending[number].joined(following)  # type: ignore[union-attr]

    while True:
        for number in range(len(streams)):
            fill(number)
        live = [n for n in range(len(streams)) if not ended[n]]
        present = [segment for segment in pending if segment is not None]
        if not live:
            if any(len(segment) for segment in present):
                yield [segment if segment is not None else _empty_like(present[0]) for segment in pending]
            return
        reach = min(int(pending[n].records["filetime"].max()) for n in live)  # type: ignore[union-attr]
        window: list[Segment | None] = []
        for number, waiting in enumerate(pending):
            if waiting is None:
                window.append(None)
                continue
            cut = int(np.count_nonzero(np.maximum.accumulate(waiting.records["filetime"]) < reach))
            window.append(waiting.part(0, cut))
            pending[number] = waiting.part(cut, len(waiting))
        if any(part is not None and len(part) for part in window):
            yield [part if part is not None else _empty_like(present[0]) for part in window]
            continue
        # Nothing earlier than the reach: the files standing at it take their next segment too.
        for number in live:
            waiting = pending[number]
            if waiting is not None and int(waiting.records["filetime"].max()) == reach:
                following = next(streams[number], None)
                if following is None:
                    ended[number] = True
                else:
                    pending[number] = waiting.joined(following)


def _empty_like(segment: Segment) -> Segment:
    return segment.part(0, 0)
