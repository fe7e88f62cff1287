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
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock

__all__ = ["HeaderFacts", "Route", "Run", "buffer_sequence", "collect_rows", "event_headers"]

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


Run = tuple[Route, list[tuple[Any, ...]]]  # rows one after the other that share their route


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
                        if log_runs and log_runs[-1][0] is route:
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
