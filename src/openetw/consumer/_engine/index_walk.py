"""Finding every record of an ETL file fast: buffers laid end to end, record chains with numpy.

``read_buffers`` gives the buffers' data in blobs of a bounded size (read straight from the file
when it is uncompressed and its buffer headers are sound; otherwise what ``EtlReader.buffers``
gives, so that damage and compression are handled by the reader). ``walk_chains`` then

1. marks, in one vectorized pass over every 8-byte-aligned position, the ones whose first u32
   looks like a record marker (a known header type under typed marker flags, or a WPP
   message marker, as ``etl.framing`` declares them: one table lookup on the marker key), and works out each one's
   size and the candidate at the position after it (through a position -> candidate table,
   not a search);
2. follows each buffer's chain of records from its first position through those "next" links
   (one list lookup per record); where a chain stops before the buffer's data ends, the stop is
   judged exactly as ``EtlReader`` judges it (end marker, unknown record, damaged size).
"""

from __future__ import annotations

import operator
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.errors import EtlFormatError
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.reader import MAX_BUFFER_SIZE, BufferInfo, EtlReader

__all__ = ["Buffers", "Chains", "GATHER_PAD", "buffer_info", "error_fields", "problem_fields", "memory_buffers", "read_buffers", "single_buffer", "walk_chains"]

BH = F.RECORDS_START
GATHER_PAD = 128  # zero bytes after the data, so fixed-offset gathers never leave the blob
CHUNK_BYTES = 64 << 20  # buffers are indexed this many bytes at a time: memory stays bounded
_u32 = struct.Struct("<I").unpack_from
_BUFFER = L.WMI_BUFFER_HEADER
_F = {name: _BUFFER.index(name) for name, _ in _BUFFER.fields}
_REACH_ROUNDS = 24
_OFFSET_FIELD = "WMI_BUFFER_HEADER.Offset"
_DENSE_CANDIDATES = 16  # a candidate per this many slots or more: follow links through a table


def _type_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per header type (``etl.framing``'s rows): typed and known, where its Size sits, its header size."""
    known = np.zeros(256, dtype=bool)
    size_at = np.zeros(256, dtype=np.int64)
    header_size = np.full(256, F.MESSAGE_KIND.header_size, dtype=np.int64)
    for header_type, row in F.HEADER_KINDS.items():
        known[header_type] = True
        header_size[header_type] = row.header_size
        size_at[header_type] = row.size_at
    return known, size_at, header_size


KNOWN_TYPES, SIZE_AT, HEADER_SIZES = _type_tables()


@dataclass
class Buffers:
    """Every buffer's data end to end in ``blob``: where each starts, where its records end."""

    infos: list[BufferInfo]
    bases: np.ndarray
    ends: np.ndarray
    lengths: list[int]
    blob: bytes | bytearray
    errors: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


_BUFFER_FIELDS = tuple(_F[name] for name in (
    "BufferSize", "Offset", "BufferFlag", "BufferType", "ProcessorIndex", "TimeStamp", "SequenceNumber", "LoggerId", "SavedOffset",
))  # fmt: skip
_buffer_fields = operator.itemgetter(*_BUFFER_FIELDS)


def buffer_info(data: Any, offset: int, index: int, file_offset: int | None = None) -> BufferInfo:
    """The WMI_BUFFER_HEADER at ``offset`` of ``data``, as the reader describes a buffer
    (``file_offset``: where it sits in its file, default ``offset``)."""
    size, end, flags, buffer_type, processor, timestamp, sequence, logger, saved = _buffer_fields(_BUFFER.unpack_from(data, offset))
    cpu = processor if flags & L.BUFFER_FLAG_PROCESSOR_INDEX else processor & 0xFF
    where = offset if file_offset is None else file_offset
    return BufferInfo(index, where, size, end, flags, buffer_type, cpu, timestamp, sequence, logger, saved)


def single_buffer(data: bytes, index: int = 0) -> Buffers:
    """One buffer's data (an uncompressed buffer as a real-time delivery would hand it over)."""
    info = buffer_info(data, 0, index)
    errors: list[dict[str, Any]] = []
    end = _record_end(info, len(data), errors)
    blob = bytes(data) + bytes(-len(data) % 8 + GATHER_PAD)
    return Buffers([info], np.zeros(1, dtype=np.int64), np.asarray([end], dtype=np.int64), [len(data)], blob, errors, {})


def memory_buffers(items: list[tuple[int, bytes]]) -> Buffers:
    """Uncompressed buffers held in memory, ``(number, data)`` each (as real-time deliveries
    hand them over), laid end to end."""
    infos: list[BufferInfo] = []
    parts: list[bytes] = []
    bases: list[int] = []
    ends: list[int] = []
    lengths: list[int] = []
    errors: list[dict[str, Any]] = []
    total = 0
    for number, data in items:
        info = buffer_info(data, 0, number)
        infos.append(info)
        bases.append(total)
        ends.append(_record_end(info, len(data), errors))
        lengths.append(len(data))
        parts.append(data)
        pad = -len(data) % 8
        if pad:
            parts.append(bytes(pad))
        total += len(data) + pad
    parts.append(bytes(GATHER_PAD))
    return Buffers(infos, np.asarray(bases, dtype=np.int64), np.asarray(ends, dtype=np.int64), lengths, b"".join(parts), errors, {})


def _record_end(info: BufferInfo, length: int, errors: list[dict[str, Any]]) -> int:
    """Where a buffer's records end, as the reader bounds it (problems noted in ``errors``)."""
    end = info.data_end
    truncated = length < info.buffer_size and not info.compressed
    if end > length:
        if not truncated and not info.compressed:
            message = f"Offset {end:#x} is past the buffer end {length:#x}"
            errors.append(problem_fields(message, info.file_offset + F.BUFFER_OFFSET_AT, info.index, _OFFSET_FIELD))
        return length
    if end < BH and not info.compressed:
        errors.append(problem_fields(f"Offset {end:#x} is inside the buffer header", info.file_offset + F.BUFFER_OFFSET_AT, info.index, _OFFSET_FIELD))
    return end


def problem_fields(message: str, offset: int | None, buffer_index: int | None, structure: str | None) -> dict[str, Any]:
    """A problem as the index keeps it: the fields of the ``EtlFormatError`` the reader raises."""
    return {"message": message, "offset": offset, "buffer_index": buffer_index, "structure": structure}


def error_fields(error: EtlFormatError) -> dict[str, Any]:
    return problem_fields(error.message, error.offset, error.buffer_index, error.structure)


def _plain_buffers(path: str, stride: int) -> tuple[list[BufferInfo], dict[str, int]] | None:
    """The buffers of an uncompressed, undamaged file, from their headers alone (``None``: let
    the reader frame them; it reports damage precisely)."""
    infos: list[BufferInfo] = []
    lost_events = lost_buffers = 0
    size_at, flags_at = _F["BufferSize"], _F["BufferFlag"]
    # Headers are read with pread, not mapped: a mapping would bring in (and count as resident)
    # the pages around every header, the whole file of a large trace.
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        if size < BH:
            return None
        offset = 0
        while offset < size:
            head = os.pread(fd, BH, offset)
            if len(head) < BH:
                return None
            h = _BUFFER.unpack_from(head, 0)
            buffer_size, flags = h[size_at], h[flags_at]
            if buffer_size < BH or buffer_size > MAX_BUFFER_SIZE or buffer_size % 8 or offset + buffer_size > size:
                return None
            if flags & L.BUFFER_FLAG_COMPRESSED or (stride and buffer_size != stride):
                return None  # (a buffer of another size than the file's has a damaged BufferSize)
            infos.append(buffer_info(head, 0, len(infos), offset))
            lost_events += bool(flags & L.BUFFER_FLAG_EVENTS_LOST)
            lost_buffers += bool(flags & L.BUFFER_FLAG_BUFFER_LOST)
            offset += buffer_size
    stats = {
        "buffers": len(infos), "compressed_buffers": 0, "skipped_bytes": 0,
        "buffers_with_events_lost_flag": lost_events, "buffers_with_buffer_lost_flag": lost_buffers,
    }
    return infos, stats


def _file_chunks(path: str, infos: Sequence[BufferInfo], limit: int, order: Sequence[int] | None = None) -> Iterator[Buffers]:
    """Buffers of a plain file, about ``limit`` bytes at a time, in file order or in ``order``
    (positions in ``infos``); each run of buffers that lie end to end in the file is read in one piece."""
    positions = range(len(infos)) if order is None else order
    with open(path, "rb") as f:
        fd = f.fileno()
        at = 0
        while at < len(positions):
            part = [infos[positions[at]]]
            total = part[0].buffer_size
            at += 1
            while at < len(positions):
                info = infos[positions[at]]
                if total + info.buffer_size > limit:
                    break
                part.append(info)
                total += info.buffer_size
                at += 1
            blob = bytearray(total + GATHER_PAD)
            view = memoryview(blob)
            bases: list[int] = []
            run_start = run_at = 0  # where the run being gathered starts in the blob and in the file
            for number, info in enumerate(part):
                base = bases[-1] + part[number - 1].buffer_size if number else 0
                bases.append(base)
                if number and info.file_offset != run_at + base - run_start:
                    _read_into(fd, view[run_start:base], run_at, path)
                    run_start, run_at = base, info.file_offset
                elif not number:
                    run_at = info.file_offset
            _read_into(fd, view[run_start:total], run_at, path)
            errors: list[dict[str, Any]] = []
            ends = [_record_end(info, info.buffer_size, errors) for info in part]
            yield Buffers(part, np.asarray(bases, dtype=np.int64), np.asarray(ends, dtype=np.int64), [info.buffer_size for info in part], blob, errors, {})


def _read_into(fd: int, view: memoryview, offset: int, path: str) -> None:
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if not n:
            raise EtlFormatError("the file shrank while it was being indexed", offset=offset + got, path=path)
        got += n


def _reader_chunks(reader: EtlReader, limit: int) -> Iterator[Buffers]:
    """What ``EtlReader.buffers`` gives (inflated, damage skipped), about ``limit`` bytes at a time."""
    infos: list[BufferInfo] = []
    parts: list[bytes] = []
    bases: list[int] = []
    ends: list[int] = []
    lengths: list[int] = []
    errors: list[dict[str, Any]] = []
    total = 0
    for info, data in reader.buffers():
        length = len(data)
        infos.append(info)
        bases.append(total)
        ends.append(_record_end(info, length, errors))
        lengths.append(length)
        parts.append(data)
        pad = -length % 8
        if pad:
            parts.append(bytes(pad))
        total += length + pad
        if total >= limit:
            parts.append(bytes(GATHER_PAD))
            yield Buffers(infos, np.asarray(bases, dtype=np.int64), np.asarray(ends, dtype=np.int64), lengths, b"".join(parts), errors, {})
            infos, parts, bases, ends, lengths, errors, total = [], [], [], [], [], [], 0
    if infos:
        parts.append(bytes(GATHER_PAD))
        yield Buffers(infos, np.asarray(bases, dtype=np.int64), np.asarray(ends, dtype=np.int64), lengths, b"".join(parts), errors, {})


def read_buffers(reader: EtlReader, limit: int = CHUNK_BYTES) -> tuple[Iterator[Buffers], Callable[[], tuple[list[dict[str, Any]], dict[str, int]]]]:
    """Every buffer of ``reader``'s file, in blobs of about ``limit`` bytes (bounded memory), and a
    function giving, once they were all read, the reader's own errors and statistics."""
    if reader.path is not None and not reader.header.compressed:
        plain = _plain_buffers(reader.path, reader.buffer_stride)
        if plain is not None:
            infos, stats = plain
            return _file_chunks(reader.path, infos, limit), lambda: ([], dict(stats))

    def outcome() -> tuple[list[dict[str, Any]], dict[str, int]]:
        read = reader.stats
        stats = {
            "buffers": read.buffers, "compressed_buffers": read.compressed_buffers, "skipped_bytes": read.skipped_bytes,
            "buffers_with_events_lost_flag": read.buffers_with_events_lost_flag, "buffers_with_buffer_lost_flag": read.buffers_with_buffer_lost_flag,
        }  # fmt: skip
        return [error_fields(error) for error in read.errors], stats

    return _reader_chunks(reader, limit), outcome


@dataclass
class Chains:
    """The records found: blob offsets, sizes, buffer positions (file order), and unknown records."""

    offsets: np.ndarray
    sizes: np.ndarray
    buffers: np.ndarray
    unknown: list[tuple[int, int, int, str]]  # (blob offset, size, buffer position, reason)


def _key_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per marker key (the marker's upper half: header type, then flags): whether it frames a
    record, its header size, and where its size is (the shift of the slot's 8 bytes)."""
    keys = np.arange(1 << 16)  # flags << 8 | header type
    header_type, flags = keys & 0xFF, keys >> (F.MARKER_FLAGS_SHIFT - F.MARKER_KEY_SHIFT)
    typed = ((flags & F.TYPED_FLAGS_MASK) == F.TYPED_FLAGS_MASK) & KNOWN_TYPES[header_type]
    framed = typed | ((flags & F.MESSAGE_FLAGS_MASK) == F.MESSAGE_FLAGS)
    header_size = np.where(typed, HEADER_SIZES[header_type], F.MESSAGE_KIND.header_size)
    shift = (8 * np.where(typed, SIZE_AT[header_type], F.MESSAGE_KIND.size_at)).astype(np.uint64)  # bits into the slot
    return framed, header_size, shift


FRAMED_KEYS, KEY_HEADER_SIZES, KEY_SIZE_SHIFTS = _key_tables()


def _candidates(bufs: Buffers) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Positions that frame as records: (slots, sizes, buffer positions, follow links).

    Only positions inside a buffer's record area count. A follow link is the candidate index of
    the next record, -1 when this record is the last of its chain, -2 when the position does not
    hold a whole record.
    """
    blob = bufs.blob
    slot_count = len(blob) // 8
    index_type: type[np.signedinteger[Any]] = np.int32 if slot_count < 1 << 28 else np.int64
    words = np.frombuffer(blob, dtype="<u8", count=slot_count)  # a slot's marker, then its second u32
    # Each slot's marker key (header type and flags, bytes 2-3) says at once whether it frames:
    # a known header type under typed flags, or a WPP message marker.
    keys = np.frombuffer(blob, dtype="<u2", count=slot_count * 4)[F.MARKER_KEY_SHIFT // 16 :: 4]
    base_slots = (bufs.bases // 8).astype(index_type)
    ends = bufs.ends.astype(index_type)
    first = base_slots + BH // 8
    last = base_slots + (ends - 4) // 8  # a marker needs 4 bytes
    areas = [(start, stop + 1) for start, stop in zip(first.tolist(), last.tolist(), strict=True) if stop >= start]
    if sum(stop - start for start, stop in areas) * 2 < slot_count:  # mostly empty buffers: their record areas only
        found = [np.flatnonzero(FRAMED_KEYS.take(keys[start:stop])) + start for start, stop in areas]
        slots = np.concatenate(found).astype(index_type) if found else np.zeros(0, dtype=index_type)
    else:
        slots = np.flatnonzero(FRAMED_KEYS.take(keys)).astype(index_type)
    # Each slot's buffer; keep the slots inside its record area.
    # (slots and buffers are both in blob order: where each buffer's slots begin, then a fill)
    begins = np.searchsorted(slots, base_slots)
    buffer_pos = np.repeat(np.arange(-1, len(base_slots), dtype=index_type), np.diff(begins, prepend=0, append=len(slots)))
    inside = np.flatnonzero((slots >= first.take(buffer_pos)) & (slots <= last.take(buffer_pos)))
    if len(inside) < len(slots):
        slots, buffer_pos = slots.take(inside), buffer_pos.take(inside)
    slot_words = words.take(slots)
    key = (slot_words >> np.uint64(F.MARKER_KEY_SHIFT)) & np.uint64(0xFFFF)
    sizes = ((slot_words >> KEY_SIZE_SHIFTS.take(key)) & np.uint64(0xFFFF)).astype(index_type)
    header_size = KEY_HEADER_SIZES.take(key).astype(index_type)
    record_end = base_slots.take(buffer_pos) * 8 + ends.take(buffer_pos)  # in bytes
    good = (slots * 8 + np.maximum(header_size, sizes) <= record_end) & (sizes >= header_size)
    # The candidate at the position after each one (candidates are sorted by slot): through a
    # slot -> candidate table where candidates are dense, else by search.
    following = np.minimum(slots + ((sizes + 7) >> 3), slot_count)
    if len(slots) * _DENSE_CANDIDATES >= slot_count:
        candidate_at = np.full(slot_count + 1, -1, dtype=index_type)
        candidate_at[slots] = np.arange(len(slots), dtype=index_type)
        j = candidate_at.take(following)
    else:
        j = np.searchsorted(slots, following).astype(index_type)
        at = np.minimum(j, max(len(slots) - 1, 0))
        j = np.where((j < len(slots)) & (slots.take(at) == following), j, -1).astype(index_type) if len(slots) else j
    if len(slots):
        j[(j >= 0) & (buffer_pos.take(np.maximum(j, 0)) != buffer_pos)] = -1  # links stay inside a buffer
    j[~good] = -2
    return slots.astype(np.int64), sizes.astype(np.int64), buffer_pos.astype(np.int64), j.astype(np.int64)


def _roots(bufs: Buffers, slots: np.ndarray) -> np.ndarray:
    """Per buffer, the candidate at its first record position (-1: none, or no room for one)."""
    first_slots = (bufs.bases + BH) // 8
    at = np.searchsorted(slots, first_slots)
    found = (at < len(slots)) & (slots[np.minimum(at, max(len(slots) - 1, 0))] == first_slots) if len(slots) else np.zeros(len(at), dtype=bool)
    return np.where(found & (BH + 4 <= bufs.ends), at, -1)


def _reachable(follow: np.ndarray, roots: np.ndarray) -> np.ndarray | None:
    """The candidates on a chain from a root, without walking the chains one by one.

    Links always go forward, so the candidates reachable from the roots are the greatest set
    holding the roots and every target of its own members: start from all candidates and
    drop those no member links to, until nothing changes (as many rounds as the longest chain
    of look-alike positions inside payloads). Each candidate counts the members linking to it,
    so a round looks only at the targets of the candidates the round before dropped. ``None``
    if that takes too many rounds.
    """
    n = len(follow)
    is_root = np.zeros(n, dtype=bool)
    is_root[roots[roots >= 0]] = True
    links = follow[follow >= 0]
    linked_from = np.bincount(links, minlength=n)
    alive = is_root | (linked_from > 0)
    dropped = np.flatnonzero(~alive)
    for _ in range(_REACH_ROUNDS):
        links = follow.take(dropped)
        links = links[links >= 0]
        if not len(links):
            return alive
        np.subtract.at(linked_from, links, 1)
        orphaned = links[(linked_from.take(links) == 0) & alive.take(links) & ~is_root.take(links)]
        dropped = np.unique(orphaned)
        alive[dropped] = False
    return None


def _walked(bufs: Buffers, slots: np.ndarray, sizes: np.ndarray, follow: np.ndarray, roots: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The chains followed one record at a time (when ``_reachable`` gives up)."""
    follow_list, slot_list = follow.tolist(), slots.tolist()
    found: list[int] = []
    stops: list[int] = []
    for position, j in enumerate(roots.tolist()):
        stop = BH
        if j >= 0:
            while True:
                nxt = follow_list[j]
                if nxt >= 0:
                    found.append(j)
                    j = nxt
                    continue
                stop = slot_list[j] * 8 - int(bufs.bases[position])
                if nxt == -1:
                    found.append(j)
                    stop += (int(sizes[j]) + 7) & ~7
                break
        stops.append(stop)
    return np.asarray(found, dtype=np.int64), stops


_NATIVE = native_module("_read")  # the chains walked in C, one record at a time (None: with numpy, below)


def walk_chains(bufs: Buffers) -> Chains:
    """Every record of every buffer, in file order (see the module doc)."""
    bufs.stats.setdefault("unknown_records", 0)
    bufs.stats.setdefault("skipped_bytes", 0)
    if _NATIVE is not None:
        return _native_chains(bufs, _NATIVE.chains)
    slots, sizes, buffer_pos, follow = _candidates(bufs)
    roots = _roots(bufs, slots)
    alive = _reachable(follow, roots)
    if alive is None:
        chosen, stops = _walked(bufs, slots, sizes, follow, roots)
    else:
        members = np.flatnonzero(alive)
        chosen = members[follow[members] != -2]  # a -2 member ends its chain without being a record
        stops = [BH] * len(bufs.infos)
        if len(members):
            # Each chain stops at its last member: after it (-1), or at it when it is no record (-2).
            last = members[np.flatnonzero(np.append(buffer_pos[members][1:] != buffer_pos[members][:-1], True))]
            ends = slots[last] * 8 - bufs.bases[buffer_pos[last]] + np.where(follow[last] == -1, (sizes[last] + 7) & ~7, 0)
            for position, end in zip(buffer_pos[last].tolist(), ends.tolist(), strict=True):
                stops[position] = end
    unknown: list[tuple[int, int, int, str]] = []
    for position, stop in enumerate(stops):
        _judge_stop(bufs, position, stop, unknown)
    return Chains(slots[chosen] * 8, sizes[chosen], buffer_pos[chosen], unknown)


def _native_chains(bufs: Buffers, chains: Callable[[Any, Any, Any], tuple[bytes, bytes, bytes, bytes]]) -> Chains:
    """``walk_chains`` by the compiled core: each chain followed in C, each stop judged here."""
    bases = np.ascontiguousarray(bufs.bases, dtype=np.int64)
    ends = np.ascontiguousarray(bufs.ends, dtype=np.int64)
    offsets, sizes, positions, stops = chains(bufs.blob, bases, ends)
    unknown: list[tuple[int, int, int, str]] = []
    for position, stop in enumerate(np.frombuffer(stops, dtype=np.int64).tolist()):
        _judge_stop(bufs, position, stop, unknown)
    as_array = np.frombuffer
    return Chains(as_array(offsets, dtype=np.int64), as_array(sizes, dtype=np.int64), as_array(positions, dtype=np.int64), unknown)


def _judge_stop(bufs: Buffers, position: int, pos: int, unknown: list[tuple[int, int, int, str]]) -> None:
    """Why a buffer's chain stopped at ``pos``: its end, an end marker, an unknown record, damage."""
    info, base, end, length = bufs.infos[position], int(bufs.bases[position]), int(bufs.ends[position]), bufs.lengths[position]
    truncated = length < info.buffer_size and not info.compressed
    problem = None
    if pos + 4 <= end:
        marker = _u32(bufs.blob, base + pos)[0]
        flags, header_type = marker >> F.MARKER_FLAGS_SHIFT, F.header_type_of(marker)
        reason = None
        if marker == F.END_OF_DATA:
            pass
        elif F.is_typed(flags) and header_type not in F.HEADER_KINDS:
            reason = f"unknown header type {header_type:#04x}"
        elif F.is_typed(flags) or F.is_message(flags):
            problem = "record header runs past the buffer's data, or its size is out of range"
        else:
            reason = f"no record header at this position (marker {marker:#010x})"
        if reason is not None:
            unknown.append((base + pos, end - pos, position, reason))
            bufs.stats["unknown_records"] += 1
            bufs.stats["skipped_bytes"] += end - pos
    if problem is not None:
        bufs.stats["skipped_bytes"] += end - pos
    if problem is not None or truncated:
        # Damage is rare: the reference walk says exactly what and where, as the reader says it.
        data = bytes(bufs.blob[base : base + length])
        for item in F.walk(data, data_end=info.data_end, buffer_size=info.buffer_size, compressed=info.compressed,
                           file_offset=info.file_offset, buffer_index=info.index):  # fmt: skip
            if isinstance(item, F.Problem) and item.structure != _OFFSET_FIELD:
                bufs.errors.append(problem_fields(item.message, item.offset, item.buffer_index, item.structure))
