"""Reading from a stream that cannot seek (a pipe, a socket) gives the records a path gives.

File order reads front to back and never seeks backwards; time order on such a stream merges
through a bounded window of buffers it keeps in memory, and still comes out in time order.
"""

from __future__ import annotations

import io
import os
import struct
import threading
import tracemalloc
from pathlib import Path

import pytest

from openetw.errors import EtlFormatError, InvalidArgument
from openetw.etl import EtlReader
from openetw.etl import reader as reader_module
from openetw.etl.record import EventRecord
from tests.conftest import corpus_path
from tests.etl.corpus_facts import SMALL, EtlFacts

UNCOMPRESSED = [f for f in SMALL if not f.compressed]
# Compressed buffers are packed back to back and are inflated once, in the window, from a stream.
STREAMED = SMALL


def _ids(facts: EtlFacts) -> str:
    return facts.path.rsplit("/", 1)[-1]


def _path(facts: EtlFacts) -> Path:
    return corpus_path("etl", *facts.path.split("/"))


class PipeLike:
    """A read-only stream: short reads of varying length, no seek, no tell."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        self._calls = 0

    def read(self, n: int = -1) -> bytes:
        self._calls += 1
        if n < 0:
            n = len(self._data) - self._pos
        n = min(n, 1 + (self._calls * 7919) % 12288)  # like a pipe: whatever has arrived
        chunk = self._data[self._pos : self._pos + n]
        self._pos += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("seek")

    def tell(self) -> int:
        raise io.UnsupportedOperation("tell")


class Trickle(io.RawIOBase):
    """A raw stream that hands out a few bytes per read."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = data
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._step, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


class SeekRecorder(io.BytesIO):
    """A seekable file that remembers every seek it was asked for."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.seeks: list[tuple[int, int]] = []  # (from, to)

    def seek(self, offset: int, whence: int = 0) -> int:
        before = self.tell()
        after = super().seek(offset, whence)
        self.seeks.append((before, after))
        return after


def _key(record: EventRecord) -> tuple[object, ...]:
    return (record.kind, record.raw, record.cpu, record.buffer_index, record.timestamp)


def _from_path(facts: EtlFacts, *, time_order: bool = False) -> list[EventRecord]:
    with EtlReader(_path(facts)) as reader:
        return list(reader.records(time_order=time_order))


@pytest.mark.parametrize("facts", STREAMED, ids=_ids)
def test_a_stream_that_cannot_seek_gives_the_records_of_the_path_in_file_order(facts: EtlFacts) -> None:
    data = _path(facts).read_bytes()
    expected = [_key(r) for r in _from_path(facts)]
    reader = EtlReader(PipeLike(data))
    got = [_key(r) for r in reader]
    assert got == expected
    assert reader.stats.errors == []
    assert reader.stats.buffers == facts.buffers
    assert reader.header.buffers_written == facts.buffers


@pytest.mark.parametrize("facts", STREAMED, ids=_ids)
def test_time_order_from_a_stream_is_the_time_order_of_the_path(facts: EtlFacts) -> None:
    data = _path(facts).read_bytes()
    expected = _from_path(facts, time_order=True)
    reader = EtlReader(PipeLike(data))
    got = list(reader.records(time_order=True))
    assert reader.stats.errors == []
    assert reader.stats.time_order_violations == 0
    stamps = [r.timestamp for r in got]
    assert stamps == sorted(stamps)
    assert stamps == [r.timestamp for r in expected]
    assert sorted(_key(r) for r in got) == sorted(_key(r) for r in expected)


@pytest.mark.parametrize("step", [1, 3, 61])
def test_buffered_reader_over_a_trickling_raw_stream(step: int) -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("primitive-types.etl"))
    data = _path(facts).read_bytes()
    stream = io.BufferedReader(Trickle(data, step), buffer_size=4096)
    assert not stream.seekable()
    with EtlReader(stream) as reader:
        got = [_key(r) for r in reader]
    assert got == [_key(r) for r in _from_path(facts)]


def test_buffered_reader_over_a_trickling_raw_stream_in_time_order() -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("HTTP_Server.etl"))
    data = _path(facts).read_bytes()
    with EtlReader(io.BufferedReader(Trickle(data, 61))) as reader:
        got = list(reader.records(time_order=True))
    assert [_key(r) for r in got] == [_key(r) for r in _from_path(facts, time_order=True)]


def _pipe_of(data: bytes) -> tuple[io.BufferedReader, threading.Thread]:
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with open(write_fd, "wb") as sink:
            for start in range(0, len(data), 5000):
                sink.write(data[start : start + 5000])

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return open(read_fd, "rb"), thread  # closed by the caller


@pytest.mark.parametrize("time_order", [False, True], ids=["file-order", "time-order"])
def test_an_os_pipe(time_order: bool) -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("ShutdownPerfDiagLogger.etl"))
    data = _path(facts).read_bytes()
    pipe, thread = _pipe_of(data)
    with pipe:
        got = [_key(r) for r in EtlReader(pipe).records(time_order=time_order)]
    thread.join()
    assert got == [_key(r) for r in _from_path(facts, time_order=time_order)]


@pytest.mark.parametrize("facts", [f for f in UNCOMPRESSED if f.buffers > 2], ids=_ids)
def test_file_order_never_seeks_backwards(facts: EtlFacts) -> None:
    stream = SeekRecorder(_path(facts).read_bytes())
    reader = EtlReader(stream)
    count = sum(1 for _ in reader)
    assert count == facts.records
    assert all(after >= before for before, after in stream.seeks), stream.seeks


def test_reading_a_file_object_from_its_current_position() -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("lxcore_kernel.etl"))
    data = _path(facts).read_bytes()
    stream = io.BytesIO(b"container bytes before the trace" + data)
    stream.seek(32)
    got = [_key(r) for r in EtlReader(stream)]
    assert got == [_key(r) for r in _from_path(facts)]


def test_a_stream_reads_once_and_says_so_when_asked_again() -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("lxcore_kernel.etl"))
    reader = EtlReader(PipeLike(_path(facts).read_bytes()))
    assert sum(1 for _ in reader) == facts.records
    with pytest.raises(InvalidArgument, match="read only once"):
        list(reader)


def test_a_cut_stream_yields_the_whole_records_then_raises() -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("HTTP_Server.etl"))
    data = _path(facts).read_bytes()
    cut = len(data) // 2 + 123
    expected = [_key(r) for r in EtlReader(data[:cut], strict=False)]
    got: list[tuple[object, ...]] = []
    with pytest.raises(EtlFormatError) as caught:
        for record in EtlReader(PipeLike(data[:cut])):
            got.append(_key(record))
    assert got == expected
    assert caught.value.offset is not None and caught.value.offset <= cut
    assert "ends inside" in caught.value.message


def test_time_order_window_on_a_stream_keeps_memory_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("ShutdownPerfDiagLogger.etl"))
    data = _path(facts).read_bytes()  # 3 MiB of 64 KiB buffers, 2 processors
    monkeypatch.setattr(reader_module, "TIME_ORDER_WINDOW_BYTES", 1 << 20)
    stream = PipeLike(data)
    tracemalloc.start()
    try:
        reader = EtlReader(stream)
        count = sum(1 for _ in reader.records(time_order=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == facts.records
    assert peak < 3 << 20, f"peak {peak / 2**20:.2f} MiB"


def test_a_window_too_small_counts_records_out_of_order_and_drops_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # Quiet processors flush late: CrossMachineHTTP's last buffers start with the session.
    facts = next(f for f in UNCOMPRESSED if f.path.endswith("CrossMachineHTTP.etl"))
    monkeypatch.setattr(reader_module, "TIME_ORDER_WINDOW_BYTES", 0)
    reader = EtlReader(PipeLike(_path(facts).read_bytes()))
    got = list(reader.records(time_order=True))
    assert reader.stats.time_order_violations > 0
    stamps = [r.timestamp for r in got]
    assert stamps != sorted(stamps)
    assert sorted(_key(r) for r in got) == sorted(_key(r) for r in _from_path(facts))


def _uneven_stream() -> bytes:
    """Three processors' buffers in file order A (cpu 0), Q (cpu 2), P (cpu 1): A and P span the
    whole trace, Q starts in its middle, and P is four times the size of the others."""
    import io as _io
    import uuid

    from openetw.etl import layouts as L
    from openetw.etl.build import build_event_record
    from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header

    out = _io.BytesIO()
    writer = EtlWriter(out, header=new_logfile_header(clock=linux_trace_clock(), buffer_size=64 << 10))
    provider = uuid.UUID("6d3e6e1c-0000-4000-8000-000000000001")
    base = 10**12
    for cpu, first, count in ((0, 0, 100), (1, 1, 100), (2, 500, 10)):
        for i in range(count):
            writer.write(build_event_record(provider_id=provider, id=cpu, timestamp=base + first + 10 * i, cpu=cpu, pid=1, tid=1))
    writer.close()
    data = out.getvalue()
    head = L.WMI_BUFFER_HEADER
    buffers: dict[int, bytes] = {}
    offset = head.unpack_from(data, 0)[0]
    header_buffer = data[:offset]
    while offset < len(data):
        fields = head.unpack_from(data, offset)
        size, cpu = fields[0], fields[head.index("ProcessorIndex")] & 0xFF
        buffers[cpu] = data[offset : offset + size]
        offset += size
    assert sorted(buffers) == [0, 1, 2]
    wide = bytearray(buffers[1] + bytes(3 * len(buffers[1])))
    head.pack_into(wide, 0, len(wide), *head.unpack_from(wide, 0)[1:])
    # Buffers of one file share the logfile's BufferSize, unless the header buffer has another
    # size: then the file states no stride and a wide buffer is not damage.
    header_buffer = bytearray(header_buffer)
    struct.pack_into("<I", header_buffer, L.BUFFER_HEADER_SIZE + L.SYSTEM_TRACE_HEADER.size, 4 * len(buffers[1]))
    return bytes(header_buffer) + buffers[0] + buffers[2] + bytes(wide)


def test_records_the_byte_bound_holds_back_out_of_order_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _uneven_stream()
    in_order = sorted(r.timestamp for r in EtlReader(data))
    assert len(in_order) == 1 + 210  # the logfile header, then the events
    # The header buffer, A and Q fit the bound, P (pushed last) passes it: A and P fill the
    # merge, Q must wait until both are read out.
    monkeypatch.setattr(reader_module, "TIME_ORDER_WINDOW_BYTES", 256 << 10)
    reader = EtlReader(PipeLike(data))
    stamps = [r.timestamp for r in reader.records(time_order=True)]
    assert sorted(stamps) == in_order  # nothing dropped
    assert stamps != in_order  # Q's records came after later ones ...
    assert reader.stats.time_order_violations == 1  # ... and that is counted, not silent
    monkeypatch.setattr(reader_module, "TIME_ORDER_WINDOW_BYTES", 16 << 20)
    reader = EtlReader(PipeLike(data))
    assert [r.timestamp for r in reader.records(time_order=True)] == in_order
    assert reader.stats.time_order_violations == 0
