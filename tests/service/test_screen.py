"""The per-record check of producer buffers, with plain bytes."""

from __future__ import annotations

import struct
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.etl import layouts as L
from openetw.service.screen import ProducerIdentity, ScreenResult, ThreadCheck, screen_buffer, thread_of_process
from openetw.service.sessions import count_typed_records

MINE = uuid.UUID("11111111-2222-4333-8444-555555555555")
SECURITY = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")
PID = 4242
BUFFER = 4096


def record(*, pid: int = PID, tid: int = PID, guid: uuid.UUID = MINE, header_type: int = L.HEADER_TYPE_EVENT_HEADER64,
           data: bytes = b"abcd", size: int | None = None, marker: int = L.MARKER_FLAGS_TYPED) -> bytes:  # fmt: skip
    total = L.EVENT_HEADER.size + len(data)
    head = L.EVENT_HEADER.pack(
        total if size is None else size, header_type, marker, L.EVENT_HEADER_FLAG_64_BIT_HEADER, 0, tid, pid, 1, guid.bytes_le,
        7, 0, 0, 4, 0, 0, 0, 0, bytes(16),
    )  # fmt: skip
    raw = head + data
    return raw + bytes(-len(raw) % 8)


def buffer(*records: bytes) -> bytearray:
    out = bytearray(L.BUFFER_HEADER_SIZE)
    for one in records:
        out += one
    used = len(out)
    out += b"\xff" * (BUFFER - used)
    struct.pack_into("<I", out, L.WMI_BUFFER_HEADER.offset("Offset"), used)
    return out


IDENTITY = ProducerIdentity(PID, frozenset({MINE.bytes_le}))


def screen(data: bytearray, identity: ProducerIdentity = IDENTITY) -> ScreenResult:
    return screen_buffer(data, identity, ThreadCheck(PID, lookup=lambda tid, pid: tid in (PID, PID + 1)))


def test_a_clean_buffer_passes_as_it_is() -> None:
    data = buffer(record(), record(tid=PID + 1), record(data=b"x" * 13))
    result = screen(data)
    assert (result.kept, result.rejected) == (3, 0)
    assert result.data is data


def test_forged_records_are_dropped_and_their_neighbours_kept_in_order() -> None:
    good = [record(data=bytes([n]) * 8) for n in range(3)]
    data = buffer(good[0], record(pid=1), good[1], record(guid=SECURITY), record(tid=1), good[2])
    result = screen(data)
    assert (result.kept, result.rejected) == (3, 3)
    assert bytes(result.data[: L.BUFFER_HEADER_SIZE + 3 * len(good[0])])[L.BUFFER_HEADER_SIZE :] == b"".join(good)
    assert count_typed_records(bytes(result.data)) == 3
    assert len(result.data) == BUFFER
    assert any("process id 1" in reason for reason in result.reasons)


def test_a_record_whose_size_lies_ends_the_buffer_there() -> None:
    data = buffer(record(), record(size=3000), record())
    result = screen(data)
    assert (result.kept, result.rejected) == (1, 1)
    assert count_typed_records(bytes(result.data)) == 1


def test_header_types_a_producer_may_not_write() -> None:
    for bad in (record(header_type=L.HEADER_TYPE_SYSTEM64), record(marker=0x80), record(header_type=L.HEADER_TYPE_FULL_HEADER64)):
        assert screen(buffer(record(), bad)).rejected == 1
    classic = ProducerIdentity(PID, frozenset({MINE.bytes_le}), classic=True, secured=frozenset({SECURITY.bytes_le}))
    assert screen(buffer(record(header_type=L.HEADER_TYPE_FULL_HEADER64, guid=uuid.uuid4())), classic).rejected == 0
    assert screen(buffer(record(header_type=L.HEADER_TYPE_FULL_HEADER64, guid=SECURITY)), classic).rejected == 1


def test_a_thread_of_another_process_is_refused_and_an_ended_one_is_not() -> None:
    import os

    assert thread_of_process(os.getpid(), os.getpid())
    assert not thread_of_process(1, os.getpid())  # init's thread is not ours
    assert thread_of_process(0x7FFFFFF0, os.getpid())  # no such thread (any more)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=BUFFER - L.BUFFER_HEADER_SIZE), st.integers(0, BUFFER + 64))
def test_any_bytes_screen_to_a_buffer_of_whole_records(body: bytes, offset: int) -> None:
    data = bytearray(L.BUFFER_HEADER_SIZE) + body + bytes(BUFFER - L.BUFFER_HEADER_SIZE - len(body))
    struct.pack_into("<I", data, L.WMI_BUFFER_HEADER.offset("Offset"), offset)
    result = screen(data)
    assert len(result.data) == BUFFER
    assert count_typed_records(bytes(result.data)) >= result.kept
