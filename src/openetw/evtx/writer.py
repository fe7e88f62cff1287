"""Writing ``.evtx``: events in, a file image (header and 64 KiB chunks) out.

Each event is a tree of elements whose leaves are typed values (``render.Value``) or literal
text. Its shape (element and attribute names, literal text, the declared type of each value)
decides its template: a chunk holds one definition per shape, inline in the first record that
uses it, and every later record of that shape refers to it (events of one provider, id and
version share one). Names are stored once per chunk and referenced after; the chunk header's
string and template tables hold the hash chains readers use. Every CRC32 is computed; the file
header says clean (no dirty flag) once ``finish`` is called, and full when ``max_chunks`` was
reached.

Pure: ``EvtxWriter`` keeps finished chunks in memory; a caller streaming to a file takes them
with ``take_chunks`` and writes ``file_header`` last (at offset 0).
"""

from __future__ import annotations

import functools
import hashlib
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from openetw.errors import InvalidArgument
from openetw.evtx import layout as L
from openetw.evtx import values as V
from openetw.evtx.binxml import (
    FLAG_MORE,
    TOKEN_ATTRIBUTE,
    TOKEN_CLOSE_EMPTY,
    TOKEN_CLOSE_START,
    TOKEN_END_ELEMENT,
    TOKEN_EOF,
    TOKEN_OPEN_START,
    TOKEN_OPTIONAL_SUBSTITUTION,
    TOKEN_TEMPLATE_INSTANCE,
    TOKEN_VALUE,
)
from openetw.evtx.record import EvtxHeader
from openetw.evtx.render import Value, XmlNode

__all__ = ["EVENT_NAMESPACE", "EvtxWriter", "tree_shape"]

EVENT_NAMESPACE = "http://schemas.microsoft.com/win/2004/08/events/event"
FRAGMENT_HEADER = b"\x0f\x01\x01\x00"

_u16 = struct.Struct("<H").pack
_u32 = struct.Struct("<I").pack
_DESCRIPTOR = struct.Struct("<HBx").pack
_RECORD_HEADER = L.RECORD_HEADER.struct.pack

# A shape is a nested tuple: ("E", name, attributes, children) with attributes a tuple of
# (name, parts) and parts / children made of ("T", text), ("S", value type) or elements.
Shape = tuple[Any, ...]


def tree_shape(tree: Iterable[Any]) -> tuple[Shape, list[Value]]:
    """The shape of a resolved tree (``XmlNode``s with ``Value`` / text leaves) and its values in slot order."""
    values: list[Value] = []

    def part(leaf: Any) -> Shape:
        if isinstance(leaf, Value):
            values.append(leaf)
            return ("S", leaf.value_type)
        if isinstance(leaf, XmlNode):
            return node(leaf)
        return ("T", str(leaf))

    def merged(items: list[Any]) -> tuple[Shape, ...]:
        out: list[Shape] = []
        for item in items:
            shaped = part(item)
            if shaped[0] == "T" and out and out[-1][0] == "T":
                out[-1] = ("T", out[-1][1] + shaped[1])  # one text token, as readers expect
            else:
                out.append(shaped)
        return tuple(out)

    def node(element: XmlNode) -> Shape:
        attributes = tuple((name, merged([_blank_to_empty(p) for p in parts])) for name, parts in element.attributes.items())
        return ("E", element.name, attributes, merged(element.children))

    shapes = tuple(part(item) for item in tree)
    return shapes, values


_SYSTEM_SHAPE = (
    ("E", "Provider", (("Name", (("S", V.STRING),)), ("Guid", (("S", V.GUID),))), ()),
    ("E", "EventID", (), (("S", V.UINT16),)),
    ("E", "Version", (), (("S", V.UINT8),)),
    ("E", "Level", (), (("S", V.UINT8),)),
    ("E", "Task", (), (("S", V.UINT16),)),
    ("E", "Opcode", (), (("S", V.UINT8),)),
    ("E", "Keywords", (), (("S", V.HEX_INT64),)),
    ("E", "TimeCreated", (("SystemTime", (("S", V.FILETIME),)),), ()),
    ("E", "EventRecordID", (), (("S", V.UINT64),)),
    ("E", "Correlation", (("ActivityID", (("S", V.GUID),)), ("RelatedActivityID", (("S", V.GUID),))), ()),
    ("E", "Execution", (("ProcessID", (("S", V.UINT32),)), ("ThreadID", (("S", V.UINT32),))), ()),
    ("E", "Channel", (), (("S", V.STRING),)),
    ("E", "Computer", (), (("S", V.STRING),)),
    ("E", "Security", (("UserID", (("S", V.SID),)),), ()),
)
_RECORD_ID_SLOT = 9  # EventRecordID's value among the System values
_pack = struct.pack


def _blank_to_empty(leaf: Any) -> Any:
    """An attribute's text value of NUL characters only is written empty (libevtx cannot render
    an attribute whose text is nothing but its terminator); every reader shows the same."""
    if isinstance(leaf, Value) and leaf.value_type in (V.STRING, V.ANSI_STRING) and leaf.raw and not leaf.raw.strip(b"\x00"):
        return Value(leaf.value_type, b"")
    return leaf


_SYSTEM_TYPES = [
    V.STRING, V.GUID, V.UINT16, V.UINT8, V.UINT8, V.UINT16, V.UINT8, V.HEX_INT64, V.FILETIME, V.UINT64,
]  # fmt: skip
_SYSTEM_FIXED = struct.Struct("<HBBHBQQQ")
_SYSTEM_TAIL_TYPES = [V.UINT32, V.UINT32, V.STRING, V.STRING]


class _EventEncoder:
    """An event's shape, value types and bytes from its ``<System>`` facts and named properties.

    Properties become ``<EventData><Data Name=...>``; a value's type follows its Python type
    (``values.type_of_python``); a property that is ``None`` is an empty ``Data``. Shapes are
    cached by property names and types."""

    def __init__(self) -> None:
        self.shapes: dict[tuple[Any, ...], Shape] = {}

    def encode(self, header: EvtxHeader, properties: Mapping[str, Any]) -> tuple[Shape, list[int], list[bytes]]:
        fixed = _SYSTEM_FIXED.pack(
            header.event_id & 0xFFFF, header.version & 0xFF, header.level & 0xFF, header.task & 0xFFFF,
            header.opcode & 0xFF, header.keywords & 0xFFFFFFFFFFFFFFFF, max(0, header.time_created), header.record_id,
        )  # fmt: skip
        activity, related, user = header.activity_id, header.related_activity_id, header.user_id
        types = [
            *_SYSTEM_TYPES,
            V.NULL if activity is None or not activity.int else V.GUID,
            V.NULL if related is None or not related.int else V.GUID,
            *_SYSTEM_TAIL_TYPES,
            V.SID if user else V.NULL,
        ]
        raws = [
            _utf16(header.provider_name),
            (header.provider_guid or _ZERO_GUID).bytes_le,
            fixed[0:2], fixed[2:3], fixed[3:4], fixed[4:6], fixed[6:7], fixed[7:15], fixed[15:23], fixed[23:31],
            b"" if types[10] == V.NULL else activity.bytes_le,  # type: ignore[union-attr]
            b"" if types[11] == V.NULL else related.bytes_le,  # type: ignore[union-attr]
            _pack("<I", header.process_id & 0xFFFFFFFF), _pack("<I", header.thread_id & 0xFFFFFFFF),
            _utf16(header.channel), _utf16(header.computer),
            _sid(user) if user else b"",
        ]  # fmt: skip
        names = []
        for name, value in properties.items():
            kind = value.__class__
            if kind is str:
                value_type, raw = V.STRING, value.encode("utf-16-le")
            elif kind is int and 0 <= value <= 0xFFFFFFFF:
                value_type, raw = V.UINT32, _pack("<I", value)
            else:
                value_type = V.type_of_python(value)
                if value_type == V.NULL:
                    names.append((name, value_type))
                    continue
                try:
                    raw = V.encode_value(value_type, value)
                except (V.ValueError_, struct.error, ValueError, TypeError, OverflowError):
                    value_type, raw = V.STRING, str(value).encode("utf-16-le")
            names.append((name, value_type))
            types.append(value_type)
            raws.append(raw)
        key = tuple(names)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = _event_shape(key)
        return shape, types, raws


@functools.lru_cache(maxsize=4096)
def _utf16(text: str) -> bytes:
    return text.encode("utf-16-le")


@functools.lru_cache(maxsize=1024)
def _sid(text: str) -> bytes:
    return V.sid_bytes(text)


_ZERO_GUID = uuid.UUID(int=0)


def _event_shape(properties: tuple[tuple[str, int], ...]) -> Shape:
    data = []
    for name, value_type in properties:
        content = () if value_type == V.NULL else (("S", value_type),)
        data.append(("E", "Data", (("Name", (("T", name),)),), content))
    return (
        (
            "E",
            "Event",
            (("xmlns", (("T", EVENT_NAMESPACE),)),),
            (("E", "System", (), _SYSTEM_SHAPE), ("E", "EventData", (), tuple(data))),
        ),
    )


def _name_bytes(name: str, next_offset: int = 0) -> bytes:
    encoded = name.encode("utf-16-le")
    return _u32(next_offset) + _u16(L.name_hash(name)) + _u16(len(encoded) // 2) + encoded + b"\x00\x00"


class _Chunk:
    """One chunk being filled: its bytes after the header, its names and templates."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.names: dict[str, int] = {}
        self.templates: dict[Shape, tuple[int, int]] = {}  # shape -> (definition offset, template id)
        self.string_table = [0] * L.STRING_BUCKETS
        self.template_table = [0] * L.TEMPLATE_BUCKETS
        self.first_id = 0
        self.last_id = 0
        self.last_record_offset = 0
        self.records = 0

    @property
    def position(self) -> int:
        return L.CHUNK_HEADER_SIZE + len(self.body)

    def image(self) -> bytes:
        free = self.position
        header = bytearray(L.CHUNK_HEADER_SIZE)
        L.CHUNK_HEADER.struct.pack_into(
            header, 0, L.CHUNK_MAGIC, self.first_id, self.last_id, self.first_id, self.last_id,
            L.CHUNK_HEADER_FIELDS_SIZE, self.last_record_offset, free, 0, b"\x00" * 64, 0, 0,
        )  # fmt: skip
        struct.pack_into(f"<{L.STRING_BUCKETS}I", header, L.STRING_TABLE_OFFSET, *self.string_table)
        struct.pack_into(f"<{L.TEMPLATE_BUCKETS}I", header, L.TEMPLATE_TABLE_OFFSET, *self.template_table)
        chunk = bytearray(bytes(header) + bytes(self.body) + bytes(L.CHUNK_SIZE - free))
        struct.pack_into("<I", chunk, L.CHUNK_RECORDS_CHECKSUM_OFFSET, L.chunk_records_checksum(chunk, free))
        struct.pack_into("<I", chunk, L.CHUNK_CHECKSUM_OFFSET, L.chunk_header_checksum(chunk))
        return bytes(chunk)


class _Encoder:
    """Encodes one record's BinXml at a known chunk position, staging new names and templates."""

    def __init__(self, chunk: _Chunk, start: int) -> None:
        self.chunk = chunk
        self.out = bytearray()
        self.start = start  # chunk offset of out[0]
        self.new_names: dict[str, int] = {}
        self.string_table = list(chunk.string_table)
        self.slot = 0

    @property
    def pos(self) -> int:
        return self.start + len(self.out)

    def name(self, name: str) -> None:
        offset = self.chunk.names.get(name)
        if offset is None:
            offset = self.new_names.get(name)
        if offset is not None:
            self.out += _u32(offset)
            return
        offset = self.pos + 4
        bucket = L.name_hash(name) % L.STRING_BUCKETS
        self.out += _u32(offset) + _name_bytes(name, self.string_table[bucket])
        self.string_table[bucket] = offset
        self.new_names[name] = offset

    def parts(self, parts: tuple[Shape, ...]) -> None:
        for part in parts:
            if part[0] == "S":
                self.out += bytes((TOKEN_OPTIONAL_SUBSTITUTION,)) + _u16(self.slot) + bytes((part[1],))
                self.slot += 1
            elif part[0] == "T":
                encoded = part[1].encode("utf-16-le")
                self.out += bytes((TOKEN_VALUE, V.STRING)) + _u16(len(encoded) // 2) + encoded
            else:
                self.element(part)

    def element(self, shape: Shape) -> None:
        _, name, attributes, children = shape
        out = self.out
        out.append(TOKEN_OPEN_START | (FLAG_MORE if attributes else 0))
        out += b"\xff\xff"
        size_at = len(out)
        out += b"\x00\x00\x00\x00"
        self.name(name)
        if attributes:
            list_at = len(out)
            out += b"\x00\x00\x00\x00"
            for index, (attribute, parts) in enumerate(attributes):
                out.append(TOKEN_ATTRIBUTE | (FLAG_MORE if index + 1 < len(attributes) else 0))
                self.name(attribute)
                self.parts(parts)
            struct.pack_into("<I", out, list_at, len(out) - list_at - 4)
        if children:
            out.append(TOKEN_CLOSE_START)
            self.parts(children)
            out.append(TOKEN_END_ELEMENT)
        else:
            out.append(TOKEN_CLOSE_EMPTY)
        struct.pack_into("<I", out, size_at, len(out) - size_at - 4)


def _template_guid(shape: Shape) -> bytes:
    return hashlib.md5(repr(shape).encode("utf-8")).digest()


class EvtxWriter:
    """Builds an ``.evtx`` image from events, chunk after chunk.

    ``add_tree(tree)`` takes a resolved record tree (``EvtxRecord.tree()``), ``add_event(header,
    properties)`` an event given by its System facts and properties, ``add_record(record)`` an
    ``EvtxRecord``. Record ids run from ``first_record_id`` unless given.
    """

    def __init__(self, *, first_record_id: int = 1, max_chunks: int | None = None) -> None:
        if first_record_id < 1:
            raise InvalidArgument("record ids start at 1 or more")
        self.next_record_id = first_record_id
        self.max_chunks = max_chunks
        self.chunks: list[bytes] = []
        self.chunks_written = 0  # finished chunks, taken or not
        self.records_written = 0
        self.full = False
        self._chunk = _Chunk()
        self._taken = 0
        self._id_slots: dict[Shape, int | None] = {}
        self._events = _EventEncoder()

    # -- input -----------------------------------------------------------------------------------
    def add_tree(self, tree: list[Any], *, record_id: int | None = None, written_time: int | None = None) -> int:
        """Add a record given as a resolved tree; returns its record id.

        The tree's ``EventRecordID`` is set to the record id and ``TimeCreated`` gives the
        written time unless ``written_time`` is passed.
        """
        shape, values = tree_shape(tree)
        slot = self._id_slots.get(shape, -1)
        if slot == -1:
            slot = self._id_slots[shape] = _record_id_slot(shape)
        return self._add_values(shape, values, record_id, written_time, slot)

    def add_event(self, header: EvtxHeader, properties: Mapping[str, Any], *, record_id: int | None = None) -> int:
        """Add an event given by its ``<System>`` facts and its properties (``EventData``)."""
        shape, types, raws = self._events.encode(header, properties)
        return self._add(shape, types, raws, record_id, max(0, header.time_created), _RECORD_ID_SLOT)

    def add_record(self, record: Any, *, keep_record_id: bool = False) -> int:
        """Add an ``EvtxRecord`` (its content as read, its record id kept or renumbered)."""
        return self.add_tree(record.tree(), record_id=record.record_id if keep_record_id else None, written_time=record.written_time)

    # -- chunks ----------------------------------------------------------------------------------
    def _add_values(self, shape: Shape, values: list[Value], record_id: int | None, written_time: int | None, id_slot: int | None) -> int:
        types = [value.value_type for value in values]
        raws = [value.raw for value in values]
        if written_time is None:
            written_time = _time_of(shape, values)
        return self._add(shape, types, raws, record_id, written_time, id_slot)

    def _add(self, shape: Shape, types: list[int], raws: list[bytes], record_id: int | None, written_time: int, id_slot: int | None) -> int:
        if self.full:
            raise InvalidArgument(f"the file is full ({self.max_chunks} chunks)")
        if record_id is None:
            record_id = self.next_record_id
        elif self._chunk.records and record_id <= self._chunk.last_id:
            raise InvalidArgument(f"record id {record_id} does not follow {self._chunk.last_id}")
        if id_slot is not None and id_slot < len(types) and types[id_slot] in (V.UINT64, V.HEX_INT64, V.NULL):
            raws[id_slot] = _pack("<Q", record_id)
        encoded = self._encode(self._chunk, shape, types, raws, record_id, written_time)
        if encoded is None:
            if not self._chunk.records:
                raise InvalidArgument(f"record {record_id} does not fit in a chunk")
            self._finish_chunk()
            if self.full:
                raise InvalidArgument(f"the file is full ({self.max_chunks} chunks)")
            encoded = self._encode(self._chunk, shape, types, raws, record_id, written_time)
            if encoded is None:
                raise InvalidArgument(f"record {record_id} does not fit in a chunk")
        self.next_record_id = record_id + 1
        self.records_written += 1
        return record_id

    def _encode(self, chunk: _Chunk, shape: Shape, types: list[int], raws: list[bytes], record_id: int, written_time: int) -> bool | None:
        start = chunk.position
        enc = _Encoder(chunk, start + L.RECORD_HEADER_SIZE)
        out = enc.out
        out += FRAGMENT_HEADER
        out.append(TOKEN_TEMPLATE_INSTANCE)
        out.append(1)
        known = chunk.templates.get(shape)
        new_template = None
        if known is not None:
            out += _u32(known[1]) + _u32(known[0])
        else:
            guid = _template_guid(shape)
            template_id = struct.unpack_from("<I", guid)[0]
            def_offset = enc.pos + 8
            bucket = template_id % L.TEMPLATE_BUCKETS
            out += _u32(template_id) + _u32(def_offset)
            out += _u32(chunk.template_table[bucket]) + guid
            size_at = len(out)
            out += b"\x00\x00\x00\x00"
            out += FRAGMENT_HEADER
            for element in shape:
                enc.element(element)
            out.append(TOKEN_EOF)
            struct.pack_into("<I", out, size_at, len(out) - size_at - 4)
            new_template = (def_offset, template_id, bucket)
        count = len(raws)
        out += _u32(count)
        out += struct.pack(f"<{count}I", *[len(raw) | value_type << 16 for raw, value_type in zip(raws, types, strict=False)])
        out += b"".join(raws)
        out.append(TOKEN_EOF)
        size = L.RECORD_HEADER_SIZE + len(out) + L.RECORD_TRAILER_SIZE
        padding = -size % 8
        size += padding
        if start + size >= L.CHUNK_SIZE:  # readers want free space after the last record
            return None
        body = chunk.body
        body += _RECORD_HEADER(L.RECORD_MAGIC, size, record_id, written_time)
        body += out
        body += bytes(padding)
        body += _u32(size)
        chunk.names.update(enc.new_names)
        chunk.string_table = enc.string_table
        if new_template is not None:
            def_offset, template_id, bucket = new_template
            chunk.templates[shape] = (def_offset, template_id)
            chunk.template_table[bucket] = def_offset
        if not chunk.records:
            chunk.first_id = record_id
        chunk.last_id = record_id
        chunk.last_record_offset = start
        chunk.records += 1
        return True

    def _finish_chunk(self) -> None:
        self.chunks.append(self._chunk.image())
        self.chunks_written += 1
        self._chunk = _Chunk()
        if self.max_chunks is not None and self.chunks_written >= self.max_chunks:
            self.full = True

    def take_chunks(self) -> list[bytes]:
        """The chunks finished since the last call (for a caller writing as it goes)."""
        taken, self.chunks = self.chunks, []
        self._taken += len(taken)
        return taken

    def finish(self) -> list[bytes]:
        """Close the last chunk; returns the chunks not yet taken. Call ``file_header`` after."""
        if self._chunk.records:
            self._finish_chunk()
        return self.take_chunks()

    def file_header(self, *, dirty: bool = False) -> bytes:
        """The 4 KiB file header for the chunks written so far (``dirty`` while still writing)."""
        count = self.chunks_written
        flags = (L.FILE_FLAG_DIRTY if dirty else 0) | (L.FILE_FLAG_FULL if self.full else 0)
        head = bytearray(
            L.FILE_HEADER.struct.pack(
                L.FILE_MAGIC, 0, max(0, count - 1), self.next_record_id, L.FILE_HEADER_FIELDS_SIZE, 1, 3,
                L.FILE_HEADER_SIZE, count & 0xFFFF, b"\x00" * 76, flags, 0,
            )
        )  # fmt: skip
        struct.pack_into("<I", head, L.FILE_CHECKSUM_OFFSET, L.file_header_checksum(head))
        return bytes(head) + bytes(L.FILE_HEADER_SIZE - len(head))

    def image(self) -> bytes:
        """The whole file: finish, then the header and every chunk (none may have been taken)."""
        if self._taken:
            raise InvalidArgument("chunks were taken already: write the header yourself")
        chunks = self.finish()
        return self.file_header() + b"".join(chunks)


def _record_id_slot(shape: Shape) -> int | None:
    """The value slot of ``Event/System/EventRecordID`` in a shape, if it is one value."""
    counter = 0
    found: int | None = None

    def walk(parts: Iterable[Shape], path: tuple[str, ...]) -> None:
        nonlocal counter, found
        for part in parts:
            if part[0] == "S":
                if path[-3:] == ("Event", "System", "EventRecordID") and found is None:
                    found = counter
                counter += 1
            elif part[0] == "E":
                for _, attribute_parts in part[2]:
                    walk(attribute_parts, (*path, part[1], "@"))
                walk(part[3], (*path, part[1]))

    walk(shape, ())
    return found


def _time_of(shape: Shape, values: list[Value]) -> int:
    """``TimeCreated/@SystemTime`` of an event (0 when it has none)."""
    for value in values:
        if value.value_type == V.FILETIME and len(value.raw) == 8:
            filetime: int = struct.unpack("<Q", value.raw)[0]
            return filetime
    return 0


def write_records(records: Iterable[Any], **options: Any) -> Iterator[bytes]:
    """File image pieces for ``EvtxRecord``s (header first): a convenience over ``EvtxWriter``."""
    writer = EvtxWriter(**options)
    for record in records:
        writer.add_record(record)
    chunks = writer.finish()
    yield writer.file_header()
    yield from chunks
