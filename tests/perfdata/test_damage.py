"""Damaged perf.data files and EventHeader events: every good record kept, the damage reported
with its offset and structure, nothing but ``PerfDataFormatError``, memory bounded."""

from __future__ import annotations

import random
import struct
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
from tests.perfdata.fuzzing import check_perf_data, mutate


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


def test_mutated_perf_data_gives_only_format_errors_within_a_memory_bound() -> None:
    data = corpus_path("perfdata", "perf.data").read_bytes()
    rng = random.Random(2024)
    for iteration in range(12):
        assert check_perf_data(mutate(data, rng), measure=iteration % 4 == 0) == []


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
            eventheader_record(tracepoint, mutate(event, rng) if event else event, context=context)
            kept += 1
        except PerfDataFormatError as error:
            assert error.structure == "eventheader" and error.offset is not None
    assert kept > 0


def test_nested_arrays_of_nothing_are_bounded_by_the_payload() -> None:
    from openetw.perfdata import eventheader as EH
    from openetw.perfdata.encode import encode_metadata

    inner = EH.EhField("s", EH.ZSTRING_CHAR8, count=0xFFFF)
    outer = EH.EhField("t", EH.STRUCT, count=0xFFFF, members=(inner,))
    metadata = encode_metadata("Bomb", [outer])
    event = (
        struct.pack("<BBHHBB", EH.FLAG_EXTENSION | EH.FLAG_LITTLE_ENDIAN, 0, 0, 0, 0, 4)
        + struct.pack("<HH", len(metadata), EH.EXT_METADATA)
        + metadata
    )
    with pytest.raises(PerfDataFormatError, match="0 left in the payload"):
        EH.decode_fields(EH.parse_event(event))
