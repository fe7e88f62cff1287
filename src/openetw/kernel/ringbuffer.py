"""Parsing tracefs ring-buffer sub-buffers (the pages ``trace_pipe_raw`` returns) — pure.

A sub-buffer is a page header (base timestamp, commit word) then compressed event headers:
a u32 whose low bits are ``type_len`` and high bits a time delta. Data events carry a
payload; the other types adjust the clock (time extend, absolute timestamp) or fill space
(padding, discarded events). Every position comes from :class:`HeaderPage` and
:class:`HeaderEvent`; payloads are decoded with the event's :class:`EventFormat`.

Here: :class:`PageParser`, which walks one page (:meth:`~PageParser.parse` to
:class:`SubBuffer`, :meth:`~PageParser.decode_into` walking and decoding in one pass). The
payload decoder is :mod:`openetw.kernel.event_decoder`; many pages at once, with column-wise
events, :mod:`openetw.kernel.ringbuffer_batch`.

Damaged input raises :class:`~openetw.errors.TraceDataError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from openetw.errors import TraceDataError
from openetw.kernel.event_decoder import EventDecoder
from openetw.kernel.ringbuffer_batch import BatchResult, FixedEvents, FixedLayouts, decode_batch
from openetw.kernel.tracefs_format import (
    ABS_TIME_TOP_BITS,
    COMMIT_LENGTH_MASK,
    MISSED_EVENTS,
    MISSED_STORED,
    HeaderEvent,
    HeaderPage,
)

__all__ = [
    "MISSED_EVENTS",
    "MISSED_STORED",
    "BatchResult",
    "EventDecoder",
    "FixedEvents",
    "FixedLayouts",
    "PageParser",
    "RawEvent",
    "SubBuffer",
]

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


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
        length = commit & COMMIT_LENGTH_MASK
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
        length = self._commit.unpack_from(page, hp.commit_offset)[0] & COMMIT_LENGTH_MASK
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
                        ts = (ts & ABS_TIME_TOP_BITS) | ((array0 << delta_bits) | delta)
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
        return decode_batch(self, pages, cpu, decoder, out, fixed)

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
                ts = (ts & ABS_TIME_TOP_BITS) | absolute
                pos += 8
            else:
                raise TraceDataError(f"unknown event header type {type_len}", offset=pos, structure="event header")
        return events, discarded
