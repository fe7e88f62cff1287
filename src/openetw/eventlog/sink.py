"""A channel session's sink: the Event Log as a destination of the trace service's buffers.

A channel session is a real-time session whose one sink is in the service (``ChannelSink``): it takes
each buffer the session offers and hands it to the Event Log (``openetw.eventlog.service``), which
walks it into rows and stores them. ``ChannelRuntime`` is the session's runtime: it remembers whose
pool each buffer comes from, and stores the buffers one drain of a pool takes together (one
transaction per log) before the pool gets them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openetw.ipc.pool import TAKEN, BufferPool
from openetw.service.connection import Connection, Delivery
from openetw.service.sessions import PoolEntry, SessionRuntime
from openetw.service.sinks import LossKind

if TYPE_CHECKING:
    from openetw.eventlog.service import EventLogService

__all__ = ["ChannelRuntime", "ChannelSink", "release_taken"]


class ChannelRuntime(SessionRuntime):
    """A channel session's runtime: remembers whose pool each buffer comes from, and stores
    the buffers one drain of a pool takes together (one transaction per log)."""

    producer: Connection | None = None
    batch: list[bytes] | None = None  # while a drain runs: the buffers its sink took
    sink: ChannelSink | None = None
    closing: BufferPool | None = None  # while a pool closes: it, whose last buffers the sink stores

    def screen(self, entry: PoolEntry, data: Any) -> tuple[Any, int | None]:
        self.producer = entry.producer
        return super().screen(entry, data)

    def drain(self, pool_id: int) -> int:
        """Every FULL buffer of the pool, stored in one transaction per log (on the store
        thread) before the pool gets them back: a service killed meanwhile leaves them TAKEN,
        and the producer hands them to the next service (``log_orphans``)."""
        entry = self.pools.get(pool_id)
        if entry is None:
            return 0
        pool = entry.pool
        indices = pool.full_buffers()
        if not indices:
            self.count_pool_losses(entry)
            return 0
        self.batch = []
        submitted = False
        try:
            for index in indices:
                screened, events = self.screen(entry, pool.take(index))
                self.deliver(screened, events=events)
            batch = self.batch
            if batch and self.sink is not None:
                self.sink.hook.store_buffers(self, self.sink.header(), batch, pool=pool, release=lambda: release_taken(pool, indices))
                submitted = True
        finally:
            self.batch = None
            if not submitted:
                release_taken(pool, indices)
        self.count_pool_losses(entry)
        return len(indices)

    def close_pool(self, pool_id: int) -> None:
        """The buffers on their way to the store are stored and given back first; the pool's
        marks go once it is closed (nobody hands it over any more)."""
        entry = self.pools.get(pool_id)
        if entry is None or self.sink is None:
            super().close_pool(pool_id)
            return
        identity = entry.pool.identity
        self.drain(pool_id)
        self.sink.hook.writer.wait()
        self.closing = entry.pool
        try:
            super().close_pool(pool_id)
        finally:
            self.closing = None
        self.sink.hook.pool_closed(identity)

    def count_pool_losses(self, entry: PoolEntry) -> None:
        """The producer's losses go to the session's first log at once, and the pool remembers
        how many were counted (for a service that takes it over after this one died)."""
        seen = entry.losses_seen
        super().count_pool_losses(entry)
        if entry.losses_seen != seen:
            if self.sink is not None:  # the log keeps what it counted of the pool with the count
                self.sink.hook._count_losses(self, loss_mark=(entry.pool.identity, entry.losses_seen))
            entry.pool.losses_counted = entry.losses_seen


def release_taken(pool: BufferPool, indices: list[int]) -> None:
    """Give the buffers a drain took back to the pool (those still TAKEN)."""
    states = pool.states
    for index in indices:
        if states[index] == TAKEN:
            pool.release(index)


class ChannelSink:
    """The sink of one channel session (``openetw.service.sinks.Sink``): its buffers go to the
    logs, a drain's together (``ChannelRuntime.drain``), any other at once."""

    name = "channel"
    kind: LossKind = "realtime"  # a channel session is a real-time session whose one consumer is the Event Log

    def __init__(self, hook: EventLogService, runtime: ChannelRuntime) -> None:
        self.hook = hook
        self.runtime = runtime
        self.accepted = 0
        self.lost = 0
        self._header: bytes | None = None

    def offer(self, buffer: Any, events: int, delivery: Delivery) -> bool:
        delivery.kept = True  # the log's books count what the store cannot keep
        if self.runtime.batch is not None:
            self.runtime.batch.append(bytes(buffer))
        else:  # a buffer taken outside a drain (a closing pool's last): stored before it goes back
            self.hook.store_buffers(self.runtime, self.header(), [bytes(buffer)], wait=True, pool=self.runtime.closing)
        self.accepted += 1
        return True

    def note_lost(self, events: int) -> None:
        pass  # counted in the session's first log by ``ChannelRuntime.count_pool_losses``

    def flush(self, *, wait: bool) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any] | None:
        return None

    def header(self) -> bytes:
        if self._header is None:
            self._header = self.runtime.header_for_consumers()
        return self._header
