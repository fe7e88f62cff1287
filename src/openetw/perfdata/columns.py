"""Tracepoint samples as columns: every field of every sample decoded into numpy arrays.

``sample_columns(perf)`` walks the data records as ``PerfData.records`` does, but a stretch of
samples that follow one another with the same size (a burst of one tracepoint: most of a
``perf record`` file) is framed with one vector operation instead of a step per record. The
samples of each tracepoint become one table: ``time`` (the sample clock, ns), ``pid``, ``tid``,
``cpu`` (those its ``sample_type`` has), then the tracepoint's own fields from its ``format``
file: integers and integer arrays as numbers, ``char[N]`` as bytes; fields whose place varies
(``__data_loc`` strings) as the decoded Python values. Samples whose layout is not fixed (call
chains, grouped reads) are parsed one by one, with the same result.

What ``records()`` would report (damaged records, counts, pipe mode's records) is reported here
the same way, in ``perf.errors`` and ``perf.stats``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openetw.errors import PerfDataFormatError
from openetw.kernel.event_decoder import EventDecoder
from openetw.kernel.tracefs_format import INT_ARRAY, INTEGER, STRING, EventFormat
from openetw.perfdata import layout as P
from openetw.perfdata.reader import EventAttr, PerfData

__all__ = ["SampleTable", "sample_columns"]

_MASK_MISC = np.uint64(0xFFFF0000FFFFFFFF)  # a record header as u64 without its misc bits
_FIRST_WINDOW = 64


@dataclass
class SampleTable:
    """The samples of one event: ``columns`` by name, each ``rows`` long."""

    name: str
    rows: int = 0
    columns: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Group:
    attr: EventAttr
    size: int
    runs: list[tuple[int, int]] = field(default_factory=list)  # (offset, count)


def _runs(perf: PerfData) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(offset, count, size) of each stretch of same-sized samples, and (offset, size, index) of
    samples met one at a time; other records are taken as ``records()`` takes them."""
    data = perf.data
    end = perf.data_end_in_file()
    little = perf.endian == "<"
    runs: list[tuple[int, int, int]] = []
    pos, index = perf.data_offset, 0
    stats = perf.stats
    while pos < end:
        framed = perf.frame(pos, end, index)
        if framed is None:
            break
        kind, _, size = framed
        if kind != P.RECORD_SAMPLE:
            extra = perf.other_record(kind, pos, size, index)
            if extra < 0:
                break
            pos += size + extra
            index += 1
            continue
        # A burst: how many records from here on have this same header (misc aside)?
        count = 1
        if size % 8 == 0 and little:
            first = np.frombuffer(data, dtype="<u8", count=1, offset=pos)[0] & _MASK_MISC
            window = _FIRST_WINDOW
            while True:
                available = (end - pos) // size
                take = min(window, available)
                heads = np.ndarray((take,), dtype="<u8", buffer=data, offset=pos, strides=(size,)) & _MASK_MISC
                same = heads == first
                if same.all():
                    count = take
                    if take == available:
                        break
                    window *= 4
                    continue
                count = int(np.argmin(same))
                break
        runs.append((pos, count, size))
        stats.records["SAMPLE"] += count - 1  # frame() counted the first
        pos += count * size
        index += count
    stats.bytes_read = pos - perf.data_offset
    return runs, []


def _layout(
    perf: PerfData, attr: EventAttr, size: int, fmt: EventFormat | None
) -> tuple[np.dtype[Any], list[str], list[Any]] | None:
    """A structured dtype for a fixed-layout sample of ``attr`` and ``size`` bytes, the sample
    fields it names, and the dynamic tracepoint fields left for one-by-one decoding."""
    sample_type = attr.sample_type
    if sample_type & (P.SAMPLE_CALLCHAIN | P.SAMPLE_BRANCH_STACK) or (
        sample_type & P.SAMPLE_READ and attr.read_format & P.FORMAT_GROUP
    ):
        return None
    endian = perf.endian
    names: list[str] = []
    formats: list[Any] = []
    offsets: list[int] = []
    position = P.EVENT_HEADER_SIZE

    def add(name: str, code: str, width: int) -> None:
        nonlocal position
        if name:
            names.append(name)
            formats.append(endian + code)
            offsets.append(position)
        position += width

    for bit, parts in (
        (P.SAMPLE_IDENTIFIER, (("", "u8", 8),)), (P.SAMPLE_IP, (("ip", "u8", 8),)),
        (P.SAMPLE_TID, (("pid", "i4", 4), ("tid", "i4", 4))), (P.SAMPLE_TIME, (("time", "u8", 8),)),
        (P.SAMPLE_ADDR, (("addr", "u8", 8),)), (P.SAMPLE_ID, (("", "u8", 8),)), (P.SAMPLE_STREAM_ID, (("", "u8", 8),)),
        (P.SAMPLE_CPU, (("cpu", "u4", 4), ("", "u4", 4))), (P.SAMPLE_PERIOD, (("period", "u8", 8),)),
    ):  # fmt: skip
        if sample_type & bit:
            for name, code, width in parts:
                add(name, code, width)
    if sample_type & P.SAMPLE_READ:
        extra = bool(attr.read_format & P.FORMAT_TOTAL_TIME_ENABLED) + bool(
            attr.read_format & P.FORMAT_TOTAL_TIME_RUNNING
        )
        position += 8 * (1 + extra + bool(attr.read_format & P.FORMAT_ID) + bool(attr.read_format & P.FORMAT_LOST))
    sample_fields = list(names)
    dynamic: list[Any] = []
    if sample_type & P.SAMPLE_RAW:
        raw_start = position + 4
        if fmt is not None:
            for f in fmt.fields:
                at = raw_start + f.offset
                if at + f.size > size:
                    return None
                if f.kind == INTEGER and f.struct_code:
                    names.append(f.name)
                    formats.append(endian + f.struct_code)
                    offsets.append(at)
                elif f.kind == INT_ARRAY and f.struct_code and f.array_length:
                    names.append(f.name)
                    formats.append((endian + f.struct_code, (f.array_length,)))
                    offsets.append(at)
                elif f.kind == STRING:
                    names.append(f.name)
                    formats.append(f"S{f.size}")
                    offsets.append(at)
                else:
                    dynamic.append(f)
    if position > size:
        return None
    dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
    return dtype, sample_fields, dynamic


def sample_columns(perf: PerfData) -> dict[str, SampleTable]:
    """Every sample's fields as columns, one table per event (``system:name`` for tracepoints)."""
    runs, _ = _runs(perf)
    groups: dict[tuple[int, int], _Group] = {}
    single = perf.attrs[0] if len(perf.attrs) == 1 else None
    ids = np.array(perf.sample_ids(), dtype=np.uint64) if single is None else None
    attr_of = [perf.attr_for(int(value)) for value in ids] if ids is not None else []
    id_position = _id_position(perf)
    for pos, count, size in runs:
        if single is not None:
            _group(groups, single, size).runs.append((pos, count))
            continue
        if id_position is None or ids is None or id_position + 8 > size:
            perf.errors.append(
                PerfDataFormatError(
                    "samples of several events without their ids", offset=pos, structure="PERF_RECORD_SAMPLE"
                )
            )
            perf.stats.samples_skipped += count
            continue
        sample_ids = np.ndarray(
            (count,), dtype=perf.endian + "u8", buffer=perf.data, offset=pos + id_position, strides=(size,)
        )
        where = np.searchsorted(ids, sample_ids)
        where = np.minimum(where, len(ids) - 1)
        known = ids[where] == sample_ids
        if not known.all():
            perf.stats.samples_skipped += int((~known).sum())
            perf.errors.append(
                PerfDataFormatError("samples of no known attribute", offset=pos, structure="PERF_RECORD_SAMPLE")
            )
        # Split the run where the attribute changes.
        start = 0
        marks = where
        while start < count:
            if not known[start]:
                start += 1
                continue
            value = marks[start]
            stop = (
                start + int(np.argmax((marks[start:] != value) | ~known[start:]))
                if ((marks[start:] != value) | ~known[start:]).any()
                else count
            )
            attr = attr_of[int(value)]
            if attr is not None:
                _group(groups, attr, size).runs.append((pos + start * size, stop - start))
            start = stop
    tables: dict[str, SampleTable] = {}
    for group in groups.values():
        _fill(perf, group, tables)
    return tables


def _id_position(perf: PerfData) -> int | None:
    first = perf.attrs[0].sample_type if perf.attrs else 0
    if first & P.SAMPLE_IDENTIFIER:
        return P.EVENT_HEADER_SIZE
    if first & P.SAMPLE_ID:
        return P.EVENT_HEADER_SIZE + 8 * sum(
            bool(first & bit) for bit in (P.SAMPLE_IP, P.SAMPLE_TID, P.SAMPLE_TIME, P.SAMPLE_ADDR)
        )
    return None


def _group(groups: dict[tuple[int, int], _Group], attr: EventAttr, size: int) -> _Group:
    key = (id(attr), size)
    found = groups.get(key)
    if found is None:
        found = groups[key] = _Group(attr, size)
    return found


def _fill(perf: PerfData, group: _Group, tables: dict[str, SampleTable]) -> None:
    attr = group.attr
    fmt = perf.tracing.formats.get(attr.config) if attr.is_tracepoint and perf.tracing is not None else None
    name = perf.event_name(attr)
    table = tables.setdefault(name, SampleTable(name))
    layout = _layout(perf, attr, group.size, fmt)
    rows = sum(count for _, count in group.runs)
    if layout is None:  # not a fixed layout: one by one
        columns: dict[str, list[Any]] = {}
        decoder = EventDecoder([fmt]) if fmt is not None else None
        for pos, count in group.runs:
            for index in range(count):
                sample = perf.parse_sample(pos + index * group.size, group.size, 0, -1)
                values = {"time": sample.time, "pid": sample.pid, "tid": sample.tid, "cpu": sample.cpu}
                if decoder is not None and sample.raw is not None:
                    decoded = decoder.decode(sample.raw)
                    if decoded is not None:
                        values.update({f.name: decoded[1].get(f.name) for f in fmt.fields})  # type: ignore[union-attr]
                for key, value in values.items():
                    columns.setdefault(key, []).append(value)
        _append(table, {key: np.asarray(value, dtype=object) for key, value in columns.items()}, rows)
        perf.stats.samples += rows
        return
    dtype, _, dynamic = layout
    parts = [np.frombuffer(perf.data, dtype=dtype, count=count, offset=pos) for pos, count in group.runs]
    joined = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
    columns_out: dict[str, Any] = {key: joined[key] for key in dtype.names or ()}
    if dynamic:
        decoder = EventDecoder([fmt]) if fmt is not None else None
        found: dict[str, list[Any]] = {f.name: [] for f in dynamic}
        for pos, count in group.runs:
            for index in range(count):
                sample = perf.parse_sample(pos + index * group.size, group.size, 0, -1)
                decoded = decoder.decode(sample.raw or b"") if decoder is not None else None
                for f in dynamic:
                    found[f.name].append(decoded[1].get(f.name) if decoded is not None else None)
        columns_out.update({key: np.asarray(value, dtype=object) for key, value in found.items()})
    _append(table, columns_out, rows)
    perf.stats.samples += rows


def _append(table: SampleTable, columns: dict[str, Any], rows: int) -> None:
    if not table.columns:
        table.columns = columns
    else:
        for key, value in columns.items():
            table.columns[key] = np.concatenate([table.columns[key], value]) if key in table.columns else value
    table.rows += rows
