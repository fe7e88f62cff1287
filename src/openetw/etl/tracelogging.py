"""TraceLogging's format: the codes of its metadata, and its encoding (metadata and provider
traits blobs, packed field values).

TlgIn equals TDH's in-type for 1..25 (24 marks a struct); TlgOut is its own, smaller space,
translated to TDH's ``OutType`` by ``tdh_out_type``. The decoder is ``openetw.tdh.tracelogging``
(which reads these blobs into a ``Schema``); this module is the inverse:
``encode_event_metadata`` writes an EVENT_SCHEMA_TL blob, ``encode_provider_traits`` a
PROV_TRAITS blob and ``pack_values`` an event's user data, so ``decode(encode(x)) == x``.
Misuse (a field TraceLogging cannot describe, a value that does not fit) raises
``InvalidArgument``.
"""

from __future__ import annotations

import struct
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from openetw.errors import InvalidArgument
from openetw.etl.extended import EXT_EVENT_SCHEMA_TL, EXT_PROV_TRAITS
from openetw.etl.intypes import (
    FLOAT_CODES,
    INTEGER_CODES,
    InType,
    OutType,
    datetime_to_filetime,
    datetime_to_systemtime,
    struct_code,
)
from openetw.etl.schema import PropertyInfo

__all__ = [
    "EXT_EVENT_SCHEMA_TL",
    "EXT_PROV_TRAITS",
    "MAX_METADATA_SIZE",
    "TRACELOGGING_CHANNEL",
    "encode_event_metadata",
    "encode_provider_traits",
    "in_type_of",
    "is_ip_address",
    "pack_values",
    "tdh_out_type",
    "tl_field",
]

TRACELOGGING_CHANNEL = 11
TRAIT_GROUP = 1
TRAIT_DECODE_GUID = 2

TLG_STRUCT = 24
TLG_POINTER = 16
ARITY_MASK = 0x60
ARITY_SCALAR = 0x00
ARITY_CONST = 0x20
ARITY_VARIABLE = 0x40
ARITY_CUSTOM = 0x60
CHAIN = 0x80
MAX_STRUCT_DEPTH = 32

_U16 = struct.Struct("<H")

# TlgOut codes whose TDH out-type does not depend on the in-type.
_TLG_OUT_TO_TDH: dict[int, OutType] = {
    1: OutType.NOPRINT, 2: OutType.STRING, 3: OutType.BOOLEAN, 5: OutType.PID, 6: OutType.TID, 7: OutType.PORT,
    8: OutType.IPV4, 9: OutType.IPV6, 10: OutType.SOCKETADDRESS, 11: OutType.XML, 12: OutType.JSON,
    13: OutType.WIN32ERROR, 14: OutType.NTSTATUS, 15: OutType.HRESULT, 16: OutType.DATETIME,
    33: OutType.CULTURE_INSENSITIVE_DATETIME, 35: OutType.UTF8, 36: OutType.PKCS7_WITH_TYPE_INFO,
    37: OutType.CODE_POINTER, 38: OutType.DATETIME_UTC,
}  # fmt: skip
TLG_HEX, TLG_SIGNED, TLG_UNSIGNED = 4, 17, 18
_HEX_BY_IN_TYPE: dict[int, OutType] = {
    InType.INT8: OutType.HEXINT8, InType.UINT8: OutType.HEXINT8,
    InType.INT16: OutType.HEXINT16, InType.UINT16: OutType.HEXINT16,
    InType.INT32: OutType.HEXINT32, InType.UINT32: OutType.HEXINT32, InType.HEXINT32: OutType.HEXINT32,
    InType.INT64: OutType.HEXINT64, InType.UINT64: OutType.HEXINT64, InType.HEXINT64: OutType.HEXINT64,
    InType.POINTER: OutType.HEXINT64,
}  # fmt: skip
_SIGNED_BY_IN_TYPE: dict[int, OutType] = {InType.INT8: OutType.BYTE, InType.INT16: OutType.SHORT, InType.INT32: OutType.INT, InType.INT64: OutType.LONG}
_UNSIGNED_BY_IN_TYPE: dict[int, OutType] = {
    InType.UINT8: OutType.UNSIGNEDBYTE, InType.UINT16: OutType.UNSIGNEDSHORT,
    InType.UINT32: OutType.UNSIGNEDINT, InType.UINT64: OutType.UNSIGNEDLONG,
}  # fmt: skip


def tdh_out_type(tlg_out: int, in_type: InType | int) -> OutType | None:
    """The TDH out-type for a TlgOut code on a field of ``in_type`` (``None``: the in-type's default)."""
    if tlg_out == TLG_HEX:
        return _HEX_BY_IN_TYPE.get(in_type)
    if tlg_out == TLG_SIGNED:
        return _SIGNED_BY_IN_TYPE.get(in_type)
    if tlg_out == TLG_UNSIGNED:
        return _UNSIGNED_BY_IN_TYPE.get(in_type)
    return _TLG_OUT_TO_TDH.get(tlg_out)



def in_type_of(code: int) -> InType | int:
    """The in-type a metadata field's code names (``TLG_STRUCT`` and unknown codes as the number)."""
    if code == TLG_STRUCT:
        return code
    try:
        return InType(code)
    except ValueError:
        return code


_TDH_TO_TLG_OUT: dict[int, int] = {int(tdh): tlg for tlg, tdh in _TLG_OUT_TO_TDH.items()}
_TDH_TO_TLG_OUT.update({int(out): TLG_HEX for out in (OutType.HEXINT8, OutType.HEXINT16, OutType.HEXINT32, OutType.HEXINT64)})
_TDH_TO_TLG_OUT.update({int(out): TLG_SIGNED for out in _SIGNED_BY_IN_TYPE.values()})
_TDH_TO_TLG_OUT.update({int(out): TLG_UNSIGNED for out in _UNSIGNED_BY_IN_TYPE.values()})
_ENCODABLE_IN_TYPES = frozenset(range(1, 26)) - {TLG_POINTER, TLG_STRUCT}
_UTF8_OUT = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})
MAX_METADATA_SIZE = 32767


def tl_field(
    name: str,
    in_type: InType | int,
    out_type: OutType | int | None = None,
    count: int | Literal["variable"] | None = None,
    *,
    members: Sequence[PropertyInfo] | None = None,
    tags: int = 0,
) -> PropertyInfo:
    """A TraceLogging field description: ``count`` is ``None`` (scalar), a constant or ``"variable"``."""
    variable = count == "variable"
    return PropertyInfo(
        name,
        in_type_of(int(in_type)),
        out_type=OutType(out_type) if out_type is not None else None,
        count=None if variable else count,
        members=tuple(members) if members is not None else None,
        tags=tags,
        count_in_data=variable,
    )


def _normalize(fields: Sequence[PropertyInfo | tuple[Any, ...]]) -> list[PropertyInfo]:
    """Field descriptions as properties, without the ``.Length`` properties decoding synthesizes."""
    props = [field if isinstance(field, PropertyInfo) else tl_field(*field) for field in fields]
    return [
        prop
        for index, prop in enumerate(props)
        if not (
            index + 1 < len(props)
            and props[index + 1].in_type == InType.BINARY
            and props[index + 1].length == prop.name
            and prop.name == f"{props[index + 1].name}.Length"
        )
    ]


def _write_tags(out: bytearray, tags: int, what: str) -> None:
    if tags < 0 or tags & ~0x0FFFFFFF:
        raise InvalidArgument(f"{what}: tags must fit in 28 bits, not {tags:#x}")
    if tags & 0x0FE00000 == tags:
        out.append(tags >> 21)
    elif tags & 0x0FFFC000 == tags:
        out += bytes((CHAIN | tags >> 21, (tags >> 14) & 0x7F))
    else:
        out += bytes((CHAIN | tags >> 21, CHAIN | (tags >> 14) & 0x7F, CHAIN | (tags >> 7) & 0x7F, tags & 0x7F))


def _name_bytes(name: str, what: str) -> bytes:
    raw = name.encode("utf-8")
    if b"\0" in raw:
        raise InvalidArgument(f"{what} {name!r} contains a NUL character")
    return raw + b"\0"


def _arity(prop: PropertyInfo) -> int:
    if prop.custom_schema is not None:
        return ARITY_CUSTOM
    if prop.count_in_data:
        return ARITY_VARIABLE
    if isinstance(prop.count, str):
        raise InvalidArgument(f"field {prop.name!r}: TraceLogging has no counts that refer to other fields")
    return ARITY_SCALAR if prop.count is None else ARITY_CONST


def _tlg_out(prop: PropertyInfo) -> int:
    if prop.source_out_type is not None:
        return prop.source_out_type
    if prop.out_type is None or prop.out_type == OutType.NULL:
        return 0
    code = _TDH_TO_TLG_OUT.get(int(prop.out_type))
    if code is None:
        raise InvalidArgument(f"field {prop.name!r}: out-type {prop.out_type!r} has no TraceLogging code")
    return code


def _encode_field(out: bytearray, prop: PropertyInfo) -> None:
    out += _name_bytes(prop.name, "field name")
    arity = _arity(prop)
    members = _normalize(prop.members) if prop.members is not None else None
    if members is not None:
        if not 1 <= len(members) <= 127 or arity == ARITY_CUSTOM:
            raise InvalidArgument(f"struct {prop.name!r} must have 1..127 members and no custom serialization")
        code, tlg_out = TLG_STRUCT, len(members)
    else:
        code = int(prop.in_type)
        if code not in _ENCODABLE_IN_TYPES:
            raise InvalidArgument(f"field {prop.name!r}: in-type {prop.in_type!r} cannot be written as TraceLogging")
        if code == InType.BINARY and arity in (ARITY_CONST, ARITY_VARIABLE):
            raise InvalidArgument(f"field {prop.name!r}: arrays of BINARY do not decode; use MANIFEST_COUNTEDBINARY")
        if prop.length is not None and not (code == InType.BINARY and prop.length == f"{prop.name}.Length"):
            raise InvalidArgument(f"field {prop.name!r}: TraceLogging fields have no length attribute")
        tlg_out = _tlg_out(prop)
    chained = bool(tlg_out or prop.tags)
    out.append(code | arity | (CHAIN if chained else 0))
    if chained:
        out.append(tlg_out | (CHAIN if prop.tags else 0))
        if prop.tags:
            _write_tags(out, prop.tags, f"field {prop.name!r}")
    if arity == ARITY_CONST:
        if not 0 <= prop.count <= 0xFFFF:  # type: ignore[operator]
            raise InvalidArgument(f"field {prop.name!r}: constant count {prop.count} does not fit in 16 bits")
        out += _U16.pack(prop.count)
    elif arity == ARITY_CUSTOM:
        schema = prop.custom_schema or b""
        out += _U16.pack(len(schema)) + schema
    for member in members or ():
        _encode_field(out, member)


def encode_event_metadata(name: str, fields: Sequence[PropertyInfo | tuple[Any, ...]], tags: int = 0) -> bytes:
    """The EVENT_SCHEMA_TL blob for an event. ``fields`` are ``PropertyInfo``s (see ``tl_field``)
    or tuples ``(name, in_type[, out_type[, count]])``."""
    body = bytearray()
    _write_tags(body, tags, "event")
    body += _name_bytes(name, "event name")
    for prop in _normalize(fields):
        _encode_field(body, prop)
    if len(body) + 2 > MAX_METADATA_SIZE:
        raise InvalidArgument(f"TraceLogging metadata of {len(body) + 2} bytes exceeds {MAX_METADATA_SIZE}")
    return _U16.pack(len(body) + 2) + bytes(body)


def encode_provider_traits(name: str, group: uuid.UUID | None = None, *, decode_guid: uuid.UUID | None = None) -> bytes:
    """The provider traits blob: size, UTF-8 name, then the group (and decode GUID) traits."""
    body = bytearray(_name_bytes(name, "provider name"))
    for kind, guid in ((TRAIT_GROUP, group), (TRAIT_DECODE_GUID, decode_guid)):
        if guid is not None:
            body += _U16.pack(19) + bytes((kind,)) + guid.bytes_le
    if len(body) + 2 > 0xFFFF:
        raise InvalidArgument("provider traits exceed 65535 bytes")
    return _U16.pack(len(body) + 2) + bytes(body)


# -- packing values ----------------------------------------------------------------------------

_INT_FORMATS = {in_type: "<" + code for in_type, code in {**INTEGER_CODES, **FLOAT_CODES, InType.BOOLEAN: struct_code(InType.BOOLEAN)}.items()}


def _counted(raw: bytes, what: str) -> bytes:
    if len(raw) > 0xFFFF:
        raise InvalidArgument(f"{what} of {len(raw)} bytes exceeds the u16 size")
    return _U16.pack(len(raw)) + raw


def _ansi_bytes(prop: PropertyInfo, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8" if prop.out_type in _UTF8_OUT else "cp1252")


def _filetime_ticks(value: Any) -> int:
    return value if isinstance(value, int) else datetime_to_filetime(value)


_systemtime = datetime_to_systemtime


def _sid_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    parts = str(value).split("-")
    if len(parts) < 3 or parts[0].upper() != "S":
        raise InvalidArgument(f"not a SID: {value!r}")
    revision, authority, subs = int(parts[1]), int(parts[2], 0), [int(p) for p in parts[3:]]
    return bytes((revision, len(subs))) + authority.to_bytes(6, "big") + b"".join(struct.pack("<I", s) for s in subs)


def _pack_scalar(prop: PropertyInfo, value: Any) -> bytes:
    code = int(prop.in_type)
    if code in _INT_FORMATS:
        if code == InType.UINT16 and prop.out_type == OutType.PORT:
            return struct.pack(">H", value)
        if code == InType.UINT32 and is_ip_address(value, "IPv4Address"):
            return bytes(value.packed)
        return struct.pack(_INT_FORMATS[code], value)
    if code == InType.UNICODESTRING:
        if "\0" in value:
            raise InvalidArgument(f"field {prop.name!r}: NUL inside a NUL-terminated string")
        encoded: bytes = value.encode("utf-16-le")
        return encoded + b"\0\0"
    if code == InType.ANSISTRING:
        raw = _ansi_bytes(prop, value)
        if b"\0" in raw:
            raise InvalidArgument(f"field {prop.name!r}: NUL inside a NUL-terminated string")
        return raw + b"\0"
    if code == InType.MANIFEST_COUNTEDSTRING:
        return _counted(value.encode("utf-16-le"), f"field {prop.name!r}")
    if code == InType.MANIFEST_COUNTEDANSISTRING:
        return _counted(_ansi_bytes(prop, value), f"field {prop.name!r}")
    if code in (InType.BINARY, InType.MANIFEST_COUNTEDBINARY):
        raw = value.packed if is_ip_address(value, "IPv6Address") else bytes(value)
        return _counted(raw, f"field {prop.name!r}")
    if code == InType.GUID:
        return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes_le
    if code == InType.FILETIME:
        return struct.pack("<q", _filetime_ticks(value))
    if code == InType.SYSTEMTIME:
        return _systemtime(value)
    if code == InType.SID:
        return _sid_bytes(value)
    raise InvalidArgument(f"field {prop.name!r}: in-type {prop.in_type!r} cannot be packed")


def _pack_element(out: bytearray, prop: PropertyInfo, value: Any) -> None:
    if prop.members is not None:
        _pack_fields(out, _normalize(prop.members), value)
    else:
        out += _pack_scalar(prop, value)


def _pack_field(out: bytearray, prop: PropertyInfo, value: Any) -> None:
    arity = _arity(prop)
    if arity == ARITY_CUSTOM:
        out += _counted(bytes(value), f"field {prop.name!r}")
    elif arity == ARITY_SCALAR:
        _pack_element(out, prop, value)
    else:
        items = list(value)
        if arity == ARITY_CONST and len(items) != prop.count:
            raise InvalidArgument(f"field {prop.name!r} takes {prop.count} values, got {len(items)}")
        if arity == ARITY_VARIABLE:
            if len(items) > 0xFFFF:
                raise InvalidArgument(f"field {prop.name!r}: {len(items)} values exceed the u16 count")
            out += _U16.pack(len(items))
        for item in items:
            _pack_element(out, prop, item)


def _pack_fields(out: bytearray, props: list[PropertyInfo], values: Mapping[str, Any] | Sequence[Any]) -> None:
    if isinstance(values, Mapping):
        missing = [prop.name for prop in props if prop.name not in values]
        if missing:
            raise InvalidArgument(f"no value for field(s) {missing}")
        ordered = [values[prop.name] for prop in props]
    else:
        ordered = list(values)
        if len(ordered) != len(props):
            raise InvalidArgument(f"{len(props)} fields but {len(ordered)} values")
    for prop, value in zip(props, ordered, strict=True):
        try:
            _pack_field(out, prop, value)
        except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
            if isinstance(exc, InvalidArgument):
                raise
            raise InvalidArgument(f"field {prop.name!r}: cannot pack {value!r}: {exc}") from exc


def pack_values(fields: Sequence[PropertyInfo | tuple[Any, ...]], values: Mapping[str, Any] | Sequence[Any]) -> bytes:
    """The user data of a TraceLogging event: ``values`` (by name or in order) packed per ``fields``."""
    out = bytearray()
    _pack_fields(out, _normalize(fields), values)
    return bytes(out)


def is_ip_address(value: object, kind: str) -> bool:
    """Whether ``value`` is an ``ipaddress.<kind>``: none can be while nobody has imported ``ipaddress``."""
    module = sys.modules.get("ipaddress")
    return module is not None and isinstance(value, getattr(module, kind))
