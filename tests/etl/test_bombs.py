"""Hostile files that are small on disk and huge in memory or output: compressed buffers that
expand to what they declare, and messages that ask for enormous widths. Each stays within a
stated bound and ends, when it must, in the project's own errors."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest

from openetw.consumer import UserTrace
from openetw.consumer._engine.index_walk import CHUNK_BYTES
from openetw.errors import EtlFormatError
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl import reader as reader_module
from openetw.etl.reader import TIME_ORDER_WINDOW_BYTES
from openetw.manifest import parse_manifest, validate
from openetw.manifest.messages import MAX_INSERT_WIDTH, MAX_MESSAGE_CHARS, TruncatedMessage
from openetw.manifest.messages import format_message as manifest_message
from openetw.tdh.format import format_message
from tests.conftest import corpus_path
from tests.manifest.samples import manifest

COMPRESSED_SAMPLE = ("perfview", "net.4.5.2.x64.etl")


def zeros_stream(count: int) -> bytes:
    """An LZXPRESS stream of a few bytes that inflates to ``count`` zero bytes: a literal and
    one match of distance 1 whose length is stored in the 32-bit form ([MS-XCA] 2.4)."""
    return b"\xff\xff\xff\x7f" + b"\x00" + struct.pack("<H", 7) + b"\x0f\xff\x00\x00" + struct.pack("<I", count - 1 - 3)


def bomb(path: Path, buffers: int, inflated: int) -> Path:
    """The sample's header buffer, then ``buffers`` compressed buffers that each declare (and
    really inflate to) ``inflated`` bytes."""
    template = corpus_path("etl", *COMPRESSED_SAMPLE).read_bytes()
    out = bytearray(template[: struct.unpack_from("<I", template, 0)[0]])
    stream = zeros_stream(inflated - L.BUFFER_HEADER_SIZE)
    size = -(-(L.BUFFER_HEADER_SIZE + len(stream)) // 8) * 8
    for n in range(buffers):
        head = bytearray(L.BUFFER_HEADER_SIZE)
        L.WMI_BUFFER_HEADER.pack_into(
            head, 0, size, size, 0, 0, 1000 + n, n + 1, 0, n % 8, 1, 3, inflated, L.BUFFER_FLAG_COMPRESSED, 0, bytes(16),
        )  # fmt: skip
        out += head + stream + bytes(size - L.BUFFER_HEADER_SIZE - len(stream))
    path.write_bytes(bytes(out))
    return path


def test_a_compressed_buffer_declaring_more_than_etw_allows_is_a_format_error(tmp_path: Path) -> None:
    path = bomb(tmp_path / "declares-64mb.etl", 64, 64 << 20)
    assert path.stat().st_size < 16 * 1024
    tracemalloc.start()
    try:
        with EtlReader(path, strict=False) as reader:
            records = list(reader.records(time_order=True))
            errors = reader.stats.errors
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(errors) == 64 and "out of range" in str(errors[0])
    assert all(r.kind != "unknown" or r.user_data_length < 1 << 20 for r in records)
    assert peak < 16 << 20
    with EtlReader(path) as reader, pytest.raises(EtlFormatError, match="at most ETW's"):
        list(reader.records(time_order=True))


def test_time_order_over_buffers_that_inflate_keeps_its_window_in_bytes(tmp_path: Path) -> None:
    # 64 buffers of 4 MB each: 256 MB if the window held them all (it used to hold 32 at least).
    path = bomb(tmp_path / "inflates.etl", 64, 4 << 20)
    tracemalloc.start()
    try:
        with EtlReader(path, strict=False, max_inflation=1 << 20) as reader:
            count = sum(1 for _ in reader.records(time_order=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count >= 64
    assert peak < TIME_ORDER_WINDOW_BYTES + 3 * (4 << 20)


def test_a_consumer_over_buffers_that_inflate_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "index"))
    monkeypatch.setattr(reader_module, "MAX_INFLATION", 1 << 20)  # (past the bound the reader refuses them)
    path = bomb(tmp_path / "inflates.etl", 128, 4 << 20)  # 512 MB inflated; the index reads it a chunk at a time
    tracemalloc.start()
    try:
        rows = sum(len(batch) for batch in UserTrace(files=[path], manifests=[]).batches(columns=["id"]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows >= 128
    assert peak < 5 * CHUNK_BYTES < 128 * (4 << 20)


@pytest.mark.parametrize("spec", ["999999999d", "-999999999x", ".999999999f", "99999999999999999999s", "1025.2000u"])
def test_insert_widths_are_clamped(spec: str) -> None:
    for formatted in (format_message(f"%1!{spec}!", [5]), manifest_message(f"%1!{spec}!", [5])):
        assert len(formatted) <= MAX_INSERT_WIDTH + 8


def test_a_message_longer_than_the_limit_is_cut_and_says_so() -> None:
    text = format_message("%1" * 99, ["x" * 1000] * 99)
    assert isinstance(text, TruncatedMessage) and text.cut == 99_000 - MAX_MESSAGE_CHARS
    assert len(text) < MAX_MESSAGE_CHARS + 64 and text.endswith("[message truncated]")
    assert not isinstance(format_message("%1 and %2", ["a", "b"]), TruncatedMessage)


def test_manifest_validate_warns_about_huge_widths() -> None:
    body = (
        '<templates><template tid="T"><data name="A" inType="win:UInt32"/></template></templates>'
        '<events><event value="1" template="T" message="$(string.Big)"/></events>'
    )
    strings = '<string id="Big" value="value %1!999999999d!"/>'
    result = parse_manifest(manifest(body, strings), "big.man")
    found = [(d.severity.value, d.code) for d in validate(result.manifest)]
    assert ("warning", "insert-width") in found
