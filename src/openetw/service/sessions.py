"""What the service keeps for one running session: its pools, its sinks, its real-time consumers.

Buffers leave a pool whole. ``deliver`` offers one to every sink of the session (``service.sinks``:
the buffering ring, the real-time consumers, a stream or a channel's log plugged in by the program
that runs the service, the file) and keeps the books once, in the session table's statistics:

* taken by any sink (written to the file, delivered to a consumer, kept in the buffering ring,
  accepted by a stream or a channel): ``buffers_written`` and ``events_written``;
* taken by none: its events count as lost;
* refused by every real-time sink (no consumer attached, or one too far behind; a stream's spool
  full): ``realtime_buffers_lost``; refused by the file (a full sequential file, a failed file):
  ``log_buffers_lost``;
* a queued file write fails after the buffer was counted written: it moves from
  ``buffers_written`` / ``events_written`` to ``log_buffers_lost`` / ``events_lost``, as the
  file's header counts it (unless a real-time consumer got it too);
* a buffer sent to real-time consumers that all went away (killed, or detached) before receiving
  it, that went nowhere else: it moves from ``buffers_written`` / ``events_written`` to
  ``realtime_buffers_lost`` / ``events_lost`` (``abandoned``; see ``Delivery``).

So for every session ``events written by producers = events_written + events_lost``: a
producer's own drops and refusals (records over 64 KB or over the buffer size) are read from its
pool header and added to ``events_lost`` too (and told to every sink: ``note_lost``).
"""

from __future__ import annotations

import mmap
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openetw.etl import framing as F
from openetw.etl.clock import TraceClock
from openetw.etl.writer import linux_trace_clock, new_logfile_header
from openetw.ipc.pool import TAKEN, BufferPool
from openetw.service.connection import Connection, Delivery
from openetw.service.logfile import LogFile, count_records, header_buffer
from openetw.service.screen import ScreenResult, ThreadCheck, screen_buffer
from openetw.service.sinks import ConsumerSink, FileSink, LossKind, RingSink, Sink
from openetw.session import LogMode, SessionConfig, SessionTable

__all__ = ["PendingFlush", "PoolEntry", "SessionRuntime", "count_typed_records"]

_REALTIME, _FILE, _RING = 1, 2, 4
_KIND_BIT: dict[LossKind, int] = {"realtime": _REALTIME, "file": _FILE, "ring": _RING}
POOL_CLOSE_TIMEOUT = 2.0  # a producer that does not answer close_pool in time is drained anyway

_u32 = struct.Struct("<I").unpack_from
_u16 = struct.Struct("<H").unpack_from
# header type -> where it keeps its Size (EVENT_HEADER first, SYSTEM after the marker)
_SIZE_AT: dict[int, int] = {header_type: row.size_at for header_type, row in F.HEADER_KINDS.items()}


def count_typed_records(buffer: bytes | mmap.mmap) -> int:
    """How many typed records a buffer holds, whatever their header type (kernel records'
    SYSTEM, PERFINFO and COMPACT headers keep their size after the marker, not first).

    Buffers written by the service's own kernel sources hold typed records only;
    ``framing.walk`` is the reference this count is tested against on them."""
    used = min(_u32(buffer, F.BUFFER_OFFSET_AT)[0], len(buffer))
    position, count = F.RECORDS_START, 0
    minimum, pad, align, is_typed, header_type_of = F.MIN_RECORD_SIZE, F.RECORD_ALIGNMENT - 1, -F.RECORD_ALIGNMENT, F.is_typed, F.header_type_of
    while position + minimum <= used:
        marker = _u32(buffer, position)[0]
        size_at = _SIZE_AT.get(header_type_of(marker)) if is_typed(marker >> F.MARKER_FLAGS_SHIFT) else None
        if size_at is None:
            break
        size = _u16(buffer, position + size_at)[0]
        if size < minimum:
            break
        position += (size + pad) & align
        count += 1
    return count


@dataclass
class PendingFlush:
    """A controller's FLUSH waiting for the producers to hand over their partly filled buffers."""

    reply_to: Connection
    request_id: Any
    waiting: set[int]
    deadline: float
    token: int = 0


@dataclass
class PoolEntry:
    """A pool the service made for one producer connection, and the losses already counted from it."""

    pool_id: int
    connection_id: int
    pool: BufferPool
    losses_seen: int = 0
    closing_deadline: float | None = None
    producer: Connection | None = None  # a producer's pool: its buffers are screened (``screen``)
    threads: ThreadCheck | None = None


@dataclass
class SessionRuntime:
    session_id: int
    logger_id: int
    config: SessionConfig
    table: SessionTable
    clock: TraceClock = field(default_factory=linux_trace_clock)
    logfile: LogFile | None = None
    pools: dict[int, PoolEntry] = field(default_factory=dict)  # by pool id
    active: dict[int, int] = field(default_factory=dict)  # connection id -> its current pool id
    consumers: dict[int, Connection] = field(default_factory=dict)
    ring: deque[tuple[bytes | mmap.mmap, int]] = field(default_factory=deque)
    finishing: bool = False
    failed: bool = False
    stop_waiters: list[tuple[Connection, Any]] = field(default_factory=list)
    # A failed session a controller stopped while its pools still drained: it leaves the table
    # once finished (not before: its runtime still reports to the table until then).
    release_when_finished: bool = False
    flushes: list[PendingFlush] = field(default_factory=list)
    write_error: str | None = None
    count_records: Callable[[bytes], int] = count_records
    # The GUIDs of providers secured for others (from the service's provider security table).
    secured_guids: Callable[[], frozenset[bytes]] = frozenset
    on_rejected: Callable[[SessionRuntime, Connection, ScreenResult], None] | None = None
    # Where its buffers go, in the order they are offered: the service's own by the log mode
    # (ring, consumers, file), and those ``add_sink`` plugs in before the file.
    sinks: list[Sink] = field(default_factory=list)

    def __post_init__(self) -> None:
        mode = self.config.mode
        own: list[Sink] = []
        if mode is LogMode.BUFFERING:
            own.append(RingSink(self))
        if mode.real_time:
            own.append(ConsumerSink(self))
        if mode.writes_file:
            own.append(FileSink(self))
        self.sinks = own

    def add_sink(self, sink: Sink) -> None:
        """Offer the session's buffers to ``sink`` too (after the consumers, before the file)."""
        at = len(self.sinks) - 1 if self.sinks and isinstance(self.sinks[-1], FileSink) else len(self.sinks)
        self.sinks.insert(at, sink)

    def find_sink(self, name: str) -> Sink | None:
        return next((sink for sink in self.sinks if sink.name == name), None)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def mode(self) -> LogMode:
        return self.config.mode

    # -- pools ---------------------------------------------------------------------------------
    def add_pool(self, pool_id: int, connection_id: int, pool: BufferPool, *, producer: Connection | None = None) -> None:
        """A pool for one connection. ``producer``: an untrusted producer's, whose records are
        checked before they go anywhere (the service's own kernel recorders pass none)."""
        threads = ThreadCheck(producer.pid) if producer is not None else None
        self.pools[pool_id] = PoolEntry(pool_id, connection_id, pool, producer=producer, threads=threads)
        self.active[connection_id] = pool_id

    def pools_of_connection(self, connection_id: int) -> list[int]:
        return [entry.pool_id for entry in self.pools.values() if entry.connection_id == connection_id]

    def start_closing(self, connection_id: int, now: float) -> int | None:
        """The connection's current pool stops taking writes; returns its id (None if it has none)."""
        pool_id = self.active.pop(connection_id, None)
        if pool_id is not None:
            self.pools[pool_id].closing_deadline = now + POOL_CLOSE_TIMEOUT
        return pool_id

    def overdue_closes(self, now: float) -> list[int]:
        return [e.pool_id for e in self.pools.values() if e.closing_deadline is not None and now >= e.closing_deadline]

    # -- buffers -------------------------------------------------------------------------------
    def drain(self, pool_id: int) -> int:
        """Move every FULL buffer of one pool to its destinations; returns how many."""
        entry = self.pools.get(pool_id)
        if entry is None:
            return 0
        pool = entry.pool
        moved = 0
        straight = (self._file_only() or self._file_keeps_it()) and self.logfile is not None and pool.buffer_size == self.logfile.buffer_size
        for index in pool.full_buffers():
            if straight and self.write_error is None and self.logfile is not None:
                # Straight into the file's write queue: one copy of the buffer, not two.
                buffer = self.logfile.spare_buffer()
                pool.take_release_into(index, buffer)
                screened, events = self.screen(entry, buffer)
                if screened is not buffer:
                    buffer[:] = screened
                self.deliver(buffer, owned=True, events=events)
            else:
                data = pool.take(index)
                pool.release(index)
                screened, events = self.screen(entry, data)
                self.deliver(screened, events=events)
            moved += 1
        self.count_pool_losses(entry)
        return moved

    def drain_connection(self, connection_id: int) -> float:
        """Drain the connection's pools; returns the largest share of a pool that was FULL."""
        fullest = 0.0
        for pool_id in self.pools_of_connection(connection_id):
            moved = self.drain(pool_id)
            if moved:
                fullest = max(fullest, moved / self.pools[pool_id].pool.buffer_count)
        return fullest

    def drain_all(self) -> int:
        return sum(self.drain(pool_id) for pool_id in list(self.pools))

    def close_pool(self, pool_id: int) -> None:
        """The producer is gone or promised to write no more: take FULL then FILLING buffers, close."""
        entry = self.pools.get(pool_id)
        if entry is None:
            return
        self.drain(pool_id)
        del self.pools[pool_id]
        if self.active.get(entry.connection_id) == pool_id:
            del self.active[entry.connection_id]
        pool = entry.pool
        for data in pool.take_filling_after_death():
            screened, events = self.screen(entry, data)
            self.deliver(screened, events=events)
        for index, state in enumerate(pool.states.tolist()):
            if state == TAKEN:  # left so by take_filling_after_death
                pool.release(index)
        self.count_pool_losses(entry)
        pool.close()

    def screen(self, entry: PoolEntry, data: Any) -> tuple[Any, int | None]:
        """(the buffer to deliver, its events) once a producer's records are checked; a
        trusted pool's buffer as it is, its events left to ``deliver`` to count."""
        producer = entry.producer
        if producer is None or entry.threads is None:
            return data, None
        result = screen_buffer(data, producer.identity(self.secured_guids()), entry.threads)
        if result.rejected:
            self.table.session(self.session_id).statistics.add_events_rejected(result.rejected)
            if self.on_rejected is not None:
                self.on_rejected(self, producer, result)
        return bytes(result.data) if result.rejected else result.data, result.kept

    def count_pool_losses(self, entry: PoolEntry) -> None:
        total = entry.pool.events_lost + entry.pool.events_refused
        new = total - entry.losses_seen
        if new > 0:
            entry.losses_seen = total
            self.note_lost(new)

    def note_lost(self, events: int) -> None:
        """Events the producers (or the kernel's ring) lost before their buffers reached the
        session: counted lost, and told to every sink (a file's header, a stream's messages)."""
        self.table.events_lost(self.session_id, events)
        for sink in self.sinks:
            sink.note_lost(events)

    def _file_keeps_it(self) -> bool:
        """The file is the only sink that keeps a buffer as it is: no consumer attached, and
        every other sink copies what it keeps (``copies_offered``, as a stream does). The
        buffer can then be the file's own, as in a file-only session."""
        if self.write_error is not None or not self.mode.writes_file or self.mode is LogMode.BUFFERING or self.consumers:
            return False
        return all(isinstance(sink, (FileSink, ConsumerSink)) or getattr(sink, "copies_offered", False) for sink in self.sinks)

    def _file_only(self) -> bool:
        return self.write_error is None and self.mode.writes_file and not self.mode.real_time and self.mode is not LogMode.BUFFERING

    def deliver(self, data: bytes | mmap.mmap, *, owned: bool = False, events: int | None = None) -> None:
        """Offer one taken buffer to every sink and count it once. ``owned``: ``data`` came
        from the log file's ``spare_buffer`` (a file-only session) and goes to it as it is.
        ``events``: how many records it holds, when the caller already counted them."""
        if events is None:
            events = self.count_records(data)  # type: ignore[arg-type]
        delivery = Delivery(self.session_id, events, owned=owned)
        took = refused = 0  # bits of the kinds of sink that took it, that refused it
        for sink in self.sinks:
            if sink.offer(data, events, delivery):
                delivery.taken = True
                took |= _KIND_BIT[sink.kind]
            else:
                refused |= _KIND_BIT[sink.kind]
        table, session_id = self.table, self.session_id
        lost = refused & ~took
        if lost & _REALTIME:
            table.realtime_buffer_lost(session_id)
        if lost & _FILE:
            table.log_buffer_lost(session_id)
        if delivery.taken:
            table.buffer_written(session_id, events)
        else:
            table.events_lost(session_id, events)

    def abandoned(self, delivery: Delivery) -> None:
        """A buffer counted written reached no consumer and nothing else: its events are lost."""
        statistics = self.table.session(self.session_id).statistics
        statistics.buffers_written -= 1  # the statistics have no "unwrite" (as in file_failed)
        statistics.events_written -= delivery.events
        self.table.realtime_buffer_lost(self.session_id)
        self.table.events_lost(self.session_id, delivery.events)

    # -- files ---------------------------------------------------------------------------------
    def header_for_consumers(self) -> bytes:
        """The header buffer a real-time consumer reads the session's buffers with."""
        header = new_logfile_header(
            clock=self.clock,
            buffer_size=self.config.buffer_size,
            logger_name=self.name,
            log_file_mode=self.config.log_file_mode,
        )
        return header_buffer(header, self.logger_id)

    def flush_file(self, *, wait: bool = True) -> None:
        """Every sink made current: the file's header rewritten, with ``wait`` (a controller's
        FLUSH) once everything taken so far is in the file, without (the flush timer) queued behind it."""
        for sink in self.sinks:
            sink.flush(wait=wait)

    def file_failed(self, error: str) -> None:
        """A write of the file failed: the session fails, and the buffers it had counted written
        that a queued write then lost count as lost, as the file's header counts them, so that
        ``events_written`` stays what the file holds (plus what consumers got)."""
        self.write_error = self.write_error or error
        assert self.logfile is not None
        buffers, events = self.logfile.take_failed_writes()
        if buffers:
            # The statistics have no "unwrite": these buffers were counted by buffer_written.
            statistics = self.table.session(self.session_id).statistics
            statistics.buffers_written -= buffers
            statistics.events_written -= events
            self.table.log_buffer_lost(self.session_id, buffers)
            self.table.events_lost(self.session_id, events)

    def snapshot(self, fd: int, file_name: str) -> int:
        """Write the buffering ring to ``fd`` as a complete file; returns the buffers written.
        Its header counts the events the session lost so far, as a file's would."""
        snapshot = LogFile(
            fd,
            session_name=self.name,
            file_name=file_name,
            logger_id=self.logger_id,
            buffer_size=self.config.buffer_size,
            log_file_mode=self.config.log_file_mode,
            clock=self.clock,
        )
        snapshot.note_lost(events=self.table.session(self.session_id).statistics.events_lost)
        try:
            for data, _ in list(self.ring):
                snapshot.write(data)
        finally:
            snapshot.close()
        return snapshot.buffers_written

    def finish(self) -> None:
        """Close every pool, then every sink: the file with its final header, consumers told the session ended."""
        for pool_id in list(self.pools):
            self.close_pool(pool_id)
        self.update_buffer_gauges()
        for sink in reversed(self.sinks):  # the file's final header first, as before any sink came in
            sink.close()

    def update_buffer_gauges(self) -> None:
        buffers = free = 0
        for entry in self.pools.values():
            buffers += entry.pool.buffer_count
            free += entry.pool.stats().free
        self.table.set_buffer_counts(self.session_id, buffers, free)
