"""The first pass: a file's rows in time order, a bounded piece at a time.

Buffers are read ``chunk_bytes`` at a time (``working_set_bytes()``: ``$OPENETW_INDEX_CHUNK_MB``,
default ``DEFAULT_CHUNK_MB``) and their rows gathered as ``index_build`` gathers them. Rows come
out in the order ``EtlReader.records(time_order=True)`` gives, without holding the file's rows:

- For an uncompressed file whose buffer headers are sound, a first look at every buffer header
  gives each buffer's first timestamp, and the buffers are read in the order of those times (a
  buffer far on in the file that starts early, as the last buffers flushed at a trace's end do,
  is read with its time's neighbours). When each buffer's records are in time order (every real
  file seen), the reader's merge is a stable sort by time (ties in file order), and a row can be
  handed out as soon as no buffer still unread starts at or before it: after each piece, the rows
  before the first time of the next buffer to read go out.
- The rows that wait (all of them for compressed or damaged files, framed by the reader, whose
  buffers' first times are known only once read) wait in a ``RowMerge``, which writes them to a
  temporary file past the chunk setting's worth: a trace going back in time or repeating its
  times costs disk, not memory.
- A buffer whose own records go back in time defeats the sort: from there on the rows not yet
  given out are gathered in memory and the reader's merge is replayed on them (``index_build``).
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from openetw.consumer._engine.index_build import (
    _UNKNOWN,
    _WPP,
    BUFFER_DTYPE,
    RECORD_DTYPE,
    _buffer_table,
    _merge_keys,
    _time_order,
    by_buffer,
    file_order_rows,
    filetimes,
    provider_table,
    take,
)
from openetw.consumer._engine.index_walk import BH, Buffers, _file_chunks, buffer_info, read_buffers, walk_chains
from openetw.consumer._engine.spill import RowMerge
from openetw.etl import layouts as L
from openetw.etl.reader import MAX_BUFFER_SIZE, BufferInfo, EtlReader, first_timestamp

__all__ = ["CHUNK_ENV", "DEFAULT_CHUNK_MB", "StreamingBuild", "working_set_bytes"]

CHUNK_ENV = "OPENETW_INDEX_CHUNK_MB"
DEFAULT_CHUNK_MB = 4
_EARLIEST = int(np.iinfo(np.int64).min)
_FIRST_RECORD_BYTES = 256  # the buffer header and the first record's header fit in this


def working_set_bytes() -> int:
    """How many bytes of buffers the first pass takes at a time (the setting memory follows)."""
    try:
        megabytes = float(os.environ.get(CHUNK_ENV, DEFAULT_CHUNK_MB))
    except ValueError:
        megabytes = DEFAULT_CHUNK_MB
    return max(1 << 16, int(megabytes * (1 << 20)))


class _Headers(Sequence[BufferInfo]):
    """A file's buffer headers kept as their bytes (``BH`` each), each made a ``BufferInfo`` when
    asked: a Python object per buffer would grow the first pass's memory with the file."""

    def __init__(self) -> None:
        self._raw = bytearray()
        self._offsets: list[int] = []

    def append(self, head: bytes, file_offset: int) -> None:
        self._raw += head[:BH]
        self._offsets.append(file_offset)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> BufferInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[BufferInfo]: ...

    def __getitem__(self, index: int | slice) -> BufferInfo | list[BufferInfo]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return buffer_info(self._raw, index * BH, index, self._offsets[index])


def _plain_headers(path: str, stride: int) -> tuple[_Headers, dict[str, int], np.ndarray] | None:
    """The buffers of an uncompressed file with sound buffer headers, their statistics and each
    one's first record time (as the reader's merge orders buffers by it); ``None``: let the
    reader frame the file. Headers are read with ``pread``, not mapped: mapping would bring in
    (and count as resident) the pages around every header, the whole file of a large trace."""
    infos = _Headers()
    firsts = np.zeros(1024, dtype=np.int64)
    lost_events = lost_buffers = 0
    last = 0
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        offset = 0
        while offset < size:
            head = os.pread(fd, _FIRST_RECORD_BYTES, offset)
            if len(head) < BH:
                return None
            info = buffer_info(head, 0, len(infos), offset)
            if info.buffer_size < BH or info.buffer_size > MAX_BUFFER_SIZE or info.buffer_size % 8 or offset + info.buffer_size > size:
                return None
            if info.flags & L.BUFFER_FLAG_COMPRESSED or (stride and info.buffer_size != stride):
                return None
            end = min(info.data_end, info.buffer_size, len(head))
            first = first_timestamp(head[:end], end)
            last = last if first is None else first
            if len(infos) == len(firsts):
                firsts = np.concatenate([firsts, np.zeros(len(firsts), dtype=np.int64)])
            firsts[len(infos)] = last
            infos.append(head, offset)
            lost_events += bool(info.flags & L.BUFFER_FLAG_EVENTS_LOST)
            lost_buffers += bool(info.flags & L.BUFFER_FLAG_BUFFER_LOST)
            offset += info.buffer_size
    if not infos:
        return None
    stats = {
        "buffers": len(infos), "compressed_buffers": 0, "skipped_bytes": 0,
        "buffers_with_events_lost_flag": lost_events, "buffers_with_buffer_lost_flag": lost_buffers,
    }  # fmt: skip
    return infos, stats, firsts[: len(infos)].copy()


class StreamingBuild:
    """One first pass over ``path`` (see the module doc): ``pieces()`` yields rows in time order
    (``filetime`` filled, ``provider`` coded in ``providers``, which grows as the rows going out
    meet new GUIDs: the table is in order of first appearance in the rows' order) with
    the reasons of their unknown records (by row of the piece). ``buffers()`` gives the buffer
    table so far; ``errors``, ``read_stats`` and ``exact_time_order`` are final once the pieces
    are all taken."""

    def __init__(self, path: str, chunk_bytes: int | None = None) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes or working_set_bytes()
        with EtlReader(path, strict=False) as reader:
            self.header, self.context = reader.header, reader.context
            self._stride = reader.buffer_stride
        self.providers: list[uuid.UUID] = []
        # GUIDs as the buffers are read (a row's code while it waits), and each one's code in
        # ``providers`` once a row of it went out (-1 before)
        self._met: list[uuid.UUID] = []
        self._codes: dict[tuple[int, int], int] = {}
        self._final = np.zeros(0, dtype=np.int32)
        self._tables: list[np.ndarray] = []
        self.errors: list[dict[str, Any]] = []
        self.read_stats: dict[str, int] = {}
        self.exact_time_order = True
        self.rows = 0
        self.spilled_rows = 0  # rows that went through the temporary file (memory stayed bounded)

    def buffers(self) -> np.ndarray:
        """The buffer table so far, in buffer order."""
        if len(self._tables) > 1:
            table = np.concatenate(self._tables)
            self._tables = [table[np.argsort(table["index"], kind="stable")]]
        return self._tables[0] if self._tables else np.zeros(0, dtype=BUFFER_DTYPE)

    def _code(self, lo: np.ndarray, hi: np.ndarray, has: np.ndarray) -> np.ndarray:
        """Provider codes of the GUIDs met so far (``_met``) for a piece's GUID halves (in no
        particular order: ``_renumber`` gives the table's order as the rows go out)."""
        column, table = provider_table(lo, hi, has)
        remap = np.empty(len(table) + 1, dtype=np.int32)
        remap[-1] = -1
        for local, guid in enumerate(table):
            key = struct.unpack("<QQ", guid.bytes_le)
            code = self._codes.get(key)
            if code is None:
                code = self._codes[key] = len(self._met)
                self._met.append(guid)
            remap[local] = code
        coded: np.ndarray = remap[column]
        return coded

    def pieces(self) -> Iterator[tuple[np.ndarray, dict[int, str]]]:
        merge = RowMerge(RECORD_DTYPE, self.chunk_bytes)
        try:
            plain = _plain_headers(self.path, self._stride) if not self.header.compressed else None
            if plain is None:
                # Compressed or damaged: the reader frames the buffers; their first times are
                # known only once read, so the rows wait (spilled past the budget) to the end.
                with EtlReader(self.path, strict=False) as reader:
                    chunks, outcome = read_buffers(reader, self.chunk_bytes)
                    walk_errors: list[dict[str, Any]] = []
                    walked = yield from self._merged(merge, chunks, None, walk_errors)
                    read_errors, stats = outcome()
                self.errors.extend(read_errors + by_buffer(walk_errors))
            else:
                infos, stats, firsts = plain
                # Buffers taken in the order of their first times (stable: file order among equal
                # ones): the earliest first time of those still to come is then the next one's,
                # and rows go out as soon as they are read, instead of waiting for a buffer far
                # on in the file that starts early (spilled to disk meanwhile).
                order = np.argsort(firsts, kind="stable")
                chunks = _file_chunks(self.path, infos, self.chunk_bytes, order.tolist())
                walked = yield from self._merged(merge, chunks, firsts[order], self.errors)
                self.errors[:] = by_buffer(self.errors)
            self.spilled_rows = merge.spilled_rows
        finally:
            merge.close()
        self.read_stats = dict(stats, records=self.rows, unknown_records=walked["unknown_records"])
        self.read_stats["skipped_bytes"] = self.read_stats.get("skipped_bytes", 0) + walked["skipped_bytes"]

    def _merged(
        self, merge: RowMerge, chunks: Iterable[Buffers], later_min: np.ndarray | None, errors: list[dict[str, Any]],
    ) -> Generator[tuple[np.ndarray, dict[int, str]], None, dict[str, int]]:  # fmt: skip
        """The rows of ``chunks`` in time order. ``later_min[i]``: the earliest first time of the
        ``i``-th buffer the chunks give and those after it (``None``: unknown, every row waits for
        the end). A row's number in the merge is its buffer's number, then its place in the
        buffer (file order, whatever order the buffers come in)."""
        clock = self.context.clock
        walked = {"unknown_records": 0, "skipped_bytes": 0}
        reasons: dict[int, str] = {}  # by row number in the merge
        buffer_indices: list[int] = []
        gathering = False
        for bufs in chunks:
            chains = walk_chains(bufs)
            rows, lo, hi, has, unknown = file_order_rows(bufs, chains)
            errors.extend(bufs.errors)
            for key in walked:
                walked[key] += bufs.stats.get(key, 0)
            table = _buffer_table(bufs)
            self._tables.append(table[np.argsort(table["index"], kind="stable")])
            buffer_indices.extend(info.index for info in bufs.infos)
            rows["provider"] = self._code(lo, hi, has)
            keys = _merge_keys(rows)
            seqs = _row_numbers(rows["buffer"])
            reasons.update({int(seqs[row]): reason for row, reason in unknown.items()})
            if not gathering and not _sortable(rows, keys):
                gathering = True
            merge.add(rows, keys, seqs)
            if gathering or later_min is None:
                continue
            done = len(buffer_indices)
            if done < len(later_min) and int(later_min[done]) == _EARLIEST:
                continue
            # (rows at that very time wait too: a buffer still to come may come before them in the file)
            for out, out_seq in merge.release(int(later_min[done]) - 1 if done < len(later_min) else None):
                yield self._finish(out, out_seq, reasons, clock)
        if gathering:
            # A buffer whose own records go back in time: the reader's merge is replayed on
            # every row not yet given out, held in memory (no real file seen has one).
            rows, rows_seq = merge.drain()
            if len(rows):
                order, exact = _time_order(rows, sorted(buffer_indices))
                self.exact_time_order = exact
                yield self._finish(take(rows, order), rows_seq[order], reasons, clock)
        else:
            for out, out_seq in merge.release(None):
                yield self._finish(out, out_seq, reasons, clock)
        return walked

    def _renumber(self, rows: np.ndarray) -> None:
        """Rows going out: their providers coded in ``providers`` (new ones added in the order met)."""
        met = rows["provider"]
        if len(self._final) < len(self._met):
            self._final = np.concatenate([self._final, np.full(len(self._met) - len(self._final), -1, dtype=np.int32)])
        final = np.append(self._final, np.int32(-1)).take(met)  # (-1, no provider, takes the last)
        unnamed = np.flatnonzero((final < 0) & (met >= 0))
        if len(unnamed):  # providers met for the first time in the rows going out
            codes, first = np.unique(met[unnamed], return_index=True)
            for code in codes[np.argsort(first, kind="stable")].tolist():
                self._final[code] = len(self.providers)
                self.providers.append(self._met[code])
            final = np.append(self._final, np.int32(-1)).take(met)
        rows["provider"] = final

    def _finish(self, rows: np.ndarray, seqs: np.ndarray, reasons: dict[int, str], clock: Any) -> tuple[np.ndarray, dict[int, str]]:
        self._renumber(rows)
        rows["filetime"] = filetimes(rows["timestamp"], clock)
        self.rows += len(rows)
        mine: dict[int, str] = {}
        if reasons:
            for row in np.flatnonzero(rows["kind"] == _UNKNOWN).tolist():
                reason = reasons.pop(int(seqs[row]), None)
                if reason is not None:
                    mine[row] = reason
        return rows, mine


def _row_numbers(buffers: np.ndarray) -> np.ndarray:
    """Each row's number in the merge (rows of a chunk, each buffer's together in file order):
    its buffer's number, then its place in that buffer, so that numbers follow file order."""
    n = len(buffers)
    starts = np.flatnonzero(np.concatenate(([True], buffers[1:] != buffers[:-1]))) if n else np.zeros(0, dtype=np.int64)
    place = np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, n)))
    numbers: np.ndarray = (buffers.astype(np.int64) << 32) | place
    return numbers


def _sortable(rows: np.ndarray, keys: np.ndarray) -> bool:
    """Whether the reader's merge of these buffers is a stable sort by time: each buffer's
    records in time order, and each buffer starting with an ordinary record."""
    if not len(rows):
        return True
    buffers = rows["buffer"]
    same = buffers[1:] == buffers[:-1]
    if np.any(same & (keys[1:] < keys[:-1])):
        return False
    firsts = np.flatnonzero(np.concatenate(([True], ~same)))
    return not np.any(np.isin(rows["kind"][firsts], (_WPP, _UNKNOWN)))


