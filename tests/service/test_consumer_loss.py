"""A real-time consumer killed mid-stream: the buffers on their way to it (queued at the service,
in its socket) were counted written when sent; once it is gone they are counted lost, so the
session's statistics keep ``events written by producers = events_written + events_lost`` with
``events_written`` what consumers received."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from openetw.controller import Session
from tests.service.guarantee_helpers import (
    ConsumerProcess,
    begin_writes,
    poll_until,
    register_all,
    wait_enabled_all,
    writes_of,
)
from tests.service.harness import ServiceProcess

BUFFER_KB = 4
TINY = {"buffer_size": BUFFER_KB, "min_buffers": 2, "max_buffers": 64, "flush_timer": 0}
PER_PRODUCER = 6000


@pytest.fixture
def consumers() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    try:
        yield started
    finally:
        for consumer in started:
            consumer.kill()


def _last_report(consumer: ConsumerProcess) -> None:
    """Read what the killed consumer printed before it died (its pipe keeps it)."""
    try:
        while True:
            consumer._read(timeout=5)
    except EOFError:
        pass


def test_a_killed_consumers_buffers_in_flight_are_counted_lost(
    service: ServiceProcess, producers: Any, consumers: list[ConsumerProcess],
) -> None:  # fmt: skip
    writers = [producers(), producers()]
    provider = "Test.Consumer.Killed"
    register_all(writers, provider)
    with Session.start("KilledConsumer", realtime=True, providers=[provider], **TINY) as session:
        wait_enabled_all(writers, provider)
        doomed = ConsumerProcess("KilledConsumer", delay=0.02)  # slow: buffers pile up on their way to it
        consumers.append(doomed)
        begin_writes(writers, provider, PER_PRODUCER)
        doomed.wait_records(200)
        doomed.sigkill()
        assert doomed.process.returncode == -signal.SIGKILL
        writes = writes_of(writers, PER_PRODUCER)
        poll_until(lambda: int(session.info()["realtime_consumers"]) == 0, what="the service to notice the consumer died")
        session.flush()  # the pools' last, partly filled buffers too
        final = session.query()
    _last_report(doomed)
    # Every event the producers wrote is written (received by the consumer) or lost.
    assert final["events_written"] + final["events_lost"] == writes.attempts
    # What was counted written is what the consumer took: it says so as it takes each buffer,
    # and prints its count when it reads the buffer's first record (a buffer or two later).
    assert doomed.buffers <= final["buffers_written"] <= doomed.buffers + 2, (doomed.buffers, final)
    assert final["realtime_buffers_lost"] > 0


def test_a_consumer_that_never_acknowledges_keeps_the_books_bounded(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from openetw.service import connection as module
    from openetw.service.connection import RealtimeDelivery
    from openetw.service.server import TraceService

    monkeypatch.setattr(module, "MAX_UNACKNOWLEDGED", 10)
    service = TraceService(tmp_path / "control.sock")  # not listening: the loop's parts alone
    ours, peer = socket.socketpair()
    try:
        connection = service.adopt_connection(ours)
        connection.acknowledges(7)
        sent = [RealtimeDelivery(7, events=3) for _ in range(25)]
        for delivery in sent:
            assert connection.send({"event": "buffer", "session_id": 7}, payload=b"x" * 64, is_buffer=True, delivery=delivery)
        assert len(connection.unreceived[7]) == 10
        assert all(delivery.received for delivery in sent[:15]) and not any(delivery.received for delivery in sent[15:])
        connection.received(7, 4)  # the consumer took four more
        assert [delivery.received for delivery in sent[15:]] == [True] * 4 + [False] * 6
        gone = connection.take_unreceived()
        assert gone == sent[19:] and all(delivery.abandoned_by_one() for delivery in gone)
    finally:
        service.close()
        peer.close()
