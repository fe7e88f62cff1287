"""The EVENT_HEADER records of a pool buffer, walked without building record objects. Pure.

A channel session stores events first and renders them later, so taking a buffer must cost
little per event: this walk reads each record's Size (first, as in every producer record),
unpacks the EVENT_HEADER's fields the log keeps as columns, and hands back the record's whole
bytes. Records of other header types (classic, WPP) are skipped: channels are manifest events.
``framing.walk`` is the reference it follows.

``collect_rows`` is the same walk for the store's hot path: each record goes straight to the
row its log stores (``store.VARYING_COLUMNS``: its route gives the others), routed by
(provider, channel), with no object per event; ``buffer_sequence`` reads the SequenceNumber a
buffer was framed with.

``collect_batch`` gives the same runs for a drain's buffers at once from their header columns
(``consumer.columns.buffer_headers``: the records framed and their headers gathered by the
compiled core), routed, filtered and refused per distinct (provider, channel) rather than per
event; its runs hold their rows as columns (``rows.ColumnRows``), no tuple per event.
``collect_rows`` is its per-event reference: tests hold the two to identical rows.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from openetw.consumer.columns import BufferHeaders, buffer_headers
from openetw.consumer.index import KIND_CODES
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock
from openetw.eventlog.rows import ColumnRows

__all__ = ["HeaderFacts", "Route", "Run", "buffer_sequence", "collect_batch", "collect_rows", "event_headers"]

_HEADER = L.EVENT_HEADER
_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_EVENT_TYPES = frozenset({L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_EVENT_HEADER64})
_I = _HEADER.index
_SIZE, _TYPE, _TID, _PID, _TIME, _GUID = _I("Size"), _I("HeaderType"), _I("ThreadId"), _I("ProcessId"), _I("TimeStamp"), _I("ProviderId")
_ID, _VERSION, _CHANNEL, _LEVEL, _OPCODE, _TASK = _I("Id"), _I("Version"), _I("Channel"), _I("Level"), _I("Opcode"), _I("Task")
_KEYWORD, _ACTIVITY = _I("Keyword"), _I("ActivityId")
_NULL_GUID = bytes(16)
_u64 = struct.Struct("<Q").unpack_from
_SEQUENCE_AT = L.WMI_BUFFER_HEADER.offset("SequenceNumber")
_SIGN = 1 << 63
_WRAP = 1 << 64


class HeaderFacts(NamedTuple):
    provider_guid: bytes  # as stored (little-endian GUID)
    event_id: int
    version: int
    channel: int
    level: int
    opcode: int
    task: int
    keyword: int
    pid: int
    tid: int
    timestamp: int
    activity_id: str | None
    raw: bytes


def event_headers(buffer: bytes) -> Iterator[HeaderFacts]:
    """Every EVENT_HEADER record of one pool buffer, in order."""
    used = min(_u32(buffer, F.BUFFER_OFFSET_AT)[0], len(buffer))
    position = F.RECORDS_START
    minimum, pad, align = F.MIN_RECORD_SIZE, F.RECORD_ALIGNMENT - 1, -F.RECORD_ALIGNMENT
    header_size = _HEADER.size
    unpack = _HEADER.unpack_from
    while position + minimum <= used:
        size = _u16(buffer, position)[0]
        if size < minimum or position + size > used:
            break
        if size >= header_size and buffer[position + 2] in _EVENT_TYPES:
            h = unpack(buffer, position)
            activity = h[_ACTIVITY]
            yield HeaderFacts(
                h[_GUID], h[_ID], h[_VERSION], h[_CHANNEL], h[_LEVEL], h[_OPCODE], h[_TASK], h[_KEYWORD], h[_PID], h[_TID],
                h[_TIME], None if activity == _NULL_GUID else str(uuid.UUID(bytes_le=activity)), buffer[position : position + size],
            )  # fmt: skip
        position += (size + pad) & align


def buffer_sequence(buffer: bytes) -> int:
    """The SequenceNumber of a buffer's WMI_BUFFER_HEADER: its place in its producer's pool."""
    return int(_u64(buffer, _SEQUENCE_AT)[0])


class Route(NamedTuple):
    """Where the events of one (provider, channel) go: their log, the constant columns of its
    rows, the log's level and keyword filters, and whether the writer may write there."""

    log: str
    provider_name: str
    provider_guid: str
    level: int | None  # the highest level kept (None: every level)
    keywords: int | None  # kept when any bit matches (None: every keyword)
    permitted: bool


Run = tuple[Route, Sequence[tuple[Any, ...]]]  # rows one after the other that share their route (a list, or ``ColumnRows``)


def collect_rows(
    buffer: bytes, routes: Mapping[tuple[bytes, int], Route | None], runs: dict[str, list[Run]], refused: dict[str, int], clock: TraceClock,
) -> None:  # fmt: skip
    """Add the row of every EVENT_HEADER record of ``buffer`` to its log's runs, in order:
    ``runs[log]`` is a list of (route, rows), a new run whenever the route changes; a row holds
    ``store.VARYING_COLUMNS`` (keywords as SQLite's signed 64 bits). As ``routes`` sends them: no
    route (``None``), filtered out by level or keywords: left out; a route the writer may not
    write: counted in ``refused[log]``. ``routes[key]`` is looked up with ``[]``, so a mapping
    with ``__missing__`` may route lazily. ``runs`` and ``refused`` must have a list and a count
    for every routed log (``defaultdict``)."""
    used = min(_u32(buffer, F.BUFFER_OFFSET_AT)[0], len(buffer))
    position = F.RECORDS_START
    minimum, pad, align = F.MIN_RECORD_SIZE, F.RECORD_ALIGNMENT - 1, -F.RECORD_ALIGNMENT
    header_size = _HEADER.size
    unpack = _HEADER.unpack_from
    start, reference, multiply, divide = clock.linear()
    types, null, sign, wrap = _EVENT_TYPES, _NULL_GUID, _SIGN, _WRAP
    last: Route | None = None
    rows: list[tuple[Any, ...]] = []
    while position + minimum <= used:
        size = _u16(buffer, position)[0]
        if size < minimum or position + size > used:
            break
        if size >= header_size and buffer[position + 2] in types:
            _, _, _, _, _, tid, pid, timestamp, guid, event_id, version, channel, level, opcode, task, keyword, _, activity = unpack(buffer, position)
            route = routes[guid, channel]
            if route is not None and (route.level is None or level <= route.level) and (route.keywords is None or keyword & route.keywords):
                if not route.permitted:
                    refused[route.log] += 1
                else:
                    if route is not last:
                        log_runs = runs[route.log]
                        if log_runs and log_runs[-1][0] is route and isinstance(log_runs[-1][1], list):
                            rows = log_runs[-1][1]
                        else:
                            rows = []
                            log_runs.append((route, rows))
                        last = route
                    filetime = start + (timestamp - reference) * multiply // divide
                    rows.append((
                        filetime if filetime > 0 else 0, event_id, version, level, task, opcode, keyword - wrap if keyword >= sign else keyword,
                        pid, tid, None if activity == null else str(uuid.UUID(bytes_le=activity)), buffer[position : position + size],
                    ))  # fmt: skip
        position += (size + pad) & align


_EVENT_TYPE_CODES = np.asarray(sorted(_EVENT_TYPES), dtype=np.uint8)
_ALL_LEVELS = 255
_KEY = np.dtype([("lo", "<u8"), ("hi", "<u8"), ("channel", "u1")])


def collect_batch(
    buffers: list[bytes], routes: Mapping[tuple[bytes, int], Route | None], runs: dict[str, list[Run]], refused: dict[str, int], clock: TraceClock,
) -> None:  # fmt: skip
    """``collect_rows`` over every buffer of ``buffers`` in order, from their header columns: the
    same runs and refused counts (see there)."""
    if not buffers:
        return
    headers = buffer_headers(buffers, clock)
    rows = headers.rows
    chosen = np.flatnonzero((rows["kind"] == _EVENT_KIND) & np.isin(rows["header_type"], _EVENT_TYPE_CODES) & (rows["size"] >= _HEADER.size))
    if not len(chosen):
        return
    rows = rows[chosen]
    found, inverse = _routes_of(headers.guid_lo[chosen], headers.guid_hi[chosen], rows["channel"], routes)
    level_bound = np.asarray([_ALL_LEVELS if r is None or r.level is None else r.level for r in found], dtype=np.int64)
    keyword_mask = np.asarray([0 if r is None or r.keywords is None else r.keywords & 0xFFFFFFFFFFFFFFFF for r in found], dtype=np.uint64)
    any_keyword = np.asarray([r is not None and r.keywords is None for r in found], dtype=bool)
    routed = np.asarray([r is not None for r in found], dtype=bool)
    permitted = np.asarray([r is not None and r.permitted for r in found], dtype=bool)
    passes = routed[inverse] & (rows["level"] <= level_bound[inverse]) & (any_keyword[inverse] | ((rows["keyword"] & keyword_mask[inverse]) != 0))
    denied = passes & ~permitted[inverse]
    if denied.any():
        for key, count in enumerate(np.bincount(inverse[denied], minlength=len(found)).tolist()):
            route = found[key]
            if count and route is not None:
                refused[route.log] += count
    kept = np.flatnonzero(passes & permitted[inverse])
    if not len(kept):
        return
    values = _row_columns(headers, chosen[kept], rows[kept])
    route_of = inverse[kept]
    logs: dict[str, list[int]] = {}
    for key, route in enumerate(found):
        if route is not None and route.permitted:
            logs.setdefault(route.log, []).append(key)
    for log, members in logs.items():
        if len(logs) == 1:
            mine, columns = np.arange(len(kept)), values
        else:
            mine = np.flatnonzero(np.isin(route_of, np.asarray(members, dtype=route_of.dtype)))
            if not len(mine):
                continue  # its events all filtered out
            chosen_rows = mine.tolist()
            columns = [[column[i] for i in chosen_rows] for column in values]
        theirs = route_of[mine]
        cuts = (np.flatnonzero(theirs[1:] != theirs[:-1]) + 1).tolist()
        log_runs = runs[log]
        for start, end in zip([0, *cuts], [*cuts, len(mine)], strict=True):
            route = found[int(theirs[start])]
            run = ColumnRows([column[start:end] for column in columns])
            if log_runs and log_runs[-1][0] is route and isinstance(log_runs[-1][1], ColumnRows):
                log_runs[-1][1].extend(run)
            else:
                log_runs.append((route, run))  # type: ignore[arg-type]  # a permitted route, never None


def _routes_of(lo: np.ndarray, hi: np.ndarray, channel: np.ndarray, routes: Mapping[tuple[bytes, int], Route | None]) -> tuple[list[Route | None], np.ndarray]:
    """The distinct (provider, channel) keys' routes, looked up in the order the records first
    name them (as the per-event walk looks them up), and each record's key."""
    if (lo == lo[0]).all() and (hi == hi[0]).all() and (channel == channel[0]).all():  # one channel of one provider: the usual drain
        unique_lo, unique_hi, unique_channel = lo[:1], hi[:1], channel[:1]
        inverse = np.zeros(len(lo), dtype=np.intp)
        order = [0]
    else:
        keys = np.empty(len(lo), dtype=_KEY)
        keys["lo"], keys["hi"], keys["channel"] = lo, hi, channel
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        unique_lo, unique_hi, unique_channel = unique["lo"], unique["hi"], unique["channel"]
        order = np.argsort(first, kind="stable").tolist()
    found: list[Route | None] = [None] * len(unique_lo)
    for key in order:
        guid = int(unique_lo[key]).to_bytes(8, "little") + int(unique_hi[key]).to_bytes(8, "little")
        found[key] = routes[guid, int(unique_channel[key])]
    return found, inverse.reshape(-1)


def _row_columns(headers: BufferHeaders, places: np.ndarray, rows: np.ndarray) -> list[list[Any]]:
    """The ``store.VARYING_COLUMNS`` of the chosen records, one list per column."""
    times = np.maximum(rows["filetime"], 0)
    keywords = rows["keyword"].view(np.int64)  # SQLite's signed 64 bits
    at = headers.at[places]
    blob = headers.blob
    if isinstance(blob, bytearray):
        blob = bytes(blob)
    activity: list[str | None] = [None] * len(rows)
    if not (at % 8).any():  # records start 8-aligned (framing.RECORD_ALIGNMENT): the id is two words
        words = np.frombuffer(blob, dtype="<u8", count=len(blob) // 8)
        named = np.flatnonzero((words[(at + _ACTIVITY_AT) // 8] | words[(at + _ACTIVITY_AT + 8) // 8]) != 0)
    else:
        octets = np.frombuffer(blob, dtype=np.uint8)
        named = np.flatnonzero(octets[(at + _ACTIVITY_AT)[:, None] + np.arange(16)].any(axis=1))
    for index, start in zip(named.tolist(), (at[named] + _ACTIVITY_AT).tolist(), strict=True):
        activity[index] = str(uuid.UUID(bytes_le=blob[start : start + 16]))
    # bytearrays: Python's sqlite3 binds one directly, but bytes only after a failed adapter
    # lookup that formats and drops an exception (about 0.5 us a record, on the store thread);
    # sliced from one copy of the blob (one copy per record, not two)
    data = bytearray(blob)
    records = [data[start:end] for start, end in zip(at.tolist(), (at + rows["size"]).tolist(), strict=True)]
    return [
        times.tolist(), rows["id"].tolist(), rows["version"].tolist(), rows["level"].tolist(), rows["task"].tolist(), rows["opcode"].tolist(),
        keywords.tolist(), rows["pid"].tolist(), rows["tid"].tolist(), activity, records,
    ]  # fmt: skip


_EVENT_KIND = KIND_CODES["event"]
_ACTIVITY_AT = _HEADER.offset("ActivityId")
