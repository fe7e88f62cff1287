"""PerfView's ``DiskServiceTimeMSec`` on a synthetic 32-bit kernel trace of overlapping I/Os.

TraceEvent keeps one list of every disk event's (disk, time) and one index into it shared by
all disks; a Read or Write's service time is its elapsed time, or less by the time since the
last event of its disk found between that index and its own time. PerfView's baseline reads the
value twice and prints the second read, which starts over from the list's start (see
report/perfview/state.py).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_system_record
from openetw.etl.clock import TraceClock
from openetw.etl.writer import EtlWriter, new_logfile_header
from openetw.report.perfview import perfview_lines
from openetw.report.perfview.state import PerfViewState
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry

FREQ = 10_000_000  # QPC ticks per second: 10 000 per millisecond
START = 1_000_000
READ, WRITE, FLUSH = 10, 11, 14

# (completion time in ms from the start, opcode, disk, elapsed ms): I/Os that overlap on disk 0,
# with disk 1's between some of them.
IOS = [
    (10.0, READ, 0, 8.0),   # nothing of disk 0 before: min(8, 10 - 0) = 8
    (12.0, READ, 0, 9.0),   # disk 0 completed at 10: min(9, 2) = 2 (the disk was busy with the first)
    (13.0, WRITE, 1, 5.0),  # disk 1's first: min(5, 13) = 5
    (15.0, WRITE, 0, 6.0),  # the first read starts at disk 1's entry (13) and sees no disk 0: 6;
                            # the printed second read starts over and finds disk 0 at 12: min(6, 3) = 3
    (16.0, FLUSH, 0, 1.0),  # a flush moves nothing but is a disk event of disk 0
    (17.0, READ, 0, 4.0),   # disk 0's flush at 16 is passed: min(4, 1) = 1
    (17.0, READ, 1, 3.0),   # same time as the previous: the scan starts over; disk 1 at 13: min(3, 4) = 3
]
EXPECTED = [8.0, 2.0, 5.0, 3.0, 1.0, 3.0]
FIRST_READS = [8.0, 2.0, 5.0, 6.0, 1.0, 3.0]  # what one read of each value gives


def _write_trace(path: Path) -> None:
    clock = TraceClock(L.CLOCK_QPC, 133_000_000_000_000_000, START, FREQ)
    header = new_logfile_header(clock=clock, pointer_size=4, number_of_processors=1)
    with EtlWriter(str(path), header=header) as writer:
        for irp, (msec, opcode, disk, elapsed) in enumerate(IOS, start=1):
            response = int(elapsed * FREQ / 1000)
            if opcode == FLUSH:
                payload = struct.pack("<IIqI", disk, 0, response, 0x1000 + irp)
            else:  # DiskNumber, IrpFlags, TransferSize, Reserved, ByteOffset, FileKey, Irp, HighResResponseTime (32-bit)
                payload = struct.pack("<IIIIqIIq", disk, 0, 4096, 0, irp * 4096, 0, 0x1000 + irp, response)
            timestamp = START + int(msec * FREQ / 1000)
            writer.write(build_system_record(hook_id=(0x01 << 8) | opcode, timestamp=timestamp, tid=4, pid=4,
                                             user_data=payload, pointer_size=4))  # fmt: skip


def test_disk_service_time_follows_traceevent_s_rule(tmp_path: Path) -> None:
    path = tmp_path / "disks.etl"
    _write_trace(path)

    def records():  # type: ignore[no-untyped-def]
        with EtlReader(str(path)) as reader:
            assert reader.header.pointer_size == 4
            yield from reader.records(time_order=True)

    lines = [line for line in perfview_lines(records, SchemaRegistry()) if "/DiskIO/Read " in line or "/DiskIO/Write " in line]
    service = [float(re.search(r"DiskServiceTimeMSec=([0-9.]+);", line).group(1)) for line in lines]  # type: ignore[union-attr]
    elapsed = [float(re.search(r"ElapsedTimeMSec=([0-9.]+);", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert elapsed == [8.0, 9.0, 5.0, 6.0, 4.0, 3.0]
    assert service == EXPECTED


def test_the_first_read_moves_the_shared_index_the_printed_second_read_starts_over(tmp_path: Path) -> None:
    """Overlapping I/Os on disk 0 with disk 1's I/O shown between them: one read of the value
    skips disk 0's completion before disk 1's entry; PerfView prints the second read."""
    path = tmp_path / "disks.etl"
    _write_trace(path)
    with EtlReader(str(path)) as reader:
        records = list(reader.records(time_order=True))
    context = DecodeContext(SchemaRegistry())
    state = PerfViewState(context)
    shown = []
    for record in records:
        context.observe(record)
        if record.kind == "system" and (record.hook_id or 0) >> 8 == 0x01:  # DiskIO
            disk = struct.unpack_from("<I", record.user_data)[0]
            state.learn(record, {"DiskNumber": disk})
            if record.opcode != FLUSH:
                shown.append((record, disk))
    elapsed = [io[3] for io in IOS if io[1] != FLUSH]
    first = [state.disk_service_msec(record, disk, spent) for (record, disk), spent in zip(shown, elapsed, strict=True)]
    assert first == FIRST_READS
    state.disk_event_index = 0
    printed = [state.shown_disk_service_msec(record, disk, spent) for (record, disk), spent in zip(shown, elapsed, strict=True)]
    assert printed == EXPECTED
