"""Writing EventHeader events (pure: values in, bytes out): what a ``user_events`` provider
writes after the tracepoint's write index, and what ``openetw.perfdata.eventheader`` reads.

``encode_event(name, fields, values, level=...)`` gives the event's bytes (eventheader,
activity id and metadata extensions, payload); ``values`` are what ``decode_fields`` gives back
(ints, floats, str, bytes, ``uuid.UUID``, lists for arrays, lists of values or (name, value)
pairs for structs), so ``decode_fields(parse_event(encode_event(...))) == values``. A ``bytes``
value for a string field is taken as its code units, as they are; ``None`` is an empty one. Misuse (a value that does not
fit its field) raises ``InvalidArgument``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from openetw.errors import InvalidArgument
from openetw.perfdata import eventheader as EH

__all__ = ["command_string", "encode_event", "encode_metadata", "tracepoint_name"]

EVENTHEADER_COMMAND_TYPES = "u8 eventheader_flags;u8 version;u16 id;u16 tag;u8 opcode;u8 level"


def tracepoint_name(provider: str, level: int, keyword: int, options: str = "") -> str:
    """``Provider_L<level>K<keyword><options>`` (lowercase hex), as ``eventheader.h`` names it."""
    if not provider or " " in provider or ":" in provider:
        raise InvalidArgument(f"an EventHeader provider name has no spaces or colons: {provider!r}")
    if not 0 < level <= 0xFF or not 0 <= keyword < 1 << 64:
        raise InvalidArgument(f"level {level} (1..255) or keyword {keyword:#x} (64 bits) out of range")
    name = f"{provider}_L{level:x}K{keyword:x}{options}"
    if len(name) >= 256:
        raise InvalidArgument(f"tracepoint name of {len(name)} characters (at most 255)")
    return name


def command_string(provider: str, level: int, keyword: int, options: str = "") -> str:
    """The ``user_events`` registration command for the tracepoint: its name and EventHeader's fields."""
    return f"{tracepoint_name(provider, level, keyword, options)} {EVENTHEADER_COMMAND_TYPES}"


def _name(text: str, what: str) -> bytes:
    raw = text.encode("utf-8")
    if b"\0" in raw:
        raise InvalidArgument(f"{what} {text!r} has a NUL")
    return raw + b"\0"


def _field_metadata(out: bytearray, field: EH.EhField, endian: str) -> None:
    out += _name(field.name, "field name")
    encoding = field.encoding
    if field.count == "variable":
        encoding |= EH.VARRAY
    elif field.count is not None:
        encoding |= EH.CARRAY
    fmt = len(field.members) if field.encoding == EH.STRUCT else field.format
    if field.encoding == EH.STRUCT and not 1 <= fmt <= 127:
        raise InvalidArgument(f"struct {field.name!r} has {fmt} fields (1..127)")
    chained = bool(fmt or field.tag)
    out.append(encoding | (EH.ENC_CHAIN if chained else 0))
    if chained:
        out.append(fmt | (EH.FMT_CHAIN if field.tag else 0))
        if field.tag:
            out += struct.pack(endian + "H", field.tag)
    if field.count is not None and field.count != "variable":
        if not 1 <= int(field.count) <= 0xFFFF:
            raise InvalidArgument(f"field {field.name!r}: constant array of {field.count} elements (1..65535)")
        out += struct.pack(endian + "H", int(field.count))
    for member in field.members:
        _field_metadata(out, member, endian)


def encode_metadata(event_name: str, fields: Sequence[EH.EhField], *, little_endian: bool = True) -> bytes:
    """The metadata extension's bytes: the event name, then each field's name and types."""
    out = bytearray(_name(event_name, "event name"))
    for field in fields:
        _field_metadata(out, field, "<" if little_endian else ">")
    return bytes(out)


_INT = {1: "B", 2: "H", 4: "I", 8: "Q"}
_SIGNED_FORMATS = (EH.SIGNED_INT, EH.ERRNO, EH.PID, EH.TIME)


def _fixed(value: Any, size: int, fmt: int, endian: str, name: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        if len(value) != size:
            raise InvalidArgument(f"field {name!r}: {len(value)} bytes for a {size}-byte value")
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, str):  # a character
        if len(value) != 1:
            raise InvalidArgument(f"field {name!r}: one character, not {value!r}")
        value = ord(value.encode("latin-1")) if size == 1 else ord(value)
    if fmt == EH.FLOAT and size in (4, 8):
        return struct.pack(endian + ("f" if size == 4 else "d"), value)
    if fmt == EH.PORT and size == 2:
        return int(value).to_bytes(2, "big")
    if size == 16:
        return int(value).to_bytes(16, "big")
    number = int(value)
    if number < 0:
        number &= (1 << (8 * size)) - 1
    return struct.pack(endian + _INT[size], number)


def _string(value: Any, field: EH.EhField, endian: str) -> bytes:
    char = EH.CHAR_SIZES[field.encoding]
    if value is None:  # a counted field of no bytes (what a value format reads as nothing)
        raw = b""
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif char == 1:
        raw = str(value).encode("latin-1" if field.format == EH.STRING8 else "utf-8")
    else:
        raw = str(value).encode(("utf-16" if char == 2 else "utf-32") + ("-le" if endian == "<" else "-be"))
    if len(raw) % char:
        raise InvalidArgument(f"field {field.name!r}: {len(raw)} bytes are no whole {char}-byte code units")
    if field.encoding in EH.ZSTRINGS:
        for index in range(0, len(raw), char):
            if not any(raw[index : index + char]):
                raise InvalidArgument(f"field {field.name!r}: a NUL inside a NUL-terminated string")
        return raw + b"\0" * char
    if len(raw) // char > 0xFFFF:
        raise InvalidArgument(f"field {field.name!r}: {len(raw) // char} code units exceed the u16 length")
    return struct.pack(endian + "H", len(raw) // char) + raw


def _element(out: bytearray, field: EH.EhField, value: Any, endian: str) -> None:
    if field.encoding == EH.STRUCT:
        items = list(value)
        if len(items) != len(field.members):
            raise InvalidArgument(f"struct {field.name!r} has {len(field.members)} fields, got {len(items)} values")
        for member, item in zip(field.members, items, strict=True):
            _value(
                out,
                member,
                item[1] if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) else item,
                endian,
            )
        return
    size = EH.VALUE_SIZES.get(field.encoding)
    if size is not None:
        out += _fixed(value, size, field.format, endian, field.name)
    else:
        out += _string(value, field, endian)


def _value(out: bytearray, field: EH.EhField, value: Any, endian: str) -> None:
    if field.count is None:
        _element(out, field, value, endian)
        return
    items = list(value)
    if field.count == "variable":
        if len(items) > 0xFFFF:
            raise InvalidArgument(f"field {field.name!r}: {len(items)} elements exceed the u16 count")
        out += struct.pack(endian + "H", len(items))
    elif len(items) != int(field.count):
        raise InvalidArgument(f"field {field.name!r} takes {field.count} elements, got {len(items)}")
    for item in items:
        _element(out, field, item, endian)


def encode_event(
    event_name: str, fields: Sequence[EH.EhField], values: Sequence[Any], *, level: int, version: int = 0, id: int = 0,  # noqa: A002 - eventheader's name
    tag: int = 0, opcode: int = 0, activity_id: uuid.UUID | None = None, related_id: uuid.UUID | None = None,
    little_endian: bool = True, pointer64: bool = True,
) -> bytes:  # fmt: skip
    """An EventHeader event: header, extensions (activity id when given, metadata), payload."""
    if len(values) != len(fields):
        raise InvalidArgument(f"{len(fields)} fields but {len(values)} values")
    if related_id is not None and activity_id is None:
        raise InvalidArgument("a related activity id needs an activity id")
    endian = "<" if little_endian else ">"
    flags = (
        EH.FLAG_EXTENSION | (EH.FLAG_LITTLE_ENDIAN if little_endian else 0) | (EH.FLAG_POINTER64 if pointer64 else 0)
    )
    try:
        out = bytearray(struct.pack(endian + "BBHHBB", flags, version, id, tag, opcode, level))
    except struct.error as error:
        raise InvalidArgument(f"eventheader field out of range: {error}") from None
    metadata = encode_metadata(event_name, fields, little_endian=little_endian)
    if activity_id is not None:
        ids = activity_id.bytes + (related_id.bytes if related_id is not None else b"")
        out += struct.pack(endian + "HH", len(ids), EH.EXT_ACTIVITY_ID | EH.EXT_CHAIN) + ids
    if len(metadata) > 0xFFFF:
        raise InvalidArgument(f"metadata of {len(metadata)} bytes exceeds the u16 size")
    out += struct.pack(endian + "HH", len(metadata), EH.EXT_METADATA) + metadata
    for field, value in zip(fields, values, strict=True):
        try:
            _value(out, field, value, endian)
        except (struct.error, TypeError, ValueError, OverflowError) as error:
            if isinstance(error, InvalidArgument):
                raise
            raise InvalidArgument(f"field {field.name!r}: cannot encode {value!r}: {error}") from None
    return bytes(out)
