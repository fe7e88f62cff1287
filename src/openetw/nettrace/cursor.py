"""Bounded reads over a slice of a trace's bytes: every read checks what is left first.

A ``Cursor`` reads little-endian primitives from ``data[start:end]`` and knows the absolute file
offset of each byte, so a short or malformed structure raises ``NettraceFormatError`` naming
where it is (offset, block, structure) instead of an ``IndexError`` or a ``struct.error``.
"""

from __future__ import annotations

import struct
from typing import Any

from openetw.errors import NettraceFormatError

_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")

MAX_STRING_BYTES = 1 << 16  # a name in metadata; longer is damage, not a name


class Cursor:
    """``data[pos:end]`` read front to back; ``base`` is the file offset of ``data[0]``."""

    __slots__ = ("data", "pos", "end", "base", "block", "structure")

    def __init__(self, data: Any, pos: int = 0, end: int | None = None, *, base: int = 0, block: int | None = None, structure: str = "") -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else min(end, len(data))
        self.base = base
        self.block = block
        self.structure = structure

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    @property
    def offset(self) -> int:
        """The file offset of the next byte."""
        return self.base + self.pos

    def error(self, message: str, offset: int | None = None) -> NettraceFormatError:
        return NettraceFormatError(message, offset=self.offset if offset is None else offset, block=self.block, structure=self.structure or None)

    def need(self, size: int, what: str) -> None:
        if size < 0 or size > self.end - self.pos:
            raise self.error(f"{what}: {size} bytes needed, {self.end - self.pos} left")

    def take(self, size: int, what: str = "bytes") -> bytes:
        self.need(size, what)
        start = self.pos
        self.pos += size
        return bytes(self.data[start : self.pos])

    def skip(self, size: int, what: str = "bytes") -> None:
        self.need(size, what)
        self.pos += size

    def u8(self, what: str = "byte") -> int:
        self.need(1, what)
        value = self.data[self.pos]
        self.pos += 1
        return int(value)

    def _fixed(self, layout: struct.Struct, what: str) -> int:
        self.need(layout.size, what)
        value: int = layout.unpack_from(self.data, self.pos)[0]
        self.pos += layout.size
        return value

    def i16(self, what: str = "short") -> int:
        return self._fixed(_I16, what)

    def i32(self, what: str = "int") -> int:
        return self._fixed(_I32, what)

    def u32(self, what: str = "uint") -> int:
        return self._fixed(_U32, what)

    def i64(self, what: str = "long") -> int:
        return self._fixed(_I64, what)

    def u64(self, what: str = "ulong") -> int:
        return self._fixed(_U64, what)

    def count(self, what: str, element_size: int) -> int:
        """An int32 count of elements of at least ``element_size`` bytes each, checked against
        what is left before anyone allocates for it."""
        at = self.offset
        value = self.i32(what)
        if value < 0 or value * max(element_size, 1) > self.remaining:
            raise self.error(f"{what} {value} does not fit the {self.remaining} bytes left", at)
        return value

    def varuint(self, what: str = "varuint", bits: int = 64) -> int:
        result: int = 0
        shift = 0
        while True:
            if self.pos >= self.end:
                raise self.error(f"{what}: the variable-length integer runs past its block")
            byte = int(self.data[self.pos])
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift >= bits + 7:
                raise self.error(f"{what}: a variable-length integer longer than {bits} bits")
        return result & ((1 << bits) - 1)

    def utf16z(self, what: str = "string") -> str:
        """A NUL-terminated UTF-16LE string (as EventPipe metadata writes names)."""
        data, start = self.data, self.pos
        limit = min(self.end, start + MAX_STRING_BYTES)
        pos = start
        while pos + 1 < limit:
            if data[pos] == 0 and data[pos + 1] == 0:
                self.pos = pos + 2
                return bytes(data[start:pos]).decode("utf-16-le", errors="replace")
            pos += 2
        raise self.error(f"{what}: no NUL terminator")

    def utf8_counted(self, what: str = "string") -> str:
        """An int32 byte count and UTF-8 bytes (FastSerialization's string)."""
        size = self.count(what, 1)
        return self.take(size, what).decode("utf-8", errors="replace")

    def align(self, boundary: int = 4) -> None:
        """Skip to the next file offset that is a multiple of ``boundary``."""
        pad = -self.offset % boundary
        if pad:
            self.skip(pad, "alignment padding")
