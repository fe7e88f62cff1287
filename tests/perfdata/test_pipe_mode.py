"""Pipe mode (``perf record -o -``): attributes, tracing data and features come as records
among the samples, and the file reads as the same events."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from openetw.consumer.perfdata_source import PerfDataSource
from openetw.perfdata import layout as P
from openetw.perfdata.reader import PerfData
from tests.conftest import corpus_path


def _record(kind: int, body: bytes) -> bytes:
    return struct.pack("<IHH", kind, 0, 8 + len(body)) + body


def as_pipe(data: bytes) -> bytes:
    """The same trace as ``perf record -o -`` would have streamed it."""
    attr_size = struct.unpack_from("<Q", data, 16)[0]
    attrs_offset, attrs_size, data_offset, data_size = struct.unpack_from("<QQQQ", data, 24)
    perf = PerfData(data)
    out = bytearray(P.MAGIC + struct.pack("<Q", P.PIPE_HEADER_SIZE))
    for index in range(attrs_size // attr_size):
        at = attrs_offset + index * attr_size
        ids_offset, ids_size = struct.unpack_from("<QQ", data, at + attr_size - 16)
        out += _record(P.RECORD_HEADER_ATTR, data[at : at + attr_size - 16] + data[ids_offset : ids_offset + ids_size])
    for feature in (P.FEATURE_HOSTNAME, P.FEATURE_NRCPUS, P.FEATURE_CLOCK_DATA):
        offset, size = perf.features[feature]
        body = struct.pack("<Q", feature) + data[offset : offset + size]
        out += _record(P.RECORD_HEADER_FEATURE, body + bytes(-len(body) % 8))
    offset, size = perf.features[P.FEATURE_TRACING_DATA]
    out += (
        _record(P.RECORD_HEADER_TRACING_DATA, struct.pack("<I4x", size))
        + data[offset : offset + size]
        + bytes(-size % 8)
    )
    out += data[data_offset : data_offset + data_size]
    return bytes(out)


def events(path: Path) -> list[tuple[int, bytes, bytes]]:
    source = PerfDataSource(path, time_order=False)
    source.open()
    try:
        found = [
            (record.timestamp, record.user_data, bytes(record.provider_guid_bytes or b""))
            for record in source.records()
        ]
        assert source.losses() == []
        return found
    finally:
        source.close()


def test_a_pipe_mode_file_reads_as_the_file_it_streamed(tmp_path: Path) -> None:
    original = corpus_path("perfdata", "perf.data")
    pipe = tmp_path / "pipe.data"
    pipe.write_bytes(as_pipe(original.read_bytes()))
    perf = PerfData(pipe.read_bytes())
    assert perf.pipe and perf.attrs == []  # attributes come with the records
    assert events(pipe) == events(original)
    source = PerfDataSource(pipe)
    source.open()
    try:
        assert sum(1 for _ in source.records()) == 539
        assert (
            source.perf is not None
            and source.perf.strings["hostname"] == "dcook2"
            and source.perf.clock_data is not None
        )
    finally:
        source.close()


@pytest.mark.skipif(
    shutil.which("perf") is None or os.geteuid() != 0 or not os.path.isdir("/sys/kernel/tracing/events/sched"),
    reason="needs perf, root and tracefs",
)
def test_perf_record_to_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "live.data"
    with path.open("wb") as sink:
        subprocess.run(
            ["perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o", "-", "--", "sleep", "0.2"],
            stdout=sink,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=60,
        )
    perf = PerfData(path.read_bytes())
    assert perf.pipe
    source = PerfDataSource(path)
    source.open()
    try:
        records = list(source.records())
        assert records and source.losses() == []
    finally:
        source.close()
