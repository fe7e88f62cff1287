"""The few protobuf wire rules the Perfetto writer needs: varints, tags, length-delimited fields."""

from __future__ import annotations

import struct

__all__ = ["bytes_field", "double_field", "fixed64_field", "sint_field", "string_field", "tag", "varint", "varint_field"]

_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")


def _plain(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_plain(n) for n in range(1 << 14)]
_CONTINUED = [bytes(((n & 0x7F) | 0x80, (n >> 7) | 0x80)) for n in range(1 << 14)]  # 14 bits, more to come


def _encode(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1
    if value < 16384:
        return _SMALL[value]
    low = _CONTINUED[value & 0x3FFF]
    if value < 1 << 28:
        return low + _SMALL[value >> 14]
    if value < 1 << 42:
        return low + _CONTINUED[value >> 14 & 0x3FFF] + _SMALL[value >> 28]
    if value < 1 << 56:
        return low + _CONTINUED[value >> 14 & 0x3FFF] + _CONTINUED[value >> 28 & 0x3FFF] + _SMALL[value >> 42]
    return (
        low + _CONTINUED[value >> 14 & 0x3FFF] + _CONTINUED[value >> 28 & 0x3FFF] + _CONTINUED[value >> 42 & 0x3FFF]
        + _SMALL[value >> 56]
    )  # fmt: skip

_VARINT_TAGS = [_plain(n << 3) for n in range(128)]
_BYTES_TAGS = [_plain(n << 3 | 2) for n in range(128)]


def varint(value: int) -> bytes:
    """``value`` as a varint (negative numbers as their 64-bit two's complement, as int64 is sent)."""
    if 0 <= value < 16384:
        return _SMALL[value]
    return _encode(value)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def varint_field(number: int, value: int) -> bytes:
    return (_VARINT_TAGS[number] if number < 128 else _encode(number << 3)) + (_SMALL[value] if 0 <= value < 16384 else _encode(value))


def sint_field(number: int, value: int) -> bytes:
    """A ``sint32``/``sint64`` field (zig-zag)."""
    return varint_field(number, (value << 1) ^ (value >> 63))


def bytes_field(number: int, data: bytes) -> bytes:
    size = len(data)
    return (_BYTES_TAGS[number] if number < 128 else _encode(number << 3 | 2)) + (_SMALL[size] if size < 16384 else _encode(size)) + data


def string_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode("utf-8", "replace"))


def fixed64_field(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + _FIXED64.pack(value & ((1 << 64) - 1))


def double_field(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + _DOUBLE.pack(value)
