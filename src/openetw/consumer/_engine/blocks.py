"""The index file: rows in fixed-size blocks of compressed columns, a summary per block.

Layout (format 7)::

    MAGIC (16 bytes: "OPENETW-INDEX\\0\\0" and the format byte)
    block 0, block 1, ...        each: a head (the column count, the row count, and each
                                 group's count of distinct tuples, u32 each; then per stored
                                 column its stored length, u32, coding, u8, and digest, 8 bytes
                                 of BLAKE2b), then each column: packed (see below), or its one
                                 value when every row has the same
    buffer table                 zlib over BUFFER_DTYPE rows
    footer                       UTF-8 JSON: the caller's facts, the block table with summaries,
                                 the provider table, where the buffer table is
    trailer (40 bytes)           footer offset (u64), footer length (u64), the footer's digest
                                 (16 bytes of BLAKE2b), TRAILER_MAGIC

Every part is checked before it is believed: the footer against the trailer's digest, each block's
head and the buffer table against the digest the footer keeps of it (8 bytes of BLAKE2b), each
column against the digest its block's head keeps, so a flipped bit anywhere reads as a damaged
index (rebuilt), never as other rows. A reader that needs a few columns (``decode_columns``: a
count by provider and event id needs no timestamps or places) reads and unpacks only those.

A block holds ``BLOCK_ROWS`` rows (the last one fewer). Columns that go together are kept as a
group (``_GROUPS``: the event descriptor's twelve columns, provider, id, version, level, opcode,
task, keyword, ...; the thread's pid and tid): each distinct tuple of the group's columns once,
in the order they first appear (a column of the group holds as many values as the block has
distinct tuples), and each row's number in that list (a column named after the group). The other
columns are encoded to compress:
timestamps as deltas from the row before, the user data's length as what ``size`` and the
user data offset do not already say, each record's offset as its distance from the end of the
record before it in the same buffer (0 for back-to-back records). Then each column is packed on
its own, with no general-purpose compressor (the first pass must stay as fast as a plain walk):
its first value apart, the others either as their difference from the least of them in as few
bits as that takes (frame of reference), or, when it is smaller, as numbers into the list of
their distinct values (at most 4096) in as few bits as those take, or as they are when neither is
smaller (``encode_column``: the exact layout; ``_native/_index.c`` is its compiled twin, giving
the same bytes). ``filetime`` is not stored: it follows from the timestamp and the trace's clock.

A block's summary (rows, first row, filetime range, provider codes and event ids present)
lets a time window or a provider filter skip it unread. Any other format byte (an older index)
reads as "no index": it is rebuilt, never misread.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

import numpy as np

from openetw._native import module as native_module
from openetw.consumer._engine.index_build import BUFFER_DTYPE, RECORD_COLUMNS, RECORD_DTYPE, RECORD_FIELDS

__all__ = [
    "BLOCK_ROWS", "BLOCK_ROWS_ENV", "FORMAT", "MAGIC", "BlockWriter", "StoredIndex", "block_rows_setting", "decode_block", "decode_column",
    "encode_block", "encode_column", "read_stored", "summary_of",
]  # fmt: skip

FORMAT = 7
MAGIC = b"OPENETW-INDEX\0\0" + bytes([FORMAT])
MAGIC_PREFIX = MAGIC[:-1]
TRAILER_MAGIC = b"OETWIDX\x07"
_TRAILER = struct.Struct("<QQ16s8s")
BLOCK_ROWS = 1 << 16
BLOCK_ROWS_ENV = "OPENETW_INDEX_BLOCK_ROWS"
ID_LIST_LIMIT = 256  # more distinct event ids in a block than this: the summary says "any"
_LEVEL = 1  # zlib level of the buffer table

_STORED = tuple(name for name in RECORD_COLUMNS if name != "filetime")
# Columns kept as a group: a block keeps each distinct tuple of a group's columns once (a table,
# the group's columns of as many rows as it has distinct tuples) and each row's number in that
# table (a column named after the group): the event descriptor, and the thread (pid and tid).
_DESCRIPTOR = ("keyword", "provider", "id", "version", "task", "hook_id", "flags", "kind", "header_type", "level", "opcode", "channel")
_GROUPS: dict[str, tuple[str, ...]] = {"descriptor": _DESCRIPTOR, "thread": ("pid", "tid")}
_GROUP_OF = {name: group for group, names in _GROUPS.items() for name in names}
_ROW_STORED = tuple(name for name in _STORED if name not in _GROUP_OF)
_PARTS = (*_GROUPS, *_ROW_STORED, *_GROUP_OF)  # the stored columns, in their order in a block
_PART_DTYPE: dict[str, np.dtype[Any]] = {**dict.fromkeys(_GROUPS, np.dtype("<u4")), **{name: RECORD_FIELDS[name] for name in _STORED}}
_WIDTH = {name: _PART_DTYPE[name].itemsize for name in _PARTS}
# The compiled twin of the column coding (None: numpy); where each stored column sits in a row
# (``_PLACES``), and the (offset, width) pairs of those stored as they are (``_PLAIN_FIELDS``).
_NATIVE = native_module("_index")
_HEAD = struct.Struct("<II" + "I" * len(_GROUPS))  # the column count, the row count, each group's count of distinct tuples
_ENTRY = struct.Struct("<IB8s")
_ONE_VALUE, _PACKED = 1, 2  # a column's coding: one value every row has; packed (``encode_column``)
_RAW, _FOR, _DICT = 0, 1, 2  # how a packed column is packed (its first byte)
_DICT_LIMIT = 4096
_MAX_BITS = 56
HEAD_BYTES = _HEAD.size + len(_PARTS) * _ENTRY.size
_PLACES = {name: int(RECORD_DTYPE.fields[name][1]) for name in _STORED}  # type: ignore[index]
_CODED = ("timestamp", "user_data_length", "offset")  # stored otherwise than they are (``_coded_columns``)
_PLAIN_FIELDS = np.asarray([(_PLACES[name], _WIDTH[name]) for name in _ROW_STORED if name not in _CODED], dtype=np.int64)
_GROUP_FIELDS = {group: np.asarray([(_PLACES[name], _WIDTH[name]) for name in names], dtype=np.int64) for group, names in _GROUPS.items()}


def _spans(fields: np.ndarray) -> np.ndarray:
    """(offset, width) fields as the fewest (offset, length) spans of a row that cover them."""
    spans: list[list[int]] = []
    for at, width in sorted(fields.tolist()):
        if spans and spans[-1][0] + spans[-1][1] == at:
            spans[-1][1] += width
        else:
            spans.append([at, width])
    return np.asarray(spans, dtype=np.int64)


_GROUP_SPANS = {group: _spans(fields) for group, fields in _GROUP_FIELDS.items()}  # (keyword and provider side by side, ...)
_GROUP_DTYPE = {group: np.dtype([(name, RECORD_FIELDS[name]) for name in names]) for group, names in _GROUPS.items()}
# A group's moves from its table (rows of ``RECORD_DTYPE``) into the rows: (from, to, length).
_GROUP_MOVES = {group: np.ascontiguousarray(np.column_stack([spans[:, 0], spans[:, 0], spans[:, 1]]), dtype=np.int64) for group, spans in _GROUP_SPANS.items()}


def block_rows_setting() -> int:
    """Rows per block for a new index: ``$OPENETW_INDEX_BLOCK_ROWS``, default ``BLOCK_ROWS``."""
    try:
        return max(1, int(os.environ.get(BLOCK_ROWS_ENV, BLOCK_ROWS)))
    except ValueError:
        return BLOCK_ROWS


def _offset_residuals(rows: np.ndarray) -> np.ndarray:
    """Each record's offset minus the end (8-aligned) of the record before it in its buffer,
    within the block (the first of a buffer in the block keeps its offset)."""
    buffers = rows["buffer"]
    order = _by_buffer(buffers)
    offsets = rows["offset"][order].astype(np.int64)
    ends = offsets + ((rows["size"][order].astype(np.int64) + 7) & ~7)
    same = np.zeros(len(order), dtype=bool)
    same[1:] = buffers[order][1:] == buffers[order][:-1]
    residual = offsets.copy()
    residual[1:] -= np.where(same[1:], ends[:-1], 0)
    out = np.empty(len(order), dtype=np.int64)
    out[order] = residual
    return out.astype(np.uint32)


def _by_buffer(buffers: np.ndarray) -> np.ndarray:
    """The rows in buffer order (stable): sorted as 16-bit numbers when they span fewer than
    65536 (a radix sort; the same order)."""
    if len(buffers) and int(buffers.max()) - int(buffers.min()) < 1 << 16:
        return np.argsort((buffers - buffers.min()).astype(np.uint16), kind="stable")
    return np.argsort(buffers, kind="stable")


def _offsets_back(rows: Any, residual: np.ndarray) -> np.ndarray:
    buffers = rows["buffer"]
    order = _by_buffer(buffers)
    r = residual[order].astype(np.int64)
    aligned = (rows["size"][order].astype(np.int64) + 7) & ~7
    same = np.zeros(len(order), dtype=bool)
    same[1:] = buffers[order][1:] == buffers[order][:-1]
    step = r.copy()
    step[1:] += np.where(same[1:], aligned[:-1], 0)
    total = np.cumsum(step)
    base = np.maximum.accumulate(np.where(~same, np.arange(len(order)), 0))  # each row's buffer's first row
    offsets = total - (total[base] - r[base])
    out = np.empty(len(order), dtype=np.uint32)
    out[order] = offsets.astype(np.uint32)
    return out


def _coded_columns(rows: np.ndarray) -> dict[str, np.ndarray]:
    """The columns stored otherwise than they are (see the module doc), coded to compress."""
    if _NATIVE is None:
        offset = _offset_residuals(rows)
    else:
        residuals = _NATIVE.offset_residuals(rows, RECORD_DTYPE.itemsize, _PLACES["buffer"], _PLACES["offset"], _PLACES["size"])
        offset = np.frombuffer(residuals, dtype=np.uint32)
    return {
        "timestamp": np.diff(rows["timestamp"], prepend=np.int64(0)),
        "user_data_length": (rows["size"].astype(np.uint32) - rows["user_data_offset"] - rows["user_data_length"]).astype(np.uint32),
        "offset": offset,
    }  # fmt: skip


def _packed_size(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def _pack_bits(values: np.ndarray, bits: int) -> bytes:
    """``values`` (uint64) in ``bits`` bits each, from the lowest bit of the first byte on."""
    if not bits or not len(values):
        return b""
    planes = ((values[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(planes.reshape(-1), bitorder="little").tobytes()


def _unpack_bits(data: bytes, count: int, bits: int) -> np.ndarray:
    if not bits:
        return np.zeros(count, dtype=np.uint64)
    flat = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little", count=count * bits).reshape(count, bits)
    values: np.ndarray = (flat.astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
    return values


def encode_column(values: np.ndarray) -> bytes:
    """A column packed (integers, read as unsigned of their width; little-endian numbers)::

        raw    0, then the values as they are
        FOR    1, bits, the first value, the least of the others (``low``), then each other
               value minus ``low`` in ``bits`` bits (the fewest that hold the largest)
        dict   2, bits, the first value, the count of distinct other values (u16, at most 4096),
               those values in the order they first appear, then each other value's number in
               that list in ``bits`` bits (the fewest that hold the count less one)

    Bits are packed from the lowest bit of the first byte on. FOR is taken when it is no larger
    than dict (FOR wider than 56 bits: never), raw when neither is smaller.
    """
    width = values.dtype.itemsize
    n = len(values)
    raw_size = 1 + n * width
    plain = np.ascontiguousarray(values).view(f"<u{width}")
    rest = plain[1:].astype(np.uint64)
    low, high = (int(rest.min()), int(rest.max())) if len(rest) else (0, 0)
    for_bits = (high - low).bit_length()
    for_size = 2 + 2 * width + _packed_size(len(rest), for_bits) if n and for_bits <= _MAX_BITS else raw_size + 1
    dict_size = raw_size + 1
    if n and for_bits:
        distinct, first, inverse = np.unique(rest, return_index=True, return_inverse=True)
        if len(distinct) <= _DICT_LIMIT:
            order = np.argsort(first)
            numbers = np.empty(len(distinct), dtype=np.uint64)
            numbers[order] = np.arange(len(distinct), dtype=np.uint64)
            dict_bits = (len(distinct) - 1).bit_length()
            dict_size = 4 + width + len(distinct) * width + _packed_size(len(rest), dict_bits)
    if min(for_size, dict_size) >= raw_size:
        return bytes([_RAW]) + plain.tobytes()
    head = plain[:1].tobytes()
    if for_size <= dict_size:
        return bytes([_FOR, for_bits]) + head + np.asarray([low], dtype=plain.dtype).tobytes() + _pack_bits(rest - np.uint64(low), for_bits)
    table = distinct[order].astype(plain.dtype).tobytes()
    count = struct.pack("<H", len(distinct))
    return bytes([_DICT, dict_bits]) + head + count + table + _pack_bits(numbers[inverse.reshape(-1)], dict_bits)


def decode_column(part: bytes, n: int, dtype: np.dtype[Any]) -> np.ndarray:
    """The ``n`` values of a column packed by ``encode_column``; ``ValueError`` when it is not one."""
    width = dtype.itemsize
    plain = np.dtype(f"<u{width}")
    m = max(n - 1, 0)
    if _NATIVE is not None:
        out = np.empty(n, dtype=dtype)
        _NATIVE.decode_column(part, out, width, 0, width)
        return out
    coding = part[0] if part else -1
    if coding == _RAW and len(part) == 1 + n * width:
        return np.frombuffer(part, dtype=plain, offset=1).view(dtype).copy()
    if coding not in (_FOR, _DICT) or n < 1 or len(part) < 2 + 2 * width or (coding == _DICT and len(part) < 4 + width):
        raise ValueError("a coded column of another shape")
    bits, first = part[1], part[2 : 2 + width]
    if coding == _FOR:
        if bits > min(_MAX_BITS, 8 * width) or len(part) != 2 + 2 * width + _packed_size(m, bits):
            raise ValueError("a coded column of another shape")
        low = np.uint64(int.from_bytes(part[2 + width : 2 + 2 * width], "little"))
        rest = _unpack_bits(part[2 + 2 * width :], m, bits) + low
    else:
        count = int.from_bytes(part[2 + width : 4 + width], "little")
        if not 1 <= count <= _DICT_LIMIT or bits != (count - 1).bit_length() or len(part) != 4 + width + count * width + _packed_size(m, bits):
            raise ValueError("a coded column of another shape")
        numbers = _unpack_bits(part[4 + width + count * width :], m, bits)
        if len(numbers) and int(numbers.max()) >= count:
            raise ValueError("a coded column of another shape")
        rest = np.frombuffer(part, dtype=plain, count=count, offset=4 + width).take(numbers.astype(np.intp))
    out = np.empty(n, dtype=plain)
    out[:1] = np.frombuffer(first, dtype=plain)
    out[1:] = rest.astype(plain)
    return out.view(dtype)


def _group_codes(rows: np.ndarray, group: str = "descriptor") -> tuple[np.ndarray, np.ndarray]:
    """Each row's number among the distinct tuples of ``group``'s columns, numbered in the
    order they first appear (u32), and the row where each first appears (the compiled twin:
    ``_native/_index.c descriptor_codes``)."""
    if _NATIVE is not None:
        codes, firsts = _NATIVE.descriptor_codes(rows, RECORD_DTYPE.itemsize, _GROUP_SPANS[group])
        return np.frombuffer(codes, dtype=np.uint32), np.frombuffer(firsts, dtype=np.int64)
    dtype = _GROUP_DTYPE[group]
    keys = np.zeros(len(rows), dtype=dtype)
    for name in _GROUPS[group]:
        keys[name] = rows[name]
    _, first, inverse = np.unique(keys.view(f"V{dtype.itemsize}"), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    numbers = np.empty(len(first), dtype=np.uint32)
    numbers[order] = np.arange(len(first), dtype=np.uint32)
    return numbers[inverse.reshape(-1)], first[order].astype(np.int64)


def _encoded(rows: np.ndarray) -> tuple[list[bytes], dict[str, int]]:
    """Every stored column of packed ``rows``, packed (``encode_column``), in the stored order
    (``_PARTS``), and each group's count of distinct tuples (the rows of its columns)."""
    coded = _coded_columns(rows)
    numbered = {group: _group_codes(rows, group) for group in _GROUPS}
    tables = {group: np.ascontiguousarray(rows[firsts]) for group, (_, firsts) in numbered.items()}
    counts = {group: len(firsts) for group, (_, firsts) in numbered.items()}
    if _NATIVE is None:
        parts = [encode_column(codes) for codes, _ in numbered.values()]
        parts += [encode_column(coded[name] if name in coded else rows[name]) for name in _ROW_STORED]
        return parts + [encode_column(tables[group][name]) for group, names in _GROUPS.items() for name in names], counts
    plain = iter(_NATIVE.encode_columns(rows, RECORD_DTYPE.itemsize, _PLAIN_FIELDS))
    parts = [_NATIVE.encode_column(np.ascontiguousarray(codes), 4, 0, 4) for codes, _ in numbered.values()]
    parts += [
        _NATIVE.encode_column(np.ascontiguousarray(coded[name]), _WIDTH[name], 0, _WIDTH[name]) if name in coded else next(plain)
        for name in _ROW_STORED
    ]  # fmt: skip
    for group in _GROUPS:
        parts += _NATIVE.encode_columns(tables[group], RECORD_DTYPE.itemsize, _GROUP_FIELDS[group])
    return parts, counts


def encode_block(rows: np.ndarray) -> bytes:
    """The block of ``rows``: its head (each column's stored length, coding and digest), then
    each column on its own (a reader may unpack only the columns it needs): its one value when
    every row has the same, else packed (``encode_column``)."""
    n = len(rows)
    parts: list[bytes] = []
    codings: list[int] = []
    encoded, counts = _encoded(np.ascontiguousarray(rows, dtype=RECORD_DTYPE))
    for name, part in zip(_PARTS, encoded, strict=True):
        width = _WIDTH[name]
        count = counts[_GROUP_OF[name]] if name in _GROUP_OF else n
        if count > 1 and part[0] == _FOR and part[1] == 0 and part[2 : 2 + width] == part[2 + width : 2 + 2 * width]:
            parts.append(part[2 : 2 + width])  # every row the same: that value
            codings.append(_ONE_VALUE)
            continue
        parts.append(part)
        codings.append(_PACKED)
    entries = (_ENTRY.pack(len(part), coding, _digest(part)) for part, coding in zip(parts, codings, strict=True))
    head = _HEAD.pack(len(parts), n, *counts.values()) + b"".join(entries)
    return head + b"".join(parts)


def _digest(data: bytes, size: int = 8) -> bytes:
    return hashlib.blake2b(data, digest_size=size).digest()


def column_spans(head: bytes, n: int) -> tuple[list[tuple[int, int, int, bytes]], dict[str, int]]:
    """Each stored column's (place in the block, stored length, coding, digest) from the head of
    a block of ``n`` rows (in ``_PARTS`` order), and each group's count of distinct tuples;
    ``ValueError`` when the head is not one of this format's, or of another number of rows."""
    if len(head) < HEAD_BYTES or _HEAD.unpack_from(head)[0] != len(_PARTS):
        raise ValueError("a block head of another shape")
    _, rows, *numbers = _HEAD.unpack_from(head)
    if rows != n:
        raise ValueError("block size does not match its row count")
    counts = dict(zip(_GROUPS, numbers, strict=True))
    if not all(min(n, 1) <= count <= n for count in numbers):
        raise ValueError("a group's count of tuples past the row count")
    spans = []
    at = HEAD_BYTES
    for number in range(len(_PARTS)):
        length, coding, digest = _ENTRY.unpack_from(head, _HEAD.size + number * _ENTRY.size)
        spans.append((at, length, coding, digest))
        at += length
    return spans, counts


def _column(part: bytes, coding: int, digest: bytes, n: int, name: str) -> np.ndarray:
    """A stored column's values (still coded as the module doc says), checked against its digest."""
    if _digest(part) != digest:
        raise ValueError(f"column {name!r} does not match its digest")
    dtype = _PART_DTYPE[name]
    if coding == _ONE_VALUE:
        if len(part) != _WIDTH[name] or n < 2:
            raise ValueError(f"column {name!r}: one value of another size")
        return np.full(n, np.frombuffer(part, dtype=dtype)[0])
    if coding != _PACKED:
        raise ValueError(f"column {name!r}: an unknown coding")
    try:
        return decode_column(part, n, dtype)
    except (ValueError, IndexError) as error:
        raise ValueError(f"column {name!r} does not unpack: {error}") from None


# The stored columns another one is decoded with (the coding of the module doc).
_NEEDS: dict[str, tuple[str, ...]] = {
    "timestamp": (), "user_data_length": ("size", "user_data_offset"), "offset": ("buffer", "size"), **{name: (group,) for name, group in _GROUP_OF.items()},
}  # fmt: skip


def decode_columns(read: Callable[[int, int], bytes], head: bytes, n: int, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Columns ``names`` (stored ones; not ``filetime``) of a block of ``n`` rows, unpacking only
    those (and what they are decoded with): ``read(at, length)`` gives the block's bytes at ``at``.
    ``ValueError`` when a part is damaged."""
    if n < 0:
        raise ValueError("a negative row count")
    spans, counts = column_spans(head, n)
    wanted = list(dict.fromkeys(name for asked in names for name in (*_NEEDS.get(asked, ()), asked)))
    raw: dict[str, np.ndarray] = {}
    for name in wanted:
        at, length, coding, digest = spans[_PARTS.index(name)]
        part = read(at, length)
        if len(part) != length:
            raise ValueError("the block is cut short")
        raw[name] = _column(part, coding, digest, counts[_GROUP_OF[name]] if name in _GROUP_OF else n, name)
    for group, names in _GROUPS.items():
        if group in raw:
            codes = raw.pop(group)
            for name in names:
                if name in raw:
                    raw[name] = _expanded(group, codes, raw[name])
    if "timestamp" in raw:
        raw["timestamp"] = np.cumsum(raw["timestamp"])
    if "user_data_length" in raw:
        raw["user_data_length"] = raw["size"] - raw["user_data_offset"] - raw["user_data_length"]
    if "offset" in raw:
        raw["offset"] = _offsets_back(raw, raw["offset"])
    return raw


def _checked_index(group: str, numbers: np.ndarray, count: int) -> np.ndarray:
    """A group's row numbers as an index into its table of ``count`` tuples; ``ValueError``
    when one is past the table (a damaged block)."""
    if len(numbers) and int(numbers.max()) >= count:
        raise ValueError(f"a {group} number past its table")
    return numbers.astype(np.intp)


def _expanded(group: str, codes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """A column of ``group`` per row: its value in ``table`` (the group's list) at each row's
    number in ``codes``; ``ValueError`` when a number is past the list."""
    if _NATIVE is None:
        return table.take(_checked_index(group, codes, len(table)))
    table = np.ascontiguousarray(table)
    out = np.empty(len(codes), dtype=table.dtype)
    width = table.dtype.itemsize
    try:
        _NATIVE.gather_group(np.ascontiguousarray(codes, dtype=np.uint32), table, width, out, width, np.asarray([[0, 0, width]], dtype=np.int64))
    except ValueError:
        raise ValueError(f"a {group} number past its table") from None
    return out


def decode_block(payload: bytes, n: int) -> np.ndarray:
    """The rows of a block (``filetime`` left at 0 for the caller to fill); ``ValueError`` when
    the payload does not decode to ``n`` rows."""
    if n < 0:
        raise ValueError("a negative row count")
    spans, counts = column_spans(payload[:HEAD_BYTES], n)
    if spans and spans[-1][0] + spans[-1][1] != len(payload):
        raise ValueError("block size does not match its columns")
    rows = np.zeros(n, dtype=RECORD_DTYPE)
    tables = {group: np.zeros(count, dtype=RECORD_DTYPE) for group, count in counts.items()}
    codes: dict[str, np.ndarray] = {}
    for name, (at, length, coding, digest) in zip(_PARTS, spans, strict=True):
        part = payload[at : at + length]
        if name in _GROUPS:
            codes[name] = _column(part, coding, digest, n, name)
        elif name in _GROUP_OF:
            group = _GROUP_OF[name]
            tables[group][name] = _column(part, coding, digest, counts[group], name)
        elif _NATIVE is not None and coding == _PACKED and _digest(part) == digest:
            try:
                _NATIVE.decode_column(part, rows, RECORD_DTYPE.itemsize, _PLACES[name], _WIDTH[name])
            except ValueError as error:
                raise ValueError(f"column {name!r} does not unpack: {error}") from None
        else:
            rows[name] = _column(part, coding, digest, n, name)
    for group, names in _GROUPS.items():
        numbers = codes[group]
        if _NATIVE is not None:
            try:
                numbers = np.ascontiguousarray(numbers, dtype=np.uint32)
                _NATIVE.gather_group(numbers, tables[group], RECORD_DTYPE.itemsize, rows, RECORD_DTYPE.itemsize, _GROUP_MOVES[group])
            except ValueError:
                raise ValueError(f"a {group} number past its table") from None
            continue
        index = _checked_index(group, numbers, counts[group])
        for name in names:
            rows[name] = np.ascontiguousarray(tables[group][name]).take(index)  # (into a strided field: slower)
    rows["timestamp"] = np.cumsum(rows["timestamp"])
    rows["user_data_length"] = rows["size"] - rows["user_data_offset"] - rows["user_data_length"]
    rows["offset"] = _offsets_back(rows, rows["offset"])
    return rows


def summary_of(rows: np.ndarray, first_row: int) -> dict[str, Any]:
    """What lets a reader skip the block: rows, first row, filetime range, providers, event ids."""
    ids = np.flatnonzero(np.bincount(rows["id"])) if len(rows) else np.zeros(0, dtype=np.int64)  # (u16: a count per id is cheaper than a sort)
    providers = np.flatnonzero(np.bincount(rows["provider"].astype(np.int64) + 1)) - 1 if len(rows) else ids
    return {
        "rows": len(rows), "first_row": first_row,
        "filetime": [int(rows["filetime"].min()), int(rows["filetime"].max())] if len(rows) else [0, 0],
        "providers": providers.tolist(),
        "ids": ids.tolist() if len(ids) <= ID_LIST_LIMIT else None,
    }  # fmt: skip


class BlockWriter:
    """Appends blocks to an open binary file, then the buffer table, footer and trailer."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.blocks: list[dict[str, Any]] = []
        self.footer: dict[str, Any] = {}
        out.write(MAGIC)
        self.position = len(MAGIC)

    def add(self, rows: np.ndarray, first_row: int) -> dict[str, Any]:
        payload = encode_block(rows)
        summary = dict(summary_of(rows, first_row), at=self.position, length=len(payload), digest=_digest(payload[:HEAD_BYTES]).hex())
        self.out.write(payload)
        self.position += len(payload)
        self.blocks.append(summary)
        return summary

    def finish(self, head: dict[str, Any], buffers: np.ndarray, providers: list[bytes]) -> None:
        table = zlib.compress(np.ascontiguousarray(buffers, dtype=BUFFER_DTYPE).tobytes(), _LEVEL)
        self.out.write(table)
        footer = dict(
            head, format=FORMAT, blocks=self.blocks, providers=[guid.hex() for guid in providers],
            buffer_table=[self.position, len(table), len(buffers)], buffer_table_digest=_digest(table).hex(),
        )  # fmt: skip
        self.position += len(table)
        self.footer = footer
        data = json.dumps(footer, separators=(",", ":")).encode("utf-8")
        self.out.write(data)
        self.out.write(_TRAILER.pack(self.position, len(data), _digest(data, 16), TRAILER_MAGIC))
        self.position += len(data) + _TRAILER.size


class StoredIndex:
    """An index file opened for reading: its footer, and its blocks read on demand."""

    def __init__(self, fd: int, footer: dict[str, Any]) -> None:
        self.fd = fd
        self.footer = footer
        self.blocks: list[dict[str, Any]] = footer["blocks"]

    def _part(self, at: Any, length: Any, digest: Any) -> bytes:
        payload = os.pread(self.fd, int(length), int(at))
        if len(payload) != int(length) or not isinstance(digest, str) or _digest(payload).hex() != digest:
            raise ValueError("its digest does not match")
        return payload

    def block(self, number: int) -> np.ndarray:
        """Block ``number``'s rows; ``ValueError`` when it is damaged."""
        entry = self.blocks[number]
        payload = os.pread(self.fd, int(entry["length"]), int(entry["at"]))
        self._check_head(payload[:HEAD_BYTES], entry)
        return decode_block(payload, int(entry["rows"]))

    def columns(self, number: int, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Columns ``names`` of block ``number`` (only those read and unpacked); ``ValueError``
        when what is read of it is damaged."""
        entry = self.blocks[number]
        at, length = int(entry["at"]), int(entry["length"])
        head = os.pread(self.fd, min(HEAD_BYTES, length), at)
        self._check_head(head, entry)

        def read(offset: int, size: int) -> bytes:
            if offset + size > length:
                raise ValueError("a column past its block")
            return os.pread(self.fd, size, at + offset)

        return decode_columns(read, head, int(entry["rows"]), names)

    @staticmethod
    def _check_head(head: bytes, entry: dict[str, Any]) -> None:
        digest = entry.get("digest")
        if len(head) != HEAD_BYTES or not isinstance(digest, str) or _digest(head).hex() != digest:
            raise ValueError("its digest does not match")

    def buffers(self) -> np.ndarray:
        """The buffer table; ``ValueError`` when it is damaged."""
        at, length, count = self.footer["buffer_table"]
        payload = self._part(at, length, self.footer.get("buffer_table_digest"))
        try:
            data = zlib.decompress(payload)
        except zlib.error as error:
            raise ValueError(f"the buffer table does not decompress: {error}") from None
        return np.frombuffer(data, dtype=BUFFER_DTYPE, count=int(count)).copy()

    def __del__(self) -> None:  # a raw descriptor: closed with its owner even when nobody called close()
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_stored(location: str | os.PathLike[str]) -> StoredIndex | None:
    """The index file at ``location``, or ``None`` when it is missing, damaged, of another
    format (an older index is rebuilt, never misread), or not an index at all."""
    try:
        fd = os.open(location, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < len(MAGIC) + _TRAILER.size or os.pread(fd, len(MAGIC), 0) != MAGIC:
            raise ValueError("not an index of this format")
        at, length, digest, magic = _TRAILER.unpack(os.pread(fd, _TRAILER.size, size - _TRAILER.size))
        if magic != TRAILER_MAGIC or at + length + _TRAILER.size != size:
            raise ValueError("no trailer")
        data = os.pread(fd, length, at)
        if _digest(data, 16) != digest:
            raise ValueError("the footer does not match its digest")
        footer = json.loads(data.decode("utf-8"))
        if not isinstance(footer, dict) or footer.get("format") != FORMAT or not isinstance(footer.get("blocks"), list):
            raise ValueError("another format")
        for entry in footer["blocks"]:
            if int(entry["at"]) < len(MAGIC) or int(entry["length"]) < 0 or int(entry["at"]) + int(entry["length"]) > at:
                raise ValueError("a block outside the file's blocks")
        return StoredIndex(fd, footer)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error):
        os.close(fd)
        return None
