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
