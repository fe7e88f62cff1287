"""The service's compiled screen of producer buffers against the pure one: for buffers of
random records (clean ones and every kind of forgery, truncation and framing damage), random
bytes, classic producers and secured GUIDs, the same buffer out, the same counts, the same
reasons, and the same threads looked up."""

from __future__ import annotations

import os
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.etl import layouts as L
from openetw.service.screen import ProducerIdentity, ThreadCheck, screen_buffer, screen_buffer_python

needs_native = pytest.mark.skipif(
    native.module("_write") is None and os.environ.get("CI") != "true", reason=f"compiled write side not active here: {native.reason()}"
)
MINE = uuid.UUID("11111111-2222-4333-8444-555555555555")
SECURED = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")
OTHER = uuid.UUID(int=5)
PID = 4242
BUFFER = 4096

RECORDS = st.fixed_dictionaries(
    {
        "pid": st.sampled_from([PID, PID, PID, PID + 9]),
        "tid": st.sampled_from([PID, PID + 1, PID + 2, 77]),
        "guid": st.sampled_from([MINE, MINE, MINE, SECURED, OTHER]),
        "header_type": st.sampled_from([L.HEADER_TYPE_EVENT_HEADER64] * 6 + [L.HEADER_TYPE_EVENT_HEADER32, 0x0A, 0x14, 0x01, 0x02]),
        "marker": st.sampled_from([L.MARKER_FLAGS_TYPED] * 8 + [0x80]),
        "data": st.binary(max_size=40),
        "size_delta": st.sampled_from([0] * 10 + [-1, -60, 9, 4000]),
    }
)


def record(pid: int, tid: int, guid: uuid.UUID, header_type: int, marker: int, data: bytes, size_delta: int) -> bytes:
    total = L.EVENT_HEADER.size + len(data)
    head = L.EVENT_HEADER.pack(
        max(0, min(0xFFFF, total + size_delta)), header_type, marker, 0, 0, tid, pid, 1, guid.bytes_le, 7, 0, 0, 4, 0, 0, 0, 0, bytes(16),
    )  # fmt: skip
    raw = head + data
    return raw + bytes(-len(raw) % 8)


def screened(function, data: bytes | bytearray, identity: ProducerIdentity) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    looked_up: list[int] = []

    def lookup(tid: int, pid: int) -> bool:
        looked_up.append(tid)
        return tid in (PID, PID + 1) or (tid == 77 and len(looked_up) > 3)

    check = ThreadCheck(PID, lookup=lookup)
    result = function(data, identity, check)
    return bytes(result.data), result.kept, result.rejected, result.reasons, looked_up, sorted(check.known)


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(RECORDS, max_size=40),
    classic=st.booleans(),
    secured=st.booleans(),
    cut=st.integers(0, 64),
    tail=st.binary(max_size=24),
)
def test_the_compiled_screen_answers_as_the_pure_one(records: list[dict[str, object]], classic: bool, secured: bool, cut: int, tail: bytes) -> None:
    body = b"".join(record(**one) for one in records) + tail  # type: ignore[arg-type]
    body = body[: max(0, min(len(body), BUFFER - L.BUFFER_HEADER_SIZE) - cut)]
    data = bytearray(L.BUFFER_HEADER_SIZE) + body + b"\xff" * (BUFFER - L.BUFFER_HEADER_SIZE - len(body))
    struct.pack_into("<I", data, L.WMI_BUFFER_HEADER.offset("Offset"), L.BUFFER_HEADER_SIZE + len(body))
    identity = ProducerIdentity(PID, frozenset({MINE.bytes_le}), classic, frozenset({SECURED.bytes_le}) if secured else frozenset())
    assert screened(screen_buffer, bytes(data), identity) == screened(screen_buffer_python, bytes(data), identity)


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=BUFFER - L.BUFFER_HEADER_SIZE), st.integers(0, BUFFER + 64))
def test_any_bytes_screen_alike(body: bytes, offset: int) -> None:
    data = bytearray(L.BUFFER_HEADER_SIZE) + body + bytes(BUFFER - L.BUFFER_HEADER_SIZE - len(body))
    struct.pack_into("<I", data, L.WMI_BUFFER_HEADER.offset("Offset"), offset)
    identity = ProducerIdentity(PID, frozenset({MINE.bytes_le}), True)
    assert screened(screen_buffer, data, identity) == screened(screen_buffer_python, data, identity)
