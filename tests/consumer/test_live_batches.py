"""How a live source groups the buffers it takes into batches (no service: a stand-in consumer).

Buffers already waiting join the batch; a batch that began with a full buffer (a busy session)
also waits a little for those behind it; one that began with a partly filled buffer (the flush
timer's, a quiet session) goes at once.
"""

from __future__ import annotations

import struct

from openetw.consumer.live import FULL_SHARE, LiveSessionSource
from openetw.etl import layouts as L

SIZE = 64 * 1024


def _buffer(used: int) -> bytes:
    data = bytearray(SIZE)
    struct.pack_into("<I", data, L.WMI_BUFFER_HEADER.offset("SavedOffset"), used)
    return bytes(data)


FULL = _buffer(SIZE - 152)
PARTLY = _buffer(int(SIZE * FULL_SHARE) // 2)
LONG = 3600.0  # a gathering window no slow machine runs past (the stand-in never sleeps)


class StandInConsumer:
    """Buffers that are already there (``waiting``), then ones that arrive only when the source
    is willing to wait for them (``arriving``)."""

    def __init__(self, waiting: list[bytes], arriving: list[bytes]) -> None:
        self.waiting = list(waiting)
        self.arriving = list(arriving)
        self.waits: list[float] = []

    def next_buffer(self) -> bytes | None:
        if not self.waiting and self.arriving:
            self.waiting.append(self.arriving.pop(0))
        return self.waiting.pop(0) if self.waiting else None

    def buffer_waiting(self, timeout: float = 0.0) -> bool:
        self.waits.append(timeout)
        if not self.waiting and self.arriving and timeout > 0:
            self.waiting.append(self.arriving.pop(0))
        return bool(self.waiting)


def _batches(consumer: StandInConsumer, **options: float) -> list[list[int]]:
    source = LiveSessionSource("stand-in")
    source._consumer = consumer
    return [[number for number, _ in batch] for batch in source.buffer_batches(**options)]  # type: ignore[arg-type]


def test_buffers_already_waiting_form_one_batch() -> None:
    consumer = StandInConsumer([PARTLY, FULL, PARTLY], [])
    assert _batches(consumer) == [[1, 2, 3]]


def test_a_busy_sessions_batch_waits_for_the_buffers_behind_it() -> None:
    consumer = StandInConsumer([FULL], [FULL, FULL, PARTLY])
    assert _batches(consumer, gather=LONG) == [[1, 2, 3, 4]]
    assert all(wait > 0 for wait in consumer.waits[:3])


def test_a_quiet_sessions_buffer_goes_at_once() -> None:
    consumer = StandInConsumer([PARTLY], [FULL, FULL])
    batches = _batches(consumer, gather=LONG)
    assert batches[0] == [1]
    assert consumer.waits[0] == 0.0
    assert batches[1:] == [[2, 3]]  # the next batch began with a full buffer: it waited


def test_without_gathering_each_buffer_not_yet_waiting_goes_alone() -> None:
    consumer = StandInConsumer([FULL], [FULL, FULL])
    assert _batches(consumer, gather=0.0) == [[1], [2], [3]]
    assert set(consumer.waits) == {0.0}


def test_a_batch_stops_at_its_size_limit() -> None:
    consumer = StandInConsumer([FULL] * 5, [])
    assert _batches(consumer, limit=2 * SIZE) == [[1, 2], [3, 4], [5]]
