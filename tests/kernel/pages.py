"""Building tracefs sub-buffers by hand, and loading the captured ones."""

from __future__ import annotations

import struct
from pathlib import Path

from openetw.kernel.ringbuffer import EventDecoder, PageParser
from openetw.kernel.tracefs_format import parse_event_format, parse_header_event, parse_header_page

DATA = Path(__file__).parent / "data" / "captured"
PAGE_SIZE = 4096


def captured_parser() -> PageParser:
    return PageParser(parse_header_page((DATA / "header_page").read_text()), parse_header_event((DATA / "header_event").read_text()))


def captured_decoder() -> EventDecoder:
    return EventDecoder(parse_event_format(p.read_text(), system=p.name.split("__")[0]) for p in sorted(DATA.glob("*.format")))


def captured_pages() -> list[tuple[int, bytes]]:
    return [(int(p.name[3 : p.name.index("-")]), p.read_bytes()) for p in sorted(DATA.glob("cpu*.page"))]


def data_event(payload: bytes, delta: int = 0) -> bytes:
    """A data event: compact (type_len = words) when it fits, else type_len 0 with a length."""
    assert len(payload) % 4 == 0
    words = len(payload) // 4
    if 1 <= words <= 28:
        return struct.pack("<I", delta << 5 | words) + payload
    return struct.pack("<II", delta << 5, len(payload) + 4) + payload


def time_extend(delta: int) -> bytes:
    return struct.pack("<II", (delta & ((1 << 27) - 1)) << 5 | 30, delta >> 27)


def absolute(ts: int) -> bytes:
    return struct.pack("<II", (ts & ((1 << 27) - 1)) << 5 | 31, (ts >> 27) & 0xFFFFFFFF)


def discarded(length: int, delta: int = 1) -> bytes:
    """A discarded event: array[0] is its size after the header word (itself included)."""
    return struct.pack("<II", delta << 5 | 29, length + 4) + b"\xAA" * length


def page(timestamp: int, *events: bytes, commit_flags: int = 0, lost: int | None = None, tail_padding: bool = False) -> bytes:
    data = b"".join(events)
    if tail_padding:
        data += struct.pack("<I", 29)  # padding, delta 0: the rest of the page
    body = struct.pack("<QQ", timestamp, len(data) | commit_flags) + data
    if lost is not None:
        body += struct.pack("<Q", lost)
    return body + bytes(PAGE_SIZE - len(body))
