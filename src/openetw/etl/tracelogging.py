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
from openetw.etl.intypes import InType, OutType
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


def pack_values(fields: Sequence[PropertyInfo | tuple[Any, ...]], values: Mapping[str, Any] | Sequence[Any]) -> bytes:
    """The user data of a TraceLogging event: ``values`` (by name or in order) packed per
    ``fields`` by the one payload packer (``etl.payload.PayloadPacker``), as a 64-bit producer
    writes it; names in ``values`` that are no field are left out."""
    from openetw.etl.payload import PayloadPacker  # (it imports this module)

    props = _normalize(fields)
    if isinstance(values, Mapping):
        missing = [prop.name for prop in props if prop.name not in values]
        if missing:
            raise InvalidArgument(f"no value for field(s) {missing}")
        values = {prop.name: values[prop.name] for prop in props}
    return PayloadPacker(props, pointer_size=8, tracelogging=True).pack(values)


def is_ip_address(value: object, kind: str) -> bool:
    """Whether ``value`` is an ``ipaddress.<kind>``: none can be while nobody has imported ``ipaddress``."""
    module = sys.modules.get("ipaddress")
    return module is not None and isinstance(value, getattr(module, kind))
