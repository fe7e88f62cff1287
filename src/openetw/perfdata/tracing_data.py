"""HEADER_TRACING_DATA: the tracefs files ``perf record`` saves beside tracepoint samples.

Layout (``tools/perf/util/trace-event-info.c``): the magic ``\\x17\\x08\\x44tracing``, a version
string, the byte order and ``long`` size of the recording machine, its page size, the
``header_page`` and ``header_event`` files, the ftrace format files, then per event system its
name and ``format`` files, then kallsyms, the printk formats and (version 0.6) the saved
command lines. Every size is checked against what is left before anything is sliced.

The ``format`` files are parsed by ``openetw.kernel.tracefs_format`` (pure: text in, objects
out), the same field model the live kernel trace uses.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from openetw.errors import PerfDataFormatError, TraceDataError
from openetw.kernel.tracefs_format import EventFormat, parse_event_format
from openetw.perfdata.layout import TRACING_MAGIC

__all__ = ["TracingData", "parse_tracing_data"]


@dataclass
class TracingData:
    """What the tracing data section holds: event formats by tracepoint id, and the rest as text."""

    version: str = ""
    big_endian: bool = False
    long_size: int = 8
    page_size: int = 4096
    header_page: str = ""
    header_event: str = ""
    formats: dict[int, EventFormat] = field(default_factory=dict)
    format_texts: dict[int, str] = field(default_factory=dict)
    kallsyms: bytes = b""
    printk: bytes = b""
    saved_cmdlines: str = ""
    problems: list[PerfDataFormatError] = field(default_factory=list)  # formats that did not parse


class _Cursor:
    def __init__(self, data: bytes, base: int, endian: str) -> None:
        self.data, self.pos, self.base, self.endian = data, 0, base, endian

    def fail(self, message: str) -> PerfDataFormatError:
        return PerfDataFormatError(message, offset=self.base + self.pos, structure="HEADER_TRACING_DATA")

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise self.fail(
                f"{what} of {size} bytes runs past the section's {len(self.data) - self.pos} remaining bytes"
            )
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return bytes(chunk)

    def number(self, size: int, what: str) -> int:
        value: int = struct.unpack(self.endian + ("I" if size == 4 else "Q"), self.take(size, what))[0]
        return value

    def cstring(self, what: str) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise self.fail(f"{what} has no NUL terminator")
        text = bytes(self.data[self.pos : end]).decode("utf-8", "replace")
        self.pos = end + 1
        return text

    def sized(self, size_bytes: int, what: str) -> bytes:
        return self.take(self.number(size_bytes, f"size of {what}"), what)


def _named_file(cursor: _Cursor, name: str) -> str:
    label = cursor.cstring(f"{name} label")
    if label != name:
        raise cursor.fail(f"expected {name!r}, found {label!r}")
    return cursor.sized(8, name).decode("utf-8", "replace")


def parse_tracing_data(data: bytes, *, base: int = 0) -> TracingData:
    """The tracing data at ``data`` (``base``: its file offset, for errors).

    A ``format`` file that does not parse is left out and noted in ``problems``; a section cut
    short keeps every format read before the cut and raises nothing when formats were read
    (the cut is in ``problems``); a section without the magic raises ``PerfDataFormatError``."""
    data = bytes(data)
    if not data.startswith(TRACING_MAGIC):
        raise PerfDataFormatError(
            "tracing data does not start with its magic", offset=base, structure="HEADER_TRACING_DATA"
        )
    cursor = _Cursor(data, base, "<")
    cursor.pos = len(TRACING_MAGIC)
    result = TracingData()
    try:
        result.version = cursor.cstring("version")
        result.big_endian = cursor.take(1, "byte order")[0] != 0
        cursor.endian = ">" if result.big_endian else "<"
        result.long_size = cursor.take(1, "long size")[0]
        result.page_size = cursor.number(4, "page size")
        result.header_page = _named_file(cursor, "header_page")
        result.header_event = _named_file(cursor, "header_event")
        for _ in range(_count(cursor, "ftrace format count")):
            _add_format(result, cursor.sized(8, "ftrace format"), "ftrace", cursor)
        for _ in range(_count(cursor, "event system count")):
            system = cursor.cstring("event system name")
            for _ in range(_count(cursor, f"{system} format count")):
                _add_format(result, cursor.sized(8, f"{system} format"), system, cursor)
        result.kallsyms = cursor.sized(4, "kallsyms")
        result.printk = cursor.sized(4, "printk formats")
        if result.version >= "0.6" and cursor.pos < len(data):
            result.saved_cmdlines = cursor.sized(8, "saved command lines").decode("utf-8", "replace")
    except PerfDataFormatError as error:
        if not result.formats:
            raise
        result.problems.append(error)
    return result


def _count(cursor: _Cursor, what: str) -> int:
    count = cursor.number(4, what)
    if count > len(cursor.data) - cursor.pos:  # each entry takes at least a byte
        raise cursor.fail(f"{what} {count} exceeds the bytes left")
    return count


def _add_format(result: TracingData, raw: bytes, system: str, cursor: _Cursor) -> None:
    text = raw.decode("utf-8", "replace")
    try:
        parsed = parse_event_format(text, system=system)
    except TraceDataError as error:
        result.problems.append(
            PerfDataFormatError(
                f"{system} format: {error}", offset=cursor.base + cursor.pos - len(raw), structure="format"
            )
        )
        return
    result.formats[parsed.id] = parsed
    result.format_texts[parsed.id] = text
