"""The first pass: a file's rows in time order, a bounded piece at a time.

Buffers are read ``chunk_bytes`` at a time (``working_set_bytes()``: ``$OPENETW_INDEX_CHUNK_MB``,
default ``DEFAULT_CHUNK_MB``) and their rows gathered as ``index_build`` gathers them. Rows come
out in the order ``EtlReader.records(time_order=True)`` gives, without holding the file's rows:

- For an uncompressed file whose buffer headers are sound, a first look at every buffer header
  gives each buffer's first timestamp. When each buffer's records are in time order (every real
  file seen), the reader's merge is a stable sort by time, and a row can be handed out as soon as
  no buffer still unread starts before it: after each piece, the rows up to the earliest first
  timestamp of the buffers to come go out, the rest wait for the next piece.
- A buffer whose records go back in time defeats that: from there on the rows are gathered and
  the reader's merge is replayed on them (``index_build``), as for compressed or damaged files,
  whose rows are gathered whole (their buffers are what the reader can make of them).
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from openetw.consumer._engine.index_build import (
    _UNKNOWN,
    _WPP,
    BUFFER_DTYPE,
    _buffer_table,
    _merge_keys,
    _time_order,
    build_index_data,
    concat,
    file_order_rows,
    filetimes,
    keep,
    provider_table,
    take,
)
from openetw.consumer._engine.index_walk import BH, _file_chunks, buffer_info, walk_chains
from openetw.etl import layouts as L
from openetw.etl.reader import MAX_BUFFER_SIZE, BufferInfo, EtlReader, _first_timestamp

__all__ = ["CHUNK_ENV", "DEFAULT_CHUNK_MB", "StreamingBuild", "working_set_bytes"]

CHUNK_ENV = "OPENETW_INDEX_CHUNK_MB"
DEFAULT_CHUNK_MB = 4
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


def _plain_headers(path: str) -> tuple[_Headers, dict[str, int], np.ndarray] | None:
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
            if info.flags & L.BUFFER_FLAG_COMPRESSED:
                return None
            end = min(info.data_end, info.buffer_size, len(head))
            first = _first_timestamp(head[:end], end)
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
    (``filetime`` filled, ``provider`` coded in ``providers``, which grows as GUIDs are met) with
    the reasons of their unknown records (by row of the piece). ``buffers()`` gives the buffer
    table so far; ``errors``, ``read_stats`` and ``exact_time_order`` are final once the pieces
    are all taken."""

    def __init__(self, path: str, chunk_bytes: int | None = None) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes or working_set_bytes()
        with EtlReader(path, strict=False) as reader:
            self.header, self.context = reader.header, reader.context
        self.providers: list[uuid.UUID] = []
        self._codes: dict[tuple[int, int], int] = {}
        self._tables: list[np.ndarray] = []
        self.errors: list[dict[str, Any]] = []
        self.read_stats: dict[str, int] = {}
        self.exact_time_order = True
        self.rows = 0

    def buffers(self) -> np.ndarray:
        if len(self._tables) > 1:
            self._tables = [np.concatenate(self._tables)]
        return self._tables[0] if self._tables else np.zeros(0, dtype=BUFFER_DTYPE)

    def _code(self, lo: np.ndarray, hi: np.ndarray, has: np.ndarray) -> np.ndarray:
        """Provider codes of the file's table for a piece's GUID halves."""
        column, table = provider_table(lo, hi, has)
        remap = np.empty(len(table) + 1, dtype=np.int32)
        remap[-1] = -1
        present = column[column >= 0]
        _, first = np.unique(present, return_index=True)
        by_appearance = np.unique(present)[np.argsort(first, kind="stable")]  # codes follow file order
        for local in by_appearance.tolist():
            guid = table[local]
            key = struct.unpack("<QQ", guid.bytes_le)
            code = self._codes.get(key)
            if code is None:
                code = self._codes[key] = len(self.providers)
                self.providers.append(guid)
            remap[local] = code
        codes: np.ndarray = remap[column]
        return codes

    def pieces(self) -> Iterator[tuple[np.ndarray, dict[int, str]]]:
        plain = _plain_headers(self.path) if not self.header.compressed else None
        if plain is None:
            yield from self._whole()
            return
        infos, stats, firsts = plain
        later_min = np.minimum.accumulate(firsts[::-1])[::-1]  # earliest first time from buffer i on
        clock = self.context.clock
        walked = {"unknown_records": 0, "skipped_bytes": 0}
        carry = np.zeros(0, dtype=self._row_dtype())
        carry_keys = np.zeros(0, dtype=np.int64)
        carry_seq = np.zeros(0, dtype=np.int64)
        reasons: dict[int, str] = {}  # by file-order row number
        gathering = False
        done_buffers = 0
        seq = 0
        for bufs in _file_chunks(self.path, infos, self.chunk_bytes):
            chains = walk_chains(bufs)
            rows, lo, hi, has, unknown = file_order_rows(bufs, chains)
            self.errors.extend(bufs.errors)
            for key in walked:
                walked[key] += bufs.stats.get(key, 0)
            self._tables.append(_buffer_table(bufs))
            rows["provider"] = self._code(lo, hi, has)
            keys = _merge_keys(rows)
            n = len(rows)
            reasons.update({seq + row: reason for row, reason in unknown.items()})
            seqs = np.arange(seq, seq + n, dtype=np.int64)
            seq += n
            done_buffers += len(bufs.infos)
            if not gathering and not _sortable(rows, keys):
                gathering = True
            carry, carry_keys, carry_seq = _concat(carry, rows), np.concatenate([carry_keys, keys]), np.concatenate([carry_seq, seqs])
            if gathering:
                continue
            if done_buffers < len(infos):
                ready = np.flatnonzero(carry_keys <= later_min[done_buffers])
                if not len(ready):
                    continue
            else:
                ready = np.arange(len(carry_keys))
            order = ready[np.argsort(carry_keys[ready], kind="stable")]
            out, out_seq = take(carry, order), carry_seq[order]
            if len(ready) == len(carry_keys):
                carry, carry_keys, carry_seq = carry[:0], carry_keys[:0], carry_seq[:0]
            else:
                left = np.ones(len(carry_keys), dtype=bool)
                left[ready] = False
                carry, carry_keys, carry_seq = keep(carry, left), carry_keys[left], carry_seq[left]
            yield self._finish(out, out_seq, reasons, clock)
        if gathering and len(carry):
            by_file = np.argsort(carry_seq, kind="stable")
            rows, rows_seq = take(carry, by_file), carry_seq[by_file]
            order, exact = _time_order(rows, list(range(len(infos))))
            self.exact_time_order = exact
            yield self._finish(take(rows, order), rows_seq[order], reasons, clock)
        self.read_stats = dict(stats, records=self.rows, unknown_records=walked["unknown_records"])
        self.read_stats["skipped_bytes"] = self.read_stats.get("skipped_bytes", 0) + walked["skipped_bytes"]

    def _row_dtype(self) -> np.dtype:
        from openetw.consumer._engine.index_build import RECORD_DTYPE

        return RECORD_DTYPE

    def _finish(self, rows: np.ndarray, seqs: np.ndarray, reasons: dict[int, str], clock: Any) -> tuple[np.ndarray, dict[int, str]]:
        rows["filetime"] = filetimes(rows["timestamp"], clock)
        self.rows += len(rows)
        mine: dict[int, str] = {}
        if reasons:
            for row in np.flatnonzero(rows["kind"] == _UNKNOWN).tolist():
                reason = reasons.pop(int(seqs[row]), None)
                if reason is not None:
                    mine[row] = reason
        return rows, mine

    def _whole(self) -> Iterator[tuple[np.ndarray, dict[int, str]]]:
        """Compressed or damaged files: the rows gathered whole, as ``build_index_data`` makes them."""
        built = build_index_data(self.path, chunk_bytes=self.chunk_bytes)
        self.providers.extend(built.providers)
        self._tables.append(built.buffers)
        self.errors.extend(built.errors)
        self.exact_time_order = built.exact_time_order
        step = max(1, self.chunk_bytes // 64)
        for start in range(0, len(built.records), step):
            rows = built.records[start : start + step]
            reasons = {row - start: reason for row, reason in built.unknown_reasons.items() if start <= row < start + step}
            self.rows += len(rows)
            yield rows, reasons
        self.read_stats = dict(built.read_stats)


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


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return b if not len(a) else concat([a, b])
