"""A small NetTrace version 6 stream, written here from the format's description (no corpus file
of version 6 exists yet): two threads, one metadata row with an int, a string, an array and a
date, a label list with an activity id, a stack, compressed and uncompressed event blocks."""

from __future__ import annotations

import struct
import uuid

ACTIVITY = uuid.UUID("11111111-2222-3333-4444-555555555555")
PROVIDER_GUID = uuid.UUID("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
SYNC_QPC, FREQUENCY = 1_000_000, 10_000_000


def varuint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return varuint(len(raw)) + raw


def block(kind: int, body: bytes) -> bytes:
    return struct.pack("<I", len(body) | kind << 24) + body


def field(name: str, type_bytes: bytes) -> bytes:
    body = text(name) + type_bytes
    return struct.pack("<H", len(body)) + body


def metadata_row(metadata_id: int, provider: str, event_id: int, name: str, fields: list[bytes], options: bytes) -> bytes:
    body = varuint(metadata_id) + text(provider) + varuint(event_id) + text(name)
    body += struct.pack("<H", len(fields)) + b"".join(fields) + struct.pack("<H", len(options)) + options
    return struct.pack("<H", len(body)) + body


def payload(count: int, message: str, values: list[int]) -> bytes:
    date = struct.pack("<8h", 2025, 3, 1, 4, 5, 6, 7, 8)  # SYSTEMTIME
    return struct.pack("<i", count) + (message + "\0").encode("utf-16-le") + struct.pack(f"<H{len(values)}H", len(values), *values) + date


def compressed_event(flags: int, *parts: bytes) -> bytes:
    return bytes((flags,)) + b"".join(parts)


def stream() -> bytes:
    out = bytearray(b"Nettrace" + struct.pack("<III", 0, 6, 0))
    trace = struct.pack("<8h", 2025, 3, 6, 7, 8, 9, 10, 11) + struct.pack("<qqi", SYNC_QPC, FREQUENCY, 8)
    trace += struct.pack("<i", 2) + text("ProcessId") + text("4321") + text("HardwareThreadCount") + text("16")
    out += block(1, trace)
    threads = b""
    for index, tid in ((1, 1001), (2, 1002)):
        row = varuint(index) + b"\x02" + varuint(777) + b"\x03" + varuint(tid) + b"\x01" + text(f"worker {index}")
        threads += struct.pack("<H", len(row)) + row
    out += block(6, threads)
    fields = [field("count", b"\x09"), field("message", b"\x12"), field("values", b"\x13\x08"), field("when", b"\x10")]
    options = b"\x01\x01" + b"\x08\x04" + b"\x09\x02" + b"\x03" + struct.pack("<Q", 0xF0) + b"\x07" + PROVIDER_GUID.bytes_le
    unknown = [field("big", b"\x15")]  # a varuint field: no TraceLogging type
    metadata = struct.pack("<H", 0)
    metadata += metadata_row(1, "My.V6Source", 7, "HelloStart", fields, options) + metadata_row(2, "My.V6Source", 8, "Odd", unknown, b"")
    out += block(3, metadata)
    out += block(8, struct.pack("<II", 1, 1) + b"\x81" + ACTIVITY.bytes_le)
    out += block(5, struct.pack("<IIIQQ", 1, 1, 16, 0x7FF000001000, 0x7FF000002000))
    rows = b""
    first = payload(1, "one", [1, 2, 3])
    rows += compressed_event(1 | 2 | 4 | 8 | 16 | 64 | 128, varuint(1), varuint(0), varuint(1), varuint(3), varuint(1), varuint(1),
                             varuint(SYNC_QPC + 100), varuint(1), varuint(len(first)), first)  # fmt: skip
    second = payload(2, "two", [])
    rows += compressed_event(4 | 8 | 128, varuint(2), varuint(0), varuint(50), varuint(len(second)), second)
    odd = varuint(300)
    rows += compressed_event(1 | 128, varuint(2), varuint(25), varuint(len(odd)), odd)
    out += block(2, struct.pack("<hhqq", 20, 1, SYNC_QPC, SYNC_QPC + 200) + rows)
    third = payload(3, "three", [9])
    row = struct.pack("<IIQQIIQII", 1, 4, 1, 1, 5, 0, SYNC_QPC + 300, 0, len(third)) + third
    out += block(2, struct.pack("<hhqq", 20, 0, SYNC_QPC, SYNC_QPC + 300) + struct.pack("<I", len(row)) + row)
    out += block(4, struct.pack("<QII", SYNC_QPC + 400, 0, 1) + varuint(1) + varuint(4))
    out += block(0, b"")
    return bytes(out)
