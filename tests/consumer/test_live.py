"""Live sessions through a real trace service: a private session the trace starts and stops, and
a session someone else started, consumed with callbacks and with the iterator."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from openetw.consumer import LiveSessionUnavailable, Provider, UserTrace
from openetw.controller import Session, list_sessions
from openetw.errors import ServiceError
from openetw.session import NoSuchSession
from tests.service.harness import Producer, ServiceProcess

PROVIDER = "Contoso.Live"


def _wait(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(predicate())


def test_without_a_service_live_traces_say_what_they_need() -> None:
    for trace in (UserTrace(manifests=[]), UserTrace("mine", manifests=[]), UserTrace(sessions=["other"], manifests=[])):
        with pytest.raises(LiveSessionUnavailable, match="need the trace service") as caught:
            trace.start()
        assert isinstance(caught.value, ServiceError)


def test_a_private_session_delivers_to_callbacks_and_stops_with_the_trace(service: ServiceProcess, producers: Any) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    trace = UserTrace("ConsumerPrivate", manifests=[])
    provider = Provider(PROVIDER).level(4)
    seen: list[dict[str, Any]] = []
    provider.add_on_event_callback(lambda r, c: seen.append(c.parser_for(r).as_dict()))
    trace.enable(provider)
    runner = threading.Thread(target=trace.start)
    runner.start()
    try:
        assert producer.wait_enabled(PROVIDER)
        assert any(s["name"] == "ConsumerPrivate" for s in list_sessions())
        assert producer.write(PROVIDER, 30, level=4) == 30
        assert producer.write(PROVIDER, 5, level=5, start=100) == 0  # the session's level, applied by the producer
        assert _wait(lambda: len(seen) >= 30)
    finally:
        trace.stop()
        runner.join(timeout=20)
    assert not runner.is_alive()
    assert sorted(fields["index"] for fields in seen) == list(range(30))
    assert not any(s["name"] == "ConsumerPrivate" for s in list_sessions())  # the trace stopped its session
    stats = trace.query_stats()
    assert stats["events_handled"] == 30 and stats["events_written"] == 30 and stats["realtime_buffers_lost"] == 0


def test_an_existing_session_through_the_iterator(service: ServiceProcess, producers: Any) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    producer.register("Contoso.Other")
    with Session.start("Shared", mode="realtime", flush_timer=1, providers=[PROVIDER, "Contoso.Other"]) as session:
        trace = UserTrace(sessions=["Shared"], manifests=[])
        trace.enable(Provider(PROVIDER))
        received: list[int] = []

        def consume() -> None:
            for event in trace.events():
                received.append(event.parse("index"))

        reader = threading.Thread(target=consume)
        reader.start()
        try:
            assert producer.wait_enabled(PROVIDER) and producer.wait_enabled("Contoso.Other")
            assert producer.write(PROVIDER, 20) == 20
            assert producer.write("Contoso.Other", 7) == 7  # in the session, but not asked for by the trace
            assert _wait(lambda: len(received) >= 20)
            assert _wait(lambda: trace.query_stats()["events_unmatched"] >= 7)
        finally:
            trace.stop()
            reader.join(timeout=20)
        assert not reader.is_alive()
        assert sorted(received) == list(range(20))
        assert any(s["name"] == "Shared" for s in list_sessions())  # someone else's session keeps running
        assert session.query()["events_written"] == 27


def test_attaching_to_no_such_session(service: ServiceProcess) -> None:
    with pytest.raises(NoSuchSession):
        UserTrace(sessions=["Nobody"], manifests=[]).start()
