"""The per-event paths made cheap give what the general ones give: stacks copied as written,
compressed headers read in line, rows of versions 1-3 read with locals."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import astuple

import pytest

from openetw.errors import NettraceFormatError
from openetw.nettrace.container import TraceInfo
from openetw.nettrace.cursor import Cursor
from openetw.nettrace.events import EventHeader, iter_headers, stack_addresses
from openetw.nettrace.metadata import EventMetadata
from openetw.nettrace.reader import NettraceEvent
from openetw.nettrace.records import RecordBuilder
from tests.nettrace.v6_file import varuint

ACTIVITY = bytes(range(16))


def _bytes(record) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(record._raw[record._pos : record._pos + record._size])


@pytest.mark.parametrize("pointer_size", [4, 8])
@pytest.mark.parametrize("frames", [1, 3, 4])
@pytest.mark.parametrize("name", ["Microsoft-Windows-DotNETRuntime", "MyCompany-Thing"])  # no extended items / TraceLogging items first
def test_a_stack_copied_as_written_is_the_stack_item_built_from_addresses(pointer_size: int, frames: int, name: str) -> None:
    builder = RecordBuilder(TraceInfo(version=2, sync_time_filetime=0, sync_qpc=0, qpc_frequency=1000, pointer_size=pointer_size))
    meta = EventMetadata(1, name, 7, "Thing", version=1)
    code = "Q" if pointer_size == 8 else "I"
    raw = struct.pack(f"<{frames}{code}", *range(0x1000, 0x1000 + frames))
    for related in (bytes(16), ACTIVITY):
        header = EventHeader(metadata_id=1, thread_id=5, timestamp=10, related_activity_id=related)
        fast = NettraceEvent(header, meta, b"payload", None, 1, raw, pointer_size)
        general = NettraceEvent(header, meta, b"payload", stack_addresses(raw, pointer_size), 1)
        assert fast.stack == general.stack == tuple(range(0x1000, 0x1000 + frames))
        ours, theirs = builder.record(fast), builder.record(general)
        assert _bytes(ours) == _bytes(theirs) and ours._h == theirs._h
        assert ours.stack is not None and ours.stack.addresses == general.stack


def _compressed_reference(cur: Cursor) -> Iterator[EventHeader]:
    """Compressed rows read field by field through the Cursor (the format as written down)."""
    cur.i16("header size")
    cur.i16("block flags")
    cur.skip(16, "block header")
    cur.structure = "event header"
    previous = EventHeader()
    while cur.remaining > 0:
        header = previous.copy()
        header.offset = cur.offset
        flags = cur.u8("header flags")
        if flags & 1:
            header.metadata_id = cur.varuint("metadata id", 32)
        if flags & 2:
            header.sequence = (header.sequence + cur.varuint("sequence number", 32) + 1) & 0xFFFFFFFF
            header.capture_thread_id = cur.varuint("capture thread id", 64)
            header.processor = cur.varuint("processor number", 32)
        elif header.metadata_id != 0:
            header.sequence = (header.sequence + 1) & 0xFFFFFFFF
        if flags & 4:
            header.thread_id = cur.varuint("thread id", 64)
        if flags & 8:
            header.stack_id = cur.varuint("stack id", 32)
        header.timestamp = (header.timestamp + cur.varuint("timestamp delta", 64)) & 0xFFFFFFFFFFFFFFFF
        if flags & 16:
            header.activity_id = cur.take(16, "activity id")
        if flags & 32:
            header.related_activity_id = cur.take(16, "related activity id")
        header.sorted = bool(flags & 64)
        if flags & 128:
            header.payload_size = cur.varuint("payload size", 32)
        header.payload_start = cur.pos
        cur.skip(header.payload_size, "event payload")
        previous = header
        yield header


def _compressed_block(rng: random.Random, rows: int) -> bytes:
    body = bytearray()
    for _ in range(rows):
        flags = rng.randrange(256)
        body.append(flags)
        for bit, bits in ((1, 20), (2, 20), (2, 40), (2, 6), (4, 40), (8, 10)):
            if flags & bit:
                body += varuint(rng.getrandbits(rng.choice((3, bits))))
        body += varuint(rng.getrandbits(rng.choice((5, 30))))
        body += ACTIVITY * (bool(flags & 16) + bool(flags & 32))
        size = rng.randrange(40)
        if flags & 128:
            body += varuint(size)
            body += bytes(size)
    return struct.pack("<hh", 20, 1) + bytes(16) + bytes(body)


def _outcome(read, data: bytes):  # type: ignore[no-untyped-def]
    """The rows ``read`` gives (every field), and the error it ends with."""
    rows: list[tuple[object, ...]] = []
    cur = Cursor(data, 0, len(data), base=100, block=3, structure="EventBlock")
    try:
        for header in read(cur):
            rows.append(astuple(header))
    except NettraceFormatError as exc:
        return rows, (str(exc), exc.offset, exc.block, exc.structure)
    return rows, None


def test_compressed_headers_read_in_line_match_the_field_by_field_reading() -> None:
    rng = random.Random(20)
    errors = 0
    for case in range(400):
        data = _compressed_block(rng, rng.randrange(1, 12))
        if case % 2:
            data = data[: rng.randrange(21, len(data) + 1)]  # cut anywhere: the same rows, then the same error
        ours = _outcome(lambda cur: iter_headers(cur, 4), data)
        assert ours == _outcome(_compressed_reference, data), case
        errors += ours[1] is not None
    assert errors > 50


def test_rows_of_version_2_keep_their_inline_stacks_and_errors() -> None:
    rows, offsets = bytearray(), []
    for index, stack in enumerate((b"", struct.pack("<2Q", 1, 2), struct.pack("<Q", 3) + b"xy")):
        payload = bytes(range(index + 1))
        body = struct.pack("<iiq16s16si", 1, 7 + index, 100 + index, ACTIVITY, bytes(16), len(payload)) + payload + struct.pack("<i", len(stack)) + stack
        offsets.append(100 + len(rows))
        rows += struct.pack("<i", len(body)) + body
    good = bytes(rows)
    got, error = _outcome(lambda cur: iter_headers(cur, 2), good)
    assert error is None and [row[13] for row in got] == [b"", struct.pack("<2Q", 1, 2), struct.pack("<Q", 3) + b"xy"]
    assert [row[0] for row in got] == offsets and [row[12] for row in got] == [1, 2, 3]  # offsets, payload sizes
    got, error = _outcome(lambda cur: iter_headers(cur, 2), good + struct.pack("<i", 1000) + bytes(56))
    assert len(got) == 3 and error is not None and error[0].endswith("event size 1000") and error[1] == 100 + len(good)
    got, error = _outcome(lambda cur: iter_headers(cur, 2), good + bytes(10))
    assert len(got) == 3 and error is not None and "event header: 56 bytes needed, 10 left" in error[0]
