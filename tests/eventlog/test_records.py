"""The channel session's buffer walk: every EVENT_HEADER record of a pool buffer, its header
facts and its whole bytes, as built and as the ETL record parser reads them."""

from __future__ import annotations

import os
import uuid

from openetw.etl.build import build_event_record
from openetw.eventlog.records import event_headers
from openetw.ipc.pool import BufferPool

PROVIDER = uuid.UUID("6c1f0d2e-5b7a-4e43-9d1c-2f8e4a7b9c01")


def test_the_walk_gives_every_record_with_its_facts() -> None:
    pool = BufferPool.create(64 * 1024, 4, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=0)
    try:
        writer = pool.writer()
        built = [
            build_event_record(provider_id=PROVIDER, id=n, version=1, channel=16 + n % 2, level=n % 5, opcode=n % 3, task=n,
                               keyword=(1 << 63) | n, pid=4242, tid=n, timestamp=1000 + n,
                               activity_id=uuid.UUID(int=n) if n % 2 else uuid.UUID(int=0), user_data=bytes(range(n % 40)))
            for n in range(300)
        ]  # fmt: skip
        for record in built:
            assert writer.write(record.raw, record.timestamp)
        assert writer.flush()
        buffers = [pool.take(index) for index in pool.full_buffers()]
    finally:
        pool.close()
    walked = [facts for buffer in buffers for facts in event_headers(buffer)]
    assert [f.raw for f in walked] == [r.raw for r in built]
    for facts, record in zip(walked, built, strict=True):
        assert facts.provider_guid == PROVIDER.bytes_le
        assert (facts.event_id, facts.version, facts.channel, facts.level, facts.opcode, facts.task, facts.keyword) == (
            record.id, record.version, record.channel, record.level, record.opcode, record.task, record.keyword)  # fmt: skip
        assert (facts.pid, facts.tid, facts.timestamp) == (record.pid, record.tid, record.timestamp)
        assert facts.activity_id == (str(record.activity_id) if record.activity_id and record.activity_id.int else None)


def test_rows_are_collected_by_route_filtered_and_refused() -> None:
    from collections import defaultdict
    from typing import Any

    from openetw.etl.clock import TraceClock
    from openetw.etl.layouts import CLOCK_QPC
    from openetw.eventlog.records import Route, buffer_sequence, collect_rows

    pool = BufferPool.create(64 * 1024, 4, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=0)
    try:
        writer = pool.writer()
        built = [
            build_event_record(provider_id=PROVIDER, id=n, version=1, channel=16 + n % 3, level=1 + n % 5, opcode=0, task=n,
                               keyword=(1 << 63) | (n % 4), pid=4242, tid=n, timestamp=1000 + n, user_data=bytes(n % 7))
            for n in range(120)
        ]  # fmt: skip
        for record in built:
            assert writer.write(record.raw, record.timestamp)
        assert writer.flush()
        buffers = [pool.take(index) for index in pool.full_buffers()]
    finally:
        pool.close()
    assert [buffer_sequence(buffer) for buffer in buffers] == [1]
    clock = TraceClock(CLOCK_QPC, 10**17, 1000, 10**9)
    routes: dict[tuple[bytes, int], Route | None] = {
        (PROVIDER.bytes_le, 16): Route("A", "Prov", str(PROVIDER), 3, None, True),  # levels 1-3 only
        (PROVIDER.bytes_le, 17): Route("B", "Prov", str(PROVIDER), None, 1 << 63 | 1, False),  # the writer may not write B
        (PROVIDER.bytes_le, 18): None,  # no channel listens
    }
    runs: dict[str, list[Any]] = defaultdict(list)
    refused: dict[str, int] = defaultdict(int)
    collect_rows(buffers[0], routes, runs, refused, clock)
    expected_a = [r for r in built if r.channel == 16 and r.level <= 3]
    assert [route for route, _ in runs["A"]] == [routes[PROVIDER.bytes_le, 16]] and set(runs) == {"A"}
    rows = runs["A"][0][1]
    assert [row[1] for row in rows] == [r.id for r in expected_a]
    assert refused == {"B": len([r for r in built if r.channel == 17])}  # keywords all carry bit 63: every one matches
    record = expected_a[0]
    assert rows[0] == (
        clock.to_filetime(record.timestamp), record.id, 1, record.level, record.task, 0, record.keyword - (1 << 64), 4242, record.tid,
        None, record.raw,
    )  # fmt: skip

    # two routes to one log, interleaved: a run each time the route changes, in order
    both = Route("A", "Other", str(PROVIDER), None, None, True)
    runs.clear()
    collect_rows(buffers[0], {**routes, (PROVIDER.bytes_le, 18): both}, runs, refused, clock)
    order = [route.provider_name for route, rows in runs["A"] for _ in rows]
    assert order == ["Prov" if r.channel == 16 else "Other" for r in built if (r.channel == 16 and r.level <= 3) or r.channel == 18]
    assert len(runs["A"]) > 2
