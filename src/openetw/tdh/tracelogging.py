"""TraceLogging (self-describing events): metadata and provider traits to ``Schema``, and back.

Decoding reads the EVENT_SCHEMA_TL blob (extended item 11) and the PROV_TRAITS blob (item 12).
Encoding builds the same blobs and packs field values, so ``decode(encode(x)) == x``.

TraceLogging type codes: TlgIn equals TDH's in-type for 1..25 (24 marks a struct), but TlgOut is
its own, smaller space; it is translated to TDH's ``OutType`` here and the original code is kept
in ``PropertyInfo.source_out_type``. A BINARY field is presented as TDH presents it: a
synthesized ``<name>.Length`` UINT16 property followed by the data with ``length`` pointing at it.

Malformed metadata never raises: what cannot be understood becomes a property carrying a
``problem``, which decoding reports as that property's error.
"""

from __future__ import annotations

import ipaddress
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Literal

from openetw.errors import DecodeError, InvalidArgument
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.schema import PropertyInfo, Schema

__all__ = [
    "EXT_EVENT_SCHEMA_TL",
    "EXT_PROV_TRAITS",
    "TRACELOGGING_CHANNEL",
    "ProviderTraits",
    "parse_provider_traits",
    "parse_event_metadata",
    "schema_from_tracelogging",
    "schema_from_record",
    "encode_event_metadata",
    "encode_provider_traits",
    "pack_values",
    "tl_field",
    "tdh_out_type",
]

EXT_EVENT_SCHEMA_TL = 0x000B
EXT_PROV_TRAITS = 0x000C
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
_FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=timezone.utc)

# TlgOut codes whose TDH out-type does not depend on the in-type.
_TLG_OUT_TO_TDH: dict[int, OutType] = {
    1: OutType.NOPRINT, 2: OutType.STRING, 3: OutType.BOOLEAN, 5: OutType.PID, 6: OutType.TID, 7: OutType.PORT,
    8: OutType.IPV4, 9: OutType.IPV6, 10: OutType.SOCKETADDRESS, 11: OutType.XML, 12: OutType.JSON,
    13: OutType.WIN32ERROR, 14: OutType.NTSTATUS, 15: OutType.HRESULT, 16: OutType.DATETIME,
    33: OutType.CULTURE_INSENSITIVE_DATETIME, 35: OutType.UTF8, 36: OutType.PKCS7_WITH_TYPE_INFO,
    37: OutType.CODE_POINTER, 38: OutType.DATETIME_UTC,
}  # fmt: skip
TLG_HEX, TLG_SIGNED, TLG_UNSIGNED = 4, 17, 18
_HEX_BY_IN_TYPE = {
    InType.INT8: OutType.HEXINT8, InType.UINT8: OutType.HEXINT8,
    InType.INT16: OutType.HEXINT16, InType.UINT16: OutType.HEXINT16,
    InType.INT32: OutType.HEXINT32, InType.UINT32: OutType.HEXINT32, InType.HEXINT32: OutType.HEXINT32,
    InType.INT64: OutType.HEXINT64, InType.UINT64: OutType.HEXINT64, InType.HEXINT64: OutType.HEXINT64,
    InType.POINTER: OutType.HEXINT64,
}  # fmt: skip
_SIGNED_BY_IN_TYPE = {InType.INT8: OutType.BYTE, InType.INT16: OutType.SHORT, InType.INT32: OutType.INT, InType.INT64: OutType.LONG}
_UNSIGNED_BY_IN_TYPE = {
    InType.UINT8: OutType.UNSIGNEDBYTE, InType.UINT16: OutType.UNSIGNEDSHORT,
    InType.UINT32: OutType.UNSIGNEDINT, InType.UINT64: OutType.UNSIGNEDLONG,
}  # fmt: skip


def tdh_out_type(tlg_out: int, in_type: InType | int) -> OutType | None:
    """The TDH out-type for a TlgOut code on a field of ``in_type`` (``None``: the in-type's default)."""
    if tlg_out == TLG_HEX:
        return _HEX_BY_IN_TYPE.get(in_type)  # type: ignore[call-overload]
    if tlg_out == TLG_SIGNED:
        return _SIGNED_BY_IN_TYPE.get(in_type)  # type: ignore[call-overload]
    if tlg_out == TLG_UNSIGNED:
        return _UNSIGNED_BY_IN_TYPE.get(in_type)  # type: ignore[call-overload]
    return _TLG_OUT_TO_TDH.get(tlg_out)


# -- tags ----------------------------------------------------------------------------------


def read_tags(blob: bytes, pos: int, end: int) -> tuple[int, int]:
    """A 28-bit tag stored as 7-bit groups, high group first, 0x80 = more follow; (tag, next pos)."""
    tag = 0
    shift = 21
    while pos < end:
        byte = blob[pos]
        pos += 1
        if shift >= 0:
            tag |= (byte & 0x7F) << shift
            shift -= 7
        if not byte & CHAIN:
            return tag, pos
    raise DecodeError("tag bytes run past the end of the metadata", offset=pos)


# -- provider traits -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderTraits:
    name: str
    group: uuid.UUID | None = None
    decode_guid: uuid.UUID | None = None
    other: tuple[tuple[int, bytes], ...] = ()


def parse_provider_traits(blob: bytes) -> ProviderTraits:
    """Parse a PROV_TRAITS blob; raises ``DecodeError`` only when not even the name is there."""
    if len(blob) < 3:
        raise DecodeError("provider traits are shorter than 3 bytes", offset=0)
    end = min(_U16.unpack_from(blob, 0)[0], len(blob))
    nul = blob.find(b"\0", 2, end)
    if nul < 0:
        raise DecodeError("provider name in the traits has no NUL terminator", offset=2)
    name = blob[2:nul].decode("utf-8", "replace")
    group = decode_guid = None
    other: list[tuple[int, bytes]] = []
    pos = nul + 1
    while pos + 3 <= end:
        size, kind = _U16.unpack_from(blob, pos)[0], blob[pos + 2]
        if size < 3 or pos + size > end:
            break
        data = bytes(blob[pos + 3 : pos + size])
        if kind == TRAIT_GROUP and len(data) == 16:
            group = uuid.UUID(bytes_le=data)
        elif kind == TRAIT_DECODE_GUID and len(data) == 16:
            decode_guid = uuid.UUID(bytes_le=data)
        else:
            other.append((kind, data))
        pos += size
    return ProviderTraits(name, group, decode_guid, tuple(other))


# -- event metadata --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RawField:
    name: str
    in_meta: int
    out_meta: int
    tags: int
    const_count: int | None
    custom_schema: bytes | None
    problem: str | None = None


def _read_fields(blob: bytes, pos: int, end: int) -> list[_RawField]:
    fields: list[_RawField] = []
    while pos < end:
        nul = blob.find(b"\0", pos, end)
        if nul < 0:
            fields.append(_RawField("", 0, 0, 0, None, None, f"field name at metadata offset {pos} has no NUL terminator"))
            break
        name = blob[pos:nul].decode("utf-8", "replace")
        pos = nul + 1
        try:
            if pos >= end:
                raise DecodeError("InMeta byte missing", offset=pos)
            in_meta, out_meta, tags = blob[pos], 0, 0
            pos += 1
            if in_meta & CHAIN:
                if pos >= end:
                    raise DecodeError("OutMeta byte missing", offset=pos)
                out_meta = blob[pos]
                pos += 1
                if out_meta & CHAIN:
                    tags, pos = read_tags(blob, pos, end)
            const_count = custom = None
            arity = in_meta & ARITY_MASK
            if arity in (ARITY_CONST, ARITY_CUSTOM):
                if pos + 2 > end:
                    raise DecodeError("u16 after the field types missing", offset=pos)
                word = _U16.unpack_from(blob, pos)[0]
                pos += 2
                if arity == ARITY_CONST:
                    const_count = word
                else:
                    if pos + word > end:
                        raise DecodeError("custom schema runs past the metadata", offset=pos)
                    custom = bytes(blob[pos : pos + word])
                    pos += word
        except DecodeError as exc:
            fields.append(_RawField(name, 0, 0, 0, None, None, f"metadata truncated: {exc}"))
            break
        fields.append(_RawField(name, in_meta, out_meta, tags, const_count, custom))
    return fields


def _in_type(code: int) -> InType | int:
    if code == TLG_STRUCT:
        return code
    try:
        return InType(code)
    except ValueError:
        return code


def _build(fields: list[_RawField], index: int, depth: int = 0) -> tuple[list[PropertyInfo], int]:
    """The logical field at ``index`` as properties (two for BINARY), and the next index."""
    raw = fields[index]
    index += 1
    if raw.problem is not None:
        return [PropertyInfo(raw.name, InType.NULL, problem=raw.problem)], index
    if depth > MAX_STRUCT_DEPTH:
        problem = f"structs nested deeper than {MAX_STRUCT_DEPTH} levels"
        return [PropertyInfo(raw.name, InType.NULL, problem=problem)], len(fields)
    code = raw.in_meta & 0x1F
    arity = raw.in_meta & ARITY_MASK
    tlg_out = raw.out_meta & 0x7F
    count = raw.const_count if arity == ARITY_CONST else None
    variable = arity == ARITY_VARIABLE
    custom = raw.custom_schema if arity == ARITY_CUSTOM else None
    if code == TLG_STRUCT:
        members: list[PropertyInfo] = []
        for _ in range(tlg_out):
            if index >= len(fields):
                problem = f"struct {raw.name!r} declares {tlg_out} members, the metadata ends after {len(members)}"
                members.append(PropertyInfo("", InType.NULL, problem=problem))
                break
            built, index = _build(fields, index, depth + 1)
            members.extend(built)
        prop = PropertyInfo(raw.name, TLG_STRUCT, count=count, members=tuple(members), tags=raw.tags, count_in_data=variable)
        return [prop], index
    in_type = _in_type(code)
    out_type = tdh_out_type(tlg_out, in_type) if tlg_out else None
    source_out = tlg_out or None
    problem = None
    if code == InType.NULL:
        problem = f"field {raw.name!r} has in-type NULL"
    elif not isinstance(in_type, InType):
        problem = f"field {raw.name!r} has unknown TraceLogging in-type {code}"
    common = dict(out_type=out_type, tags=raw.tags, source_out_type=source_out, problem=problem, custom_schema=custom)
    if in_type == InType.BINARY and custom is None:
        if count is None and not variable:
            length_name = f"{raw.name}.Length"
            length = PropertyInfo(length_name, InType.UINT16)
            return [length, PropertyInfo(raw.name, InType.BINARY, length=length_name, **common)], index  # type: ignore[arg-type]
        # TDH cannot decode arrays of BINARY; each element is u16 size + bytes, as COUNTEDBINARY.
        in_type = InType.MANIFEST_COUNTEDBINARY
    return [PropertyInfo(raw.name, in_type, count=count, count_in_data=variable, **common)], index  # type: ignore[arg-type]


def parse_event_metadata(blob: bytes) -> tuple[str | None, int, tuple[PropertyInfo, ...]]:
    """(event name, event tags, properties) from an EVENT_SCHEMA_TL blob; never raises."""
    blob = bytes(blob)
    if len(blob) < 2:
        return None, 0, (PropertyInfo("", InType.NULL, problem="TraceLogging metadata shorter than its size field"),)
    end = min(_U16.unpack_from(blob, 0)[0], len(blob))
    try:
        tags, pos = read_tags(blob, 2, end)
    except DecodeError as exc:
        return None, 0, (PropertyInfo("", InType.NULL, problem=f"TraceLogging metadata: {exc}"),)
    nul = blob.find(b"\0", pos, end)
    if nul < 0:
        return None, tags, (PropertyInfo("", InType.NULL, problem="TraceLogging event name has no NUL terminator"),)
    name = blob[pos:nul].decode("utf-8", "replace")
    fields = _read_fields(blob, nul + 1, end)
    properties: list[PropertyInfo] = []
    index = 0
    while index < len(fields):
        built, index = _build(fields, index)
        properties.extend(built)
    return name, tags, tuple(properties)


@lru_cache(maxsize=4096)
def _cached_schema(provider_id: uuid.UUID, metadata: bytes, traits: bytes | None, descriptor: tuple[int, ...]) -> Schema:
    event_name, tags, properties = parse_event_metadata(metadata)
    provider = None
    if traits is not None:
        try:
            provider = parse_provider_traits(traits)
        except DecodeError:
            provider = None
    event_id, version, opcode, level, task, keyword, channel = descriptor
    return Schema(
        provider_id=provider_id,
        event_id=event_id,
        version=version,
        opcode=opcode,
        level=level,
        task=task,
        keyword=keyword,
        channel=channel,
        provider_name=provider.name if provider else None,
        event_name=event_name,
        properties=properties,
        source="tracelogging",
        decode_guid=provider.decode_guid if provider else None,
        tags=tags,
        provider_group=provider.group if provider else None,
    )


def schema_from_tracelogging(
    provider_id: uuid.UUID,
    metadata: bytes,
    traits: bytes | None = None,
    *,
    event_id: int = 0,
    version: int = 0,
    opcode: int = 0,
    level: int = 0,
    task: int = 0,
    keyword: int = 0,
    channel: int = TRACELOGGING_CHANNEL,
) -> Schema:
    """The schema of a TraceLogging event. Cached by the blobs' bytes and the descriptor, never by id alone."""
    descriptor = (event_id, version, opcode, level, task, keyword, channel)
    return _cached_schema(provider_id, bytes(metadata), None if traits is None else bytes(traits), descriptor)


def schema_from_record(record: Any) -> Schema | None:
    """The TraceLogging schema carried by an event record, or ``None`` if it carries none.

    ``record`` needs ``provider_id``, the descriptor fields and ``extended`` (items with
    ``ext_type`` and ``data``), as ``openetw.etl.EventRecord`` has.
    """
    metadata = traits = None
    for item in getattr(record, "extended", ()) or ():
        if item.ext_type == EXT_EVENT_SCHEMA_TL and metadata is None:
            metadata = item.data
        elif item.ext_type == EXT_PROV_TRAITS and traits is None:
            traits = item.data
    if metadata is None:
        return None
    return schema_from_tracelogging(
        record.provider_id,
        metadata,
        traits,
        event_id=record.id,
        version=record.version,
        opcode=record.opcode,
        level=record.level,
        task=record.task,
        keyword=record.keyword,
        channel=record.channel,
    )


# -- encoding --------------------------------------------------------------------------------

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
        _in_type(int(in_type)),
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

_INT_FORMATS = {
    InType.INT8: "<b", InType.UINT8: "<B", InType.INT16: "<h", InType.UINT16: "<H",
    InType.INT32: "<i", InType.UINT32: "<I", InType.INT64: "<q", InType.UINT64: "<Q",
    InType.HEXINT32: "<I", InType.HEXINT64: "<Q", InType.FLOAT: "<f", InType.DOUBLE: "<d", InType.BOOLEAN: "<I",
}  # fmt: skip


def _counted(raw: bytes, what: str) -> bytes:
    if len(raw) > 0xFFFF:
        raise InvalidArgument(f"{what} of {len(raw)} bytes exceeds the u16 size")
    return _U16.pack(len(raw)) + raw


def _ansi_bytes(prop: PropertyInfo, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8" if prop.out_type in _UTF8_OUT else "cp1252")


def _filetime_ticks(value: Any) -> int:
    if isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _FILETIME_EPOCH) // timedelta(microseconds=1) * 10


def _systemtime(value: datetime) -> bytes:
    day_of_week = (value.weekday() + 1) % 7  # SYSTEMTIME counts from Sunday = 0
    fields = (value.year, value.month, day_of_week, value.day, value.hour, value.minute, value.second, value.microsecond // 1000)
    return struct.pack("<8H", *fields)


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
        if code == InType.UINT32 and isinstance(value, ipaddress.IPv4Address):
            return value.packed
        return struct.pack(_INT_FORMATS[code], value)  # type: ignore[index]
    if code == InType.UNICODESTRING:
        if "\0" in value:
            raise InvalidArgument(f"field {prop.name!r}: NUL inside a NUL-terminated string")
        return value.encode("utf-16-le") + b"\0\0"
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
        raw = value.packed if isinstance(value, ipaddress.IPv6Address) else bytes(value)
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
    for prop, value in zip(props, ordered):
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
