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
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

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

__all__ = ["BatchResult", "EventDecoder", "FixedEvents", "FixedLayouts", "PageParser", "RawEvent", "SubBuffer"]

MISSED_EVENTS = 1 << 31
"""Commit flag: events were lost (overwritten) before this page."""
MISSED_STORED = 1 << 30
"""Commit flag: the number of lost events is stored after the data."""
_LENGTH_MASK = (1 << 30) - 1
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ABS_TOP_BITS = ~((1 << 59) - 1) & 0xFFFFFFFFFFFFFFFF
_TIME_LIMIT = 1 << 62  # a page time beyond this (146 years of uptime) is damage: decode_batch keeps times in int64


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

    def decode_into(self, page: bytes, cpu: int, decoder: EventDecoder, out: list[tuple[int, int, str, dict[str, Any]]]) -> tuple[int, int, int]:
        """Walks ``page`` and decodes its events in one pass: ``parse()`` + ``decode_events()``
        without building the :class:`SubBuffer`.

        Appends ``(timestamp, cpu, name, values)`` to ``out``; returns ``(discarded, unknown,
        damaged)`` as those two would count them. A damaged page raises
        :class:`~openetw.errors.TraceDataError` like :meth:`parse` and leaves ``out`` as it was.
        """
        hp = self.header_page
        data_start = hp.data_offset
        if len(page) < data_start:
            raise TraceDataError(f"sub-buffer of {len(page)} bytes is shorter than its header", offset=0, structure="sub-buffer")
        ts = self._ts.unpack_from(page, hp.timestamp_offset)[0]
        length = self._commit.unpack_from(page, hp.commit_offset)[0] & _LENGTH_MASK
        end = data_start + length
        if end > len(page):
            raise TraceDataError(f"commit length {length} runs past the {len(page)}-byte sub-buffer", offset=hp.commit_offset, structure="sub-buffer")
        he = self.header_event
        delta_bits = self._delta_bits
        type_mask = self._type_mask
        data_max = he.data_max_type_len
        padding, extend, stamp = he.padding, he.time_extend, he.time_stamp
        unpack_u32 = _U32.unpack_from
        compiled_of = decoder._compiled.get
        type_reader = decoder._type_reader
        if type_reader is None:
            read_type, type_end, type_offset = None, 0, 0
        else:
            read_type, type_offset = type_reader[0].unpack_from, type_reader[1]
            type_end = type_offset + type_reader[0].size
        append = out.append
        started = len(out)
        discarded = unknown = damaged = 0
        pos = data_start
        try:
            while pos + 4 <= end:
                word = unpack_u32(page, pos)[0]
                type_len = word & type_mask
                delta = word >> (32 - delta_bits)
                if 1 <= type_len <= data_max:
                    size = type_len * 4
                    start = pos + 4
                    pos = start + size
                    if pos > end:
                        raise TraceDataError(f"event of {size} bytes runs past the data", offset=start - 4, structure="event header")
                    ts += delta
                elif pos + 8 > end:
                    if type_len == padding and delta == 0:
                        break  # padding to the end of the page needs no length word
                    raise TraceDataError(f"event header type {type_len} is cut short", offset=pos, structure="event header")
                else:
                    array0 = unpack_u32(page, pos + 4)[0]
                    if type_len == 0:
                        if array0 < 4 or pos + 4 + array0 > end:
                            raise TraceDataError(f"event length {array0} is invalid here", offset=pos, structure="event header")
                        ts += delta
                        start, size = pos + 8, array0 - 4
                        pos += 4 + array0
                    elif type_len == padding:
                        if delta == 0:
                            break  # the rest of the page is padding
                        if pos + 4 + array0 > end:
                            raise TraceDataError(f"discarded event of {array0} bytes runs past the data", offset=pos, structure="event header")
                        ts += delta
                        discarded += 1
                        pos += 4 + array0
                        continue
                    elif type_len == extend:
                        ts += (array0 << delta_bits) | delta
                        pos += 8
                        continue
                    elif type_len == stamp:
                        ts = (ts & _ABS_TOP_BITS) | ((array0 << delta_bits) | delta)
                        pos += 8
                        continue
                    else:
                        raise TraceDataError(f"unknown event header type {type_len}", offset=pos, structure="event header")
                # a data event at page[start:start + size]
                if read_type is None:
                    unknown += 1
                    continue
                if size < type_end:
                    damaged += 1
                    continue
                compiled = compiled_of(read_type(page, start + type_offset)[0])
                if compiled is None:
                    unknown += 1
                elif compiled.simple:
                    if size < compiled.min_payload:
                        damaged += 1
                    elif compiled.single is not None:
                        append((ts, cpu, compiled.name, {compiled.single: compiled.unpack_from(page, start)[0]}))
                    else:
                        append((ts, cpu, compiled.name, dict(zip(compiled.names, compiled.unpack_from(page, start), strict=True))))
                else:
                    try:
                        append((ts, cpu, compiled.name, compiled.decode_at(page, start, size)))
                    except TraceDataError:
                        damaged += 1
        except TraceDataError:
            del out[started:]
            raise
        return discarded, unknown, damaged

    def decode_batch(
        self, pages: Sequence[bytes], cpu: int, decoder: EventDecoder,
        out: list[tuple[int, int, str, dict[str, Any]]], fixed: FixedLayouts | None = None,
    ) -> BatchResult:  # fmt: skip
        """Decodes pages read in turn from one CPU: :meth:`decode_into` for each page, except
        that the events ``fixed`` names come back column-wise in :attr:`BatchResult.fixed`
        (one header walk per page, then the payloads of all pages at once) instead of in ``out``.

        A damaged page is dropped whole and counted in ``page_errors`` (where
        :meth:`decode_into` raises); events damaged one by one are counted in ``damaged``.
        """
        return _decode_batch(self, pages, cpu, decoder, out, fixed)

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
    """One event format turned into a struct for its fixed fields plus per-field fix-ups.

    ``wanted`` limits the decoded fields (the others are skipped by the struct); ``None`` decodes
    all. A format without strings, arrays or dynamic fields decodes with one ``unpack_from``
    and one ``dict(zip())``.
    """

    __slots__ = ("format", "name", "names", "struct", "unpack_from", "fixups", "min_payload", "simple", "arrays", "single")

    def __init__(self, fmt: EventFormat, wanted: frozenset[str] | None = None) -> None:
        self.format = fmt
        self.name = fmt.name
        chosen = [f for f in fmt.all_fields if wanted is None or f.name in wanted]
        fixed = sorted((f for f in chosen if f.kind != DYNAMIC_TAIL), key=lambda f: f.offset)
        codes = ["<"]
        names: list[str] = []
        fixups: list[tuple[int, FieldFormat]] = []
        arrays: list[tuple[int, int]] = []  # (index in the flat tuple, element count)
        position = 0
        flat_index = 0
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
                count = f.array_length or 0
                codes.append(f"{count}{f.struct_code}")
                arrays.append((flat_index, count))
                flat_index += count - 1
            else:  # STRING, BYTES
                codes.append(f"{f.size}s")
                if f.kind == STRING:
                    fixups.append((len(names), f))
            names.append(f.name)
            flat_index += 1
            position = f.offset + f.size
        self.struct = struct.Struct("".join(codes))
        self.unpack_from = self.struct.unpack_from
        self.names = tuple(names)
        self.min_payload = fmt.min_payload
        self.arrays = tuple(arrays)
        for f in overlapping:  # never seen in practice; decoded one by one
            fixups.append((-1, f))
        for f in chosen:
            if f.kind == DYNAMIC_TAIL:
                fixups.append((-1, f))
        self.fixups = tuple(fixups)
        self.simple = not fixups and not arrays
        # One plain field (a lean system call's id or ret): a one-entry dict without zip().
        self.single = names[0] if self.simple and len(names) == 1 else None

    def _too_short(self, length: int) -> TraceDataError:
        return TraceDataError(
            f"{self.format.name} payload of {length} bytes is shorter than its {self.min_payload}-byte layout",
            structure="payload",
        )

    def decode(self, payload: bytes) -> dict[str, Any]:
        return self.decode_at(payload, 0, len(payload))

    def decode_at(self, page: bytes, start: int, length: int) -> dict[str, Any]:
        """The values of the payload at ``page[start:start + length]`` (no copy of the payload)."""
        if length < self.min_payload:
            raise self._too_short(length)
        flat = self.unpack_from(page, start)
        if self.simple:
            return dict(zip(self.names, flat, strict=True))
        if self.arrays:
            grouped: list[Any] = []
            cursor = 0
            for index, count in self.arrays:
                grouped.extend(flat[cursor:index])
                grouped.append(flat[index : index + count])
                cursor = index + count
            grouped.extend(flat[cursor:])
            flat = tuple(grouped)
        values = dict(zip(self.names, flat, strict=True))
        for _, f in self.fixups:
            if f.kind == STRING:
                values[f.name] = _cstring(values[f.name])
            elif f.kind in (DATA_LOC, REL_LOC):
                values[f.name] = self._dynamic(page, start, length, f, values[f.name])
            elif f.kind == DYNAMIC_TAIL:
                tail = page[start + f.offset : start + length]
                values[f.name] = _cstring(tail) if f.text else tail
            elif f.kind == INTEGER:  # an overlapping field
                values[f.name] = struct.unpack_from("<" + (f.struct_code or "B"), page, start + f.offset)[0]
            elif f.kind == BYTES:
                values[f.name] = page[start + f.offset : start + f.offset + f.size]
        return values

    def _dynamic(self, page: bytes, base: int, length: int, f: FieldFormat, word: int) -> str | bytes:
        size = word >> 16
        start = word & 0xFFFF
        if f.kind == REL_LOC:
            start += f.offset + f.size
        if start + size > length:
            raise TraceDataError(
                f"{self.format.name}.{f.name} points at {start}+{size}, past the {length}-byte payload",
                offset=f.offset, structure="payload",
            )
        raw = page[base + start : base + start + size]
        return _cstring(raw) if f.text else raw


class EventDecoder:
    """Decodes payloads of the events it knows, by ``common_type``.

    ``fields`` (event name → field names) limits what is decoded for those events: a consumer
    that reads few fields (the mapper, see
    :meth:`~openetw.kernel.classes.KernelEventMapper.fields_used`) skips the cost of the rest.
    Events not named there are decoded whole.
    """

    def __init__(self, formats: Iterable[EventFormat], fields: Mapping[str, Iterable[str]] | None = None) -> None:
        self._compiled: dict[int, _CompiledFormat] = {}
        self.formats: dict[int, EventFormat] = {}
        self._type_reader: tuple[struct.Struct, int] | None = None
        self._fields = {name: frozenset(names) for name, names in (fields or {}).items()}
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
        self._compiled[fmt.id] = _CompiledFormat(fmt, self._fields.get(fmt.name))
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

    def decode_events(self, sub: SubBuffer, cpu: int, out: list[tuple[int, int, str, dict[str, Any]]]) -> tuple[int, int]:
        """Appends ``(timestamp, cpu, name, values)`` for every event of ``sub`` to ``out``.

        Returns ``(unknown, damaged)``: events of types this decoder was not given, and events
        whose payload did not fit their format (skipped, as :meth:`decode` would raise).
        """
        if self._type_reader is None:
            return len(sub.events), 0
        reader, type_offset = self._type_reader
        type_end = type_offset + reader.size
        read_type = reader.unpack_from
        compiled_of = self._compiled.get
        page = sub.page
        append = out.append
        unknown = damaged = 0
        for timestamp, offset, length in sub.events:
            if length < type_end:
                damaged += 1
                continue
            compiled = compiled_of(read_type(page, offset + type_offset)[0])
            if compiled is None:
                unknown += 1
                continue
            if compiled.simple:
                if length < compiled.min_payload:
                    damaged += 1
                    continue
                append((timestamp, cpu, compiled.name, dict(zip(compiled.names, compiled.unpack_from(page, offset), strict=True))))
                continue
            try:
                values = compiled.decode_at(page, offset, length)
            except TraceDataError:
                damaged += 1
                continue
            append((timestamp, cpu, compiled.name, values))
        return unknown, damaged


# -- column-wise decoding of fixed-layout events ------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FixedKind:
    name: str
    min_payload: int
    fields: tuple[tuple[str, int, int, bool], ...]  # (name, offset, size, signed)


class FixedLayouts:
    """The events :meth:`PageParser.decode_batch` decodes column-wise instead of one dict each.

    ``events`` maps an event name to the fields wanted; an event is taken only when the
    decoder knows it and every wanted field is a plain integer (a fixed position in every
    payload). :attr:`names` lists the events taken, in the order of :attr:`FixedEvents.kinds`.
    """

    def __init__(self, decoder: EventDecoder, events: Mapping[str, Iterable[str]]) -> None:
        kinds: list[_FixedKind] = []
        ids: list[int] = []
        by_name = decoder.by_name
        for name, wanted in events.items():
            fmt = by_name.get(name)
            if fmt is None:
                continue
            chosen = [fmt.by_name.get(field) for field in wanted]
            if any(f is None or f.kind != INTEGER for f in chosen):
                continue
            fields = tuple((f.name, f.offset, f.size, f.signed) for f in chosen if f is not None)
            kinds.append(_FixedKind(name, fmt.min_payload, fields))
            ids.append(fmt.id)
        self.kinds = tuple(kinds)
        self.names = tuple(kind.name for kind in kinds)
        self.ids = tuple(ids)
        self.field_names = tuple(dict.fromkeys(field[0] for kind in kinds for field in kind.fields))
        self._min_payload = np.array([kind.min_payload for kind in kinds], dtype=np.int64)
        self._table = np.full(max(ids, default=0) + 1, -1, dtype=np.int64)
        for index, event_id in enumerate(ids):
            self._table[event_id] = index

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def kind_of(self, types: np.ndarray) -> np.ndarray:
        """Kind index of each event type (``-1``: not a fixed event)."""
        table = self._table
        inside = types < len(table)
        return np.where(inside, table[np.where(inside, types, 0)], -1)


@dataclass(frozen=True, slots=True, eq=False)
class FixedEvents:
    """Fixed-layout events read from one CPU, column-wise, in that CPU's time order.

    ``kinds[i]`` indexes :attr:`names`; ``columns[field][i]`` is the field's value as the 64
    bits of two's complement (a signed field is sign-extended), 0 for an event without it.
    """

    cpu: int
    names: tuple[str, ...]
    kinds: np.ndarray
    timestamps: np.ndarray
    columns: Mapping[str, np.ndarray]
    signed: Mapping[tuple[int, str], bool]  # (kind, field) → the field is signed

    def __len__(self) -> int:
        return len(self.timestamps)

    def events(self) -> list[tuple[int, int, str, dict[str, Any]]]:
        """The same events as ``(timestamp, cpu, name, values)`` tuples (what :meth:`PageParser.decode_into` gives)."""
        cpu, names = self.cpu, self.names
        fields_of: dict[int, list[tuple[str, bool]]] = {}
        for kind, field in self.signed:
            fields_of.setdefault(kind, []).append((field, self.signed[kind, field]))
        columns = {name: column.tolist() for name, column in self.columns.items()}
        out = []
        for i, (timestamp, kind) in enumerate(zip(self.timestamps.tolist(), self.kinds.tolist(), strict=True)):
            values = {}
            for field, signed in fields_of.get(kind, ()):
                value = columns[field][i]
                values[field] = value - (1 << 64) if signed and value >= 1 << 63 else value
            out.append((timestamp, cpu, names[kind], values))
        return out


class BatchResult(NamedTuple):
    """What :meth:`PageParser.decode_batch` counted, and the last event time of each page."""

    fixed: FixedEvents | None
    discarded: int
    unknown: int
    damaged: int
    page_errors: int
    last_timestamps: list[int | None]  # per page: its last data event's time (None: none, or dropped)


def _gather(joined: bytes, positions: np.ndarray, size: int, signed: bool) -> np.ndarray:
    """The ``size``-byte little-endian integers at byte ``positions`` of ``joined``, as uint64 bits
    (a signed value sign-extended)."""
    if size == 8 and not (positions & 3).any():
        words = np.frombuffer(joined, dtype="<u4")
        index = positions >> 2
        joined_words: np.ndarray = words[index].astype(np.uint64) | (words[index + 1].astype(np.uint64) << np.uint64(32))
        return joined_words
    kind = "i" if signed else "u"
    if size in (1, 2, 4, 8) and not (positions % size).any():
        values = np.frombuffer(joined, dtype=f"<{kind}{size}", count=len(joined) // size)[positions // size]
    else:
        data = np.frombuffer(joined, dtype=np.uint8)
        values = data[positions[:, None] + np.arange(size)].view(f"<{kind}{size}").reshape(-1)
    bits: np.ndarray = values.astype(np.int64).view(np.uint64) if signed else values.astype(np.uint64)
    return bits


def _event_times(deltas: np.ndarray, walked: list[tuple[int, int, int, array[int] | None] | None]) -> np.ndarray:
    """Each data event's time: its page's time plus the deltas up to it, or the time the exact walk gave."""
    sums = np.cumsum(deltas, dtype=np.int64)
    pages = [w for w in walked if w is not None and w[1]]
    marks = np.array([w[0] for w in pages], dtype=np.int64)
    counts = np.array([w[1] for w in pages], dtype=np.int64)
    bases = np.array([w[2] for w in pages], dtype=np.int64)
    before = np.where(marks > 0, sums[np.maximum(marks - 1, 0)], 0)
    times = sums + np.repeat(bases - before, counts)
    for mark, count, _, exact in pages:
        if exact is not None:
            times[mark : mark + count] = np.frombuffer(exact, dtype=np.int64)
    return times


def _decode_batch(
    parser: PageParser, pages: Sequence[bytes], cpu: int, decoder: EventDecoder,
    out: list[tuple[int, int, str, dict[str, Any]]], fixed: FixedLayouts | None,
) -> BatchResult:  # fmt: skip
    hp, he = parser.header_page, parser.header_event
    data_start = hp.data_offset
    padded = [page if not len(page) % 4 else page + bytes(4 - len(page) % 4) for page in pages]
    joined = b"".join(padded)
    words = memoryview(joined).cast("I")
    read_ts, read_commit = parser._ts.unpack_from, parser._commit.unpack_from
    ts_offset, commit_offset = hp.timestamp_offset, hp.commit_offset
    shift = 32 - parser._delta_bits
    delta_bits = parser._delta_bits
    type_mask = parser._type_mask
    data_max = he.data_max_type_len
    padding, extend, stamp = he.padding, he.time_extend, he.time_stamp
    heads = array("q")  # word index of every data event's header, in page order
    add_head = heads.append
    discarded = page_errors = 0
    walked: list[tuple[int, int, int, array[int] | None] | None] = []  # per page: (first head, count, base time, exact times)
    base = 0
    for page, copy in zip(pages, padded, strict=True):
        length = len(page)
        page_base, base = base, base + len(copy)
        if length < data_start:
            page_errors += 1
            walked.append(None)
            continue
        page_ts = read_ts(joined, page_base + ts_offset)[0]
        end = data_start + (read_commit(joined, page_base + commit_offset)[0] & _LENGTH_MASK)
        if end > length or (page_base + data_start) % 4 or page_ts >= _TIME_LIMIT:
            page_errors += 1
            walked.append(None)
            continue
        first = (page_base + data_start) >> 2
        end_w = (page_base + end) >> 2
        mark = len(heads)
        # The common page holds only compact data events (and padding at the end): their times
        # are the page's time plus the deltas in their headers, summed later all at once.
        i = first
        simple = True
        while i < end_w:
            word = words[i]
            type_len = word & type_mask
            if 0 < type_len <= data_max:
                add_head(i)
                i += type_len + 1
                continue
            simple = type_len == padding and not word >> shift  # the rest of the page is padding
            break
        if simple and i <= end_w:
            walked.append((mark, len(heads) - mark, page_ts, None))
            continue
        # A clock event, a discarded or a long event, or damage: walk again, summing as we go.
        del heads[mark:]
        stamps = array("q")
        add_stamp = stamps.append
        ts = page_ts
        end_byte = page_base + end
        page_discarded = 0
        i = first
        try:
            while i < end_w:
                word = words[i]
                type_len = word & type_mask
                if 0 < type_len <= data_max:
                    ts += word >> shift
                    add_head(i)
                    add_stamp(ts)
                    i += type_len + 1
                    continue
                delta = word >> shift
                if i + 1 >= end_w:
                    if type_len == padding and delta == 0:
                        break  # padding to the end of the page needs no length word
                    raise TraceDataError(f"event header type {type_len} is cut short", offset=i * 4 - page_base, structure="event header")
                array0 = words[i + 1]
                if type_len == 0:
                    if array0 < 4 or array0 % 4 or i * 4 + 4 + array0 > end_byte:
                        raise TraceDataError(f"event length {array0} is invalid here", offset=i * 4 - page_base, structure="event header")
                    ts += delta
                    add_head(i)
                    add_stamp(ts)
                    i += 1 + (array0 >> 2)
                elif type_len == padding:
                    if delta == 0:
                        break  # the rest of the page is padding
                    if array0 % 4 or i * 4 + 4 + array0 > end_byte:
                        raise TraceDataError(f"discarded event of {array0} bytes runs past the data", offset=i * 4 - page_base, structure="event header")
                    ts += delta  # a discarded event keeps its own delta; the next event counts from it
                    page_discarded += 1
                    i += 1 + (array0 >> 2)
                elif type_len == extend:
                    ts += (array0 << delta_bits) | delta
                    i += 2
                elif type_len == stamp:
                    ts = (ts & _ABS_TOP_BITS) | ((array0 << delta_bits) | delta)
                    i += 2
                else:
                    raise TraceDataError(f"unknown event header type {type_len}", offset=i * 4 - page_base, structure="event header")
            if i > end_w:
                raise TraceDataError("an event runs past the data", offset=end, structure="event header")
        except (TraceDataError, OverflowError):  # OverflowError: clock events past 2**63 ns
            del heads[mark:]
            page_errors += 1
            walked.append(None)
            continue
        discarded += page_discarded
        walked.append((mark, len(heads) - mark, page_ts, stamps))
    count = len(heads)
    if not count:
        return BatchResult(None, discarded, 0, 0, page_errors, [None] * len(walked))

    word_array = np.frombuffer(joined, dtype="<u4")
    head = np.frombuffer(heads, dtype=np.int64)
    header_words = word_array[head]
    stamp_array = _event_times(header_words >> shift, walked)
    last_timestamps = [None if w is None or not w[1] else int(stamp_array[w[0] + w[1] - 1]) for w in walked]
    type_lens = header_words & type_mask
    long_form = type_lens == 0
    starts = (head + 1 + long_form) * 4
    sizes = np.where(long_form, word_array[np.minimum(head + 1, len(word_array) - 1)].astype(np.int64) - 4, type_lens.astype(np.int64) * 4)
    type_reader = decoder._type_reader
    if type_reader is None:
        return BatchResult(None, discarded, count, 0, page_errors, last_timestamps)
    type_struct, type_offset = type_reader
    typed = sizes >= type_offset + type_struct.size
    damaged = count - int(np.count_nonzero(typed))
    types = _gather(joined, np.where(typed, starts + type_offset, 0), type_struct.size, False).astype(np.int64)
    if fixed:
        kind = np.where(typed, fixed.kind_of(types), -1)
        is_fixed = kind >= 0
        fits = sizes >= fixed._min_payload[np.maximum(kind, 0)]
        damaged += int(np.count_nonzero(is_fixed & ~fits))
        chosen = np.flatnonzero(is_fixed & fits)
        others = np.flatnonzero(typed & ~is_fixed)
    else:
        chosen = None
        others = np.flatnonzero(typed)

    unknown = 0
    compiled_of = decoder._compiled.get
    append = out.append
    rest = zip(stamp_array[others].tolist(), starts[others].tolist(), sizes[others].tolist(), types[others].tolist(), strict=True)
    for timestamp, start, size, event_type in rest:
        compiled = compiled_of(event_type)
        if compiled is None:
            unknown += 1
        elif compiled.simple:
            if size < compiled.min_payload:
                damaged += 1
            elif compiled.single is not None:
                append((timestamp, cpu, compiled.name, {compiled.single: compiled.unpack_from(joined, start)[0]}))
            else:
                append((timestamp, cpu, compiled.name, dict(zip(compiled.names, compiled.unpack_from(joined, start), strict=True))))
        else:
            try:
                append((timestamp, cpu, compiled.name, compiled.decode_at(joined, start, size)))
            except TraceDataError:
                damaged += 1

    batch = None
    if chosen is not None and len(chosen):
        assert fixed is not None
        kinds = kind[chosen]
        fixed_starts = starts[chosen]
        columns = {name: np.zeros(len(chosen), dtype=np.uint64) for name in fixed.field_names}
        signed: dict[tuple[int, str], bool] = {}
        single_kind = len(fixed.kinds) == 1
        for index, spec in enumerate(fixed.kinds):
            mask = None if single_kind else kinds == index
            where = fixed_starts if mask is None else fixed_starts[mask]
            for field, offset, size, is_signed in spec.fields:
                signed[index, field] = is_signed
                if len(where):
                    if mask is None:
                        columns[field] = _gather(joined, where + offset, size, is_signed)
                    else:
                        columns[field][mask] = _gather(joined, where + offset, size, is_signed)
        batch = FixedEvents(cpu, fixed.names, kinds, stamp_array[chosen], columns, signed)
    return BatchResult(batch, discarded, unknown, damaged, page_errors, last_timestamps)
