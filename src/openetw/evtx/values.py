"""BinXml value types: bytes to Python values, to the text Event Viewer shows, and back.

A substitution carries a type byte; ``0x80`` marks an array of the base type. Text follows
``wevtutil qe /f:xml``: decimal integers, ``0x``-prefixed hex, ``{GUID}`` in capitals, SIDs as
``S-1-...``, times as ``YYYY-MM-DDTHH:MM:SS.fffffffffZ``, binary as capital hex.
"""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from openetw.etl.clock import FILETIME_EPOCH, datetime_to_filetime
from openetw.etl.intypes import filetime_iso

NULL = 0x00
STRING = 0x01
ANSI_STRING = 0x02
INT8 = 0x03
UINT8 = 0x04
INT16 = 0x05
UINT16 = 0x06
INT32 = 0x07
UINT32 = 0x08
INT64 = 0x09
UINT64 = 0x0A
REAL32 = 0x0B
REAL64 = 0x0C
BOOL = 0x0D
BINARY = 0x0E
GUID = 0x0F
SIZE_T = 0x10
FILETIME = 0x11
SYSTEMTIME = 0x12
SID = 0x13
HEX_INT32 = 0x14
HEX_INT64 = 0x15
EVT_HANDLE = 0x20
BINXML = 0x21
EVT_XML = 0x23
ARRAY = 0x80

TYPE_NAMES = {
    NULL: "Null", STRING: "String", ANSI_STRING: "AnsiString", INT8: "Int8", UINT8: "UInt8",
    INT16: "Int16", UINT16: "UInt16", INT32: "Int32", UINT32: "UInt32", INT64: "Int64",
    UINT64: "UInt64", REAL32: "Real32", REAL64: "Real64", BOOL: "Bool", BINARY: "Binary",
    GUID: "Guid", SIZE_T: "SizeT", FILETIME: "FileTime", SYSTEMTIME: "SysTime", SID: "Sid",
    HEX_INT32: "HexInt32", HEX_INT64: "HexInt64", EVT_HANDLE: "EvtHandle", BINXML: "BinXml",
    EVT_XML: "EvtXml",
}  # fmt: skip

# Fixed-size scalar types: struct code.
_FIXED: dict[int, str] = {
    INT8: "b", UINT8: "B", INT16: "h", UINT16: "H", INT32: "i", UINT32: "I", INT64: "q",
    UINT64: "Q", REAL32: "f", REAL64: "d", BOOL: "I", HEX_INT32: "I", HEX_INT64: "Q",
    FILETIME: "Q",
}  # fmt: skip
FIXED_SIZES: dict[int, int] = {t: struct.calcsize("<" + c) for t, c in _FIXED.items()}
FIXED_SIZES.update({GUID: 16, SYSTEMTIME: 16})
_STRUCTS = {t: struct.Struct("<" + c) for t, c in _FIXED.items()}



class ValueError_(ValueError):
    """A value's bytes do not fit its type (turned into ``EvtxFormatError`` by the caller)."""


def type_name(value_type: int) -> str:
    base = TYPE_NAMES.get(value_type & 0x7F, f"0x{value_type & 0x7F:02x}")
    return base + "Array" if value_type & ARRAY else base


def _utf16(data: bytes) -> str:
    text = data.decode("utf-16-le", "replace")
    return text.rstrip("\x00")


def _ansi(data: bytes) -> str:
    return data.decode("latin-1").rstrip("\x00")


def filetime_text(ticks: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.fffffffffZ`` (100 ns precision, nanosecond digits) as wevtutil prints."""
    try:
        return filetime_iso(ticks, 9)
    except OverflowError:
        raise ValueError_(f"FILETIME {ticks} is outside the years 1601 to 9999") from None


def filetime_datetime(ticks: int) -> datetime:
    try:
        return FILETIME_EPOCH + timedelta(microseconds=ticks // 10)
    except OverflowError:
        raise ValueError_(f"FILETIME {ticks} is outside the years 1601 to 9999") from None


def systemtime_fields(data: bytes) -> tuple[int, ...]:
    year, month, _dow, day, hour, minute, second, ms = struct.unpack_from("<8H", data)
    return year, month, day, hour, minute, second, ms


def systemtime_datetime(data: bytes) -> datetime:
    year, month, day, hour, minute, second, ms = systemtime_fields(data)
    try:
        return datetime(year, month, day, hour, minute, second, ms * 1000, tzinfo=UTC)
    except ValueError:
        raise ValueError_(f"SYSTEMTIME {year}-{month}-{day} {hour}:{minute}:{second}.{ms} is not a date") from None


def systemtime_text(data: bytes) -> str:
    value = systemtime_datetime(data)
    return f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond * 1000:09d}Z"


def sid_text(data: bytes) -> str:
    if len(data) < 8:
        raise ValueError_(f"SID of {len(data)} bytes")
    revision, count = data[0], data[1]
    if len(data) < 8 + 4 * count:
        raise ValueError_(f"SID with {count} sub-authorities in {len(data)} bytes")
    authority = int.from_bytes(data[2:8], "big")
    subs = struct.unpack_from(f"<{count}I", data, 8)
    return "-".join(["S", str(revision), str(authority), *map(str, subs)])


def sid_bytes(text: str) -> bytes:
    parts = text.split("-")
    if len(parts) < 3 or parts[0].upper() != "S":
        raise ValueError_(f"{text!r} is not a SID")
    subs = [int(p) for p in parts[3:]]
    return bytes([int(parts[1]), len(subs)]) + int(parts[2]).to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)


def guid_text(data: bytes) -> str:
    if len(data) != 16:
        raise ValueError_(f"GUID of {len(data)} bytes")
    return "{" + str(uuid.UUID(bytes_le=bytes(data))).upper() + "}"


def _real_text(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _scalar_text(value_type: int, data: bytes) -> str:
    """The text of one non-array, non-BinXml value."""
    if value_type == STRING:
        return _utf16(data)
    if value_type in (ANSI_STRING, EVT_XML):
        return _ansi(data) if value_type == ANSI_STRING else _utf16(data)
    if value_type == NULL:
        return ""
    if value_type == BINARY:
        return data.hex().upper()
    if value_type == GUID:
        return guid_text(data)
    if value_type == SID:
        return sid_text(data)
    if value_type == SYSTEMTIME:
        if len(data) != 16:
            raise ValueError_(f"SYSTEMTIME of {len(data)} bytes")
        return systemtime_text(data)
    if value_type in (SIZE_T, EVT_HANDLE):
        if len(data) not in (4, 8):
            raise ValueError_(f"{type_name(value_type)} of {len(data)} bytes")
        number = int.from_bytes(data, "little")
        return f"0x{number:x}" if value_type == SIZE_T else str(number)
    packer = _STRUCTS.get(value_type)
    if packer is None:
        raise ValueError_(f"unknown value type 0x{value_type:02x}")
    if len(data) != packer.size:
        raise ValueError_(f"{type_name(value_type)} of {len(data)} bytes")
    (number,) = packer.unpack(data)
    if value_type in (HEX_INT32, HEX_INT64):
        return f"0x{number:x}"
    if value_type == FILETIME:
        return filetime_text(number)
    if value_type == BOOL:
        return "true" if number else "false"
    if value_type in (REAL32, REAL64):
        return _real_text(number)
    return str(number)


def split_array(value_type: int, data: bytes) -> list[bytes]:
    base = value_type & 0x7F
    if base == STRING:
        text = data.decode("utf-16-le", "replace")
        if text.endswith("\x00"):
            text = text[:-1]
        return [part.encode("utf-16-le") for part in text.split("\x00")] if text else []
    if base == ANSI_STRING:
        text = data.decode("latin-1")
        if text.endswith("\x00"):
            text = text[:-1]
        return [part.encode("latin-1") for part in text.split("\x00")] if text else []
    size = FIXED_SIZES.get(base)
    if base in (SIZE_T, EVT_HANDLE):
        size = 8 if len(data) % 8 == 0 else 4
    if base == SID:
        items = []
        pos = 0
        while pos + 8 <= len(data):
            end = pos + 8 + 4 * data[pos + 1]
            items.append(data[pos:end])
            pos = end
        if pos != len(data):
            raise ValueError_(f"SID array of {len(data)} bytes ends inside a SID")
        return items
    if not size:
        raise ValueError_(f"no array of {type_name(base)}")
    if len(data) % size:
        raise ValueError_(f"{type_name(value_type)} of {len(data)} bytes is not a whole number of items")
    return [data[i : i + size] for i in range(0, len(data), size)]


def value_text(value_type: int, data: bytes) -> str:
    """The text of a value (arrays: items joined with ``,``); ``ValueError_`` when damaged."""
    if value_type & ARRAY:
        base = value_type & 0x7F
        return ",".join(_scalar_text(base, item) for item in split_array(value_type, data))
    return _scalar_text(value_type, data)


def _scalar_value(value_type: int, data: bytes) -> Any:
    if value_type in (STRING, EVT_XML):
        return _utf16(data)
    if value_type == ANSI_STRING:
        return _ansi(data)
    if value_type == NULL:
        return None
    if value_type == BINARY:
        return bytes(data)
    if value_type == GUID:
        if len(data) != 16:
            raise ValueError_(f"GUID of {len(data)} bytes")
        return uuid.UUID(bytes_le=bytes(data))
    if value_type == SID:
        return sid_text(data)
    if value_type == SYSTEMTIME:
        if len(data) != 16:
            raise ValueError_(f"SYSTEMTIME of {len(data)} bytes")
        return systemtime_datetime(data)
    if value_type in (SIZE_T, EVT_HANDLE):
        return int.from_bytes(data, "little")
    packer = _STRUCTS.get(value_type)
    if packer is None:
        raise ValueError_(f"unknown value type 0x{value_type:02x}")
    if len(data) != packer.size:
        raise ValueError_(f"{type_name(value_type)} of {len(data)} bytes")
    (number,) = packer.unpack(data)
    if value_type == FILETIME:
        return filetime_datetime(number)
    if value_type == BOOL:
        return bool(number)
    return number


def python_value(value_type: int, data: bytes) -> Any:
    """The value as Python: int, float, bool, str, bytes, UUID, datetime, SID text, or a list."""
    if value_type & ARRAY:
        base = value_type & 0x7F
        return [_scalar_value(base, item) for item in split_array(value_type, data)]
    return _scalar_value(value_type, data)


# -- encoding (the writer) -----------------------------------------------------------------------


def _encode_scalar(value_type: int, value: Any) -> bytes:
    if value_type in (STRING, EVT_XML):
        return str(value).encode("utf-16-le")
    if value_type == ANSI_STRING:
        return str(value).encode("latin-1", "replace")
    if value_type == NULL:
        return b""
    if value_type == BINARY:
        return bytes(value)
    if value_type == GUID:
        return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes_le
    if value_type == SID:
        return sid_bytes(str(value))
    if value_type == SYSTEMTIME:
        v: datetime = value
        return struct.pack("<8H", v.year, v.month, (v.weekday() + 1) % 7, v.day, v.hour, v.minute, v.second, v.microsecond // 1000)
    if value_type in (SIZE_T, EVT_HANDLE):
        return int(value).to_bytes(8, "little")
    if value_type == FILETIME and isinstance(value, datetime):
        value = datetime_to_filetime(value)
    packer = _STRUCTS.get(value_type)
    if packer is None:
        raise ValueError_(f"cannot encode value type 0x{value_type:02x}")
    return packer.pack(value)


def encode_value(value_type: int, value: Any) -> bytes:
    """Bytes of ``value`` as ``value_type`` (arrays from a sequence)."""
    if value_type & ARRAY:
        base = value_type & 0x7F
        if base == STRING:
            return "".join(str(v) + "\x00" for v in value).encode("utf-16-le")
        if base == ANSI_STRING:
            return "".join(str(v) + "\x00" for v in value).encode("latin-1", "replace")
        return b"".join(_encode_scalar(base, v) for v in value)
    return _encode_scalar(value_type, value)


def type_of_python(value: Any) -> int:
    """The value type the writer uses for a Python value."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        if 0 <= value <= 0xFFFFFFFF:
            return UINT32
        if -(2**63) <= value < 0:
            return INT64
        return UINT64 if value < 2**64 else STRING
    if isinstance(value, float):
        return REAL64
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BINARY
    if isinstance(value, uuid.UUID):
        return GUID
    if isinstance(value, datetime):
        return FILETIME
    if isinstance(value, (list, tuple)):
        if not value:
            return STRING | ARRAY
        base = type_of_python(value[0])
        if base in (NULL, BINARY) or any(type_of_python(v) != base for v in value):
            return STRING | ARRAY
        return base | ARRAY
    return STRING
