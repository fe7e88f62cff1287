"""The type table: one row per TDH in-type, and the FILETIME and SYSTEMTIME conversions, once.

``InType`` and ``OutType`` carry TDH's numbers (``TDH_INTYPE_*`` / ``TDH_OUTTYPE_*``). Each
:class:`TypeRow` says how an in-type sits in an event's user data: its fixed size (``None``
when variable or pointer-sized), its ``struct`` code (little-endian, without the ``<``), its
family, and ``encode`` / ``decode`` for one fixed-size value (``None`` for the others, whose
layout depends on the property: strings, counted data, pointers, SIDs). Every encoder (the
provider's, the TraceLogging one, the test kit's) and every decoder (``tdh``, the consumer's
parser) takes its codes, sizes and time conversions from here.

FILETIME is a count of 100 ns ticks since 1601-01-01 UTC; SYSTEMTIME eight u16 (year, month,
day of week from Sunday = 0, day, hour, minute, second, milliseconds) with no time zone.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

__all__ = [
    "FILETIME_EPOCH",
    "UNIX_EPOCH_FILETIME",
    "FIXED_SIZES",
    "FLOAT_CODES",
    "INTEGER_CODES",
    "MAX_FILETIME",
    "SYSTEMTIME",
    "TYPES",
    "InType",
    "OutType",
    "TypeRow",
    "datetime_to_filetime",
    "filetime_iso",
    "datetime_to_systemtime",
    "filetime_to_datetime",
    "filetime_value",
    "struct_code",
    "systemtime_to_datetime",
]


class InType(IntEnum):
    """TDH_IN_TYPE: how a property is laid out on the wire."""

    NULL = 0
    UNICODESTRING = 1
    ANSISTRING = 2
    INT8 = 3
    UINT8 = 4
    INT16 = 5
    UINT16 = 6
    INT32 = 7
    UINT32 = 8
    INT64 = 9
    UINT64 = 10
    FLOAT = 11
    DOUBLE = 12
    BOOLEAN = 13
    BINARY = 14
    GUID = 15
    POINTER = 16
    FILETIME = 17
    SYSTEMTIME = 18
    SID = 19
    HEXINT32 = 20
    HEXINT64 = 21
    MANIFEST_COUNTEDSTRING = 22
    MANIFEST_COUNTEDANSISTRING = 23
    RESERVED24 = 24
    MANIFEST_COUNTEDBINARY = 25
    # WBEM / MOF types: never in manifests, met when decoding classic events.
    COUNTEDSTRING = 300
    COUNTEDANSISTRING = 301
    REVERSEDCOUNTEDSTRING = 302
    REVERSEDCOUNTEDANSISTRING = 303
    NONNULLTERMINATEDSTRING = 304
    NONNULLTERMINATEDANSISTRING = 305
    UNICODECHAR = 306
    ANSICHAR = 307
    SIZET = 308
    HEXDUMP = 309
    WBEMSID = 310


class OutType(IntEnum):
    """TDH_OUT_TYPE: how a decoded property is rendered. NULL means "the inType's default"."""

    NULL = 0
    STRING = 1
    DATETIME = 2
    BYTE = 3
    UNSIGNEDBYTE = 4
    SHORT = 5
    UNSIGNEDSHORT = 6
    INT = 7
    UNSIGNEDINT = 8
    LONG = 9
    UNSIGNEDLONG = 10
    FLOAT = 11
    DOUBLE = 12
    BOOLEAN = 13
    GUID = 14
    HEXBINARY = 15
    HEXINT8 = 16
    HEXINT16 = 17
    HEXINT32 = 18
    HEXINT64 = 19
    PID = 20
    TID = 21
    PORT = 22
    IPV4 = 23
    IPV6 = 24
    SOCKETADDRESS = 25
    CIMDATETIME = 26
    ETWTIME = 27
    XML = 28
    ERRORCODE = 29
    WIN32ERROR = 30
    NTSTATUS = 31
    HRESULT = 32
    CULTURE_INSENSITIVE_DATETIME = 33
    JSON = 34
    UTF8 = 35
    PKCS7_WITH_TYPE_INFO = 36
    CODE_POINTER = 37
    DATETIME_UTC = 38
    REDUCEDSTRING = 300
    NOPRINT = 301


# -- FILETIME and SYSTEMTIME -------------------------------------------------------------------
FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
MAX_FILETIME = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - FILETIME_EPOCH) // _TICK * 10
"""The last FILETIME a ``datetime`` can hold."""
SYSTEMTIME = struct.Struct("<8H")
UNIX_EPOCH_FILETIME = 116444736000000000
"""1970-01-01 as a FILETIME (100 ns ticks since 1601-01-01): the one copy of this number."""
_FRACTION_DIGITS = {7: 1, 9: 100, 3: 1}  # digits -> factor on the ticks (3: ticks // 10_000)


def filetime_iso(ticks: int, digits: int = 7) -> str:
    """A FILETIME as ISO 8601 UTC: ``digits`` 7 is its full 100 ns precision
    (``2026-11-29T08:00:00.1234567Z``, as ETW's tools print), 9 the nanosecond form of the Event
    Log's XML (``...123456700Z``), 3 SYSTEMTIME's milliseconds (``...123Z``). Raises
    ``OverflowError`` for a FILETIME outside the years 1 to 9999."""
    if digits not in _FRACTION_DIGITS:
        raise ValueError(f"a FILETIME is written with 3, 7 or 9 fractional digits, not {digits}")
    seconds, rest = divmod(ticks, 10_000_000)
    base = FILETIME_EPOCH + timedelta(seconds=seconds)
    fraction = rest // 10_000 if digits == 3 else rest * _FRACTION_DIGITS[digits]
    return f"{base:%Y-%m-%dT%H:%M:%S}.{fraction:0{digits}d}Z"


def filetime_to_datetime(ticks: int) -> datetime:
    """A FILETIME as an aware UTC ``datetime`` (microseconds: the last tick digit is dropped).

    Raises ``OverflowError`` past year 9999; see :func:`filetime_value` for decoding."""
    return FILETIME_EPOCH + timedelta(microseconds=ticks // 10)


def filetime_value(ticks: int) -> datetime | int:
    """A decoded FILETIME property: the ``datetime``, or the ``int`` itself when it is no date
    (0, the usual "not set", negative values, and values past year 9999)."""
    if ticks <= 0 or ticks > MAX_FILETIME:
        return ticks
    return FILETIME_EPOCH + timedelta(microseconds=ticks // 10)


def datetime_to_filetime(value: datetime) -> int:
    """A ``datetime`` as FILETIME ticks (naive means UTC); negative before 1601."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - FILETIME_EPOCH) // _TICK * 10


def systemtime_to_datetime(fields: tuple[int, ...]) -> datetime:
    """SYSTEMTIME (year, month, day of week, day, hour, minute, second, ms) as a naive ``datetime``.

    SYSTEMTIME carries no time zone (TraceLogging: "timezone unspecified"), hence naive.
    Raises ``ValueError`` for a date that does not exist."""
    year, month, _dow, day, hour, minute, second, millis = fields
    if millis > 999:
        raise ValueError(f"milliseconds {millis} out of range")
    return datetime(year, month, day, hour, minute, second, millis * 1000)


def datetime_to_systemtime(value: datetime) -> bytes:
    """A ``datetime`` as SYSTEMTIME bytes: an aware one in UTC, a naive one as it reads."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    day_of_week = (value.weekday() + 1) % 7  # SYSTEMTIME counts from Sunday = 0
    return SYSTEMTIME.pack(value.year, value.month, day_of_week, value.day, value.hour, value.minute, value.second, value.microsecond // 1000)


# -- the table ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TypeRow:
    """How one in-type sits in user data."""

    in_type: InType
    family: str  # integer, float, boolean, guid, filetime, systemtime, char, pointer, string, counted, binary, sid
    size: int | None  # fixed size in bytes; None: variable or pointer-sized
    code: str | None  # struct code of a fixed-size value (no byte order); None: not one struct value
    encode: Callable[[Any], bytes] | None  # one fixed-size value -> its bytes
    decode: Callable[[bytes], Any] | None  # its bytes -> the value (FILETIME: see filetime_value)


def _scalar(in_type: InType, family: str, code: str) -> TypeRow:
    packer = struct.Struct("<" + code)
    pack, unpack = packer.pack, packer.unpack

    def decode(raw: bytes) -> Any:
        return unpack(raw)[0]

    return TypeRow(in_type, family, packer.size, code, pack, decode)


def _row(in_type: InType, family: str, size: int | None = None, code: str | None = None,
         encode: Callable[[Any], bytes] | None = None, decode: Callable[[bytes], Any] | None = None) -> TypeRow:  # fmt: skip
    return TypeRow(in_type, family, size, code, encode, decode)


def _filetime_bytes(value: datetime | int) -> bytes:
    return struct.pack("<q", value if isinstance(value, int) else datetime_to_filetime(value))


def _filetime_decode(raw: bytes) -> datetime | int:
    return filetime_value(struct.unpack("<q", raw)[0])


def _systemtime_decode(raw: bytes) -> datetime:
    return systemtime_to_datetime(SYSTEMTIME.unpack(raw))


def _guid_bytes(value: uuid.UUID) -> bytes:
    return value.bytes_le


def _guid_decode(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes_le=bytes(raw))


def _boolean_bytes(value: Any) -> bytes:
    return struct.pack("<I", 1 if value else 0)


def _boolean_decode(raw: bytes) -> bool:
    return bool(struct.unpack("<I", raw)[0])


T = InType
TYPES: dict[InType, TypeRow] = {
    row.in_type: row
    for row in (
        _scalar(T.INT8, "integer", "b"),
        _scalar(T.UINT8, "integer", "B"),
        _scalar(T.INT16, "integer", "h"),
        _scalar(T.UINT16, "integer", "H"),
        _scalar(T.INT32, "integer", "i"),
        _scalar(T.UINT32, "integer", "I"),
        _scalar(T.INT64, "integer", "q"),
        _scalar(T.UINT64, "integer", "Q"),
        _scalar(T.HEXINT32, "integer", "I"),
        _scalar(T.HEXINT64, "integer", "Q"),
        _scalar(T.FLOAT, "float", "f"),
        _scalar(T.DOUBLE, "float", "d"),
        _row(T.BOOLEAN, "boolean", 4, "I", _boolean_bytes, _boolean_decode),
        _row(T.GUID, "guid", 16, "16s", _guid_bytes, _guid_decode),
        _row(T.FILETIME, "filetime", 8, "q", _filetime_bytes, _filetime_decode),
        _row(T.SYSTEMTIME, "systemtime", 16, "16s", datetime_to_systemtime, _systemtime_decode),
        _scalar(T.UNICODECHAR, "char", "H"),
        _scalar(T.ANSICHAR, "char", "B"),
        _row(T.POINTER, "pointer"),
        _row(T.SIZET, "pointer"),
        _row(T.UNICODESTRING, "string"),
        _row(T.ANSISTRING, "string"),
        _row(T.NONNULLTERMINATEDSTRING, "string"),
        _row(T.NONNULLTERMINATEDANSISTRING, "string"),
        _row(T.MANIFEST_COUNTEDSTRING, "counted"),
        _row(T.MANIFEST_COUNTEDANSISTRING, "counted"),
        _row(T.MANIFEST_COUNTEDBINARY, "counted"),
        _row(T.COUNTEDSTRING, "counted"),
        _row(T.COUNTEDANSISTRING, "counted"),
        _row(T.REVERSEDCOUNTEDSTRING, "counted"),
        _row(T.REVERSEDCOUNTEDANSISTRING, "counted"),
        _row(T.BINARY, "binary"),
        _row(T.HEXDUMP, "binary"),
        _row(T.SID, "sid"),
        _row(T.WBEMSID, "sid"),
    )
}
del T

FIXED_SIZES: dict[int, int] = {t: row.size for t, row in TYPES.items() if row.size is not None}
"""Fixed wire sizes in bytes; absent = variable or pointer-sized."""
INTEGER_CODES: dict[int, str] = {t: row.code for t, row in TYPES.items() if row.family == "integer" and row.code}
"""struct codes of the integer in-types (hex ones included; not BOOLEAN or the chars)."""
FLOAT_CODES: dict[int, str] = {t: row.code for t, row in TYPES.items() if row.family == "float" and row.code}


def struct_code(in_type: InType) -> str:
    """The struct code of a fixed-size in-type (``KeyError`` for the others)."""
    code = TYPES[in_type].code
    if code is None:
        raise KeyError(in_type)
    return code
