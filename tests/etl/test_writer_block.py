"""EtlWriter.write_block: fixed-size records of one processor given as one block."""

from __future__ import annotations

import io
import struct

import pytest

from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_system_record
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header

ROW = struct.Struct("<HBBHHqQ")  # PERFINFO64 header + one u64: 24 bytes


def _rows(timestamps: list[int], hook: int = 0x0F33) -> bytes:
    return b"".join(ROW.pack(2, L.HEADER_TYPE_PERFINFO64, L.MARKER_FLAGS_TYPED, ROW.size, hook, ts, ts * 3) for ts in timestamps)


def _writer(out: io.BytesIO, buffer_size: int = 1024) -> EtlWriter:
    return EtlWriter(out, header=new_logfile_header(clock=linux_trace_clock(), buffer_size=buffer_size, number_of_processors=2))


def test_blocks_spread_over_buffers_and_merge_with_ordinary_records_in_time_order() -> None:
    out = io.BytesIO()
    writer = _writer(out)
    block_times = list(range(1_000, 1_200))  # 200 records of 24 bytes: several 1 KiB buffers
    assert writer.write_block(_rows(block_times[:150]), 1, ROW.size, block_times[:150]) == 150
    for ts in (1_050, 1_120, 1_199):  # the same processor's ordinary records stay in their own buffers
        assert writer.write(build_system_record(hook_id=0x0524, version=2, pid=1, tid=2, timestamp=ts, cpu=1, user_data=b"x" * 8))
    assert writer.write_block(_rows(block_times[150:]), 1, ROW.size, block_times[150:]) == 50
    writer.close()
    assert writer.records_written == 203
    with EtlReader(out.getvalue()) as reader:
        records = [r for r in reader.records(time_order=True) if r.hook_id != 0]  # not the logfile header
        end_time = reader.header.end_time
    assert len(records) == 203
    times = [r.timestamp for r in records]
    assert times == sorted(times)
    rows = [r for r in records if r.hook_id == 0x0F33]
    assert [r.timestamp for r in rows] == block_times
    assert all(r.cpu == 1 and r.raw == ROW.pack(2, L.HEADER_TYPE_PERFINFO64, L.MARKER_FLAGS_TYPED, 24, 0x0F33, r.timestamp, r.timestamp * 3) for r in rows)
    assert end_time == writer.clock.to_filetime(1_199)


def test_flush_writes_the_partly_filled_block_buffers() -> None:
    out = io.BytesIO()
    writer = _writer(out)
    writer.write_block(_rows([5, 6]), 0, ROW.size, [5, 6])
    before = writer.buffers_written
    writer.flush()
    assert writer.buffers_written == before + 1
    writer.close()
    with EtlReader(out.getvalue()) as reader:
        assert [r.timestamp for r in list(reader)[1:]] == [5, 6]


@pytest.mark.parametrize("row_size", [20, 0, 2048])
def test_a_row_size_that_cannot_be_a_record_refuses_the_block_and_counts_it_lost(row_size: int) -> None:
    out = io.BytesIO()
    writer = _writer(out)
    block = bytes(4096)
    assert writer.write_block(block, 0, row_size, [1] * 300) == 0
    count = len(block) // row_size if row_size else 0
    assert writer.events_lost == count and writer.records_refused == count
    writer.close()
