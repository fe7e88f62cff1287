"""The few protobuf wire rules the Perfetto writer needs: varints, tags, length-delimited fields."""

from __future__ import annotations

import struct

__all__ = ["bytes_field", "double_field", "fixed64_field", "sint_field", "string_field", "tag", "varint", "varint_field"]

_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_SMALL = [bytes((n,)) for n in range(128)]


def varint(value: int) -> bytes:
    """``value`` as a varint (negative numbers as their 64-bit two's complement, as int64 is sent)."""
    if 0 <= value < 128:
        return _SMALL[value]
    if value < 0:
        value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def sint_field(number: int, value: int) -> bytes:
    """A ``sint32``/``sint64`` field (zig-zag)."""
    return varint(number << 3) + varint((value << 1) ^ (value >> 63))


def bytes_field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def string_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode("utf-8", "replace"))


def fixed64_field(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + _FIXED64.pack(value & ((1 << 64) - 1))


def double_field(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + _DOUBLE.pack(value)
