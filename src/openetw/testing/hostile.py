"""Hostile ``.etl`` files for tests: small on disk, huge when read.

``record_bomb(path, buffers, inflated)`` writes a compressed trace whose every buffer is a few
dozen bytes that inflate to ``inflated`` bytes of one small event repeated (a literal record and
one long LZXPRESS match, [MS-XCA] 2.4): 64 buffers of 16 MiB are 77 KB on disk and 13.4 million
records.
"""

from __future__ import annotations

import os
import struct
import uuid

from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.clock import TraceClock
from openetw.etl.writer import header_buffer, new_logfile_header

__all__ = ["BOMB_RECORD_SIZE", "record_bomb"]

_BH = L.BUFFER_HEADER_SIZE
_CLOCK = TraceClock(L.CLOCK_QPC, 133_000_000_000_000_000, 5_000_000, 10_000_000)
_RECORD = bytes(build_event_record(provider_id=uuid.UUID(int=5), id=1, timestamp=5_000_100).raw)
BOMB_RECORD_SIZE = len(_RECORD)


def _repeating_stream(record: bytes, size: int) -> bytes:
    """An LZXPRESS stream of ``record`` then a match repeating it up to ``size`` bytes."""
    symbols: list[int | None] = [*record, None]  # None: the match
    out = bytearray()
    for start in range(0, len(symbols), 32):
        group = symbols[start : start + 32]
        flags = 0
        for symbol in group:
            flags = flags << 1 | (symbol is None)
        padding = 32 - len(group)
        out += struct.pack("<I", flags << padding | ((1 << padding) - 1))
        for symbol in group:
            if symbol is not None:
                out.append(symbol)
            else:  # distance len(record), length in the 32-bit form
                out += struct.pack("<HBBHI", (len(record) - 1) << 3 | 7, 0x0F, 0xFF, 0, size - len(record) - 3)
    return bytes(out)


def record_bomb(path: str | os.PathLike[str], buffers: int = 64, inflated: int = 16 << 20) -> int:
    """Write the bomb (see the module doc); returns how many records it holds. Each buffer holds
    whole records: ``inflated`` is rounded down to a whole number of them after the header."""
    count = (inflated - _BH) // len(_RECORD)
    data_end = _BH + count * len(_RECORD)
    stream = _repeating_stream(_RECORD, data_end - _BH)
    mode = L.EVENT_TRACE_FILE_MODE_SEQUENTIAL | L.EVENT_TRACE_COMPRESSED_MODE
    out = bytearray(header_buffer(new_logfile_header(clock=_CLOCK, number_of_processors=1, log_file_mode=mode), 1))
    size = _BH + len(stream)
    for n in range(buffers):
        head = bytearray(_BH)
        L.WMI_BUFFER_HEADER.pack_into(head, 0, size, size, 0, 0, 5_000_000 + n, n + 1, 0, 0, 1, 3, data_end, L.BUFFER_FLAG_COMPRESSED, 0, bytes(16))
        out += head + stream
    with open(path, "wb") as f:
        f.write(out)
    return 1 + buffers * count
