"""Iterating a trace: plain and async iterators, back-pressure, stopping."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from openetw.consumer import Event, EventsDropped, Provider, UserTrace
from openetw.etl import EtlReader
from tests.consumer.helpers import PROVIDER_A, corpus_etl, every_kind, write_etl


@pytest.fixture(scope="module")
def etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_etl(tmp_path_factory.mktemp("iteration") / "kinds.etl", every_kind(3000))


def _raws(path: Path) -> list[bytes]:
    with EtlReader(path) as reader:
        return [r.raw for r in reader.records(time_order=True)]


@pytest.mark.parametrize("index", [True, False])
def test_events_are_every_record_in_order(etl: Path, index: bool) -> None:
    trace = UserTrace(files=[etl], manifests=[], index=index)
    events = list(trace.events(queue_size=64))
    assert all(isinstance(e, Event) for e in events)
    assert [e.record.raw for e in events] == _raws(etl)
    stats = trace.query_stats()
    assert stats["events_handled"] == len(events) and stats["events_dropped"] == 0


def test_events_of_enabled_providers_and_their_callbacks(etl: Path) -> None:
    trace = UserTrace(files=[etl], manifests=[])
    provider = Provider(PROVIDER_A).level(3)
    called: list[int] = []
    provider.add_on_event_callback(lambda r, c: called.append(threading.get_ident()))
    trace.enable(provider)
    events = list(trace.events())
    with EtlReader(etl) as reader:
        # WPP records carry their message GUID where others carry the provider's, as ProcessTrace reports them.
        expected = [r.raw for r in reader.records(time_order=True) if r.provider_id == PROVIDER_A and r.level <= 3]
    assert [e.record.raw for e in events] == expected
    assert len(called) == len(expected) and threading.get_ident() not in called  # the trace's own thread
    assert {e.provider_id for e in events} == {PROVIDER_A}


def test_dropping_counts_every_event_exactly(etl: Path) -> None:
    trace = UserTrace(files=[etl], manifests=[])
    errors: list[Any] = []
    trace.on_error(lambda error, record: errors.append(error))
    received = 0
    for _ in trace.events(queue_size=4, when_full="drop"):
        received += 1
        time.sleep(0.0005)  # a slow consumer
    stats = trace.query_stats()
    total = len(_raws(etl))
    assert stats["events_handled"] == received
    assert stats["events_handled"] + stats["events_dropped"] == total == stats["events_read"]
    assert stats["events_dropped"] > 0
    assert [type(e) for e in errors] == [EventsDropped] and errors[0].count == stats["events_dropped"]


def test_blocking_never_drops(etl: Path) -> None:
    trace = UserTrace(files=[etl], manifests=[])
    received = 0
    for _ in trace.events(queue_size=4):
        received += 1
        if received % 500 == 0:
            time.sleep(0.01)
    stats = trace.query_stats()
    assert received == stats["events_handled"] == stats["events_read"] and stats["events_dropped"] == 0


def test_leaving_the_loop_early_stops_the_trace_and_counts_what_was_queued(etl: Path) -> None:
    trace = UserTrace(files=[etl], manifests=[])
    for received, _ in enumerate(trace.events(queue_size=64), start=1):
        if received == 100:
            break
    stats = trace.query_stats()
    assert stats["events_handled"] == 100
    offered = stats["events_handled"] + stats["events_dropped"]
    assert offered + stats["events_not_processed"] == stats["events_read"] + stats["events_not_processed"] == len(_raws(etl))


def test_async_iteration(etl: Path) -> None:
    async def consume() -> tuple[int, int]:
        trace = UserTrace(files=[etl], manifests=[])
        count = 0
        ticks = 0
        async for _event in trace.events_async(queue_size=32):
            count += 1
            if count % 300 == 0:
                await asyncio.sleep(0)
                ticks += 1
        return count, trace.query_stats()["events_handled"]

    count, handled = asyncio.run(consume())
    assert count == handled == len(_raws(etl))


def test_async_iteration_can_drop_and_break(etl: Path) -> None:
    async def consume() -> tuple[int, dict[str, Any]]:
        trace = UserTrace(files=[etl], manifests=[])
        count = 0
        async with contextlib.aclosing(trace.events_async(queue_size=4, when_full="drop")) as events:
            async for _ in events:
                count += 1
                await asyncio.sleep(0.001)
                if count == 50:
                    break
        return count, trace.query_stats()

    count, stats = asyncio.run(consume())
    assert stats["events_handled"] == count <= 50
    assert stats["events_handled"] + stats["events_dropped"] + stats["events_not_processed"] == len(_raws(etl))


def test_stop_from_another_thread() -> None:
    path = corpus_etl("tx", "Process.etl")
    trace = UserTrace(files=[path], manifests=[])
    started = threading.Event()

    def slow(record: Any, context: Any) -> None:
        started.set()
        time.sleep(0.001)

    trace.set_default_event_callback(slow)
    stopper = threading.Thread(target=lambda: (started.wait(5), trace.stop()))
    stopper.start()
    trace.start()
    stopper.join()
    stats = trace.query_stats()
    assert 0 < stats["events_read"] < 10344 and stats["events_not_processed"] == 10344 - stats["events_read"]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_stop_from_a_signal_handler() -> None:
    path = corpus_etl("tx", "Process.etl")
    trace = UserTrace(files=[path], manifests=[], index=False)
    seen = 0

    def count(record: Any, context: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == 10:
            os.kill(os.getpid(), signal.SIGUSR1)

    trace.set_default_event_callback(count)
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: trace.stop())
    try:
        trace.start()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert 10 <= seen < 10344


def _collect(handoff: Any) -> list[Any]:
    return list(handoff)


def test_handoff_bounds_waiting_events_and_drops_what_does_not_fit() -> None:
    from openetw.consumer.iteration import HandOff

    reported: list[Any] = []
    handoff = HandOff(10, "drop", lambda error, record: reported.append(error), live=True)
    handoff.flushes_batches()  # chunks of capacity // 4 = 2, and at each flush
    assert handoff.chunk == 2
    for n in range(7):  # chunks 0-1, 2-3, 4-5 go over; 6 waits for the flush
        handoff.offer(n)
    assert handoff._queued == 6
    handoff.flush()
    assert handoff._queued == 7
    for n in range(7, 13):  # 7-8 and 9-10 fit (9 queued... then 10 only in part)
        handoff.offer(n)
    handoff.flush()  # 11-12: no room left
    assert handoff._queued == 10
    assert handoff.dropped == 3
    handoff.finish()
    assert _collect(handoff) == list(range(10))
    assert handoff.handed == 10
    assert [type(e) for e in reported] == [EventsDropped] and reported[0].count == 3


def test_handoff_waits_for_room_when_blocking() -> None:
    from openetw.consumer.iteration import HandOff

    handoff = HandOff(4, "block", lambda error, record: None)
    got: list[Any] = []
    go = threading.Event()

    def consume() -> None:
        go.wait(10)
        got.extend(handoff)

    consumer = threading.Thread(target=consume)
    consumer.start()
    most = 0
    for n in range(40):
        if n == 4:
            go.set()  # the queue is full: from here on the producer waits for the consumer
        handoff.offer(n)
        most = max(most, handoff._queued)
    handoff.finish()
    consumer.join(10)
    assert most <= 4
    assert got == list(range(40)) and handoff.dropped == 0 and handoff.handed == 40


def test_handoff_counts_what_the_consumer_left_queued() -> None:
    from openetw.consumer.iteration import HandOff

    handoff = HandOff(100, "drop", lambda error, record: None)
    for n in range(50):
        handoff.offer(n)
    handoff.flush()
    first = []
    for item in handoff:
        first.append(item)
        if len(first) == 5:
            break
    handoff.close()
    assert handoff.handed == 5 and handoff.dropped == 45
