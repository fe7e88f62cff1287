"""EventHeader: TraceLogging's event model in a Linux tracepoint (``user_events``), decoded.

An EventHeader event (``eventheader.h`` of microsoft/LinuxTracepoints) is written to a
tracepoint named ``ProviderName_L<level>K<keyword>[options]``. Its bytes are an 8-byte header
(flags, version, id, tag, opcode, level), extension blocks (metadata: the event name and its
fields' names and types; activity id: the activity and related activity ids), then the
payload the metadata describes. Nothing here depends on ETW: ``decode_fields`` gives plain
Python values (``openetw.perfdata.transcode`` turns an event into a TraceLogging record).

Malformed events raise ``PerfDataFormatError`` (structure ``eventheader``, offset inside the
event); every count and length is checked against the bytes that are there.
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from openetw.errors import PerfDataFormatError

__all__ = [
    "EhEvent",
    "EhField",
    "TracepointName",
    "decode_fields",
    "decode_typed",
    "plain",
    "decode_string",
    "parse_event",
    "parse_metadata",
    "parse_tracepoint_name",
]

HEADER_SIZE = 8
FLAG_POINTER64 = 0x01
FLAG_LITTLE_ENDIAN = 0x02
FLAG_EXTENSION = 0x04
EXT_CHAIN = 0x8000
EXT_KIND_MASK = 0x7FFF
EXT_METADATA = 1
EXT_ACTIVITY_ID = 2

# event_field_encoding
ENC_MASK, CARRAY, VARRAY, ENC_CHAIN = 0x1F, 0x20, 0x40, 0x80
STRUCT, VALUE8, VALUE16, VALUE32, VALUE64, VALUE128 = 1, 2, 3, 4, 5, 6
ZSTRING_CHAR8, ZSTRING_CHAR16, ZSTRING_CHAR32 = 7, 8, 9
STRING_LENGTH16_CHAR8, STRING_LENGTH16_CHAR16, STRING_LENGTH16_CHAR32 = 10, 11, 12
BINARY_LENGTH16_CHAR8 = 13
MAX_ENCODING = 13
# event_field_format
FMT_MASK, FMT_CHAIN = 0x7F, 0x80
(DEFAULT, UNSIGNED_INT, SIGNED_INT, HEX_INT, ERRNO, PID, TIME, BOOLEAN, FLOAT, HEX_BYTES, STRING8, STRING_UTF,
 STRING_UTF_BOM, STRING_XML, STRING_JSON, UUID, PORT, IPV4, IPV6) = range(19)  # fmt: skip

VALUE_SIZES = {VALUE8: 1, VALUE16: 2, VALUE32: 4, VALUE64: 8, VALUE128: 16}
CHAR_SIZES = {
    ZSTRING_CHAR8: 1, ZSTRING_CHAR16: 2, ZSTRING_CHAR32: 4,
    STRING_LENGTH16_CHAR8: 1, STRING_LENGTH16_CHAR16: 2, STRING_LENGTH16_CHAR32: 4, BINARY_LENGTH16_CHAR8: 1,
}  # fmt: skip
ZSTRINGS = (ZSTRING_CHAR8, ZSTRING_CHAR16, ZSTRING_CHAR32)
MAX_STRUCT_DEPTH = 32

_NAME = re.compile(
    r"^(?P<provider>[^ :]+)_L(?P<level>[0-9a-f]+)K(?P<keyword>[0-9a-f]+)(?P<options>(?:[A-Z][0-9a-z]*)*)$"
)
_OPTION = re.compile(r"([A-Z])([0-9a-z]*)")


@dataclass(frozen=True, slots=True)
class TracepointName:
    """``ProviderName_L<level>K<keyword>[options]``: ``options`` by letter (``G``: provider group)."""

    provider: str
    level: int
    keyword: int
    options: tuple[tuple[str, str], ...] = ()

    @property
    def group(self) -> str | None:
        return dict(self.options).get("G")


def parse_tracepoint_name(name: str) -> TracepointName | None:
    """The parts of an EventHeader tracepoint name, ``None`` when the name is not one."""
    match = _NAME.match(name)
    if match is None or len(name) >= 256:
        return None
    level, keyword = int(match.group("level"), 16), int(match.group("keyword"), 16)
    if level > 0xFF or keyword >> 64:
        return None
    return TracepointName(match.group("provider"), level, keyword, tuple(_OPTION.findall(match.group("options"))))


@dataclass(frozen=True, slots=True)
class EhField:
    """One field of the metadata: ``encoding`` and ``format`` without their flag bits; ``count``
    a constant array length, ``"variable"`` (a u16 count in the payload) or ``None``."""

    name: str
    encoding: int
    format: int = 0
    tag: int = 0
    count: int | str | None = None
    members: tuple[EhField, ...] = ()


@dataclass(frozen=True, slots=True)
class EhEvent:
    """An EventHeader event: its header, extensions and payload (bytes of the event itself)."""

    flags: int
    version: int
    id: int
    tag: int
    opcode: int
    level: int
    name: str
    attributes: str  # what followed the event name after ';' in the metadata
    fields: tuple[EhField, ...]
    metadata: bytes | None
    activity_id: bytes | None
    related_id: bytes | None
    payload: bytes
    payload_offset: int

    @property
    def little_endian(self) -> bool:
        return bool(self.flags & FLAG_LITTLE_ENDIAN)

    @property
    def pointer64(self) -> bool:
        return bool(self.flags & FLAG_POINTER64)


def _fail(message: str, offset: int, base: int) -> PerfDataFormatError:
    return PerfDataFormatError(message, offset=base + offset, structure="eventheader")


def parse_event(data: bytes, *, base: int = 0) -> EhEvent:
    """An event's header and extensions (``base``: where ``data`` sits in its file, for errors)."""
    if len(data) < HEADER_SIZE:
        raise _fail(f"{len(data)} bytes, fewer than the 8-byte eventheader", 0, base)
    flags, version = data[0], data[1]
    endian = "<" if flags & FLAG_LITTLE_ENDIAN else ">"
    event_id, tag = struct.unpack_from(endian + "HH", data, 2)
    opcode, level = data[6], data[7]
    pos = HEADER_SIZE
    metadata = activity = related = None
    metadata_at = pos
    if flags & FLAG_EXTENSION:
        while True:
            if pos + 4 > len(data):
                raise _fail("extension header past the end of the event", pos, base)
            size, kind = struct.unpack_from(endian + "HH", data, pos)
            pos += 4
            if pos + size > len(data):
                raise _fail(f"extension of {size} bytes past the end of the event", pos - 4, base)
            block = bytes(data[pos : pos + size])
            if kind & EXT_KIND_MASK == EXT_METADATA and metadata is None:
                metadata, metadata_at = block, pos
            elif kind & EXT_KIND_MASK == EXT_ACTIVITY_ID:
                if size not in (16, 32):
                    raise _fail(f"activity id extension of {size} bytes (16 or 32)", pos - 4, base)
                activity, related = block[:16], (block[16:] or None)
            pos += size
            if not kind & EXT_CHAIN:
                break
    name, attributes, fields = (
        ("", "", ()) if metadata is None else parse_metadata(metadata, little=endian == "<", base=base + metadata_at)
    )
    return EhEvent(
        flags,
        version,
        event_id,
        tag,
        opcode,
        level,
        name,
        attributes,
        fields,
        metadata,
        activity,
        related,
        bytes(data[pos:]),
        pos,
    )


def _split_name(raw: bytes) -> tuple[str, str]:
    text = raw.decode("utf-8", "replace")
    name, _, attributes = text.partition(";")
    return name, attributes


def parse_metadata(blob: bytes, *, little: bool = True, base: int = 0) -> tuple[str, str, tuple[EhField, ...]]:
    """(event name, its attributes, fields) from a metadata extension (tags and array lengths in
    the event's byte order)."""
    order: Any = "little" if little else "big"
    end = blob.find(b"\0")
    if end < 0:
        raise _fail("event name without its NUL", 0, base)
    name, attributes = _split_name(blob[:end])
    pos = end + 1
    flat: list[tuple[EhField, int]] = []  # each field and, for a struct, its member count
    while pos < len(blob):
        nul = blob.find(b"\0", pos)
        if nul < 0:
            raise _fail("field name without its NUL", pos, base)
        field_name = _split_name(blob[pos:nul])[0]
        pos = nul + 1
        if pos >= len(blob):
            raise _fail(f"field {field_name!r} has no encoding byte", pos, base)
        encoding_at, encoding = pos, blob[pos]
        pos += 1
        fmt = tag = 0
        if encoding & ENC_CHAIN:
            if pos >= len(blob):
                raise _fail(f"field {field_name!r} has no format byte", pos, base)
            fmt = blob[pos]
            pos += 1
            if fmt & FMT_CHAIN:
                if pos + 2 > len(blob):
                    raise _fail(f"field {field_name!r} has no tag", pos, base)
                tag = int.from_bytes(blob[pos : pos + 2], order)
                pos += 2
        count: int | str | None = None
        if encoding & CARRAY and encoding & VARRAY:
            raise _fail(f"field {field_name!r} is both a constant and a variable array", pos, base)
        if encoding & CARRAY:
            if pos + 2 > len(blob):
                raise _fail(f"field {field_name!r} has no array length", pos, base)
            count = int.from_bytes(blob[pos : pos + 2], order)
            pos += 2
            if count == 0:
                raise _fail(f"field {field_name!r} is a constant array of 0 elements", pos - 2, base)
        elif encoding & VARRAY:
            count = "variable"
        kind = encoding & ENC_MASK
        if kind == 0 or kind > MAX_ENCODING:
            raise _fail(f"field {field_name!r} has encoding {kind}", encoding_at, base)
        members = fmt & FMT_MASK if kind == STRUCT else 0
        if kind == STRUCT and members == 0:
            raise _fail(f"struct {field_name!r} has no fields", pos, base)
        flat.append((EhField(field_name, kind, 0 if kind == STRUCT else fmt & FMT_MASK, tag, count), members))
    fields, index = [], 0
    while index < len(flat):
        built, index = _nest(flat, index, 0, base)
        fields.append(built)
    return name, attributes, tuple(fields)


def _nest(flat: list[tuple[EhField, int]], index: int, depth: int, base: int) -> tuple[EhField, int]:
    field, members = flat[index]
    index += 1
    if not members:
        return field, index
    if depth >= MAX_STRUCT_DEPTH:
        raise _fail(f"structs nested deeper than {MAX_STRUCT_DEPTH}", 0, base)
    nested = []
    for _ in range(members):
        if index >= len(
            flat
        ):  # a struct declaring more fields than follow ends with the metadata (as LinuxTracepoints reads it)
            break
        member, index = _nest(flat, index, depth + 1, base)
        nested.append(member)
    return EhField(field.name, field.encoding, 0, field.tag, field.count, tuple(nested)), index


# -- payload -----------------------------------------------------------------------------------

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
)  # fmt: skip


def decode_string(raw: bytes, char_size: int, fmt: int, little: bool) -> str:
    """The text of a string's code units: Latin-1 for ``string8``, UTF-8/16/32 by the code unit
    size otherwise, a BOM choosing instead for the BOM, XML and JSON formats."""
    if fmt in (STRING_UTF_BOM, STRING_XML, STRING_JSON):
        for bom, codec in _BOMS:
            if raw.startswith(bom):
                return raw[len(bom) :].decode(codec, "replace")
    if char_size == 1:
        if fmt == STRING8:
            return raw.decode("latin-1")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:  # not UTF-8: read as Latin-1, as LinuxTracepoints does
            return raw.decode("latin-1")
    codec = ("utf-16" if char_size == 2 else "utf-32") + ("-le" if little else "-be")
    return raw.decode(codec, "replace")


class _Payload:
    __slots__ = ("data", "pos", "endian", "little", "base")

    def __init__(self, data: bytes, endian: str, base: int) -> None:
        self.data, self.pos, self.endian, self.little, self.base = data, 0, endian, endian == "<", base

    def take(self, size: int, what: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise _fail(f"{what} needs {size} bytes, {len(self.data) - self.pos} left", self.pos, self.base)
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u16(self, what: str) -> int:
        value: int = struct.unpack(self.endian + "H", self.take(2, what))[0]
        return value


_INT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
# Which sizes each format reads as a value (a counted field of another size falls back to its encoding's default).
_VALUE_FORMAT_SIZES: dict[int, tuple[int, ...]] = {
    UNSIGNED_INT: (1, 2, 4, 8), SIGNED_INT: (1, 2, 4, 8), HEX_INT: (1, 2, 4, 8), ERRNO: (4,), PID: (4,), TIME: (4, 8),
    BOOLEAN: (1, 2, 4), FLOAT: (4, 8), UUID: (16,), PORT: (2,), IPV4: (4, 16), IPV6: (4, 16),
}  # fmt: skip

# A decoded value with what it is: (kind, size, value). Kinds: uint int hex errno pid time bool
# float char uuid port ipv4 ipv6 bytes str null struct.
Typed = tuple[str, int, Any]


def _number(raw: bytes, endian: str, signed: bool) -> int:
    code = _INT_CODES[len(raw)]
    number: int = struct.unpack(endian + (code.lower() if signed else code), raw)[0]
    return number


def _typed_value(raw: bytes, fmt: int, endian: str) -> Typed | None:
    """``raw`` read by ``fmt`` when the format takes values of its size, else ``None``."""
    size = len(raw)
    if size not in _VALUE_FORMAT_SIZES.get(fmt, ()):
        return None
    if fmt == UNSIGNED_INT:
        return ("uint", size, _number(raw, endian, False))
    if fmt == SIGNED_INT:
        return ("int", size, _number(raw, endian, True))
    if fmt == HEX_INT:
        return ("hex", size, _number(raw, endian, False))
    if fmt == ERRNO:
        return ("errno", size, _number(raw, endian, True))
    if fmt == PID:
        return ("pid", size, _number(raw, endian, True))
    if fmt == TIME:
        return ("time", size, _number(raw, endian, True))
    if fmt == BOOLEAN:
        number = _number(raw, endian, False)
        if number in (0, 1) or size < 4:
            return ("bool", size, number)
        return ("int", size, _number(raw, endian, True))  # neither 0 nor 1: the number, as LinuxTracepoints shows it
    if fmt == FLOAT:
        return ("float", size, struct.unpack(endian + ("f" if size == 4 else "d"), raw)[0])
    if fmt == UUID:
        return ("uuid", size, uuid.UUID(bytes=raw))
    if fmt == PORT:
        return ("port", size, int.from_bytes(raw, "big"))
    return ("ipv4" if size == 4 else "ipv6", size, raw)


def _fixed(raw: bytes, fmt: int, endian: str) -> Typed:
    """A Value8..Value128 field."""
    size = len(raw)
    if fmt == HEX_BYTES:
        return ("bytes", size, raw)
    if fmt in (STRING8, STRING_UTF) and size == 1:
        return ("char", 1, raw.decode("latin-1"))
    if fmt == STRING_UTF and size in (2, 4):
        number = _number(raw, endian, False)
        return ("char", size, chr(number) if number < 0x110000 and not 0xD800 <= number < 0xE000 else "\ufffd")
    typed = _typed_value(raw, fmt, endian)
    if typed is not None:
        return typed
    if size == 16:
        return ("bytes", 16, raw)
    return ("uint", size, _number(raw, endian, False))


def _element(reader: _Payload, field: EhField, depth: int) -> Typed:
    encoding = field.encoding
    if encoding == STRUCT:
        return ("struct", 0, [(member.name, _read_field(reader, member, depth + 1)) for member in field.members])
    size = VALUE_SIZES.get(encoding)
    if size is not None:
        return _fixed(reader.take(size, field.name), field.format, reader.endian)
    char = CHAR_SIZES[encoding]
    if encoding in ZSTRINGS:
        data, pos = reader.data, reader.pos
        if pos >= len(data):  # every element takes a byte at least: arrays stay bounded by the payload
            raise _fail(f"string {field.name!r} needs at least 1 byte, 0 left in the payload", pos, reader.base)
        terminator = b"\0" * char
        end = pos
        while True:
            end = data.find(terminator, end)
            if end < 0 or (end - pos) % char == 0:
                break
            end += 1
        raw = bytes(reader.take((len(data) if end < 0 else end) - pos, field.name))
        if end >= 0:
            reader.pos += char
    else:
        raw = bytes(reader.take(reader.u16(f"{field.name} length") * char, field.name))
        if char == 1 and field.format in _VALUE_FORMAT_SIZES:
            if not raw:
                return ("null", 0, None)
            typed = _typed_value(raw, field.format, reader.endian)
            if typed is not None:
                return typed
    if field.format == HEX_BYTES or (
        encoding == BINARY_LENGTH16_CHAR8
        and field.format not in (STRING8, STRING_UTF, STRING_UTF_BOM, STRING_XML, STRING_JSON)
    ):
        return ("bytes", len(raw), raw)
    return ("str", 0, decode_string(raw, char, field.format, reader.little))


def _read_field(reader: _Payload, field: EhField, depth: int = 0) -> Typed | list[Typed]:
    if field.count is None:
        return _element(reader, field, depth)
    count = reader.u16(f"{field.name} count") if field.count == "variable" else int(field.count)
    if field.encoding in VALUE_SIZES and count * VALUE_SIZES[field.encoding] > len(reader.data) - reader.pos:
        raise _fail(f"array {field.name!r} of {count} elements past the payload's end", reader.pos, reader.base)
    return [_element(reader, field, depth) for _ in range(count)]


def decode_typed(event: EhEvent, *, base: int = 0) -> list[tuple[str, Typed | list[Typed]]]:
    """The payload's values by the metadata, each with its kind and size (see ``Typed``)."""
    reader = _Payload(event.payload, "<" if event.little_endian else ">", base + event.payload_offset)
    return [(field.name, _read_field(reader, field)) for field in event.fields]


def plain(value: Typed | list[Typed]) -> Any:
    """A typed value as a plain Python value (structs as lists of (name, value) pairs)."""
    if isinstance(value, list):
        return [plain(item) for item in value]
    kind, _, inner = value
    if kind == "struct":
        return [(name, plain(member)) for name, member in inner]
    return inner


def decode_fields(event: EhEvent, *, base: int = 0) -> list[tuple[str, Any]]:
    """The payload's values by the metadata, in order (names may repeat; a struct is a list of
    its (name, value) pairs, an array a list). Values: ``int`` (signed by format), ``float``,
    ``str`` (chars and strings), ``bytes`` (hex_bytes, Value128, IPv4/IPv6 addresses), ``uuid.UUID``."""
    return [(name, plain(value)) for name, value in decode_typed(event, base=base)]
