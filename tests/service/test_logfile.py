"""A session's log file from pool buffers: header buffer, sequential limit, circular, new file."""

from __future__ import annotations

import os
import struct
import time
import uuid
from pathlib import Path

import pytest

from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.relog import is_logfile_header_record
from openetw.etl.writer import linux_trace_clock
from openetw.ipc.pool import BufferPool
from openetw.service.logfile import LogFile, count_records
from openetw.session import LogMode, SessionConfig

PROVIDER = uuid.UUID("5eadbeef-0000-4000-8000-00000000f11e")
BUFFER = 4096
BASE = time.monotonic_ns() + 10**10  # event times; EndTime follows them wherever the clock was anchored


def pool_buffers(first: int, count: int, per_buffer: int = 10) -> list[bytes]:
    """``count`` full pool buffers holding records numbered from ``first``, ``per_buffer`` each."""
    out = []
    with BufferPool.create(BUFFER, 2, logger_id=3, producer_pid=os.getpid(), flush_interval_ms=0) as pool:
        writer = pool.writer()
        number = first
        for _ in range(count):
            for _ in range(per_buffer):
                record = build_event_record(provider_id=PROVIDER, id=1, timestamp=BASE + number, user_data=struct.pack("<Q", number))
                assert writer.write(record.raw, BASE + number)
                number += 1
            assert writer.flush()
            (index,) = pool.full_buffers()
            out.append(pool.take(index))
            pool.release(index)
    return out


def numbers(path: Path) -> list[int]:
    with EtlReader(path) as reader:
        found = [struct.unpack("<Q", r.user_data)[0] for r in reader if not is_logfile_header_record(r)]
        assert reader.stats.errors == []
    return found


def open_log(path: Path, config: SessionConfig, **kwargs) -> LogFile:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    return LogFile(
        fd, session_name=config.name, file_name=str(path), logger_id=3, buffer_size=BUFFER,
        log_file_mode=config.log_file_mode, max_file_mb=config.max_file_mb, clock=linux_trace_clock(), **kwargs,
    )  # fmt: skip


def test_count_records_walks_the_sizes() -> None:
    (buffer,) = pool_buffers(0, 1, per_buffer=7)
    assert count_records(buffer) == 7


def test_the_header_buffer_is_written_first_and_rewritten_with_the_counts(tmp_path: Path) -> None:
    path = tmp_path / "seq.etl"
    log = open_log(path, SessionConfig("Seq", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    assert path.stat().st_size == BUFFER  # readable before any event arrives
    with EtlReader(path) as reader:
        assert list(reader) != [] and reader.header.logger_name == "Seq"
    for buffer in pool_buffers(0, 3):
        assert log.write(buffer).written
    log.note_lost(events=5)
    log.close()
    assert numbers(path) == list(range(30))
    with EtlReader(path) as reader:
        header = reader.header
        assert header.buffers_written == 4
        assert header.events_lost == 5
        assert header.log_file_mode == L.EVENT_TRACE_FILE_MODE_SEQUENTIAL
        assert header.buffer_size == BUFFER
        assert header.end_time == header.clock.to_filetime(BASE + 29)


def test_a_full_sequential_file_refuses_buffers(tmp_path: Path) -> None:
    path = tmp_path / "full.etl"
    log = open_log(path, SessionConfig("Full", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path), max_file_mb=1))
    buffers = pool_buffers(0, 260)  # 1 MB holds the header buffer and 255 more
    results = [log.write(buffer).written for buffer in buffers]
    log.close()
    assert results == [True] * 255 + [False] * 5
    assert path.stat().st_size == 1 << 20
    assert numbers(path) == list(range(2550))


def test_a_circular_file_overwrites_its_oldest_buffers(tmp_path: Path) -> None:
    path = tmp_path / "ring.etl"
    config = SessionConfig("Ring", mode=LogMode.CIRCULAR_FILE, file_name=str(path), max_file_mb=1)
    log = open_log(path, config, circular=True)
    for buffer in pool_buffers(0, 300):
        assert log.write(buffer).written
    log.close()
    assert path.stat().st_size == 1 << 20
    found = numbers(path)
    assert len(found) == 2550
    assert sorted(found) == list(range(450, 3000))  # the last 255 buffers
    with EtlReader(path) as reader:
        assert reader.header.buffers_written == 256  # what the file holds: readers stop at its end
        assert reader.header.log_file_mode == L.EVENT_TRACE_FILE_MODE_CIRCULAR
        in_time = [struct.unpack("<Q", r.user_data)[0] for r in reader.records(time_order=True) if not is_logfile_header_record(r)]
    assert in_time == sorted(found)


def test_a_new_file_session_moves_on_to_the_next_file(tmp_path: Path) -> None:
    pattern = str(tmp_path / "part%d.etl")
    config = SessionConfig("Parts", mode=LogMode.NEW_FILE, file_name=pattern, max_file_mb=1)
    opened = []

    def open_next(sequence: int) -> tuple[int, str]:
        name = config.file_name_for(sequence)
        opened.append(name)
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), name

    log = open_log(Path(config.file_name_for(1)), config, open_next=open_next)
    moved = [log.write(buffer).new_file for buffer in pool_buffers(0, 600)]
    log.close()
    assert opened == [pattern.replace("%d", "2"), pattern.replace("%d", "3")]
    assert moved.count(True) == 2
    parts = [numbers(Path(pattern.replace("%d", str(n)))) for n in (1, 2, 3)]
    assert [len(p) for p in parts] == [2550, 2550, 900]
    assert [i for part in parts for i in part] == list(range(6000))


@pytest.mark.parametrize(("mode", "buffers", "records"), [
    (LogMode.SEQUENTIAL_FILE, 4, 41), (LogMode.CIRCULAR_FILE, 4, 41), (LogMode.CIRCULAR_FILE, 300, 2551),
])  # fmt: skip
def test_every_file_reads_with_dissect_etl_to_its_end(tmp_path: Path, mode: LogMode, buffers: int, records: int) -> None:
    dissect = pytest.importorskip("dissect.etl")
    path = tmp_path / "interop.etl"
    config = SessionConfig("Interop", mode=mode, file_name=str(path), max_file_mb=1)
    log = open_log(path, config, circular=mode is LogMode.CIRCULAR_FILE)
    for buffer in pool_buffers(0, buffers):
        log.write(buffer)
    log.close()
    with open(path, "rb") as handle:  # a wrapped circular file too: no EOFError past its last buffer
        assert sum(1 for _ in dissect.ETL(handle)) == records


# -- the writer thread ----------------------------------------------------------------------------


class GatedDisk:
    """Stands in for ``pwritev``: each write waits until ``open`` is set (a stalled disk); the
    write numbered ``fail_at`` (from 0, header writes included) fails with ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int = -1) -> None:
        import threading

        from openetw.service import logfile

        self.open = threading.Event()
        self.entered = threading.Event()
        self.writes = 0
        self.fail_at = fail_at
        real = logfile._pwritev

        def pwritev(fd: int, parts: list[memoryview], offset: int) -> int:
            self.entered.set()
            assert self.open.wait(30)
            number, self.writes = self.writes, self.writes + 1
            if number == self.fail_at:
                raise OSError(28, "No space left on device")
            return real(fd, parts[:1] if self.one_part else parts, offset)

        self.one_part = False  # write only the first part of each call (short writes)
        monkeypatch.setattr(logfile, "_pwritev", pwritev)


def test_a_stalled_disk_never_holds_up_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stall.etl"
    log = open_log(path, SessionConfig("Stall", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch)
    buffers = pool_buffers(0, 5)
    for buffer in buffers:
        assert log.write(buffer).written  # returns with the disk stalled
    assert disk.entered.wait(10) and disk.writes == 0
    assert log.queued_bytes == 5 * BUFFER
    log.flush(wait=False)  # a periodic flush queues the header behind them
    assert log.queued_bytes == 6 * BUFFER and disk.writes == 0
    disk.open.set()
    log.flush()  # a controller's flush: everything is in the file when it returns
    assert log.queued_bytes == 0 and 3 <= disk.writes <= 7  # buffers one after the other: one call
    assert numbers(path) == list(range(50))
    log.close()
    with EtlReader(path) as reader:
        assert reader.header.buffers_written == 6


def test_past_the_queue_limit_write_waits_for_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    path = tmp_path / "limit.etl"
    log = open_log(path, SessionConfig("Limit", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)), max_queued_bytes=2 * BUFFER)
    disk = GatedDisk(monkeypatch)
    buffers = pool_buffers(0, 3)
    third = threading.Thread(target=lambda: [log.write(buffer) for buffer in buffers])
    third.start()
    assert disk.entered.wait(10)
    third.join(0.3)
    assert third.is_alive() and log.queued_bytes == 2 * BUFFER  # the third buffer waits for room
    disk.open.set()
    third.join(10)
    assert not third.is_alive()
    log.close()
    assert numbers(path) == list(range(30))


def test_a_failed_queued_write_is_raised_and_counted_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "full.etl"
    log = open_log(path, SessionConfig("Full", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch, fail_at=0)  # the first write fails, whatever it held
    buffers = pool_buffers(0, 4)
    for buffer in buffers[:3]:
        assert log.write(buffer).written
    disk.open.set()
    with pytest.raises(OSError, match="No space"):
        log.flush()  # waits for the queue: the failure is known by then
    assert log.buffers_written == 0 and log.buffers_lost == 3 and log.events_lost == 30
    with pytest.raises(OSError, match="No space"):
        log.write(buffers[3])  # not queued: the caller counts it lost
    assert log.buffers_written == 0 and log.buffers_lost == 3  # counted once
    assert disk.writes == 1  # nothing was tried after the failure
    with pytest.raises(OSError, match="No space"):
        log.close()
    assert log.fd == -1


def test_short_writes_are_written_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "short.etl"
    log = open_log(path, SessionConfig("Short", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch)
    disk.one_part = True
    for buffer in pool_buffers(0, 4):
        log.write(buffer)
    disk.open.set()
    log.close()
    assert numbers(path) == list(range(40))


def test_failed_queued_writes_are_told_once_without_those_counted_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "told.etl"
    log = open_log(path, SessionConfig("Told", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch, fail_at=0)
    buffers = pool_buffers(0, 3)
    assert log.write(buffers[0], 10).written
    assert log.write(buffers[1], 10, counted_written=True).written  # a consumer got it as well
    assert log.write(buffers[2]).written  # events counted from the buffer when lost
    assert log.take_failed_writes() == (0, 0)  # nothing failed yet
    disk.open.set()
    with pytest.raises(OSError, match="No space"):
        log.flush()
    assert log.buffers_lost == 3 and log.events_lost == 30
    assert log.take_failed_writes() == (2, 20)
    assert log.take_failed_writes() == (0, 0)


def test_close_after_a_failed_queued_write_still_writes_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "header.etl"
    log = open_log(path, SessionConfig("Header", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch, fail_at=2)  # buffers 1-2 in one call, the flush's header, then a failure
    buffers = pool_buffers(0, 2)
    for buffer in buffers:
        assert log.write(buffer).written
    disk.open.set()
    log.flush()
    assert log.write(pool_buffers(20, 1)[0]).written
    with pytest.raises(OSError, match="No space"):
        log.close()
    with EtlReader(path) as reader:
        assert (reader.header.buffers_lost, reader.header.events_lost) == (1, 10)
    assert numbers(path) == list(range(20))


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_buffers_that_reached_the_file_before_the_disk_filled_are_not_counted_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
    path = tmp_path / "full.etl"
    log = open_log(path, SessionConfig("Full", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path)))
    disk = GatedDisk(monkeypatch, fail_at=fail_at)
    disk.one_part = True  # each call writes one buffer of the run: the failure comes mid-run
    for buffer in pool_buffers(0, 5):
        assert log.write(buffer).written
    disk.open.set()
    with pytest.raises(OSError):
        log.flush()
    lost_buffers, lost_events = log.take_failed_writes()
    data = path.read_bytes()
    whole = (len(data) - BUFFER) // BUFFER  # after the header buffer
    assert (lost_buffers, lost_events) == (5 - whole, 10 * (5 - whole))
    assert whole == fail_at  # every buffer a call finished is in the file, and none of them is lost
    assert log.buffers_written == whole
