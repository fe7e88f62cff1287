"""A slow consumer under load: every event producers write is handled, dropped by the consumer or
lost by the service, and each of those is counted, exactly.

Where events go, for a real-time only session and a trace iterating it with a bounded
drop-on-full queue:

* a producer's pool has no free buffer: the write returns False and the session counts the
  event in ``events_lost`` (read from the pool);
* a buffer the service cannot hand to a consumer (none attached, or one too far behind):
  ``realtime_buffers_lost`` counts the buffer and ``events_lost`` its events;
* a record that reached the trace but found the hand-off queue full: ``events_dropped``;
* everything else was handed to the loop: ``events_handled``.

A real-time session delivers no logfile header event (a log file has one; ProcessTrace on a
real-time session gives none): every record that arrives was written by a producer.

The service counts lost real-time buffers, not which events they held; the events are found as
what the producers wrote minus what arrived.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from openetw.consumer import EventsDropped, UserTrace
from openetw.controller import Session
from openetw.etl.relog import is_logfile_header_record
from tests.service.harness import Producer, ServiceProcess

LOAD = "Contoso.Load"
BEFORE_ATTACH = 300  # per producer, written while no consumer is attached: lost in real time
UNDER_LOAD = 15_000  # per producer, written as fast as it can while the consumer lags
QUEUE_SIZE = 64
SLOW_EVERY = 50  # the loop sleeps every this many events
HOLD_TIMEOUT = 20.0


def _write_in_parallel(writers: list[Producer], count: int, start: int) -> list[int]:
    """Every producer writes ``count`` events at once; what each reports written."""
    written = [0] * len(writers)

    def write(number: int) -> None:
        written[number] = writers[number].write(LOAD, count, start=start, pad=20)

    threads = [threading.Thread(target=write, args=(number,)) for number in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return written


# (buffer size in KB, buffers per producer pool): roomy pools, and pools so small that producers
# writing flat out may find no free buffer (the accounting must hold either way).
POOLS = {"roomy pools": (64, 64), "tiny pools": (2, 4)}


def _consume_slowly(trace: UserTrace, headers: list[int]) -> dict[int, set[int]]:
    """Iterate with a small drop-on-full queue, holding the first event until the queue has
    overflowed (so the consumer surely lags), then sleeping every ``SLOW_EVERY`` events; the
    ``index`` fields handled, by producer pid (``headers``: where header events came)."""
    seen: dict[int, set[int]] = {}
    for number, event in enumerate(trace.events(queue_size=QUEUE_SIZE, when_full="drop")):
        if is_logfile_header_record(event.record):
            headers.append(number)
        else:
            seen.setdefault(event.parse("pid"), set()).add(event.parse("index"))
        if number == 0:
            deadline = time.monotonic() + HOLD_TIMEOUT
            while trace.query_stats()["events_dropped"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        elif number % SLOW_EVERY == 0:
            time.sleep(0.002)
    return seen


@pytest.mark.parametrize("pools", list(POOLS))
def test_handled_plus_dropped_plus_lost_is_what_producers_wrote(pools: str, service: ServiceProcess, producers: Any) -> None:
    buffer_size, buffers = POOLS[pools]
    writers: list[Producer] = [producers(), producers()]
    for producer in writers:
        producer.register(LOAD)
    session = Session.start(
        "Load", mode="realtime", flush_timer=1, buffer_size=buffer_size, min_buffers=buffers, max_buffers=buffers, providers=[LOAD]
    )  # fmt: skip
    final: dict[str, int] = {}
    written_under_load: list[int] = []

    def produce_then_stop() -> None:
        try:
            written_under_load.extend(_write_in_parallel(writers, UNDER_LOAD, BEFORE_ATTACH))
        finally:
            final.update(session.stop())  # the consumer's loop ends when the session does

    try:
        for producer in writers:
            assert producer.wait_enabled(LOAD)
        # Before anyone consumes: whole buffers lost by the service.
        written_before = sum(_write_in_parallel(writers, BEFORE_ATTACH, 0))
        session.flush()
        early = session.query()
        assert early["realtime_buffers_lost"] >= 1
        assert early["events_written"] == 0
        assert early["events_lost"] == len(writers) * BEFORE_ATTACH

        trace = UserTrace(sessions=["Load"], manifests=[])
        reported: list[BaseException] = []
        trace.on_error(lambda error, record: reported.append(error))
        trace.open()  # attached: from now on the service hands buffers over
        headers: list[int] = []
        producing = threading.Thread(target=produce_then_stop)
        producing.start()
        try:
            seen = _consume_slowly(trace, headers)
        finally:
            producing.join(timeout=60)
        assert not producing.is_alive()
    finally:
        session.stop()

    stats = trace.query_stats()
    attempted = len(writers) * (BEFORE_ATTACH + UNDER_LOAD)
    accepted = written_before + sum(written_under_load)  # what the producers' pools took
    handled, dropped, lost = stats["events_handled"], stats["events_dropped"], final["events_lost"]
    arrived = stats["events_read"]

    assert dropped > 0, "the consumer held its first event until the queue overflowed"
    assert headers == []  # no logfile header event in real time
    assert handled + dropped + lost == attempted
    assert handled + dropped == arrived  # every record that reached the trace is accounted for there
    assert arrived == final["events_written"]  # what the service handed over reached the trace
    assert sum(len(indexes) for indexes in seen.values()) == handled  # each handled event once
    assert set(seen) <= {producer.pid for producer in writers}

    dropped_by_pools = attempted - accepted
    lost_in_real_time = accepted - arrived
    assert lost == dropped_by_pools + lost_in_real_time
    assert lost >= early["events_lost"]
    assert lost_in_real_time > 0  # at least the buffers taken before the consumer attached
    assert (final["realtime_buffers_lost"] > 0) == (lost_in_real_time > 0)
    assert (lost > 0) == (attempted - handled - dropped > 0)

    drops = [error for error in reported if isinstance(error, EventsDropped)]
    assert len(drops) == 1 and drops[0].count == dropped
