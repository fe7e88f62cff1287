"""The trace service with real processes: sessions, routing, accounting, crashes, limits."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from openetw.controller import ServiceClient, Session
from openetw.errors import ServiceError
from openetw.etl import EtlReader
from openetw.ipc.protocol import FRAME_HEADER, MAGIC, MAX_JSON, PROTOCOL_VERSION, encode_frame
from openetw.session import MAX_SESSIONS, TooManySessions
from tests.service.harness import (
    Producer,
    ServiceProcess,
    decoded,
    indices,
    read_events,
    start_service,
)

PROVIDER = "Test.Service"


def test_a_file_session_gets_exactly_the_events_its_level_and_keywords_select(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "select.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Select", output=output, providers=[(PROVIDER, {"level": 3, "any": 0x6, "all": 0x4})]) as session:
        assert producer.wait_enabled(PROVIDER)
        expected = []
        start = 0
        for level in (1, 3, 4, 5):
            for keyword in (0x0, 0x1, 0x2, 0x4, 0x6, 0xC):
                producer.write(PROVIDER, 3, start=start, level=level, keyword=keyword)
                takes = level <= 3 and (keyword == 0 or (keyword & 0x6 and keyword & 0x4 == 0x4))
                if takes:
                    expected += range(start, start + 3)
                start += 3
        session.flush()
        assert sorted(indices(output)) == expected
    stats = session.query()
    assert stats["events_written"] == len(expected)
    assert stats["events_lost"] == 0
    events = decoded(read_events(output))
    assert {(provider, name) for provider, name, _ in events} == {(PROVIDER, "Tick")}
    assert {fields["pid"] for _, _, fields in events} == {producer.pid}


def test_two_sessions_with_different_settings_each_get_their_own(service: ServiceProcess, producers, tmp_path: Path) -> None:
    verbose, errors = tmp_path / "verbose.etl", tmp_path / "errors.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Verbose", output=verbose, providers=[(PROVIDER, {"level": 5})]) as first, \
            Session.start("Errors", output=errors, buffer_size=4, providers=[(PROVIDER, {"level": 2})]) as second:  # fmt: skip
        assert producer.wait_sessions(PROVIDER, 2) == 2
        producer.write(PROVIDER, 10, start=0, level=2, event="Error")
        producer.write(PROVIDER, 20, start=100, level=5, event="Detail")
    assert sorted(indices(verbose)) == list(range(10)) + list(range(100, 120))
    assert sorted(indices(errors)) == list(range(10))
    assert first.query()["events_written"] == 30
    assert second.query()["events_written"] == 10
    with EtlReader(errors) as reader:
        assert reader.header.buffer_size == 4096
        assert reader.header.logger_name == "Errors"


def test_enabling_and_disabling_while_the_producer_runs(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "toggle.etl"
    producer: Producer = producers()
    assert not producer.register(PROVIDER)
    with Session.start("Toggle", output=output) as session:
        assert producer.write(PROVIDER, 5, start=0) == 0  # nobody listens yet
        session.enable(PROVIDER, level=5)
        assert producer.wait_enabled(PROVIDER)
        assert producer.write(PROVIDER, 7, start=100) == 7
        session.disable(PROVIDER)
        assert not producer.wait_enabled(PROVIDER, False)
        assert producer.write(PROVIDER, 5, start=200) == 0
        session.enable(PROVIDER, level=5, any=0x1)
        assert producer.wait_enabled(PROVIDER)
        assert producer.write(PROVIDER, 3, start=300) == 3
    assert sorted(indices(output)) == list(range(100, 107)) + list(range(300, 303))
    assert session.query()["events_written"] == 10
    calls = producer.send("callbacks", name=PROVIDER)["calls"]
    assert [call[0] for call in calls] == [True, False, True, False]  # the last: the session stopped


def test_a_provider_started_before_the_service_is_enabled_once_it_starts(service_env: Path, producers, tmp_path: Path) -> None:
    producer: Producer = producers()
    assert not producer.register(PROVIDER, wait=0.2)
    running = start_service(service_env)
    try:
        output = tmp_path / "late.etl"
        with Session.start("Late", output=output, providers=[PROVIDER]):
            assert producer.wait_enabled(PROVIDER, timeout=10)
            assert producer.write(PROVIDER, 4) == 4
        assert sorted(indices(output)) == [0, 1, 2, 3]
    finally:
        running.kill()


def test_accounting_with_tiny_buffers_every_event_is_in_the_file_or_lost(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "tiny.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    total = 4000
    with Session.start("Tiny", output=output, buffer_size=1, min_buffers=2, max_buffers=2, flush_timer=0,
                       providers=[PROVIDER]) as session:  # fmt: skip
        assert producer.wait_enabled(PROVIDER)
        written = producer.write(PROVIDER, total, pad=40)
        # A loss marks the next buffer the producer opens: one more write once the service has
        # emptied the pool (a burst may end before it frees a buffer, the compiled writer's above all).
        time.sleep(0.3)
        written += producer.write(PROVIDER, 1, start=total, pad=40)
    stats = session.query()
    in_file = read_events(output)
    assert stats["events_written"] == len(in_file) == written
    assert stats["events_written"] + stats["events_lost"] == total + 1
    assert stats["events_lost"] > 0, "two 1 KB buffers cannot keep up with a burst"
    with EtlReader(output) as reader:
        list(reader)
        assert reader.header.events_lost == stats["events_lost"]
        assert reader.stats.buffers_with_events_lost_flag > 0


def test_a_killed_producer_loses_nothing_it_wrote(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "killed.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Killed", output=output, flush_timer=0, providers=[PROVIDER]) as session:
        assert producer.wait_enabled(PROVIDER)
        assert producer.write(PROVIDER, 1234) == 1234
        os.kill(producer.pid, signal.SIGKILL)
        producer.kill()
        deadline = time.monotonic() + 10
        while session.query()["events_written"] < 1234 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert sorted(indices(output)) == list(range(1234))
    assert session.query()["events_lost"] == 0


def test_a_killed_service_leaves_a_file_that_reads_up_to_its_last_flush(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "crash.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    session = Session.start("Crash", output=output, flush_timer=0, providers=[PROVIDER])
    assert producer.wait_enabled(PROVIDER)
    producer.write(PROVIDER, 2000)
    session.flush()
    producer.write(PROVIDER, 50, start=5000)  # in the producer's pool only: never flushed
    service.kill()
    found = indices(output)  # read strictly: no error, no unknown record
    assert sorted(found)[:2000] == list(range(2000))
    assert set(found) <= set(range(2000)) | set(range(5000, 5050))
    assert not producer.wait_enabled(PROVIDER, False), "a provider whose service died is disabled"


def test_a_producer_that_does_not_answer_cannot_hold_up_a_stop(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "frozen.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    session = Session.start("Frozen", output=output, flush_timer=0, providers=[PROVIDER])
    assert producer.wait_enabled(PROVIDER)
    assert producer.write(PROVIDER, 100) == 100
    os.kill(producer.pid, signal.SIGSTOP)
    try:
        stats = session.stop()  # the pool is taken as it is once the producer's time is up
    finally:
        os.kill(producer.pid, signal.SIGCONT)
    assert stats["events_written"] == 100
    assert sorted(indices(output)) == list(range(100))


def _raw_connection(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        while chunk := sock.recv(65536):
            _ = chunk
    except ConnectionResetError:
        pass
    return True


MALFORMED = {
    "http": b"GET / HTTP/1.1\r\n\r\n",
    "version": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION + 1, 2, 0) + b"{}",
    "oversized": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, MAX_JSON + 1, 0),
    "payload": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 2, 1 << 20) + b"{}",
    "not-object": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 5, 0) + b"[1,2]",
    "not-utf8": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 4, 0) + b"\xff\xfe{}",
    "unknown-op": encode_frame({"op": "no such operation", "id": 1}),
    "no-op": encode_frame({"id": 1}),
    "missing-fds": encode_frame({"op": "query", "id": 1, "fds": 2, "session": "x"}),
}


def test_a_malformed_message_closes_that_connection_only(service: ServiceProcess, tmp_path: Path) -> None:
    with Session.start("Bystander", output=tmp_path / "b.etl") as bystander:
        for name, garbage in MALFORMED.items():
            bad = _raw_connection(service.socket)
            bad.sendall(garbage)
            assert _closed_by_peer(bad), name
            bad.close()
            assert bystander.query()["events_written"] == 0, name  # the service and the session go on
            assert service.process.poll() is None, name


def test_a_refused_request_keeps_the_connection(service: ServiceProcess) -> None:
    with ServiceClient() as client:
        with pytest.raises(Exception, match="no trace session"):
            client.call("query", session="nothing")
        assert client.call("status")["sessions"] == 0


def test_the_65th_session_fails_with_its_error(service: ServiceProcess) -> None:
    with ServiceClient() as client:
        for number in range(MAX_SESSIONS):
            client.call("start_session", config={"name": f"S{number}", "mode": "real-time"})
        with pytest.raises(TooManySessions, match="64"):
            client.call("start_session", config={"name": "one too many", "mode": "real-time"})
        assert len(client.call("list")["sessions"]) == MAX_SESSIONS
        client.call("stop_session", session="S0")
        client.call("start_session", config={"name": "now there is room", "mode": "real-time"})


def test_dissect_etl_reads_the_session_file_with_the_right_record_count(service: ServiceProcess, producers, tmp_path: Path) -> None:
    dissect = pytest.importorskip("dissect.etl")
    output = tmp_path / "interop.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Interop", output=output, buffer_size=16, providers=[PROVIDER]):
        assert producer.wait_enabled(PROVIDER)
        producer.write(PROVIDER, 700, pad=20)
    with open(output, "rb") as handle:
        count = sum(1 for _ in dissect.ETL(handle))
    assert count == 700 + 1  # the logfile header record too
    assert len(read_events(output)) == 700


def test_events_over_64_kb_are_refused_and_counted_lost(service: ServiceProcess, producers, tmp_path: Path) -> None:
    guid = "5eadbeef-0000-4000-8000-0000000a11ce"
    output = tmp_path / "big.etl"
    producer: Producer = producers()
    producer.send("register_manifest", guid=guid)
    with Session.start("Big", output=output, providers=[guid]) as session:
        assert producer.send("wait_enabled", guid=guid)["enabled"]
        small = producer.send("write_raw", guid=guid, count=3, size=100)
        big = producer.send("write_raw", guid=guid, count=2, size=70000)
        assert small == {"written": 3, "refused": 0}
        assert big == {"written": 0, "refused": 2}
    assert session.query()["events_written"] == 3
    assert session.query()["events_lost"] == 2
    records = read_events(output)
    assert [len(r.user_data) for r in records] == [100, 100, 100]


def test_stopping_the_service_finishes_its_sessions(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "shutdown.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    Session.start("Shutdown", output=output, flush_timer=0, providers=[PROVIDER])
    assert producer.wait_enabled(PROVIDER)
    producer.write(PROVIDER, 321)
    assert service.stop() == 0
    assert sorted(indices(output)) == list(range(321))
    with EtlReader(output) as reader:
        assert reader.header.buffers_written == sum(1 for _ in reader.buffers())
        assert reader.header.end_time > reader.header.start_time
    assert not service.socket.exists()


def test_query_reports_exactly_the_statistics_keys(service: ServiceProcess, tmp_path: Path) -> None:
    with Session.start("Keys", output=tmp_path / "k.etl") as session:
        assert set(session.query()) == {
            "buffers", "free_buffers", "events_written", "events_lost", "buffers_written", "log_buffers_lost", "realtime_buffers_lost",
            "events_rejected", "events_truncated",
        }  # fmt: skip


def test_no_service_and_no_autostart_is_a_clear_error(service_env: Path) -> None:
    with pytest.raises(ServiceError, match="no trace service"):
        Session.start("Nobody", output=str(service_env.parent / "x.etl"))

