"""Packing property values the way a manifest template lays them out (the EventWrite side).

``pack_template(schema, values)`` is the inverse of ``openetw.tdh.decode`` for manifest (and
MOF) schemas: integers by their in-type's width, strings NUL-terminated unless a length is
given, counted strings and binaries with their u16 size, arrays by their count, structs by
their members. A count or length that names another property is filled in from the data when
``values`` leaves that property out.
"""

from __future__ import annotations

import ipaddress
import struct
import uuid
from collections.abc import Mapping
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.intypes import (
    FLOAT_CODES,
    INTEGER_CODES,
    InType,
    OutType,
    datetime_to_filetime,
    datetime_to_systemtime,
)
from openetw.tdh.schema import REST, PropertyInfo, Schema

__all__ = ["pack_template"]

_INTEGERS = {in_type: "<" + code for in_type, code in {**INTEGER_CODES, **FLOAT_CODES}.items()}
_UTF8 = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})


def _ticks(value: Any) -> int:
    return value if isinstance(value, int) else datetime_to_filetime(value)


def _sid(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    parts = str(value).split("-")
    if len(parts) < 3 or parts[0].upper() != "S":
        raise InvalidArgument(f"not a SID: {value!r}")
    subs = [int(part) for part in parts[3:]]
    return bytes((int(parts[1]), len(subs))) + int(parts[2], 0).to_bytes(6, "big") + b"".join(struct.pack("<I", s) for s in subs)


def _text(value: Any, prop: PropertyInfo, wide: bool) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if wide:
        return str(value).encode("utf-16-le")
    return str(value).encode("utf-8" if prop.out_type in _UTF8 else "cp1252")


def _sized(raw: bytes, size: int | None, unit: int, what: str) -> bytes:
    """``raw`` padded with NULs to ``size`` units (a fixed-length string)."""
    if size is None:
        return raw
    if len(raw) > size * unit:
        raise InvalidArgument(f"{what}: {len(raw) // unit} units do not fit the length {size}")
    return raw + bytes(size * unit - len(raw))


class _Packer:
    def __init__(self, values: Mapping[str, Any], pointer_size: int) -> None:
        self.values = values
        self.pointer_size = pointer_size
        self.out = bytearray()

    def size_of(self, ref: int | str | None, scope: Mapping[str, Any]) -> int | None:
        if ref is None or ref == REST:
            return None
        if isinstance(ref, int):
            return ref
        value = scope.get(ref, self.values.get(ref))
        if not isinstance(value, int):
            raise InvalidArgument(f"the size property {ref!r} has no integer value")
        return value

    def element(self, prop: PropertyInfo, value: Any, scope: Mapping[str, Any]) -> None:
        if prop.members is not None:
            self.fields(prop.members, value)
            return
        code = prop.in_type
        out = self.out
        fmt = _INTEGERS.get(code)
        if fmt is not None:
            if code == InType.UINT16 and prop.out_type == OutType.PORT:
                out += struct.pack(">H", value)
            elif isinstance(value, ipaddress.IPv4Address):
                out += value.packed
            else:
                out += struct.pack(fmt, value)
        elif code in (InType.POINTER, InType.SIZET):
            out += int(value).to_bytes(self.pointer_size, "little")
        elif code == InType.BOOLEAN:
            out += struct.pack("<I", 1 if value else 0)
        elif code == InType.GUID:
            out += (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes_le
        elif code == InType.FILETIME:
            out += struct.pack("<q", _ticks(value))
        elif code == InType.SYSTEMTIME:
            out += datetime_to_systemtime(value)
        elif code == InType.SID:
            out += _sid(value)
        elif code in (InType.UNICODESTRING, InType.ANSISTRING):
            wide = code == InType.UNICODESTRING
            raw = _text(value, prop, wide)
            length = self.size_of(prop.length, scope)
            if prop.length == REST:
                out += raw
            elif length is None:
                out += raw + (b"\0\0" if wide else b"\0")
            else:
                out += _sized(raw, length, 2 if wide else 1, prop.name)
        elif code in (InType.BINARY,):
            raw = value.packed if isinstance(value, ipaddress.IPv6Address) else bytes(value)
            out += _sized(raw, self.size_of(prop.length, scope), 1, prop.name)
        elif code in (
            InType.MANIFEST_COUNTEDSTRING, InType.COUNTEDSTRING, InType.MANIFEST_COUNTEDANSISTRING, InType.COUNTEDANSISTRING,
            InType.MANIFEST_COUNTEDBINARY,
        ):
            wide = code in (InType.MANIFEST_COUNTEDSTRING, InType.COUNTEDSTRING)
            raw = bytes(value) if code == InType.MANIFEST_COUNTEDBINARY else _text(value, prop, wide)
            out += struct.pack("<H", len(raw)) + raw
        elif code in (InType.UNICODECHAR, InType.ANSICHAR):
            out += _text(value, prop, code == InType.UNICODECHAR)[: 2 if code == InType.UNICODECHAR else 1]
        else:
            raise InvalidArgument(f"property {prop.name!r}: in-type {prop.in_type!r} cannot be packed")

    def field(self, prop: PropertyInfo, value: Any, scope: Mapping[str, Any]) -> None:
        if prop.count is None and not prop.count_in_data:
            self.element(prop, value, scope)
            return
        items = list(value)
        count = self.size_of(prop.count, scope)
        if count is not None and len(items) != count:
            raise InvalidArgument(f"property {prop.name!r} takes {count} values, got {len(items)}")
        if prop.count_in_data:
            self.out += struct.pack("<H", len(items))
        for item in items:
            self.element(prop, item, scope)

    def fields(self, props: tuple[PropertyInfo, ...], values: Any) -> None:
        scope = _with_sizes(props, values)
        for prop in props:
            if prop.name not in scope:
                if prop.optional:
                    return
                raise InvalidArgument(f"no value for property {prop.name!r}")
            self.field(prop, scope[prop.name], scope)


def _measure(prop: PropertyInfo, value: Any, what: str) -> int:
    if what == "count" or isinstance(value, (bytes, bytearray, list, tuple)):
        return len(value)
    if prop.in_type == InType.UNICODESTRING:
        return len(str(value).encode("utf-16-le")) // 2
    return len(_text(value, prop, False))


def _with_sizes(props: tuple[PropertyInfo, ...], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the counts and lengths other properties refer to filled in."""
    if not isinstance(values, Mapping):
        raise InvalidArgument(f"values must be a mapping of property names, not {values!r}")
    scope = dict(values)
    for prop in props:
        for what, ref in (("count", prop.count), ("length", prop.length)):
            if isinstance(ref, str) and ref != REST and ref not in scope and prop.name in scope:
                scope[ref] = _measure(prop, scope[prop.name], what)
    return scope


def pack_template(schema: Schema, values: Mapping[str, Any], pointer_size: int = 8) -> bytes:
    """The user data of an event of ``schema`` with these property ``values``."""
    unknown = set(values) - {prop.name for prop in schema.properties}
    if unknown:
        raise InvalidArgument(f"the event has no propert{'y' if len(unknown) == 1 else 'ies'} {sorted(unknown)}")
    packer = _Packer(_with_sizes(schema.properties, values), pointer_size)
    packer.fields(schema.properties, values)
    return bytes(packer.out)
