"""The EVTX binary layouts, declared once and used by the reader and the writer.

A file is a 4 KiB header followed by 64 KiB chunks. Each chunk starts with a 512-byte header
(a 128-byte fixed part, then a table of 64 string offsets and 32 template offsets) followed by
event records; each record is a 24-byte header, a BinXml fragment and a copy of its size.
Field names follow the format's (MS-EVEN6 and the public notes on it); offsets are in bytes.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, NamedTuple

FILE_MAGIC = b"ElfFile\x00"
CHUNK_MAGIC = b"ElfChnk\x00"
RECORD_MAGIC = b"**\x00\x00"

FILE_HEADER_SIZE = 0x1000  # the header block; only its first 128 bytes carry fields
FILE_HEADER_FIELDS_SIZE = 128
CHUNK_SIZE = 0x10000
CHUNK_HEADER_SIZE = 0x200
CHUNK_HEADER_FIELDS_SIZE = 128
RECORD_HEADER_SIZE = 24
RECORD_TRAILER_SIZE = 4
MIN_RECORD_SIZE = RECORD_HEADER_SIZE + RECORD_TRAILER_SIZE
STRING_BUCKETS = 64
TEMPLATE_BUCKETS = 32

# File header flags.
FILE_FLAG_DIRTY = 0x1
FILE_FLAG_FULL = 0x2
FILE_FLAG_NO_CRC32 = 0x4

# Chunk header flags.
CHUNK_FLAG_DIRTY = 0x1
CHUNK_FLAG_NO_CRC32 = 0x4


class Layout(NamedTuple):
    """A fixed structure: its name, ``struct`` format and field names in order."""

    name: str
    struct: struct.Struct
    fields: tuple[str, ...]

    def unpack_from(self, data: Any, offset: int = 0) -> dict[str, Any]:
        return dict(zip(self.fields, self.struct.unpack_from(data, offset), strict=False))

    def pack(self, **values: Any) -> bytes:
        return self.struct.pack(*(values.get(name, 0) for name in self.fields))

    @property
    def size(self) -> int:
        return self.struct.size


def _layout(name: str, spec: list[tuple[str, str]]) -> Layout:
    return Layout(name, struct.Struct("<" + "".join(code for _, code in spec)), tuple(field for field, _ in spec))


FILE_HEADER = _layout(
    "file header",
    [
        ("Signature", "8s"),
        ("FirstChunkNumber", "Q"),
        ("LastChunkNumber", "Q"),
        ("NextRecordIdentifier", "Q"),
        ("HeaderSize", "I"),
        ("MinorVersion", "H"),
        ("MajorVersion", "H"),
        ("HeaderBlockSize", "H"),
        ("NumberOfChunks", "H"),
        ("Unknown", "76s"),
        ("FileFlags", "I"),
        ("Checksum", "I"),
    ],
)
assert FILE_HEADER.size == FILE_HEADER_FIELDS_SIZE

CHUNK_HEADER = _layout(
    "chunk header",
    [
        ("Signature", "8s"),
        ("FirstEventRecordNumber", "Q"),
        ("LastEventRecordNumber", "Q"),
        ("FirstEventRecordIdentifier", "Q"),
        ("LastEventRecordIdentifier", "Q"),
        ("HeaderSize", "I"),
        ("LastEventRecordDataOffset", "I"),
        ("FreeSpaceOffset", "I"),
        ("EventRecordsChecksum", "I"),
        ("Unknown", "64s"),
        ("Flags", "I"),
        ("Checksum", "I"),
    ],
)
assert CHUNK_HEADER.size == CHUNK_HEADER_FIELDS_SIZE

RECORD_HEADER = _layout(
    "event record",
    [("Signature", "4s"), ("Size", "I"), ("EventRecordIdentifier", "Q"), ("WrittenTime", "Q")],
)
assert RECORD_HEADER.size == RECORD_HEADER_SIZE

# Offsets used on hot paths.
FILE_CHECKSUM_OFFSET = 124
FILE_FLAGS_OFFSET = 120
CHUNK_FLAGS_OFFSET = 120
CHUNK_CHECKSUM_OFFSET = 124
CHUNK_RECORDS_CHECKSUM_OFFSET = 52
STRING_TABLE_OFFSET = 128
TEMPLATE_TABLE_OFFSET = 384


def file_header_checksum(header: bytes | bytearray | memoryview) -> int:
    """CRC32 of the file header's first 120 bytes."""
    return zlib.crc32(header[:FILE_FLAGS_OFFSET])


def chunk_header_checksum(chunk: bytes | bytearray | memoryview) -> int:
    """CRC32 of the chunk header's first 120 bytes and of bytes 128 to 512 (the offset tables)."""
    crc = zlib.crc32(chunk[:CHUNK_FLAGS_OFFSET])
    return zlib.crc32(chunk[CHUNK_HEADER_FIELDS_SIZE:CHUNK_HEADER_SIZE], crc)


def chunk_records_checksum(chunk: bytes | bytearray | memoryview, free_space_offset: int) -> int:
    """CRC32 of the event records: bytes 512 up to the free-space offset."""
    return zlib.crc32(chunk[CHUNK_HEADER_SIZE:free_space_offset])


def name_hash(name: str) -> int:
    """The 16-bit hash BinXml keeps beside each name (MS-EVEN6): ``h = h * 65599 + unit`` over UTF-16 units."""
    encoded = name.encode("utf-16-le")
    units = struct.unpack(f"<{len(encoded) // 2}H", encoded)
    value = 0
    for unit in units:
        value = (value * 65599 + unit) & 0xFFFFFFFF
    return value & 0xFFFF
