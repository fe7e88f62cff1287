"""TraceLogging (self-describing events): metadata and provider traits to ``Schema``, and back.

Decoding reads the EVENT_SCHEMA_TL blob (extended item 11) and the PROV_TRAITS blob (item 12).
The format's codes and the encoder live in ``openetw.etl.tracelogging`` (a provider writes
TraceLogging events without loading the decoder); its names are importable from here too, and
``decode(encode(x)) == x``.

TraceLogging type codes: TlgIn equals TDH's in-type for 1..25 (24 marks a struct), but TlgOut is
its own, smaller space; it is translated to TDH's ``OutType`` here and the original code is kept
in ``PropertyInfo.source_out_type``. A BINARY field is presented as TDH presents it: a
synthesized ``<name>.Length`` UINT16 property followed by the data with ``length`` pointing at it.

Malformed metadata never raises: what cannot be understood becomes a property carrying a
``problem``, which decoding reports as that property's error.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from openetw.errors import DecodeError
from openetw.etl.intypes import InType
from openetw.etl.schema import PropertyInfo, Schema
from openetw.etl.tracelogging import (
    ARITY_CONST,
    ARITY_CUSTOM,
    ARITY_MASK,
    ARITY_VARIABLE,
    CHAIN,
    EXT_EVENT_SCHEMA_TL,
    EXT_PROV_TRAITS,
    MAX_METADATA_SIZE,
    MAX_STRUCT_DEPTH,
    TLG_STRUCT,
    TRACELOGGING_CHANNEL,
    TRAIT_DECODE_GUID,
    TRAIT_GROUP,
    encode_event_metadata,
    encode_provider_traits,
    in_type_of,
    pack_values,
    tdh_out_type,
    tl_field,
)

_U16 = struct.Struct("<H")

__all__ = [
    "EXT_EVENT_SCHEMA_TL",
    "EXT_PROV_TRAITS",
    "MAX_METADATA_SIZE",
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


def _build(fields: list[_RawField], index: int, depth: int = 0) -> tuple[list[PropertyInfo], int]:
    """The logical field at ``index`` as properties (two for BINARY), and the next index."""
    raw = fields[index]
    index += 1
    if raw.problem is not None:
        return [PropertyInfo(raw.name, InType.NULL, problem=raw.problem)], index
    if depth > MAX_STRUCT_DEPTH:
        deep = f"structs nested deeper than {MAX_STRUCT_DEPTH} levels"
        return [PropertyInfo(raw.name, InType.NULL, problem=deep)], len(fields)
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
                short = f"struct {raw.name!r} declares {tlg_out} members, the metadata ends after {len(members)}"
                members.append(PropertyInfo("", InType.NULL, problem=short))
                break
            built, index = _build(fields, index, depth + 1)
            members.extend(built)
        prop = PropertyInfo(raw.name, TLG_STRUCT, count=count, members=tuple(members), tags=raw.tags, count_in_data=variable)
        return [prop], index
    in_type = in_type_of(code)
    out_type = tdh_out_type(tlg_out, in_type) if tlg_out else None
    source_out = tlg_out or None
    problem: str | None = None
    if code == InType.NULL:
        problem = f"field {raw.name!r} has in-type NULL"
    elif not isinstance(in_type, InType):
        problem = f"field {raw.name!r} has unknown TraceLogging in-type {code}"
    common = {"out_type": out_type, "tags": raw.tags, "source_out_type": source_out, "problem": problem, "custom_schema": custom}
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
