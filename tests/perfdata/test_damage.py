"""Damaged perf.data files and EventHeader events: every good record kept, the damage reported
with its offset and structure, nothing but ``PerfDataFormatError``, memory bounded."""

from __future__ import annotations

import random
import struct
import tracemalloc
from pathlib import Path

import pytest

from openetw.consumer.perfdata_source import PerfDataSource
from openetw.errors import PerfDataFormatError
from openetw.etl.clock import SYSTEM_TIME_CLOCK
from openetw.etl.record import RecordContext
from openetw.perfdata.eventheader import parse_tracepoint_name
from openetw.perfdata.interceptor import interceptor_events
from openetw.perfdata.reader import PerfData
from openetw.perfdata.transcode import eventheader_record
from tests.conftest import corpus_path

MEMORY_BOUND = 32 << 20  # the file is 170 KB: a read holds it, its records and small tables


def read(path: Path, *, time_order: bool = True) -> tuple[int, list[PerfDataFormatError], list[PerfDataFormatError]]:
    source = PerfDataSource(path, time_order=time_order)
    source.open()
    try:
        count = sum(1 for _ in source.records())
        return count, source.losses(), source.notices()
    finally:
        source.close()


def sample_ends(data: bytes) -> list[int]:
    perf = PerfData(data)
    return [
        sample.offset + struct.unpack_from("<H", data, sample.offset + 6)[0]
        for sample in perf.records()
        if sample is not None
    ]


def test_a_cut_file_keeps_every_record_before_the_cut(tmp_path: Path) -> None:
    data = corpus_path("perfdata", "perf.data").read_bytes()
    ends = sample_ends(data)
    rng = random.Random(7)
    for cut in sorted(rng.sample(range(ends[0] + 1, ends[-1]), 12)):
        path = tmp_path / f"cut{cut}.data"
        path.write_bytes(data[:cut])
        count, losses, notices = read(path, time_order=False)
        assert count == sum(1 for end in ends if end <= cut)
        assert (
            losses
            and losses[-1].structure == "perf_event_header"
            and losses[-1].offset is not None
            and losses[-1].offset <= cut
        )
        assert any("features after it are lost" in str(notice) for notice in notices)


def test_a_damaged_eventheader_payload_costs_that_event_alone(tmp_path: Path) -> None:
    data = bytearray(corpus_path("perfdata", "perf.data").read_bytes())
    position = data.find(b"CScalars3\x00Struct20\x00\x81\x94\xef\xbehi\x00\x87")
    assert position > 0
    data[position + 26] = 0x9F  # the field "hi": encoding 31, which does not exist
    path = tmp_path / "damaged.data"
    path.write_bytes(bytes(data))
    count, losses, _ = read(path)
    assert count == 538
    assert len(losses) == 1 and losses[0].structure == "eventheader" and losses[0].record_index is not None
    assert losses[0].offset == position + 26  # the damaged byte itself


def test_not_perf_data_is_a_format_error(tmp_path: Path) -> None:
    for content in (b"", b"PERFILE2", b"PERFILE2" + bytes(100), b"NOTPERF!" * 20):
        with pytest.raises(PerfDataFormatError):
            PerfData(content)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "word", "cut", "insert", "delete"))
        at = rng.randrange(len(out))
        if kind == "flip":
            out[at] ^= rng.randint(1, 255)
        elif kind == "word" and at + 8 <= len(out):
            out[at : at + rng.choice((2, 4, 8))] = rng.choice((b"\xff" * 8, b"\x00" * 8, rng.randbytes(8)))[
                : len(out[at : at + 8])
            ][: rng.choice((2, 4, 8))]
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = rng.randbytes(rng.randint(1, 64))
        elif kind == "delete":
            del out[at : at + rng.randint(1, 64)]
        if not out:
            break
    return bytes(out)


def test_mutated_perf_data_gives_only_format_errors_within_a_memory_bound(tmp_path: Path) -> None:
    data = corpus_path("perfdata", "perf.data").read_bytes()
    rng = random.Random(2024)
    path = tmp_path / "fuzz.data"
    for iteration in range(30):
        path.write_bytes(_mutate(data, rng))
        measured = iteration % 5 == 0  # tracing allocations slows a read fivefold: every fifth
        if measured:
            tracemalloc.start()
        try:
            read(path, time_order=rng.random() < 0.5)
        except PerfDataFormatError:
            pass
        finally:
            if measured:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert peak < MEMORY_BOUND


def test_mutated_eventheader_events_give_only_format_errors() -> None:
    data = corpus_path("perfdata", "EventHeaderInterceptorLE64.dat").read_bytes()
    context = RecordContext(SYSTEM_TIME_CLOCK, source="<fuzz>")
    entries = list(interceptor_events(data))
    rng = random.Random(99)
    kept = 0
    for _ in range(600):
        _, name, event = rng.choice(entries)
        tracepoint = parse_tracepoint_name(name)
        assert tracepoint is not None
        try:
            eventheader_record(tracepoint, _mutate(event, rng) if event else event, context=context)
            kept += 1
        except PerfDataFormatError as error:
            assert error.structure == "eventheader" and error.offset is not None
    assert kept > 0
