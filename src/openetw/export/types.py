"""Decoded properties as typed Arrow columns: one ``ColumnType`` per ``PropertyInfo``.

The type follows the property's in-type (and the out-types that change the decoded value):

* integers keep their width and sign (pointers and SIZE_T are ``uint64``, whatever the
  producer's pointer size); an out-type of BOOLEAN makes them ``bool``;
* FLOAT / DOUBLE are ``float32`` / ``float64``, BOOLEAN is ``bool``;
* FILETIME and SYSTEMTIME are UTC timestamps in microseconds (a FILETIME that names no date,
  such as 0, is still that many ticks after 1601; a SYSTEMTIME, which carries no zone, is
  taken as written);
* GUIDs, SIDs, IPv4/IPv6 addresses and strings are strings; binary data is binary;
* arrays are lists of their element's type, structs are structs of their members.

A column is built from a whole batch of values at once (``ColumnType.array``): scalars go
to Arrow in one call, only values that need converting (GUIDs, dates) are touched one by one.
Missing values (a property that did not decode) are nulls.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.schema import PropertyInfo

__all__ = ["ColumnType", "column_type", "filetime_micros", "json_equivalent"]

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FILETIME_TO_UNIX_MICROS = 11_644_473_600_000_000  # microseconds from 1601-01-01 to 1970-01-01

_INTEGERS = {
    InType.INT8: "int8", InType.UINT8: "uint8", InType.INT16: "int16", InType.UINT16: "uint16",
    InType.INT32: "int32", InType.UINT32: "uint32", InType.INT64: "int64", InType.UINT64: "uint64",
    InType.HEXINT32: "uint32", InType.HEXINT64: "uint64", InType.POINTER: "uint64", InType.SIZET: "uint64",
}  # fmt: skip
_STRINGS = frozenset({
    InType.UNICODESTRING, InType.ANSISTRING, InType.MANIFEST_COUNTEDSTRING, InType.MANIFEST_COUNTEDANSISTRING,
    InType.COUNTEDSTRING, InType.COUNTEDANSISTRING, InType.REVERSEDCOUNTEDSTRING, InType.REVERSEDCOUNTEDANSISTRING,
    InType.NONNULLTERMINATEDSTRING, InType.NONNULLTERMINATEDANSISTRING, InType.UNICODECHAR, InType.ANSICHAR,
    InType.SID, InType.WBEMSID,
})  # fmt: skip
_BINARY = frozenset({InType.BINARY, InType.MANIFEST_COUNTEDBINARY, InType.HEXDUMP})
_TIMES = frozenset({InType.FILETIME, InType.SYSTEMTIME})


def filetime_micros(value: datetime | int) -> int:
    """A decoded FILETIME or SYSTEMTIME as microseconds since 1970 (UTC).

    ``datetime`` values (naive ones taken as UTC) convert exactly; an ``int`` is the FILETIME's
    ticks the decoder could not turn into a date.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - _UNIX_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value // 10 - _FILETIME_TO_UNIX_MICROS


def _text(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _binary(value: Any) -> Any:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return value.packed
    return str(value).encode()


def _guid(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else _text(value)


def _aware(value: Any) -> Any:
    """A time inside a list or struct: an aware ``datetime`` (ticks no date holds become null)."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    try:
        return _UNIX_EPOCH + timedelta(microseconds=filetime_micros(value))
    except (OverflowError, TypeError):
        return None


# conversions that leave values of these types as they are (a column of them skips converting)
_AS_THEY_ARE: dict[Callable[[Any], Any], frozenset[type]] = {
    _text: frozenset({str, type(None)}), _guid: frozenset({str, type(None)}), _binary: frozenset({bytes, type(None)}),
}


@dataclass(frozen=True, slots=True)
class ColumnType:
    """An Arrow type and how decoded values become it.

    ``convert`` turns one value into what ``pyarrow.array`` takes for a column of this type
    (``None``: as it is); ``nested`` does the same for a value inside a list or struct;
    ``timestamp`` columns are built from int64 microseconds and cast.
    """

    arrow: Any
    convert: Callable[[Any], Any] | None = None
    nested: Callable[[Any], Any] | None = None
    timestamp: bool = False

    def nested_value(self, value: Any) -> Any:
        nested = self.nested
        return value if nested is None or value is None else nested(value)

    def array(self, values: Sequence[Any], pa: Any) -> Any:
        """A column of ``values`` (``None`` for missing ones)."""
        convert = self.convert
        if convert is not None and not (convert in _AS_THEY_ARE and set(map(type, values)) <= _AS_THEY_ARE[convert]):
            values = [None if value is None else convert(value) for value in values]
        if self.timestamp:
            return pa.array(values, type=pa.int64()).cast(self.arrow)
        return pa.array(values, type=self.arrow)


def json_equivalent(kind: ColumnType) -> bool:
    """Whether a column of ``kind`` holds what ``json_value`` writes for the decoded value: numbers and
    booleans as they are, text (strings, GUIDs, SIDs, addresses: ``str`` of the value), binary data
    (hex in JSON, its bytes here); not times, lists or structs."""
    return not kind.timestamp and kind.convert in (None, _text, _guid, _binary)


def column_type(prop: PropertyInfo, pa: Any) -> ColumnType:
    """The column of one property (``pa`` is the ``pyarrow`` module)."""
    element = _element_type(prop, pa)
    if not prop.is_array:
        return element
    inner = element.nested

    def as_list(value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            value = [value]
        if inner is None:
            return list(value)
        return [None if item is None else inner(item) for item in value]

    return ColumnType(pa.list_(element.arrow), as_list, as_list)


def _element_type(prop: PropertyInfo, pa: Any) -> ColumnType:
    if prop.members is not None:
        unique: dict[str, ColumnType] = {}
        for member in prop.members:
            unique.setdefault(member.name, column_type(member, pa))
        struct_type = pa.struct([pa.field(name, member.arrow) for name, member in unique.items()])

        def as_struct(value: Any) -> Any:
            if not isinstance(value, dict):
                return None
            return {name: member.nested_value(value.get(name)) for name, member in unique.items()}

        return ColumnType(struct_type, as_struct, as_struct)
    in_type, out_type = prop.in_type, prop.out_type
    if prop.custom_schema is not None:
        return ColumnType(pa.binary(), _binary, _binary)
    if in_type in _INTEGERS:
        if out_type == OutType.BOOLEAN:
            return ColumnType(pa.bool_())
        if out_type == OutType.IPV4 and in_type in (InType.UINT32, InType.INT32, InType.HEXINT32):
            return ColumnType(pa.string(), _text, _text)
        return ColumnType(getattr(pa, _INTEGERS[InType(in_type)])())
    if in_type == InType.FLOAT:
        return ColumnType(pa.float32())
    if in_type == InType.DOUBLE:
        return ColumnType(pa.float64())
    if in_type == InType.BOOLEAN:
        return ColumnType(pa.bool_())
    if in_type == InType.GUID:
        return ColumnType(pa.string(), _guid, _guid)
    if in_type in _TIMES:
        return ColumnType(pa.timestamp("us", tz="UTC"), filetime_micros, _aware, timestamp=True)
    if in_type in _BINARY:
        if out_type == OutType.IPV6:
            return ColumnType(pa.string(), _text, _text)
        return ColumnType(pa.binary(), _binary, _binary)
    # strings, SIDs, and in-types the decoder reports as errors: text
    return ColumnType(pa.string(), _text, _text)
