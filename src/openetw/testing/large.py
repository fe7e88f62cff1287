"""Large traces for tests and benchmarks, made fast: a file's data buffers written again and again.

``repeat_buffers(source, target, min_bytes)`` writes ``source``'s header buffer once, then its
other buffers whole, repeated until the file holds at least ``min_bytes``. ``time_step`` says how
each repetition's timestamps (buffer headers and records) move against the one before:

- ``1`` (the default): past the one before, so the result is one long trace in time order, as a
  long recording would be;
- ``0``: not at all, as a relog of the same trace many times over (many records per timestamp,
  and the buffers go back in time at each repetition);
- ``-1``: before the one before, so the file's buffers go back in time.

A compressed source's buffers are repeated as they are (their records' timestamps are inside the
compressed data): only ``time_step=0`` is possible for it. WPP and unknown records keep their bytes.

``compressed_copy(source, target)`` writes an uncompressed trace again with every data buffer
compressed (LZXPRESS, as Windows writes a trace in compressed mode): the source of compressed
traces of any size and density for ``repeat_buffers``.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from openetw.consumer._engine.index_build import KIND_CODES, build_index_data
from openetw.etl import layouts as L
from openetw.etl.lzxpress import compress
from openetw.etl.reader import EtlReader
from openetw.etl.writer import header_buffer

__all__ = ["compressed_copy", "repeat_buffers"]

# Where a record's timestamp is, by kind (the header layouts of ``etl/layouts.py``).
_TIMESTAMP_AT = {
    "system": L.SYSTEM_TRACE_HEADER.offset("SystemTime"),
    "compact": L.SYSTEM_TRACE_HEADER.offset("SystemTime"),
    "perfinfo": L.PERFINFO_TRACE_HEADER.offset("SystemTime"),
    "classic": L.EVENT_TRACE_HEADER.offset("TimeStamp"),
    "instance": L.EVENT_TRACE_HEADER.offset("TimeStamp"),
    "event": L.EVENT_HEADER.offset("TimeStamp"),
}


def repeat_buffers(source: str | os.PathLike[str], target: str | os.PathLike[str], min_bytes: int, *, time_step: int = 1) -> int:
    """Write the repeated trace (see the module doc); returns how many records it holds."""
    if time_step not in (-1, 0, 1):
        raise ValueError("time_step is -1, 0 or 1")
    built = build_index_data(os.fspath(source))
    if built.header.compressed and time_step:
        raise ValueError("a compressed trace's buffers are repeated with their own times: time_step=0")
    buffers, rows = built.buffers, built.records
    with open(source, "rb") as f:
        data = f.read()
    head_size = int(buffers["buffer_size"][0])
    body = bytearray(data[head_size : int(buffers["file_offset"][-1] + buffers["buffer_size"][-1])])
    in_body = rows["buffer"] != buffers["index"][0]
    per_copy = int(np.count_nonzero(in_body))
    slots, span = _timestamp_slots(buffers, rows, in_body, head_size) if time_step else (np.zeros(0, dtype=np.int64), 0)
    original = np.frombuffer(bytes(body), dtype="<i8", count=len(body) // 8)
    work = np.frombuffer(body, dtype="<i8", count=len(body) // 8)
    copies = 0
    with open(target, "wb") as out:
        out.write(data[:head_size])
        written = head_size
        while written < min_bytes or copies == 0:
            if time_step:
                work[slots] = original[slots] + time_step * copies * span
            out.write(body)
            written += len(body)
            copies += 1
    return int(len(rows) - per_copy + per_copy * copies)


def _timestamp_slots(buffers: np.ndarray, rows: np.ndarray, in_body: np.ndarray, head_size: int) -> tuple[np.ndarray, int]:
    """The 8-byte slots of the body holding a timestamp, and the time one copy spans."""
    places = [buffers["file_offset"][1:].astype(np.int64) - head_size + L.WMI_BUFFER_HEADER.offset("TimeStamp")]
    starts = {int(index): int(offset) for index, offset in zip(buffers["index"].tolist(), buffers["file_offset"].tolist(), strict=False)}
    for kind, at in _TIMESTAMP_AT.items():
        mine = rows[in_body & (rows["kind"] == KIND_CODES[kind])]
        if len(mine):
            base = np.asarray([starts[int(b)] for b in mine["buffer"].tolist()], dtype=np.int64) - head_size
            places.append(base + mine["offset"].astype(np.int64) + at)
    where = np.concatenate(places)
    if np.any(where % 8):
        raise ValueError("timestamps not 8-byte aligned")
    timed = rows["timestamp"][rows["kind"] < KIND_CODES["wpp"]]
    span = int(timed.max() - timed.min()) + 1 if len(timed) else 1
    return where // 8, span


def compressed_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Write ``source`` (uncompressed) with its data buffers compressed; returns how many."""
    bh = L.BUFFER_HEADER_SIZE
    with EtlReader(source) as reader, open(target, "wb") as out:
        header = dataclasses.replace(reader.header, log_file_mode=reader.header.log_file_mode | L.EVENT_TRACE_COMPRESSED_MODE)
        if header.compressed == reader.header.compressed:
            raise ValueError("compressed_copy takes an uncompressed trace")
        buffers = iter(reader.buffers())
        first, _ = next(buffers)
        out.write(header_buffer(header, first.logger_id))
        count = 0
        for info, data in buffers:
            end = min(info.data_end, len(data))
            stream = compress(data[bh:end])
            size = bh + len(stream)  # packed, as Windows writes them: the stream ends the buffer
            head = bytearray(data[:bh])
            fields = L.WMI_BUFFER_HEADER.unpack_from(head, 0)
            values = dict(zip((name for name, _ in L.WMI_BUFFER_HEADER.fields), fields, strict=True))
            values.update(BufferSize=size, SavedOffset=size, Offset=end, BufferFlag=info.flags | L.BUFFER_FLAG_COMPRESSED)
            L.WMI_BUFFER_HEADER.pack_into(head, 0, *values.values())
            out.write(bytes(head) + stream)
            count += 1
    return count
