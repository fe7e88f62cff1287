"""A damaged BufferSize costs at most its own buffer: the lenient reader resynchronises.

An uncompressed file's buffers all have the logfile's BufferSize, so a buffer that says another
size is framed at that stride (its records kept); in a compressed file reading goes on at the next
header that frames a buffer which inflates. For three corpus files, a copy per damaged buffer
(its BufferSize doubled, made too small, or a few bytes too long) must keep every other buffer's data and records, and
report the damage once, in both engines (the compiled core and the pure-Python reference).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

import openetw._native as native
from openetw.etl import EtlReader
from openetw.testing.fuzz import pure_engine
from tests.conftest import corpus_path

FILES = {
    "compressed": ("perfview", "net.4.5.2.x64.etl"),
    "compressed-small": ("perfview", "SelfDescribingSingleEvent.etl"),
    "uncompressed": ("tx", "Process.etl"),
}
# Copies per file: every buffer where reading is fast, a spread sample where it is not.
STREAM = "LZXPRESS stream"
SAMPLES = {"native": 12, "pure": 3}


@contextlib.contextmanager
def engine(name: str) -> Iterator[None]:
    if name == "native":
        if native.module("_read") is None:
            if os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
                pytest.fail(f"the compiled core must be active under CI: {native.reason()}")
            pytest.skip(f"compiled core not active: {native.reason()}")
        yield
        return
    with pure_engine():
        yield


def _read(data: bytes) -> tuple[dict[int, bytes], dict[int, list[bytes]], EtlReader]:
    """Each buffer's data (inflated) and records, by file offset, from a lenient read."""
    buffers: dict[int, bytes] = {}
    records: dict[int, list[bytes]] = {}
    with EtlReader(data, strict=False) as lenient:
        for info, content in lenient.buffers():
            buffers[info.file_offset] = content
            records[info.file_offset] = [bytes(record.raw) for record in lenient._walk(info, content)]
    return buffers, records, lenient


@pytest.mark.parametrize("engine_name", ["native", "pure"])
@pytest.mark.parametrize("shape", list(FILES))
def test_one_damaged_buffer_size_loses_nothing_outside_its_buffer(shape: str, engine_name: str) -> None:
    path: Path = corpus_path("etl", *FILES[shape])
    data = path.read_bytes()
    with engine(engine_name):
        buffers, records, intact = _read(data)
        assert not intact.stats.errors
        offsets = sorted(buffers)[1:]  # the data buffers (the header buffer's damage is fatal)
        step = max(1, len(offsets) // SAMPLES[engine_name])
        compressed = intact.header.compressed
        for number, offset in enumerate(offsets[::step]):
            size = struct.unpack_from("<I", data, offset)[0]
            # doubled; too small; a few bytes too long (a compressed stream may end before its
            # buffer: that buffer still inflates and the next is found just before the bad end)
            wrong = (size * 2, size // 2 if compressed else 0x48, size + (1 if compressed else 8))[number % 3]
            damaged = bytearray(data)
            struct.pack_into("<I", damaged, offset, wrong)
            got_buffers, got_records, lenient = _read(bytes(damaged))
            where = f"{shape}: BufferSize of the buffer at {offset:#x} made {wrong:#x}"
            assert [error.structure for error in lenient.stats.errors][:1] in (["WMI_BUFFER_HEADER.BufferSize"], [STREAM], ["compressed buffer"]), where
            assert len(lenient.stats.errors) == 1, (where, lenient.stats.errors)
            others = [at for at in offsets if at != offset]
            assert {at: got_buffers.get(at) for at in others} == {at: buffers[at] for at in others}, where
            assert {at: got_records.get(at) for at in others} == {at: records[at] for at in others}, where
            if compressed and wrong == size + 1:
                assert got_records[offset] == records[offset], where
            elif compressed:
                assert not got_records.get(offset), where  # (its header alone is kept)
                assert lenient.stats.skipped_bytes == size, where  # exactly the damaged buffer
            else:
                assert got_records[offset] == records[offset], where  # framed at the stride: kept
                assert lenient.stats.skipped_bytes == 0, where
