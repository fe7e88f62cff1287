"""EventPipe metadata: what one kind of event is (provider, id, name, version, opcode) and its fields.

A metadata record is the payload of an event whose metadata id is 0 (in ``EventBlock``s up to
version 3, in ``MetadataBlock``s from version 4). Its header names the provider (by name; by
GUID in version 1) and the event; then comes a "V1" field list (``TypeCode``, nested fields for
``Object``, the name), and from version 5 tags: an opcode, or a "V2" field list that may hold
arrays (a u16 element count in the payload, then the elements).

Field lists that cannot be understood do not stop the trace: the record keeps ``fields=None``
and ``problem`` says why (its events are kept, their payload undecoded).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openetw.errors import NettraceFormatError
from openetw.nettrace.cursor import Cursor

__all__ = ["EventMetadata", "Field", "TypeCode", "read_metadata"]

MAX_FIELDS = 0x4000
MAX_DEPTH = 16
TAG_OPCODE = 1
TAG_V2_PARAMS = 2


class TypeCode:
    """``System.TypeCode`` as EventPipe writes it, with its two additions (Guid 17, Array 19)."""

    OBJECT = 1
    BOOLEAN = 3
    CHAR = 4
    SBYTE = 5
    BYTE = 6
    INT16 = 7
    UINT16 = 8
    INT32 = 9
    UINT32 = 10
    INT64 = 11
    UINT64 = 12
    SINGLE = 13
    DOUBLE = 14
    DECIMAL = 15
    DATETIME = 16
    GUID = 17
    STRING = 18
    ARRAY = 19


KNOWN_TYPE_CODES = frozenset(range(3, 20)) | {TypeCode.OBJECT}


@dataclass(frozen=True, slots=True)
class Field:
    """One payload field: a primitive, a struct (``members``) or an array (``element``)."""

    name: str
    type_code: int
    members: tuple[Field, ...] | None = None
    element: Field | None = None
    count: int | None = None  # a fixed-length array's element count (version 6)


@dataclass(slots=True)
class EventMetadata:
    """One kind of event as the trace describes it."""

    metadata_id: int
    provider_name: str
    event_id: int
    event_name: str
    keywords: int = 0
    version: int = 0
    level: int = 0
    opcode: int | None = None  # from the opcode tag (version 5); None: the trace does not say
    provider_guid: uuid.UUID | None = None  # version 1 names providers by GUID
    fields: tuple[Field, ...] | None = ()  # None: the field list could not be read (``problem``)
    problem: str | None = None


def _type(cur: Cursor, name: str, layout: int, depth: int) -> Field:
    at = cur.offset
    code = cur.i32("field type code")
    if code == TypeCode.OBJECT:
        return Field(name, code, members=_fields(cur, layout, depth + 1))
    if code == TypeCode.ARRAY:
        if layout < 2:
            raise cur.error("an array type in a V1 field list", at)
        return Field(name, code, element=_type(cur, name, layout, depth + 1))
    if code not in KNOWN_TYPE_CODES:
        raise cur.error(f"field {name!r}: type code {code}", at)
    return Field(name, code)


def _fields(cur: Cursor, layout: int, depth: int) -> tuple[Field, ...]:
    if depth > MAX_DEPTH:
        raise cur.error(f"fields nested deeper than {MAX_DEPTH}")
    at = cur.offset
    count = cur.i32("field count")
    if not 0 <= count <= MAX_FIELDS or count * 6 > cur.remaining:
        raise cur.error(f"field count {count}", at)
    found = []
    for _ in range(count):
        if layout >= 2:
            start = cur.offset
            size = cur.i32("V2 field size")
            if not 4 <= size <= cur.remaining + 4:
                raise cur.error(f"V2 field size {size}", start)
            field_cur = Cursor(cur.data, cur.pos, cur.pos + size - 4, base=cur.base, block=cur.block, structure=cur.structure)
            name = field_cur.utf16z("field name")
            found.append(_type(field_cur, name, layout, depth))
            cur.pos += size - 4
        else:
            typed = _type(cur, "", layout, depth)
            name = cur.utf16z("field name")
            found.append(Field(name, typed.type_code, typed.members, typed.element))
    return tuple(found)


def read_metadata(cur: Cursor, version: int, metadata_id: int = 0) -> EventMetadata:
    """One metadata record from ``cur`` (exactly its payload). ``version`` is the Trace
    object's; up to version 2 the id is the record's file offset (``metadata_id``)."""
    cur.structure = "metadata"
    provider_guid = None
    if version >= 3:
        metadata_id = cur.i32("metadata id")
        provider = cur.utf16z("provider name")
    else:
        if version == 1:
            provider_guid = uuid.UUID(bytes_le=cur.take(16, "provider GUID"))
            provider = ""
        else:
            provider = cur.utf16z("provider name")
        event_id = cur.i32("event id")
        event_version = cur.i32("event version")
        if cur.i32("metadata length") <= 0:
            return EventMetadata(metadata_id, provider, event_id & 0xFFFF, "", version=event_version & 0xFF, provider_guid=provider_guid)
    meta = EventMetadata(metadata_id, provider, cur.i32("event id") & 0xFFFF, cur.utf16z("event name"), provider_guid=provider_guid)
    meta.keywords = cur.i64("keywords") & 0xFFFFFFFFFFFFFFFF
    meta.version = cur.i32("event version") & 0xFF
    meta.level = cur.i32("level") & 0xFF
    if cur.remaining == 0:
        return meta
    try:
        meta.fields = _fields(cur, 1, 0)
        while cur.remaining > 0:
            at = cur.offset
            size = cur.i32("tag size")
            kind = cur.u8("tag kind")
            if not 0 <= size <= cur.remaining:
                raise cur.error(f"metadata tag of {size} bytes", at)
            tag = Cursor(cur.data, cur.pos, cur.pos + size, base=cur.base, block=cur.block, structure="metadata tag")
            cur.pos += size
            if kind == TAG_OPCODE and size >= 1:
                meta.opcode = tag.u8("opcode")
            elif kind == TAG_V2_PARAMS:
                meta.fields = _fields(tag, 2, 0)
    except NettraceFormatError as exc:
        meta.fields = None
        meta.problem = exc.message
    return meta
