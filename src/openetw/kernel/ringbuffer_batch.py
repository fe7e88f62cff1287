"""Decoding many sub-buffers of one CPU at once (:meth:`PageParser.decode_batch
<openetw.kernel.ringbuffer.PageParser.decode_batch>`) — pure.

The pages are joined into one buffer and walked header by header: a page of plain data
events needs only its event headers listed (their times are the page time plus the summed
deltas, computed for all pages at once with numpy); a page with clock events, discarded or
long events is walked again exactly. Then each event's type is read from all payloads at
once, the events :class:`FixedLayouts` names (integers at fixed positions, e.g. system call
enter/exit) are gathered column-wise into :class:`FixedEvents`, and the rest are decoded one
by one as :meth:`PageParser.decode_into` does. A damaged page is dropped whole and counted.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from openetw import _native
from openetw.errors import TraceDataError
from openetw.kernel.event_decoder import EventDecoder
from openetw.kernel.ringbuffer_plan import decoder_plan, fixed_plan, page_params
from openetw.kernel.tracefs_format import ABS_TIME_TOP_BITS, COMMIT_LENGTH_MASK, INTEGER

if TYPE_CHECKING:
    from openetw.kernel.ringbuffer import PageParser

__all__ = ["BatchResult", "FixedEvents", "FixedLayouts", "decode_batch"]

_TIME_LIMIT = 1 << 62  # a page time beyond this (146 years of uptime) is damage: decode_batch keeps times in int64


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
        self._native_plan: Any = None  # what the compiled page decoder is given (ringbuffer_plan.py)
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


def decode_batch(
    parser: PageParser, pages: Sequence[bytes], cpu: int, decoder: EventDecoder,
    out: list[tuple[int, int, str, dict[str, Any]]], fixed: FixedLayouts | None,
) -> BatchResult:  # fmt: skip
    native = _native.module("_tracefs")
    if native is not None and _native_layout(parser):
        return _decode_native(native, parser, pages, cpu, decoder, out, fixed)
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
        end = data_start + (read_commit(joined, page_base + commit_offset)[0] & COMMIT_LENGTH_MASK)
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
                    ts = (ts & ABS_TIME_TOP_BITS) | ((array0 << delta_bits) | delta)
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
    rows = zip(
        stamp_array[others].tolist(), starts[others].tolist(), sizes[others].tolist(), types[others].tolist(), strict=True,
    )
    for timestamp, start, size, event_type in rows:
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


def _native_layout(parser: PageParser) -> bool:
    """Whether the compiled decoder takes this page header: its fields before the 4-aligned data."""
    hp = parser.header_page
    commit_size = 8 if hp.commit_size == 8 else 4
    return hp.timestamp_offset + 8 <= hp.data_offset and hp.commit_offset + commit_size <= hp.data_offset and not hp.data_offset % 4


def _decode_native(
    native: Any, parser: PageParser, pages: Sequence[bytes], cpu: int, decoder: EventDecoder,
    out: list[tuple[int, int, str, dict[str, Any]]], fixed: FixedLayouts | None,
) -> BatchResult:  # fmt: skip
    """:func:`decode_batch` by the compiled twin (``openetw._native._tracefs``): the same result."""
    columns_plan = fixed_plan(fixed)
    raw, discarded, unknown, damaged, page_errors, last_timestamps = native.decode_batch(
        pages if isinstance(pages, list) else list(pages), cpu, page_params(parser, decoder), decoder_plan(decoder),
        columns_plan, out,
    )  # fmt: skip
    batch = None
    if raw is not None:
        assert fixed is not None
        kinds_raw, times_raw, column_raw = raw
        signed = {(index, field): is_signed for index, spec in enumerate(fixed.kinds) for field, _, _, is_signed in spec.fields}
        columns = {name: np.frombuffer(column, dtype=np.uint64) for name, column in zip(fixed.field_names, column_raw, strict=True)}
        batch = FixedEvents(
            cpu, fixed.names, np.frombuffer(kinds_raw, dtype=np.int64), np.frombuffer(times_raw, dtype=np.int64), columns, signed,
        )  # fmt: skip
    return BatchResult(batch, discarded, unknown, damaged, page_errors, last_timestamps)
