"""Hostile ``.evtx`` files built for the tests: a template bomb among good records.

The bomb is one record whose template renders its only value, a BinXml value, four times; that
value is an instance of the same template whose value is another such instance, ``depth``
levels down: parsing it is linear, rendering it is ``4 ** (depth + 1)`` template expansions.
"""

from __future__ import annotations

import struct

from openetw.evtx import EvtxWriter
from openetw.evtx import layout as L
from openetw.evtx import values as V
from openetw.evtx.render import Value, XmlNode

TEMPLATE_GUID = bytes(range(0x40, 0x50))
FANOUT = 4


def _name(text: str) -> bytes:
    """A name stored inline: next offset, hash, length, UTF-16 text and its terminator."""
    return struct.pack("<IHH", 0, L.name_hash(text), len(text)) + text.encode("utf-16-le") + b"\x00\x00"


def _template_body(at: int) -> bytes:
    """``<Bomb>`` holding value 0 (BinXml) ``FANOUT`` times; ``at`` is its chunk offset."""
    name = _name("Bomb")
    content = b"\x02" + (b"\x0d" + struct.pack("<HB", 0, V.BINXML)) * FANOUT + b"\x04"
    element = b"\x01" + struct.pack("<HII", 0xFFFF, len(name) + len(content), at + 4 + 11) + name + content
    return b"\x0f\x01\x01\x00" + element + b"\x00"


def _values(value: bytes) -> bytes:
    kind = V.BINXML if value else V.NULL
    return struct.pack("<I", 1) + struct.pack("<HBx", len(value), kind) + value


def _nested(value: bytes, definition: int) -> bytes:
    """A BinXml value: an instance of the template defined at ``definition`` holding ``value``."""
    template_id = struct.unpack_from("<I", TEMPLATE_GUID)[0]
    return b"\x0f\x01\x01\x00\x0c\x01" + struct.pack("<II", template_id, definition) + _values(value) + b"\x00"


def bomb_binxml(at: int, depth: int) -> bytes:
    """The bomb's BinXml at chunk offset ``at``: the template defined inline by the outer
    instance, ``depth`` levels of instances nested as its value."""
    template_id = struct.unpack_from("<I", TEMPLATE_GUID)[0]
    definition = at + 4 + 10
    body = _template_body(definition + 24)
    inner = b""
    for _ in range(depth):
        inner = _nested(inner, definition)
    head = b"\x0f\x01\x01\x00\x0c\x01" + struct.pack("<II", template_id, definition)
    return head + struct.pack("<I16sI", 0, TEMPLATE_GUID, len(body)) + body + _values(inner) + b"\x00"


def _good_tree(number: int) -> list[XmlNode]:
    system = XmlNode("System", {}, [
        XmlNode("Provider", {"Name": ["Good"]}),
        XmlNode("EventID", {}, [Value(V.UINT16, number.to_bytes(2, "little"))]),
    ])  # fmt: skip
    data = XmlNode("EventData", {}, [XmlNode("Data", {"Name": ["N"]}, [Value(V.UINT32, number.to_bytes(4, "little"))])])
    return [XmlNode("Event", {}, [system, data])]


def template_bomb_file(depth: int = 14, good_before: int = 3, good_after: int = 2) -> bytes:
    """A one-chunk ``.evtx`` (69,632 bytes): ``good_before`` good records, the bomb, then
    ``good_after`` good records (copies of the last good one, renumbered)."""
    writer = EvtxWriter()
    for number in range(1, good_before + 1):
        writer.add_tree(_good_tree(number), written_time=132_000_000_000_000_000 + number)
    (chunk_bytes,) = list(writer.finish())
    chunk = bytearray(chunk_bytes)
    header = L.CHUNK_HEADER.unpack_from(chunk)
    free = header["FreeSpaceOffset"]
    last_good = header["LastEventRecordDataOffset"]
    good_size = struct.unpack_from("<I", chunk, last_good + 4)[0]
    good = bytes(chunk[last_good : last_good + good_size])
    record_id = header["LastEventRecordIdentifier"]

    def append(record: bytes) -> None:
        nonlocal free
        chunk[free : free + len(record)] = record
        free += len(record)

    record_id += 1
    binxml = bomb_binxml(free + L.RECORD_HEADER_SIZE, depth)
    size = L.RECORD_HEADER_SIZE + len(binxml) + 4
    bomb_at = free
    record_header = L.RECORD_HEADER.pack(Signature=L.RECORD_MAGIC, Size=size, EventRecordIdentifier=record_id, WrittenTime=132_000_000_000_000_100)
    append(record_header + binxml + struct.pack("<I", size))
    last = bomb_at
    for _ in range(good_after):
        record_id += 1
        last = free
        append(good[:8] + struct.pack("<Q", record_id) + good[16:])
    struct.pack_into("<Q", chunk, 16, record_id)  # the last record number and id
    struct.pack_into("<Q", chunk, 32, record_id)
    struct.pack_into("<II", chunk, 44, last, free)
    struct.pack_into("<I", chunk, L.CHUNK_RECORDS_CHECKSUM_OFFSET, L.chunk_records_checksum(chunk, free))
    struct.pack_into("<I", chunk, L.CHUNK_CHECKSUM_OFFSET, L.chunk_header_checksum(chunk))
    file_header = bytearray(writer.file_header())
    struct.pack_into("<Q", file_header, 24, record_id + 1)
    struct.pack_into("<I", file_header, L.FILE_CHECKSUM_OFFSET, L.file_header_checksum(file_header[: L.FILE_HEADER_FIELDS_SIZE]))
    return bytes(file_header) + bytes(chunk)
