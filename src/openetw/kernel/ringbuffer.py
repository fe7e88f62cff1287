"""Parsing tracefs ring-buffer sub-buffers (the pages ``trace_pipe_raw`` returns) — pure.

A sub-buffer is a page header (base timestamp, commit word) then compressed event headers:
a u32 whose low bits are ``type_len`` and high bits a time delta. Data events carry a
payload; the other types adjust the clock (time extend, absolute timestamp) or fill space
(padding, discarded events). Every position comes from :class:`HeaderPage` and
:class:`HeaderEvent`; payloads are decoded with the event's :class:`EventFormat`.

Damaged input raises :class:`~openetw.errors.TraceDataError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from openetw.errors import TraceDataError
from openetw.kernel.tracefs_format import (
    BYTES,
    DATA_LOC,
    DYNAMIC_TAIL,
    INT_ARRAY,
    INTEGER,
    REL_LOC,
    STRING,
    EventFormat,
    FieldFormat,
    HeaderEvent,
    HeaderPage,
)

__all__ = ["EventDecoder", "PageParser", "RawEvent", "SubBuffer"]

MISSED_EVENTS = 1 << 31
"""Commit flag: events were lost (overwritten) before this page."""
MISSED_STORED = 1 << 30
"""Commit flag: the number of lost events is stored after the data."""
_LENGTH_MASK = (1 << 30) - 1
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ABS_TOP_BITS = ~((1 << 59) - 1) & 0xFFFFFFFFFFFFFFFF


class RawEvent(NamedTuple):
    """A data event: its absolute timestamp and where its payload lies in the page."""

    timestamp: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class SubBuffer:
    """One parsed sub-buffer. ``lost_events`` is the count the kernel stored (``None`` when not)."""

    page: bytes
    timestamp: int
    data_length: int
    missed_events: bool
    lost_events: int | None
    events: tuple[RawEvent, ...]
    discarded: int
    free_space: int

    def payload(self, event: RawEvent) -> bytes:
        return self.page[event.offset : event.offset + event.length]


class PageParser:
    """Splits sub-buffers into events with absolute timestamps."""

    def __init__(self, header_page: HeaderPage, header_event: HeaderEvent) -> None:
        self.header_page = header_page
        self.header_event = header_event
        self._ts = struct.Struct("<Q")
        self._commit = struct.Struct("<Q" if header_page.commit_size == 8 else "<I")
        self._delta_bits = header_event.time_delta_bits
        self._type_mask = (1 << header_event.type_len_bits) - 1

    def parse(self, page: bytes) -> SubBuffer:
        hp = self.header_page
        data_start = hp.data_offset
        if len(page) < data_start:
            raise TraceDataError(f"sub-buffer of {len(page)} bytes is shorter than its header", offset=0, structure="sub-buffer")
        base = self._ts.unpack_from(page, hp.timestamp_offset)[0]
        commit = self._commit.unpack_from(page, hp.commit_offset)[0]
        length = commit & _LENGTH_MASK
        if data_start + length > len(page):
            raise TraceDataError(f"commit length {length} runs past the {len(page)}-byte sub-buffer", offset=hp.commit_offset, structure="sub-buffer")
        lost: int | None = None
        if commit & MISSED_STORED:
            end = data_start + length
            if end + 8 <= len(page):
                lost = _U64.unpack_from(page, end)[0]
        events, discarded = self._walk(page, base, data_start, data_start + length)
        return SubBuffer(
            page=page,
            timestamp=base,
            data_length=length,
            missed_events=bool(commit & MISSED_EVENTS),
            lost_events=lost,
            events=tuple(events),
            discarded=discarded,
            free_space=len(page) - data_start - length,
        )

    def _walk(self, page: bytes, ts: int, pos: int, end: int) -> tuple[list[RawEvent], int]:
        he = self.header_event
        delta_bits = self._delta_bits
        type_mask = self._type_mask
        data_max = he.data_max_type_len
        padding, extend, stamp = he.padding, he.time_extend, he.time_stamp
        unpack_u32 = _U32.unpack_from
        events: list[RawEvent] = []
        append = events.append
        discarded = 0
        while pos + 4 <= end:
            word = unpack_u32(page, pos)[0]
            type_len = word & type_mask
            delta = word >> (32 - delta_bits)
            if 1 <= type_len <= data_max:
                size = type_len * 4
                if pos + 4 + size > end:
                    raise TraceDataError(f"event of {size} bytes runs past the data", offset=pos, structure="event header")
                ts += delta
                append(RawEvent(ts, pos + 4, size))
                pos += 4 + size
                continue
            if pos + 8 > end:
                if type_len == padding and delta == 0:
                    break  # padding to the end of the page needs no length word
                raise TraceDataError(f"event header type {type_len} is cut short", offset=pos, structure="event header")
            array0 = unpack_u32(page, pos + 4)[0]
            if type_len == 0:
                if array0 < 4 or pos + 4 + array0 > end:
                    raise TraceDataError(f"event length {array0} is invalid here", offset=pos, structure="event header")
                ts += delta
                append(RawEvent(ts, pos + 8, array0 - 4))
                pos += 4 + array0
            elif type_len == padding:
                if delta == 0:
                    break  # the rest of the page is padding
                # A discarded event keeps its own delta; the next event counts from it.
                if pos + 4 + array0 > end:
                    raise TraceDataError(f"discarded event of {array0} bytes runs past the data", offset=pos, structure="event header")
                ts += delta
                discarded += 1
                pos += 4 + array0
            elif type_len == extend:
                ts += (array0 << delta_bits) | delta
                pos += 8
            elif type_len == stamp:
                absolute = (array0 << delta_bits) | delta
                ts = (ts & _ABS_TOP_BITS) | absolute
                pos += 8
            else:
                raise TraceDataError(f"unknown event header type {type_len}", offset=pos, structure="event header")
        return events, discarded


# -- payloads ---------------------------------------------------------------------------------


def _cstring(raw: bytes) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw.decode("utf-8", "replace")


class _CompiledFormat:
    """One event format turned into a struct for its fixed fields plus per-field fix-ups."""

    __slots__ = ("format", "names", "struct", "fixups", "min_payload", "has_arrays")

    def __init__(self, fmt: EventFormat) -> None:
        self.format = fmt
        fixed = sorted((f for f in fmt.all_fields if f.kind != DYNAMIC_TAIL), key=lambda f: f.offset)
        codes = ["<"]
        names: list[str] = []
        fixups: list[tuple[int, FieldFormat]] = []
        position = 0
        overlapping: list[FieldFormat] = []
        for f in fixed:
            if f.offset < position:
                overlapping.append(f)
                continue
            if f.offset > position:
                codes.append(f"{f.offset - position}x")
            if f.kind == INTEGER:
                codes.append(f.struct_code or "")
            elif f.kind in (DATA_LOC, REL_LOC):
                codes.append("I")
                fixups.append((len(names), f))
            elif f.kind == INT_ARRAY:
                codes.append(f"{f.array_length}{f.struct_code}")
                fixups.append((len(names), f))
            else:  # STRING, BYTES
                codes.append(f"{f.size}s")
                if f.kind == STRING:
                    fixups.append((len(names), f))
            names.append(f.name)
            position = f.offset + f.size
        self.struct = struct.Struct("".join(codes))
        self.names = names
        self.fixups = fixups
        self.min_payload = fmt.min_payload
        self.has_arrays = any(f.kind == INT_ARRAY for _, f in fixups)
        for f in overlapping:  # never seen in practice; decoded one by one
            fixups.append((-1, f))
        for f in fmt.all_fields:
            if f.kind == DYNAMIC_TAIL:
                fixups.append((-1, f))

    def decode(self, payload: bytes) -> dict[str, Any]:
        if len(payload) < self.min_payload:
            raise TraceDataError(
                f"{self.format.name} payload of {len(payload)} bytes is shorter than its {self.min_payload}-byte layout",
                structure="payload",
            )
        flat = self.struct.unpack_from(payload, 0)
        values: dict[str, Any]
        if self.has_arrays:
            values = {}
            index = 0
            for name in self.names:
                fmt_field = self.format.by_name[name]
                if fmt_field.kind == INT_ARRAY:
                    count = fmt_field.array_length or 0
                    values[name] = tuple(flat[index : index + count])
                    index += count
                else:
                    values[name] = flat[index]
                    index += 1
        else:
            values = dict(zip(self.names, flat))
        for _, f in self.fixups:
            if f.kind == STRING:
                values[f.name] = _cstring(values[f.name])
            elif f.kind in (DATA_LOC, REL_LOC):
                values[f.name] = self._dynamic(payload, f, values[f.name])
            elif f.kind == DYNAMIC_TAIL:
                tail = payload[f.offset :]
                values[f.name] = _cstring(tail) if f.text else tail
            elif f.kind == INTEGER:  # an overlapping field
                values[f.name] = struct.unpack_from("<" + (f.struct_code or "B"), payload, f.offset)[0]
            elif f.kind == BYTES:
                values[f.name] = payload[f.offset : f.offset + f.size]
        return values

    def _dynamic(self, payload: bytes, f: FieldFormat, word: int) -> str | bytes:
        length = word >> 16
        start = word & 0xFFFF
        if f.kind == REL_LOC:
            start += f.offset + f.size
        if start + length > len(payload):
            raise TraceDataError(
                f"{self.format.name}.{f.name} points at {start}+{length}, past the {len(payload)}-byte payload",
                offset=f.offset, structure="payload",
            )
        raw = payload[start : start + length]
        return _cstring(raw) if f.text else raw


class EventDecoder:
    """Decodes payloads of the events it knows, by ``common_type``."""

    def __init__(self, formats: Iterable[EventFormat]) -> None:
        self._compiled: dict[int, _CompiledFormat] = {}
        self.formats: dict[int, EventFormat] = {}
        self._type_reader: tuple[struct.Struct, int] | None = None
        for fmt in formats:
            self.add(fmt)

    def add(self, fmt: EventFormat) -> None:
        common_type = fmt.by_name.get("common_type")
        if common_type is None or common_type.kind != INTEGER or common_type.size not in (2, 4):
            raise TraceDataError(f"event {fmt.name} has no integer common_type field", structure="format")
        reader = (struct.Struct("<" + (common_type.struct_code or "H").upper()), common_type.offset)
        if self._type_reader is None:
            self._type_reader = reader
        elif self._type_reader[1] != reader[1] or self._type_reader[0].format != reader[0].format:
            raise TraceDataError(f"event {fmt.name} places common_type differently", structure="format")
        self._compiled[fmt.id] = _CompiledFormat(fmt)
        self.formats[fmt.id] = fmt

    @property
    def by_name(self) -> Mapping[str, EventFormat]:
        return {fmt.name: fmt for fmt in self.formats.values()}

    def event_type(self, payload: bytes) -> int | None:
        """The payload's ``common_type``; ``None`` before any format was added."""
        if self._type_reader is None:
            return None
        reader, offset = self._type_reader
        if len(payload) < offset + reader.size:
            raise TraceDataError("payload too short for common_type", structure="payload")
        return int(reader.unpack_from(payload, offset)[0])

    def decode(self, payload: bytes) -> tuple[EventFormat, dict[str, Any]] | None:
        """``(format, values)``, or ``None`` for an event type this decoder was not given."""
        event_type = self.event_type(payload)
        compiled = None if event_type is None else self._compiled.get(event_type)
        if compiled is None:
            return None
        return compiled.format, compiled.decode(payload)
