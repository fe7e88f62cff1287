"""The controller API against a real service: log modes, real-time consumers, update, snapshot, autostart."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from openetw.controller import RealtimeConsumer, ServiceClient, Session, list_sessions, parse_mode, registered_providers
from openetw.controller.session import session_config
from openetw.errors import InvalidArgument
from openetw.etl import EtlReader
from openetw.session import EnableRule, InvalidSessionConfig, LogMode, ProviderEnable, SessionConfig, SessionExists
from tests.service.harness import (
    Producer,
    ServiceProcess,
    decoded,
    indices,
    read_events,
)

PROVIDER = "Test.Controller"


@pytest.mark.parametrize(
    ("mode", "output", "realtime", "expected"),
    [
        (None, "x.etl", False, LogMode.SEQUENTIAL_FILE),
        (None, None, False, LogMode.REAL_TIME),
        ("file", "x.etl", True, LogMode.FILE_AND_REAL_TIME),
        ("circular", "x.etl", False, LogMode.CIRCULAR_FILE),
        ("newfile", "x%d.etl", False, LogMode.NEW_FILE),
        ("buffering", None, False, LogMode.BUFFERING),
        (LogMode.REAL_TIME, None, True, LogMode.REAL_TIME),
    ],
)
def test_parse_mode(mode, output, realtime, expected) -> None:
    assert parse_mode(mode, output=output, realtime=realtime) is expected


def test_parse_mode_refuses_what_cannot_be() -> None:
    with pytest.raises(InvalidArgument, match="unknown mode"):
        parse_mode("tape", output=None, realtime=False)
    with pytest.raises(InvalidArgument, match="real time"):
        parse_mode("buffering", output=None, realtime=True)


def test_a_real_time_consumer_sees_the_events_as_they_come(service: ServiceProcess, producers) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    session = Session.start("Live", mode="realtime", flush_timer=1, providers=[PROVIDER])
    consumer = session.consumer()
    received: list = []
    reader = threading.Thread(target=lambda: received.extend(consumer.records()))
    reader.start()
    try:
        assert producer.wait_enabled(PROVIDER)
        assert producer.write(PROVIDER, 40) == 40
        deadline = time.monotonic() + 10
        while len(received) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = session.stop()
    finally:
        reader.join(timeout=15)
        consumer.close()
    assert not reader.is_alive()
    assert sorted(fields["index"] for _, _, fields in decoded(received)) == list(range(40))
    assert stats["events_written"] == 40 and stats["realtime_buffers_lost"] == 0


def test_real_time_buffers_nobody_takes_are_counted_lost(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "both.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Both", output=output, realtime=True, flush_timer=0, providers=[PROVIDER]) as both, \
            Session.start("Alone", mode="realtime", flush_timer=0, providers=[PROVIDER]) as alone:  # fmt: skip
        assert producer.wait_sessions(PROVIDER, 2) == 2
        producer.write(PROVIDER, 30)
    assert sorted(indices(output)) == list(range(30))
    both_stats, alone_stats = both.query(), alone.query()
    assert both_stats["events_written"] == 30 and both_stats["events_lost"] == 0
    assert both_stats["realtime_buffers_lost"] == both_stats["buffers_written"] >= 1
    assert alone_stats["events_written"] == 0 and alone_stats["events_lost"] == 30
    assert alone_stats["realtime_buffers_lost"] >= 1


def test_a_buffering_session_keeps_its_last_buffers_for_a_snapshot(service: ServiceProcess, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Memory", mode="buffering", buffer_size=4, max_buffers=8, providers=[PROVIDER]) as session:
        assert producer.wait_enabled(PROVIDER)
        for start in range(0, 2000, 100):  # never more than the pool holds between two flushes
            producer.write(PROVIDER, 100, start=start, pad=30)
            session.flush()
        assert session.query()["events_lost"] == 0
        snapshot = tmp_path / "snap.etl"
        buffers = session.snapshot(snapshot)
    assert 1 <= buffers <= 8
    found = sorted(indices(snapshot))
    assert found == list(range(2000 - len(found), 2000)), "the most recent events, without a gap"
    with EtlReader(snapshot) as reader:
        assert reader.header.buffers_written == buffers + 1


def test_a_new_file_session_writes_numbered_files(service: ServiceProcess, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    pattern = tmp_path / "part%d.etl"
    with Session.start("Parts", output=pattern, mode="newfile", max_size=1, buffer_size=64, flush_timer=0, providers=[PROVIDER]) as session:
        assert producer.wait_enabled(PROVIDER)
        written = producer.write(PROVIDER, 12000, pad=200)
    stats = session.query()
    parts = sorted(tmp_path.glob("part*.etl"))
    assert len(parts) >= 2
    assert all(path.stat().st_size <= 1 << 20 for path in parts)
    found = sorted(i for path in parts for i in indices(path))
    # Every write that returned True is in the files, once; a busy machine's service may leave
    # the pool full for a moment, and those writes return False and are counted lost.
    assert len(found) == len(set(found)) == written == stats["events_written"]
    assert set(found) <= set(range(12000)) and stats["events_lost"] == 12000 - written


def test_update_switches_the_output_file(service: ServiceProcess, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    first, second = tmp_path / "first.etl", tmp_path / "second.etl"
    with Session.start("Switch", output=first, providers=[PROVIDER]) as session:
        assert producer.wait_enabled(PROVIDER)
        producer.write(PROVIDER, 5)
        session.flush()
        info = session.update(output=second, flush_timer=2)
        assert info["file_name"] == str(second) and info["flush_timer"] == 2
        producer.write(PROVIDER, 5, start=5)
    assert sorted(indices(first)) == list(range(5))
    assert sorted(indices(second)) == list(range(5, 10))


def test_the_keywords_describe_the_config_a_session_starts_with(tmp_path: Path) -> None:
    config = session_config("K", tmp_path / "k.etl", realtime=True, buffer_size=128, min_buffers=8, max_buffers=4,
                            providers=[PROVIDER, ("*Other", {"level": 4, "any": 0x10})])  # fmt: skip
    assert (config.mode, config.file_name, config.buffer_size_kb) == (LogMode.FILE_AND_REAL_TIME, str(tmp_path / "k.etl"), 128)
    assert (config.minimum_buffers, config.maximum_buffers) == (4, 4)  # the minimum never above the maximum
    (by_name, hashed) = config.providers
    assert (by_name.provider_name, by_name.by_name) == (PROVIDER, True)  # the service resolves it or keeps it pending
    assert (hashed.provider_name, hashed.by_name, hashed.rule.level, hashed.rule.match_any) == ("Other", False, 4, 0x10)
    with pytest.raises(InvalidArgument, match="need kernel_flags"):
        session_config("K", kernel_source="tracefs")
    with pytest.raises(InvalidArgument, match="needs an output file"):
        session_config("K", mode="file")


def test_a_session_starts_from_its_config(service: ServiceProcess, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    config = SessionConfig("FromConfig", LogMode.SEQUENTIAL_FILE, file_name=str(tmp_path / "c.etl"), flush_timer=0,
                           providers=(ProviderEnable.of(PROVIDER, EnableRule(level=5)),))  # fmt: skip
    with Session.start(config) as session:
        assert session.info_at_start["file_name"] == str(tmp_path / "c.etl")
        assert producer.wait_enabled(PROVIDER)
        producer.write(PROVIDER, 3)
    assert sorted(indices(tmp_path / "c.etl")) == [0, 1, 2]
    with pytest.raises(InvalidArgument, match="not both"):
        Session.start(config, flush_timer=2)


def test_a_name_kept_pending_is_announced_where_the_session_was_started(service: ServiceProcess) -> None:
    from openetw.provider_names import ProviderNameWarning

    with pytest.warns(ProviderNameWarning, match="Test.Nobody.Yet") as warned:
        Session.start("Pending", providers=["Test.Nobody.Yet"]).stop()
    assert [w.filename for w in warned] == [__file__]


def test_session_errors_come_back_as_their_exceptions(service: ServiceProcess, tmp_path: Path) -> None:
    with Session.start("Twice", output=tmp_path / "t.etl"):
        with pytest.raises(SessionExists):
            Session.start("twice", output=tmp_path / "u.etl")  # names compare without case
    with pytest.raises(InvalidSessionConfig, match="maximum file size"):
        Session.start("NoMax", output=tmp_path / "c.etl", mode="circular")
    assert list_sessions() == []


def test_list_and_providers_show_who_is_there(service: ServiceProcess, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Listed", output=tmp_path / "l.etl", providers=[PROVIDER]):
        assert producer.wait_enabled(PROVIDER)
        assert [s["name"] for s in list_sessions()] == ["Listed"]
        (found,) = [p for p in registered_providers() if p["pid"] == producer.pid]
        assert found["name"] == PROVIDER and found["sessions"] == ["Listed"]


def _gone(pid: int) -> bool:
    """Whether every thread of ``pid`` has exited: a killed process whose first thread is a
    zombie still holds its descriptors (its listening socket) until its last thread is one too."""
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return False
    except FileNotFoundError:
        return True
    return True


def test_the_service_is_started_on_first_use(service_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENETW_NO_AUTOSTART")
    pid = None
    try:
        with Session.start("Auto", output=tmp_path / "auto.etl") as session:
            assert session.query()["events_written"] == 0
            with ServiceClient(autostart=False) as client:
                pid = client.call("status")["pid"]
            assert os.getppid() != pid and os.getpid() != _parent_of(pid), "the service is detached"
    finally:
        if pid is None:
            with ServiceClient(autostart=False) as client:
                pid = client.call("status")["pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert _gone(pid)
    assert len(read_events(tmp_path / "auto.etl")) == 0
    with pytest.raises(Exception, match="no trace service"):
        RealtimeConsumer("Auto")


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])
