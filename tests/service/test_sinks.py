"""A session's sinks: every destination is offered each buffer, and the session keeps the books once.

Sinks are plugged into a real ``SessionRuntime`` (no service, no sockets): a sink that takes or
refuses at will shows how ``deliver`` counts a buffer written, lost per kind, and its events lost.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from openetw.errors import InvalidArgument
from openetw.service.connection import Delivery
from openetw.service.handlers import _sinks_for
from openetw.service.server import TraceService
from openetw.service.sessions import SessionRuntime
from openetw.service.sinks import SINK_REQUEST_KEYS, ConsumerSink, LossKind, RingSink
from openetw.session import Caller, LogMode, SessionConfig, SessionTable

BUFFER = bytes(4096)


class ScriptedSink:
    """Takes the buffers its script says it takes, and remembers what it heard."""

    def __init__(self, name: str, kind: LossKind, takes: bool, *, keeps: bool = True) -> None:
        self.name, self.kind, self.takes, self.keeps = name, kind, takes, keeps
        self.accepted = self.lost = 0
        self.heard: list[Any] = []

    def offer(self, buffer: Any, events: int, delivery: Delivery) -> bool:
        self.heard.append(("offer", events, delivery.taken))
        if self.takes:
            self.accepted += 1
            delivery.kept = delivery.kept or self.keeps
        else:
            self.lost += 1
        return self.takes

    def note_lost(self, events: int) -> None:
        self.heard.append(("lost", events))

    def flush(self, *, wait: bool) -> None:
        self.heard.append(("flush", wait))

    def close(self) -> None:
        self.heard.append(("close",))

    def describe(self) -> dict[str, Any] | None:
        return {"accepted": self.accepted}


def runtime(mode: LogMode) -> SessionRuntime:
    table = SessionTable()
    config = SessionConfig(
        "Sinks", mode=mode, minimum_buffers=2, maximum_buffers=2, file_name="unused.etl" if mode.writes_file else None
    )
    session = table.create(config, Caller(os.getuid(), os.getgid()))
    return SessionRuntime(session.session_id, session.logger_id, config, table, count_records=lambda _data: 3)


def stats(runtime: SessionRuntime) -> dict[str, int]:
    return runtime.table.statistics(runtime.session_id)


def test_the_log_mode_chooses_the_services_own_sinks() -> None:
    assert [type(sink) for sink in runtime(LogMode.REAL_TIME).sinks] == [ConsumerSink]
    assert [type(sink) for sink in runtime(LogMode.BUFFERING).sinks] == [RingSink]
    assert [sink.name for sink in runtime(LogMode.FILE_AND_REAL_TIME).sinks] == ["consumers", "file"]


def test_a_plugged_in_sink_comes_after_the_consumers_and_before_the_file() -> None:
    session = runtime(LogMode.FILE_AND_REAL_TIME)
    session.add_sink(ScriptedSink("stream", "realtime", True))
    assert [sink.name for sink in session.sinks] == ["consumers", "stream", "file"]
    assert session.find_sink("stream") is session.sinks[1]


def test_a_buffer_one_real_time_sink_takes_is_written_and_not_lost() -> None:
    session = runtime(LogMode.REAL_TIME)  # no consumer attached: the consumers refuse
    stream = ScriptedSink("stream", "realtime", True)
    session.add_sink(stream)
    session.deliver(BUFFER)
    counts = stats(session)
    assert counts["buffers_written"] == 1 and counts["events_written"] == 3
    assert counts["realtime_buffers_lost"] == 0 and counts["events_lost"] == 0
    assert stream.heard == [("offer", 3, False)]


def test_a_buffer_every_sink_refuses_is_lost_once() -> None:
    session = runtime(LogMode.REAL_TIME)
    session.add_sink(ScriptedSink("stream", "realtime", False))
    session.add_sink(ScriptedSink("channel", "realtime", False))
    session.deliver(BUFFER)
    counts = stats(session)
    assert counts["buffers_written"] == 0 and counts["events_written"] == 0
    assert counts["realtime_buffers_lost"] == 1  # one buffer, refused by three real-time sinks
    assert counts["events_lost"] == 3


def test_each_kind_that_refused_counts_its_loss_but_the_events_survive_in_another() -> None:
    session = runtime(LogMode.REAL_TIME)
    session.add_sink(ScriptedSink("archive", "file", False))
    later = ScriptedSink("later", "realtime", True)
    session.add_sink(later)
    session.deliver(BUFFER)
    counts = stats(session)
    assert counts["log_buffers_lost"] == 1 and counts["realtime_buffers_lost"] == 0
    assert counts["buffers_written"] == 1 and counts["events_lost"] == 0
    assert later.heard == [("offer", 3, False)]  # nothing had taken it before this sink


def test_the_buffering_ring_keeps_the_newest_buffers() -> None:
    session = runtime(LogMode.BUFFERING)
    for number in range(4):
        session.deliver(bytes([number]) * 16)
    assert [data[0] for data, _ in session.ring] == [2, 3]
    assert stats(session)["buffers_written"] == 4


def test_producer_losses_flushes_and_the_end_reach_every_sink() -> None:
    session = runtime(LogMode.REAL_TIME)
    sink = ScriptedSink("stream", "realtime", True)
    session.add_sink(sink)
    session.note_lost(5)
    session.flush_file(wait=False)
    session.finish()
    assert sink.heard == [("lost", 5), ("flush", False), ("close",)]
    assert stats(session)["events_lost"] == 5


@pytest.mark.parametrize("kept", [True, False])
def test_a_buffer_a_sink_kept_is_not_lost_when_its_consumers_leave(kept: bool) -> None:
    session = runtime(LogMode.REAL_TIME)
    session.add_sink(ScriptedSink("stream", "realtime", True, keeps=kept))
    delivery = Delivery(session.session_id, 3)
    session.sinks[1].offer(BUFFER, 3, delivery)
    delivery.waiting = 1  # as if one consumer had it on its way
    assert delivery.abandoned_by_one() is not kept


def test_a_start_request_may_name_a_stream() -> None:
    assert SINK_REQUEST_KEYS == ("stream",)


def test_a_service_without_a_stream_sink_refuses_a_streamed_session(tmp_path: Path) -> None:
    service = TraceService(tmp_path / "control.sock")  # not listening, and nothing plugged in
    config = SessionConfig("Streamed", mode=LogMode.REAL_TIME)
    try:
        with pytest.raises(InvalidArgument, match="'stream'"):
            _sinks_for(service, config, {"stream": {"options": {"servers": ["nats://127.0.0.1:1"]}}})
        seen: list[Any] = []

        def factory(_service: Any, _config: Any, spec: Any) -> Any:
            seen.append(spec)
            return lambda runtime: ScriptedSink("stream", "realtime", True)

        service.sink_factories["stream"] = factory
        attachers = _sinks_for(service, config, {"stream": {"x": 1}, "providers": []})
        assert seen == [{"x": 1}] and len(attachers) == 1
        assert _sinks_for(service, config, {}) == []
    finally:
        service.close()
