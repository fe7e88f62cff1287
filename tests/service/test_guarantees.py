"""Every event is accounted for, in every log mode, with real producers, service and consumers.

Three producer processes write at once into tiny pools (4 KB buffers, four of them), so pools
overflow and producers drop events. Each producer reports how many of its writes returned True.
For each mode the test proves, exactly:

    writes made = events in the file(s) or delivered + events the service counts lost

where the events counted lost are ``query()``'s ``events_lost`` (a producer's drops and
refusals, plus the events of buffers a full file or an absent consumer could not take; the
buffers themselves are ``log_buffers_lost`` and ``realtime_buffers_lost``) and the same number
is in the file header's EventsLost. A circular file and a buffering session's ring overwrite
their oldest buffers on purpose: there the overwritten events are counted from the buffers the
service reports written (see ``ring_accounting``).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openetw.controller import Session
from openetw.session.stats import COUNTER_KEYS
from tests.service.guarantee_helpers import (
    ConsumerProcess,
    FileContent,
    Writes,
    begin_writes,
    poll_until,
    read_file,
    records_per_full_buffer,
    register_all,
    ring_accounting,
    wait_enabled_all,
    write_at_once,
    writes_of,
)
from tests.service.harness import Producer, ServiceProcess, start_service

BUFFER_KB = 4
BUFFER_SIZE = BUFFER_KB * 1024
POOL_BUFFERS = 4
MAX_FILE_MB = 1
SLOTS_IN_FULL_FILE = (MAX_FILE_MB << 20) // BUFFER_SIZE - 1  # the header takes the first buffer
TINY = {"buffer_size": BUFFER_KB, "min_buffers": 2, "max_buffers": POOL_BUFFERS, "flush_timer": 0}


@dataclass
class Rig:
    service: ServiceProcess
    producers: list[Producer]
    directory: Path

    @property
    def pids(self) -> set[int]:
        return {producer.pid for producer in self.producers}

    def provider(self, name: str) -> str:
        """A provider of this name registered in every producer."""
        provider = f"Test.Guarantee.{name}"
        register_all(self.producers, provider)
        return provider


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """One service and three producers for the whole module (starting them is the slow part)."""
    directory = tmp_path_factory.mktemp("guarantees")
    socket_path = directory / "control.sock"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENETW_SOCKET", str(socket_path))
        patch.setenv("OPENETW_NO_AUTOSTART", "1")
        service = start_service(socket_path)
        producers: list[Producer] = []
        try:
            producers = [Producer(dict(os.environ)) for _ in range(3)]
            yield Rig(service, producers, directory)
        finally:
            for producer in producers:
                producer.kill()
            service.kill()


@pytest.fixture
def consumers() -> Iterator[list[ConsumerProcess]]:
    """Consumer processes a test starts go here; all of them are killed at the end."""
    started: list[ConsumerProcess] = []
    try:
        yield started
    finally:
        for consumer in started:
            consumer.kill()


def run(rig: Rig, provider: str, count: int) -> Writes:
    """The producers wait to be enabled, then write ``count`` events each, all at once."""
    wait_enabled_all(rig.producers, provider)
    return write_at_once(rig.producers, provider, count)


def run_until(rig: Rig, provider: str, session: Session, key: str, above: int, *, batch: int = 2000) -> tuple[Writes, int]:
    """Batches of ``batch`` events per producer until ``query()[key] > above`` (how much gets
    through depends on how much the producers drop); the writes and the indices' end."""
    wait_enabled_all(rig.producers, provider)
    writes, end = Writes(0, 0), 0
    for round_number in range(40):
        writes += write_at_once(rig.producers, provider, batch, start=end)
        end += batch
        if session.query()[key] > above:
            return writes, end
        if round_number >= 19:
            # Plenty was written: a busy machine's service may still be storing what was handed
            # over, so let it catch up before writing more (the counters, not the time, decide).
            for _ in range(20):
                time.sleep(0.05)
                if session.query()[key] > above:
                    return writes, end
    raise AssertionError(f"{key} stayed at most {above}")


def assert_events_are_the_producers(rig: Rig, events: list[tuple[int, int]], count: int) -> None:
    """Each event once, from one of our producers, with an index it wrote."""
    duplicates = [event for event, seen in Counter(events).items() if seen > 1]
    assert duplicates == []
    assert {pid for pid, _ in events} <= rig.pids
    assert all(0 <= index < count for _, index in events)


def assert_header_agrees(content: FileContent, stats: dict[str, int]) -> None:
    assert content.header.events_lost == stats["events_lost"]
    assert content.header.buffers_lost == stats["log_buffers_lost"]


# -- file modes ----------------------------------------------------------------------------------


def test_a_sequential_file_holds_exactly_the_writes_that_returned_true(rig: Rig) -> None:
    provider, output, count = rig.provider("Sequential"), rig.directory / "sequential.etl", 3000
    with Session.start("Sequential", output=output, providers=[provider], **TINY) as session:
        writes = run(rig, provider, count)
    stats = session.query()
    content = read_file(output)
    assert_events_are_the_producers(rig, content.events, count)
    assert len(content.events) == stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert writes.attempts == len(content.events) + stats["events_lost"]
    assert stats["log_buffers_lost"] == stats["realtime_buffers_lost"] == 0
    assert stats["buffers_written"] == content.data_buffers
    assert content.header.buffers_written == content.data_buffers + 1
    assert_header_agrees(content, stats)


def test_a_full_sequential_file_counts_the_buffers_it_refused_and_their_events(rig: Rig) -> None:
    provider, output = rig.provider("Full"), rig.directory / "full.etl"
    with Session.start("Full", output=output, max_size=MAX_FILE_MB, providers=[provider], **TINY) as session:
        writes, count = run_until(rig, provider, session, "log_buffers_lost", 0)
    stats = session.query()
    content = read_file(output)
    assert_events_are_the_producers(rig, content.events, count)
    assert content.data_buffers == stats["buffers_written"] == SLOTS_IN_FULL_FILE
    assert stats["log_buffers_lost"] > 0, "1 MB cannot hold what three producers wrote"
    assert len(content.events) == stats["events_written"]
    assert writes.attempts == len(content.events) + stats["events_lost"]
    in_refused_buffers = stats["events_lost"] - writes.returned_false
    most = records_per_full_buffer(BUFFER_SIZE, min(content.record_sizes))
    assert stats["log_buffers_lost"] <= in_refused_buffers <= stats["log_buffers_lost"] * most
    assert_header_agrees(content, stats)


def test_a_circular_file_keeps_the_newest_buffers_and_counts_what_it_overwrote(rig: Rig) -> None:
    """Exact here means: every write that returned True was written to the file once
    (``events_written``), and those no longer in it are the events of the overwritten buffers,
    ``buffers_written`` minus the buffers the file holds, all whole and older than the rest."""
    provider, output = rig.provider("Circular"), rig.directory / "circular.etl"
    with Session.start("Circular", output=output, mode="circular", max_size=MAX_FILE_MB, providers=[provider], **TINY) as session:
        writes, count = run_until(rig, provider, session, "buffers_written", SLOTS_IN_FULL_FILE + 20)
    stats = session.query()
    content = read_file(output)
    assert_events_are_the_producers(rig, content.events, count)
    assert stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert content.data_buffers == SLOTS_IN_FULL_FILE
    assert content.header.buffers_written == content.data_buffers + 1  # what the file holds, header buffer included
    ring = ring_accounting(content, stats["buffers_written"], BUFFER_SIZE)
    assert ring["overwritten_buffers"] > 0, "the file wrapped"
    assert len(content.events) + ring["overwritten_events"] == stats["events_written"]
    assert writes.attempts == len(content.events) + ring["overwritten_events"] + stats["events_lost"]
    assert stats["log_buffers_lost"] == 0
    assert_header_agrees(content, stats)


def test_new_files_together_hold_every_event_written(rig: Rig) -> None:
    provider, pattern = rig.provider("NewFile"), rig.directory / "part%d.etl"
    with Session.start("NewFile", output=pattern, mode="newfile", max_size=MAX_FILE_MB, providers=[provider], **TINY) as session:
        writes, count = run_until(rig, provider, session, "buffers_written", SLOTS_IN_FULL_FILE)
    stats = session.query()
    parts = sorted(rig.directory.glob("part*.etl"), key=lambda path: int(path.stem[4:]))
    assert [path.name for path in parts] == [f"part{n}.etl" for n in range(1, len(parts) + 1)]
    assert len(parts) >= 2
    contents = [read_file(path) for path in parts]
    events = [event for content in contents for event in content.events]
    assert_events_are_the_producers(rig, events, count)
    assert len(events) == stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert sum(content.data_buffers for content in contents) == stats["buffers_written"]
    assert all(content.data_buffers == SLOTS_IN_FULL_FILE for content in contents[:-1])
    # Each header counts the losses up to its file's end: the last one holds the session's.
    lost = [content.header.events_lost for content in contents]
    assert lost == sorted(lost)
    assert_header_agrees(contents[-1], stats)


# -- real time -----------------------------------------------------------------------------------


def test_a_real_time_session_without_a_consumer_counts_every_event_lost(rig: Rig) -> None:
    provider, count = rig.provider("Unheard"), 1000
    with Session.start("Unheard", mode="realtime", providers=[provider], **TINY) as session:
        writes = run(rig, provider, count)
    stats = session.query()
    assert stats["events_written"] == stats["buffers_written"] == 0
    assert stats["events_lost"] == writes.attempts
    assert 0 < stats["realtime_buffers_lost"] <= writes.returned_true
    assert writes.returned_true > 0


def test_a_slow_real_time_consumer_gets_every_event_the_service_took(rig: Rig, consumers: list[ConsumerProcess]) -> None:
    provider, count = rig.provider("Slow"), 1500
    with Session.start("Slow", mode="realtime", providers=[provider], **TINY) as session:
        consumer = ConsumerProcess("Slow", delay=0.003)
        consumers.append(consumer)
        writes = run(rig, provider, count)
    stats = session.query()
    received = consumer.result()  # read to the session's end, well after the writes
    assert_events_are_the_producers(rig, received, count)
    assert len(received) == stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert writes.attempts == len(received) + stats["events_lost"]
    assert stats["realtime_buffers_lost"] == 0
    assert consumer.buffers == stats["buffers_written"]


def test_file_and_real_time_deliver_the_same_events_to_both(rig: Rig, consumers: list[ConsumerProcess]) -> None:
    provider, output, count = rig.provider("Both"), rig.directory / "both.etl", 2000
    with Session.start("Both", output=output, realtime=True, providers=[provider], **TINY) as session:
        consumer = ConsumerProcess("Both")
        consumers.append(consumer)
        writes = run(rig, provider, count)
    stats = session.query()
    content = read_file(output)
    received = consumer.result()
    assert_events_are_the_producers(rig, content.events, count)
    assert sorted(received) == sorted(content.events)
    assert len(content.events) == stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert stats["realtime_buffers_lost"] == stats["log_buffers_lost"] == 0
    assert_header_agrees(content, stats)


def test_file_and_real_time_without_a_consumer_loses_no_event(rig: Rig) -> None:
    provider, output, count = rig.provider("FileOnly"), rig.directory / "file-only.etl", 1000
    with Session.start("FileOnly", output=output, realtime=True, providers=[provider], **TINY) as session:
        writes = run(rig, provider, count)
    stats = session.query()
    content = read_file(output)
    assert len(content.events) == stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    assert stats["realtime_buffers_lost"] == stats["buffers_written"] == content.data_buffers > 0
    assert_header_agrees(content, stats)


# -- buffering -----------------------------------------------------------------------------------


def test_a_buffering_snapshot_holds_the_newest_buffers_of_its_ring(rig: Rig) -> None:
    """The ring keeps ``max_buffers`` buffers; the snapshot is the ring, and what the ring
    dropped is counted like a circular file's overwritten buffers."""
    provider, snapshot = rig.provider("Buffering"), rig.directory / "snapshot.etl"
    ring_buffers = 8
    settings = {**TINY, "max_buffers": ring_buffers}
    with Session.start("Buffering", mode="buffering", providers=[provider], **settings) as session:
        writes, count = run_until(rig, provider, session, "buffers_written", ring_buffers, batch=1000)
        session.flush()  # the partly filled buffers join the ring
        taken = session.snapshot(snapshot)
        stats = session.query()
    final = session.query()
    assert {key: final[key] for key in COUNTER_KEYS} == {key: stats[key] for key in COUNTER_KEYS}  # stopping added nothing
    content = read_file(snapshot)
    assert_events_are_the_producers(rig, content.events, count)
    assert taken == content.data_buffers == min(ring_buffers, stats["buffers_written"])
    assert stats["events_written"] == writes.returned_true
    assert stats["events_lost"] == writes.returned_false
    ring = ring_accounting(content, stats["buffers_written"], BUFFER_SIZE)
    assert ring["overwritten_buffers"] > 0
    assert len(content.events) + ring["overwritten_events"] == stats["events_written"]
    assert content.header.events_lost == stats["events_lost"]


# -- a consumer killed mid-stream ----------------------------------------------------------------


def _consumers_attached(session: Session) -> int:
    return int(session.info()["realtime_consumers"])


def test_a_consumer_killed_mid_stream_leaves_the_session_running(rig: Rig, consumers: list[ConsumerProcess]) -> None:
    provider, output = rig.provider("Killed"), rig.directory / "killed.etl"
    with Session.start("Killed", output=output, realtime=True, providers=[provider], **TINY) as session:
        wait_enabled_all(rig.producers, provider)
        doomed = ConsumerProcess("Killed")
        consumers.append(doomed)
        begin_writes(rig.producers, provider, 3000)
        doomed.wait_records(1)
        doomed.sigkill()
        assert doomed.process.returncode == -signal.SIGKILL
        writes = writes_of(rig.producers, 3000)
        poll_until(lambda: _consumers_attached(session) == 0, what="the service to notice the consumer died")
        before = session.flush()
        size_before = output.stat().st_size

        unheard = write_at_once(rig.producers, provider, 500, start=10_000)
        between = session.flush()
        assert output.stat().st_size > size_before, "the file keeps growing"

        successor = ConsumerProcess("Killed")
        consumers.append(successor)
        assert _consumers_attached(session) == 1
        heard = write_at_once(rig.producers, provider, 500, start=20_000)
        after = session.flush()
    final = session.query()
    content = read_file(output)
    received = successor.result()

    total = writes + unheard + heard
    assert len(content.events) == final["events_written"] == total.returned_true
    assert final["events_lost"] == total.returned_false
    assert_header_agrees(content, final)
    # With no consumer attached, every buffer of the second batch went to the file only.
    unheard_buffers = sum(1 for buffer in content.buffers if 10_000 <= buffer.indices[0] < 20_000)
    assert unheard_buffers > 0
    assert between["realtime_buffers_lost"] - before["realtime_buffers_lost"] == unheard_buffers
    assert after["realtime_buffers_lost"] == between["realtime_buffers_lost"] == final["realtime_buffers_lost"]
    # The new consumer got exactly what was written once it attached.
    assert sorted(received) == sorted(event for event in content.events if event[1] >= 20_000)
    assert len(received) == heard.returned_true
    for earlier, later in ((before, between), (between, after), (after, final)):
        for key in ("events_written", "events_lost", "buffers_written", "realtime_buffers_lost"):
            assert earlier[key] <= later[key], key


# -- a file write that fails after the buffer was counted ------------------------------------------


def test_a_failed_queued_write_leaves_the_statistics_agreeing_with_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service counts a buffer written when the file's writer thread takes it; when that
    write then fails, the session's statistics move it to lost, as the file's header does."""
    from openetw.etl import EtlReader
    from openetw.etl.relog import is_logfile_header_record
    from openetw.service.logfile import LogFile
    from openetw.service.sessions import SessionRuntime
    from openetw.session import Caller, LogMode, SessionConfig, SessionTable
    from tests.service.test_logfile import BUFFER, GatedDisk, pool_buffers

    path = tmp_path / "failing.etl"
    config = SessionConfig("Failing", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path), buffer_size_kb=BUFFER // 1024)
    table = SessionTable()
    session = table.create(config, Caller(os.getuid(), os.getgid()))
    runtime = SessionRuntime(session.session_id, session.logger_id, config, table)
    runtime.logfile = LogFile(
        os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), session_name="Failing", file_name=str(path),
        logger_id=session.logger_id, buffer_size=BUFFER, log_file_mode=config.log_file_mode, clock=runtime.clock,
    )  # fmt: skip
    disk = GatedDisk(monkeypatch, fail_at=2)  # buffers 1-3 in one call, the flush's header, then a failure
    for buffer in pool_buffers(0, 3):
        runtime.deliver(buffer)
    disk.open.set()
    runtime.flush_file()
    for buffer in pool_buffers(30, 4):  # queued and lost, or refused once the failure is known
        runtime.deliver(buffer)
    runtime.flush_file()  # the failure surfaces here, if not in a delivery before
    runtime.finish()
    assert runtime.write_error is not None and "No space" in runtime.write_error
    statistics = table.statistics(session.session_id)
    with EtlReader(path) as reader:
        in_file = sum(1 for record in reader if not is_logfile_header_record(record))
        header = reader.header
    assert in_file == 30
    assert statistics["events_written"] == in_file and statistics["buffers_written"] == 3
    assert statistics["events_lost"] == header.events_lost == 40
    assert statistics["log_buffers_lost"] == header.buffers_lost == 4


def test_the_flush_timers_flush_never_waits_for_a_stalled_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.etl import EtlReader
    from openetw.service.logfile import LogFile
    from openetw.service.server import TraceService
    from openetw.service.sessions import SessionRuntime
    from openetw.session import Caller, FlushSession, LogMode, SessionConfig, SessionTable
    from tests.service.test_logfile import BUFFER, GatedDisk, pool_buffers

    path = tmp_path / "timer.etl"
    config = SessionConfig("Timer", mode=LogMode.SEQUENTIAL_FILE, file_name=str(path), buffer_size_kb=BUFFER // 1024)
    service = TraceService(tmp_path / "socket")
    table = service.table = SessionTable()
    session = table.create(config, Caller(os.getuid(), os.getgid()))
    runtime = service.runtimes[session.session_id] = SessionRuntime(session.session_id, session.logger_id, config, table)
    runtime.logfile = LogFile(
        os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), session_name="Timer", file_name=str(path),
        logger_id=session.logger_id, buffer_size=BUFFER, log_file_mode=config.log_file_mode, clock=runtime.clock,
    )  # fmt: skip
    disk = GatedDisk(monkeypatch)
    for buffer in pool_buffers(0, 2):
        runtime.deliver(buffer)
    service.carry_out([FlushSession(session.session_id)])  # returns with the disk stalled
    assert disk.writes == 0 and runtime.logfile.queued_bytes == 3 * BUFFER  # two buffers, then the header
    disk.open.set()
    runtime.finish()
    with EtlReader(path) as reader:
        assert reader.header.buffers_written == 3
    service.close()
