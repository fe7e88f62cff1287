"""Building an ETL index: every record's place and header columns, with numpy.

``index_walk`` finds the records; here their header fields are gathered at once from the fixed
offsets of each header kind, provider GUIDs go to a table, and the rows are put in the order
``EtlReader.records(time_order=True)`` gives. One row per record, the same fields as the
``EventRecord`` the reader would build (a kernel record's provider is the event class GUID of
its group, as ``openetw.consumer.provider.match_guid`` matches it).
"""

from __future__ import annotations

import heapq
import itertools
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.consumer._engine.index_walk import CHUNK_BYTES, HEADER_SIZES, Buffers, Chains, read_buffers, walk_chains
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock
from openetw.etl.logfile import LogfileHeader
from openetw.etl.reader import EtlReader
from openetw.etl.record import RECORD_CLASSES, MessageRecord, RecordContext
from openetw.tdh.mof_kernel import GROUP_GUIDS, HOOK_ALIASES

__all__ = [
    "BUFFER_DTYPE", "KIND_CODES", "KIND_NAMES", "RECORD_DTYPE", "BuiltIndex", "build_index_data", "file_order_rows", "filetimes", "provider_table",
]

RECORD_DTYPE = np.dtype([
    ("timestamp", "<i8"), ("filetime", "<i8"), ("keyword", "<u8"),
    ("provider", "<i4"), ("pid", "<u4"), ("tid", "<u4"), ("cpu", "<u4"), ("buffer", "<u4"), ("offset", "<u4"),
    ("size", "<u4"), ("user_data_offset", "<u4"), ("user_data_length", "<u4"),
    ("id", "<u2"), ("version", "<u2"), ("task", "<u2"), ("hook_id", "<u2"), ("flags", "<u2"),
    ("kind", "u1"), ("header_type", "u1"), ("level", "u1"), ("opcode", "u1"), ("channel", "u1"),
])  # fmt: skip
"""One index row: the header fields of a record and where it sits (``offset`` inside the data of
buffer ``buffer``, ``user_data_offset`` inside the record). ``provider`` indexes the provider
table (-1: none)."""
RECORD_COLUMNS: tuple[str, ...] = RECORD_DTYPE.names or ()  # (a structured dtype always has names)
RECORD_FIELDS: dict[str, np.dtype[Any]] = {name: RECORD_DTYPE[name] for name in RECORD_COLUMNS}
"""Each column's dtype."""

BUFFER_DTYPE = np.dtype([
    ("file_offset", "<i8"), ("timestamp", "<i8"), ("buffer_size", "<u4"), ("data_end", "<u4"),
    ("length", "<u4"), ("cpu", "<u4"), ("index", "<u4"), ("flags", "<u2"), ("buffer_type", "<u2"),
])  # fmt: skip

KIND_NAMES = ("system", "compact", "perfinfo", "classic", "instance", "event", "wpp", "unknown")
KIND_CODES = {name: code for code, name in enumerate(KIND_NAMES)}
_SYSTEM, _COMPACT, _PERFINFO, _CLASSIC, _INSTANCE, _EVENT, _WPP, _UNKNOWN = range(8)
_u32 = struct.Struct("<I").unpack_from


def _kind_table() -> np.ndarray:
    kind = np.full(256, _WPP, dtype=np.uint8)
    for header_type, cls in RECORD_CLASSES.items():
        kind[header_type] = KIND_CODES[cls.kind]
    return kind


def _group_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo = np.zeros(256, dtype=np.uint64)
    hi = np.zeros(256, dtype=np.uint64)
    has = np.zeros(256, dtype=bool)
    for group, guid in GROUP_GUIDS.items():
        lo[group], hi[group] = struct.unpack("<QQ", guid.bytes_le)
        has[group] = True
    return lo, hi, has


_KIND_OF_TYPE = _kind_table()
_GROUP_LO, _GROUP_HI, _GROUP_HAS = _group_tables()


@dataclass
class BuiltIndex:
    """What a build gives: rows in time order, the provider table, buffers, facts and problems."""

    records: np.ndarray
    providers: list[uuid.UUID]
    buffers: np.ndarray
    header: LogfileHeader
    context: RecordContext
    errors: list[dict[str, Any]] = field(default_factory=list)
    unknown_reasons: dict[int, str] = field(default_factory=dict)
    read_stats: dict[str, int] = field(default_factory=dict)
    exact_time_order: bool = True


class _Views:
    """The blob seen as u8 and u64 arrays."""

    def __init__(self, blob: bytes | bytearray) -> None:
        self.u8 = np.frombuffer(blob, dtype=np.uint8)
        self.u64 = np.frombuffer(blob, dtype="<u8", count=len(blob) // 8)


def _at(layout: L.Layout, name: str, code: str, plus: int = 0) -> tuple[str, int]:
    return code, layout.offset(name) + plus


_S, _P, _C, _E = L.SYSTEM_TRACE_HEADER, L.PERFINFO_TRACE_HEADER, L.EVENT_TRACE_HEADER, L.EVENT_HEADER
# Each family's columns, where ``layouts.py`` puts them (an opcode is the low byte of a HookId;
# a GUID is read as its two 8-byte halves).
_KERNEL_FIELDS = {
    "version": _at(_S, "Version", "u1"), "version_word": _at(_S, "Version", "<u2"), "opcode": _at(_S, "HookId", "u1"),
    "hook_id": _at(_S, "HookId", "<u2"), "tid": _at(_S, "ThreadId", "<u4"), "pid": _at(_S, "ProcessId", "<u4"),
    "timestamp": _at(_S, "SystemTime", "<i8"),
}  # fmt: skip
_PERFINFO_FIELDS = {
    "version": _at(_P, "Version", "u1"), "version_word": _at(_P, "Version", "<u2"), "opcode": _at(_P, "HookId", "u1"),
    "hook_id": _at(_P, "HookId", "<u2"), "timestamp": _at(_P, "SystemTime", "<i8"),
}  # fmt: skip
_CLASSIC_FIELDS = {
    "opcode": _at(_C, "Type", "u1"), "level": _at(_C, "Level", "u1"), "version": _at(_C, "Version", "<u2"), "tid": _at(_C, "ThreadId", "<u4"),
    "pid": _at(_C, "ProcessId", "<u4"), "timestamp": _at(_C, "TimeStamp", "<i8"), "lo": _at(_C, "Guid", "<u8"), "hi": _at(_C, "Guid", "<u8", 8),
}  # fmt: skip
_EVENT_FIELDS = {
    "flags": _at(_E, "Flags", "<u2"), "tid": _at(_E, "ThreadId", "<u4"), "pid": _at(_E, "ProcessId", "<u4"), "timestamp": _at(_E, "TimeStamp", "<i8"),
    "lo": _at(_E, "ProviderId", "<u8"), "hi": _at(_E, "ProviderId", "<u8", 8), "id": _at(_E, "Id", "<u2"), "version": _at(_E, "Version", "u1"),
    "channel": _at(_E, "Channel", "u1"), "level": _at(_E, "Level", "u1"), "opcode": _at(_E, "Opcode", "u1"), "task": _at(_E, "Task", "<u2"),
    "keyword": _at(_E, "Keyword", "<u8"),
}  # fmt: skip
# The SYSTEM extension rule (``framing.system_header_extension``) by the Version word's high byte.
_EXTENSION_BYTES = np.asarray([F.system_header_extension(high << 8) for high in range(256)], dtype=np.int64)
_FAMILIES = (
    # (name, header words its fields lie in, kind codes, fields at their header offsets, columns taken as they are);
    # the numbering (0 kernel, 1 perfinfo, 2 classic, 3 event) is used below
    ("kernel", 3, (_SYSTEM, _COMPACT), _KERNEL_FIELDS, ("version", "opcode", "hook_id", "tid", "pid", "timestamp")),
    ("perfinfo", 2, (_PERFINFO,), _PERFINFO_FIELDS, ("version", "opcode", "hook_id", "timestamp")),
    ("classic", 5, (_CLASSIC, _INSTANCE), _CLASSIC_FIELDS, ("opcode", "level", "version", "tid", "pid", "timestamp")),
    ("event", 7, (_EVENT,), _EVENT_FIELDS, ("flags", "tid", "pid", "timestamp", "id", "version", "channel", "level", "opcode", "task", "keyword")),
)
_FAMILY_OF_KIND = np.full(8, -1, dtype=np.int64)  # -1: WPP and unknown records
for _number, _family in enumerate(_FAMILIES):
    _FAMILY_OF_KIND[list(_family[2])] = _number


def _family_view(fields: dict[str, tuple[str, int]], words: int) -> np.dtype:
    """The header fields of a family over blocks of ``words`` 8-byte words."""
    return np.dtype({
        "names": list(fields), "formats": [f for f, _ in fields.values()], "offsets": [o for _, o in fields.values()],
        "itemsize": 8 * words,
    })  # fmt: skip


# The compiled twin of ``_framed_rows`` (openetw._native): the columns it writes, in its order, where
# RECORD_DTYPE puts them (with the types it writes them as), and the kernel tables it needs.
_NATIVE = native_module("_read")
_NATIVE_COLUMNS = (
    ("timestamp", "<i8"), ("keyword", "<u8"), ("pid", "<u4"), ("tid", "<u4"), ("cpu", "<u4"), ("buffer", "<u4"), ("offset", "<u4"),
    ("size", "<u4"), ("user_data_offset", "<u4"), ("user_data_length", "<u4"), ("id", "<u2"), ("version", "<u2"), ("task", "<u2"),
    ("hook_id", "<u2"), ("flags", "<u2"), ("kind", "|u1"), ("header_type", "|u1"), ("level", "|u1"), ("opcode", "|u1"), ("channel", "|u1"),
)  # fmt: skip
assert all(RECORD_DTYPE[name].str == code for name, code in _NATIVE_COLUMNS)
_COLUMN_AT = np.asarray([RECORD_DTYPE.fields[name][1] for name, _ in _NATIVE_COLUMNS], dtype=np.int64)  # type: ignore[index]
_GROUPS = np.stack([_GROUP_LO.view(np.int64), _GROUP_HI.view(np.int64), _GROUP_HAS.astype(np.int64)], axis=1).copy()
_ALIASES = np.asarray([(group, hook_type, to) for (group, hook_type), (to, _) in HOOK_ALIASES.items()], dtype=np.int64).reshape(-1, 3)


def _framed_rows(bufs: Buffers, chains: Chains, cpus: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the framed records (file order), their GUID halves and whether they have one
    (by the compiled core when it runs, else with numpy: ``_framed_rows_numpy``)."""
    rows, lo, hi, has = _framed_rows_numpy(bufs, chains, cpus, indices) if _NATIVE is None else _framed_rows_native(bufs, chains, cpus, indices)
    # A damaged header can say its user data starts past the record's end (a kernel header's
    # extension longer than the record): the record has no user data, as the reader gives it.
    past = np.flatnonzero(rows["user_data_offset"] > rows["size"])
    if len(past):
        rows["user_data_offset"][past] = rows["size"][past]
        rows["user_data_length"][past] = 0
    return rows, lo, hi, has


def _framed_rows_native(bufs: Buffers, chains: Chains, cpus: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    assert _NATIVE is not None
    n = len(chains.offsets)
    rows = np.zeros(n, dtype=RECORD_DTYPE)
    lo, hi, has = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool)

    def int64s(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.int64)

    _NATIVE.rows(
        bufs.blob, int64s(chains.offsets), int64s(chains.sizes), int64s(chains.buffers), int64s(bufs.bases), int64s(cpus),
        int64s(indices), _GROUPS, _ALIASES, _EXTENSION_BYTES, _COLUMN_AT, rows, RECORD_DTYPE.itemsize, lo, hi, has,
    )  # fmt: skip
    if np.any(rows["kind"] == _WPP):
        _fill_wpp(rows, lo, hi, has, bufs, chains)
    return rows, lo, hi, has


def _framed_rows_numpy(bufs: Buffers, chains: Chains, cpus: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the framed records (file order), their GUID halves and whether they have one.

    Each record's header is gathered once as a block of words, and each family of header
    kinds reads its columns from the blocks through a structured view. The family with most
    rows is read over every row (no gathers or scatters by row number) when it has at least
    half of them; the other rows are then cleared and read by their own family.
    """
    v = _Views(bufs.blob)
    p = chains.offsets
    n = len(p)
    slot = p >> 3
    first_word = v.u64.take(slot)
    header_type = ((first_word >> np.uint64(F.MARKER_TYPE_SHIFT)) & np.uint64(0xFF)).astype(np.intp)
    flags = (first_word >> np.uint64(F.MARKER_FLAGS_SHIFT)) & np.uint64(0xFF)
    typed = (flags & np.uint64(F.TYPED_FLAGS_MASK)) == F.TYPED_FLAGS_MASK
    kind = np.where(typed, _KIND_OF_TYPE.take(header_type), _WPP).astype(np.uint8)
    rows = np.zeros(n, dtype=RECORD_DTYPE)
    user_data_offset = HEADER_SIZES.take(header_type)
    lo = np.zeros(n, dtype=np.uint64)
    hi = np.zeros(n, dtype=np.uint64)
    has = np.zeros(n, dtype=bool)
    family = _FAMILY_OF_KIND.take(kind)
    counts = np.bincount(family + 1, minlength=len(_FAMILIES) + 1)[1:].tolist()
    present = sorted((f for f in range(len(_FAMILIES)) if counts[f]), key=lambda f: -counts[f])
    if present:
        # The first ``words`` 8-byte words of every record, gathered as one item each: a view of
        # the blob with an item of that size at every slot (records start on slots).
        words = max(_FAMILIES[f][1] for f in present)
        windows = np.ndarray(shape=(len(v.u64) - words + 1,), dtype=np.dtype((np.void, 8 * words)), buffer=bufs.blob, strides=(8,))
        blocks = windows[slot]
    for rank, number in enumerate(present):
        _, _, _, fields, copied = _FAMILIES[number]
        view = blocks.view(_family_view(fields, words))
        if rank == 0 and counts[number] * 2 >= n:
            at: np.ndarray | slice = slice(None)
            if counts[number] < n:
                others = np.flatnonzero(family != number)
            else:
                others = None
        else:
            at = np.flatnonzero(family == number)
            view = view.take(at)
            others = None
        for name in copied:
            rows[name][at] = view[name]
        if number <= 1:  # kernel headers: group GUIDs from the hook, extensions after the header
            version = view["version_word"].astype(np.int64)
            user_data_offset[at] += _EXTENSION_BYTES.take(version >> 8)
            hook = view["hook_id"].astype(np.int64)
            group = hook >> 8
            for (from_group, from_type), (to_group, _) in HOOK_ALIASES.items():
                group = np.where((group == from_group) & ((hook & 0xFF) == from_type), to_group, group)
            lo[at], hi[at], has[at] = _GROUP_LO.take(group), _GROUP_HI.take(group), _GROUP_HAS.take(group)
            if number == 1:
                rows["pid"][at] = 0xFFFFFFFF
                rows["tid"][at] = 0xFFFFFFFF
        else:
            lo[at], hi[at], has[at] = view["lo"], view["hi"], True
        if number == 3:  # EVENT_HEADER: extended items before the user data
            extended = (view["flags"] & L.EVENT_HEADER_FLAG_EXTENDED_INFO) != 0
            if isinstance(at, slice) and others is not None:
                extended &= family == number
            extended_rows = np.flatnonzero(extended) if isinstance(at, slice) else at[extended]
            if len(extended_rows):
                user_data_offset[extended_rows] = _after_extended_items(v.u8, p[extended_rows], chains.sizes[extended_rows])
        if others is not None:  # read over every row: clear what the others got from it
            rows[others] = np.zeros((), dtype=RECORD_DTYPE)
            lo[others], hi[others], has[others] = 0, 0, False
            user_data_offset[others] = HEADER_SIZES.take(header_type.take(others))
    rows["header_type"] = header_type
    rows["kind"] = kind
    rows["size"] = chains.sizes
    rows["buffer"] = indices.take(chains.buffers)
    rows["cpu"] = cpus.take(chains.buffers)
    rows["offset"] = p - bufs.bases.take(chains.buffers)
    rows["user_data_offset"] = user_data_offset
    rows["user_data_length"] = chains.sizes - user_data_offset
    if np.any(kind == _WPP):
        _fill_wpp(rows, lo, hi, has, bufs, chains)
    return rows, lo, hi, has


def _after_extended_items(u8: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Where the user data of EVENT_HEADER records with extended items starts (relative)."""
    pos = starts + L.EVENT_HEADER.size
    end = starts + sizes
    active = np.ones(len(starts), dtype=bool)
    while True:
        live = np.flatnonzero(active & (pos + 8 <= end))
        if not len(live):
            break
        at = pos[live]
        item_size = u8[at].astype(np.int64) | (u8[at + 1].astype(np.int64) << 8)
        linkage = u8[at + 4]
        ok = item_size >= 8
        pos[live[ok]] += item_size[ok]
        active[:] = False
        active[live[ok & (linkage & 1 != 0)]] = True
    lengths: np.ndarray = np.minimum(pos, end) - starts
    return lengths


def _fill_wpp(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, has: np.ndarray, bufs: Buffers, chains: Chains) -> None:
    """WPP records keep their time, ids and GUID in optional items: read them one by one."""
    context = RecordContext(TraceClock(0, 0, 0, 0))
    for row in np.flatnonzero(rows["kind"] == _WPP).tolist():
        pos, size = int(chains.offsets[row]), int(chains.sizes[row])
        header = L.MESSAGE_TRACE_HEADER.unpack_from(bufs.blob, pos)
        record = MessageRecord(header, bytes(bufs.blob[pos : pos + size]), 0, size, 0, context)  # (the blob may be a bytearray)
        rows["id"][row] = record.id
        rows["timestamp"][row] = record.timestamp
        rows["pid"][row] = record.pid
        rows["tid"][row] = record.tid
        rows["user_data_offset"][row] = record.user_data_offset
        rows["user_data_length"][row] = record.user_data_length
        guid = record.provider_guid_bytes
        if guid is not None:
            lo[row], hi[row] = struct.unpack("<QQ", guid)
            has[row] = True


def provider_table(lo: np.ndarray, hi: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, list[uuid.UUID]]:
    """The provider column and table: unique GUIDs, found through a 64-bit mix of both halves."""
    column = np.full(len(lo), -1, dtype=np.int32)
    rows = np.flatnonzero(has)
    if not len(rows):
        return column, []
    a, b = lo[rows], hi[rows]
    mixed = a ^ (b * np.uint64(0x9E3779B97F4A7C15))
    first, inverse = _unique_runs(mixed)
    if not (np.array_equal(a, a[first][inverse]) and np.array_equal(b, b[first][inverse])):
        pairs = list(zip(a.tolist(), b.tolist(), strict=True))  # two GUIDs mixed to one key: do it exactly
        table: dict[tuple[int, int], int] = {}
        inverse = np.asarray([table.setdefault(pair, len(table)) for pair in pairs], dtype=np.int64)
        first = np.asarray([pairs.index(pair) for pair in table], dtype=np.int64)
    column[rows] = inverse
    return column, [uuid.UUID(bytes_le=struct.pack("<QQ", int(a[i]), int(b[i]))) for i in first.tolist()]


def by_appearance(column: np.ndarray, table: list[uuid.UUID]) -> tuple[np.ndarray, list[uuid.UUID]]:
    """The provider column and table renumbered in order of first appearance in ``column``
    (so that the table does not depend on how the rows were taken in pieces)."""
    present = column[column >= 0]
    codes, first = np.unique(present, return_index=True)
    ordered = codes[np.argsort(first, kind="stable")]
    remap = np.full(len(table) + 1, -1, dtype=np.int32)
    remap[ordered] = np.arange(len(ordered), dtype=np.int32)
    return remap[column], [table[code] for code in ordered.tolist()]


def _unique_runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True, return_inverse=True)[1:]``, sorting only the first
    key of each run of equal keys when there are few runs (a provider's records come together)."""
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    if len(starts) * 4 >= len(keys):
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    _, first_run, run_inverse = np.unique(keys[starts], return_index=True, return_inverse=True)
    run_of = np.zeros(len(keys), dtype=np.int64)
    run_of[starts[1:]] = 1
    return starts[first_run], run_inverse.reshape(-1)[np.cumsum(run_of)]


def _unknown_rows(bufs: Buffers, chains: Chains, cpus: np.ndarray, indices: np.ndarray) -> np.ndarray:
    rows = np.zeros(len(chains.unknown), dtype=RECORD_DTYPE)
    for row, (offset, size, position, _) in enumerate(chains.unknown):
        rows["kind"][row] = _UNKNOWN
        rows["header_type"][row] = F.header_type_of(_u32(bufs.blob, offset)[0])
        rows["size"][row] = size
        rows["user_data_length"][row] = size
        rows["buffer"][row] = indices[position]
        rows["cpu"][row] = cpus[position]
        rows["offset"][row] = offset - int(bufs.bases[position])
    return rows


def _merge_keys(rows: np.ndarray) -> np.ndarray:
    """The time the reader's merge orders each record by (an unknown record takes the time of
    the record before it in its buffer, or 0 when it comes first)."""
    keys = rows["timestamp"].copy()
    for row in np.flatnonzero(rows["kind"] == _UNKNOWN).tolist():
        keys[row] = keys[row - 1] if row and rows["buffer"][row - 1] == rows["buffer"][row] else 0
    return keys


def _time_order(rows: np.ndarray, buffer_indices: list[int]) -> tuple[np.ndarray, bool]:
    """The permutation of file-order rows into ``records(time_order=True)`` order.

    When every buffer's records are in time order and it starts with an ordinary record (every
    real file seen), the reader's merge is a stable sort by time; otherwise the merge is replayed
    record by record. Returns (order, whether the sort sufficed).
    """
    keys = _merge_keys(rows)
    buffers = rows["buffer"]
    same_buffer = buffers[1:] == buffers[:-1]
    monotone = not np.any(same_buffer & (keys[1:] < keys[:-1]))
    firsts = np.flatnonzero(np.concatenate(([True], ~same_buffer))) if len(rows) else np.zeros(0, dtype=np.int64)
    plain_starts = not np.any(np.isin(rows["kind"][firsts], (_WPP, _UNKNOWN)))
    if monotone and plain_starts:
        if not np.any(keys[1:] < keys[:-1]):
            return np.arange(len(rows)), True  # already in time order: the stable sort changes nothing
        return np.argsort(keys, kind="stable"), True
    return _replayed_order(rows, keys, firsts, buffer_indices), False


def _replayed_order(rows: np.ndarray, keys: np.ndarray, firsts: np.ndarray, buffer_indices: list[int]) -> np.ndarray:
    """``EtlReader``'s k-way merge over buffers, replayed on the keys (its window unbounded)."""
    spans: dict[int, tuple[int, int]] = {}
    bounds = firsts.tolist() + [len(rows)]
    for start, stop in itertools.pairwise(bounds):
        spans[int(rows["buffer"][start])] = (start, stop)
    key_list, kinds, timestamps = keys.tolist(), rows["kind"].tolist(), rows["timestamp"].tolist()
    pending: list[tuple[int, int]] = []
    last_first = 0
    for index in buffer_indices:
        start, stop = spans.get(index, (0, 0))
        if stop > start and kinds[start] not in (_WPP, _UNKNOWN):
            last_first = timestamps[start]
        pending.append((last_first, index))
    heapq.heapify(pending)
    active: list[tuple[int, int, int, int, int]] = []
    order: list[int] = []
    seq = 0
    while pending or active:
        while pending and (not active or pending[0][0] <= active[0][0]):
            _, index = heapq.heappop(pending)
            start, stop = spans.get(index, (0, 0))
            if stop > start:
                seq += 1
                heapq.heappush(active, (timestamps[start] if kinds[start] != _UNKNOWN else 0, index, seq, start, stop))
        if not active:
            continue
        ts, index, _, row, stop = active[0]
        order.append(row)
        if row + 1 >= stop:
            heapq.heappop(active)
        else:
            seq += 1
            heapq.heapreplace(active, (key_list[row + 1] if kinds[row + 1] != _UNKNOWN else ts, index, seq, row + 1, stop))
    return np.asarray(order, dtype=np.int64)


def _buffer_table(bufs: Buffers) -> np.ndarray:
    table = np.zeros(len(bufs.infos), dtype=BUFFER_DTYPE)
    for row, info in enumerate(bufs.infos):
        # a compressed buffer's data_end is its inflated size; an uncompressed one's is kept within
        # the buffer (a damaged Offset, which the reader reports, is not a size worth keeping)
        data_end = info.data_end if info.flags & L.BUFFER_FLAG_COMPRESSED else min(info.data_end, info.buffer_size)
        table[row] = (info.file_offset, info.timestamp, info.buffer_size, data_end, bufs.lengths[row], info.cpu, info.index, info.flags, info.buffer_type)
    return table


def take(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``rows[order]`` for a structured array, at the speed of a byte copy."""
    raw = rows.view(np.dtype((np.void, rows.dtype.itemsize)))
    taken: np.ndarray = np.take(raw, order).view(rows.dtype)
    return taken


def concat(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` for structured arrays of one dtype, at the speed of a byte copy
    (numpy copies a structured array field by field: 25 times slower for the index's rows)."""
    if len(parts) == 1:
        return parts[0]
    raw = np.dtype((np.void, parts[0].dtype.itemsize))
    joined: np.ndarray = np.concatenate([part.view(raw) for part in parts]).view(parts[0].dtype)
    return joined


def keep(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``rows[mask]`` for a structured array and a boolean mask, at the speed of a byte copy."""
    kept: np.ndarray = rows.view(np.dtype((np.void, rows.dtype.itemsize)))[mask].view(rows.dtype)
    return kept


def filetimes(timestamps: np.ndarray, clock: TraceClock) -> np.ndarray:
    """``clock.to_filetime`` over an array, exactly (no intermediate overflow)."""
    delta = timestamps.astype(np.int64) - np.int64(clock.reference_timestamp)
    if clock.clock_type == L.CLOCK_QPC and clock.perf_freq > 0:
        seconds, rest = np.divmod(delta, np.int64(clock.perf_freq))
        ticks = seconds * 10_000_000 + (rest * 10_000_000) // clock.perf_freq
    elif clock.clock_type == L.CLOCK_CPU_CYCLE and clock.cpu_speed_mhz > 0:
        micros, rest = np.divmod(delta, np.int64(clock.cpu_speed_mhz))
        ticks = micros * 10 + (rest * 10) // clock.cpu_speed_mhz
    else:
        ticks = delta
    filetimes: np.ndarray = ticks + np.int64(clock.start_time)
    return filetimes


def file_order_rows(bufs: Buffers, chains: Chains) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[int, str]]:
    """One blob's rows in file order, their GUID halves, and the reasons of its unknown records
    (by row)."""
    cpus = np.asarray([info.cpu for info in bufs.infos], dtype=np.int64)
    indices = np.asarray([info.index for info in bufs.infos], dtype=np.int64)
    rows, lo, hi, has = _framed_rows(bufs, chains, cpus, indices)
    if not chains.unknown:
        return rows, lo, hi, has, {}
    unknown = _unknown_rows(bufs, chains, cpus, indices)
    count = len(unknown)
    offsets = np.concatenate([chains.offsets, np.asarray([u[0] for u in chains.unknown], dtype=np.int64)])
    order = np.argsort(offsets, kind="stable")
    rows = take(np.concatenate([rows, unknown]), order)
    lo, hi = np.append(lo, np.zeros(count, dtype=np.uint64))[order], np.append(hi, np.zeros(count, dtype=np.uint64))[order]
    has = np.append(has, np.zeros(count, dtype=bool))[order]
    framed = len(chains.offsets)
    reasons = {int(row): chains.unknown[int(source) - framed][3] for row, source in enumerate(order.tolist()) if source >= framed}
    return rows, lo, hi, has, reasons


def build_index_data(source: Any, *, chunk_bytes: int = CHUNK_BYTES) -> BuiltIndex:
    """Index one ETL file (a path, or anything ``EtlReader`` takes): see the module doc.

    Buffers are taken about ``chunk_bytes`` at a time; only the rows (tens of bytes per record)
    of the whole file are held at once.
    """
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    tables: list[np.ndarray] = []
    reasons: dict[int, str] = {}
    errors: list[dict[str, Any]] = []
    walked = {"unknown_records": 0, "skipped_bytes": 0}
    buffer_indices: list[int] = []
    done = 0
    with EtlReader(source, strict=False) as reader:
        header, context = reader.header, reader.context
        chunks, outcome = read_buffers(reader, chunk_bytes)
        for bufs in chunks:
            chains = walk_chains(bufs)
            rows, lo, hi, has, unknown = file_order_rows(bufs, chains)
            parts.append((rows, lo, hi, has))
            reasons.update({done + row: reason for row, reason in unknown.items()})
            done += len(rows)
            errors.extend(bufs.errors)
            for key in walked:
                walked[key] += bufs.stats.get(key, 0)
            tables.append(_buffer_table(bufs))
            buffer_indices.extend(info.index for info in bufs.infos)
        read_errors, read_stats = outcome()
    rows, lo, hi, has = (
        (parts[0][i] if len(parts) == 1 else np.concatenate([part[i] for part in parts])) if parts else np.zeros(0, dtype=dtype)
        for i, dtype in ((0, RECORD_DTYPE), (1, np.uint64), (2, np.uint64), (3, bool))
    )  # fmt: skip
    rows["provider"], providers = provider_table(lo, hi, has)
    order, exact = _time_order(rows, buffer_indices)
    if len(order) and not (order[0] == 0 and np.all(order[1:] > order[:-1])):
        rows = take(rows, order)
    rows["provider"], providers = by_appearance(rows["provider"], providers)  # the table in the rows' order
    rows["filetime"] = filetimes(rows["timestamp"], context.clock)
    if reasons:
        position_of = np.empty(len(order), dtype=np.int64)
        position_of[order] = np.arange(len(order))
        reasons = {int(position_of[row]): reason for row, reason in reasons.items()}
    stats = dict(read_stats, records=len(rows), unknown_records=walked["unknown_records"])
    stats["skipped_bytes"] = stats.get("skipped_bytes", 0) + walked["skipped_bytes"]
    buffers = np.concatenate(tables) if tables else np.zeros(0, dtype=BUFFER_DTYPE)
    return BuiltIndex(rows, providers, buffers, header, context, read_errors + by_buffer(errors), reasons, stats, exact)


def by_buffer(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Problems found walking the buffers, in buffer order (one buffer's in the order found),
    whatever chunks the buffers were walked in."""
    return sorted(errors, key=lambda error: (error["buffer_index"] is None, error["buffer_index"] or 0))
