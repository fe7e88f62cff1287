"""The EVENT_HEADER records of a pool buffer, walked without building record objects. Pure.

A channel session stores events first and renders them later, so taking a buffer must cost
little per event: this walk reads each record's Size (first, as in every producer record),
unpacks the EVENT_HEADER's fields the log keeps as columns, and hands back the record's whole
bytes. Records of other header types (classic, WPP) are skipped: channels are manifest events.
``framing.walk`` is the reference it follows.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import NamedTuple

from openetw.etl import framing as F
from openetw.etl import layouts as L

__all__ = ["HeaderFacts", "event_headers"]

_HEADER = L.EVENT_HEADER
_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_EVENT_TYPES = frozenset({L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_EVENT_HEADER64})
_I = _HEADER.index
_SIZE, _TYPE, _TID, _PID, _TIME, _GUID = _I("Size"), _I("HeaderType"), _I("ThreadId"), _I("ProcessId"), _I("TimeStamp"), _I("ProviderId")
_ID, _VERSION, _CHANNEL, _LEVEL, _OPCODE, _TASK = _I("Id"), _I("Version"), _I("Channel"), _I("Level"), _I("Opcode"), _I("Task")
_KEYWORD, _ACTIVITY = _I("Keyword"), _I("ActivityId")
_NULL_GUID = bytes(16)


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
