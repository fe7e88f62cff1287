"""A session's buffers published to the fleet's JetStream stream, from a thread of its own.

The service's loop hands each completed buffer to ``offer`` and goes on: ``offer`` never waits.
It numbers the buffer (sequence 0 is the logfile header buffer, sent first) and keeps it while
the bytes held for the stream stay within the spool size; past that the buffer is lost for the
stream (ETW's BuffersLost: ``offer`` returns False and the session counts it) and its sequence
number becomes a gap the next message names.

The publishing thread holds one NATS connection of its own (``natsconn.PublishConnection``: no
event loop, no nats-py) and publishes in sequence order with at most ``WINDOW``
acknowledgements outstanding. Buffers leave in batches: whatever waits when the thread wakes
goes in one ``sendmsg``, and the acknowledgements that came are read together. The thread wakes
as rarely as the stream allows, since each wake costs the service more than the Python it runs:
while the window has room, acknowledgements do not wake it (they are read when the next buffer
does, or ``ACK_DELAY`` later); when the window is full and buffers wait, an acknowledgement that
comes waits up to ``ACK_GATHER`` for the next few; a new buffer wakes it only when nothing else
would (or ``WAKE_BATCH`` wait), and with nothing in flight a few buffers wait up to ``LINGER``
for more. The memory of acknowledged buffers takes the next ones (up to the spool size, given
back after ``IDLE_TRIM`` seconds with nothing waiting). Each message carries the id
``<host>:<session>:<start>:<sequence>``, so a publish repeated after a lost acknowledgement is
dropped by JetStream. When a publish fails (the cluster unreachable, no leader) the thread stops
sending, keeps the failed buffers to send again first, and moves what waits in memory beyond
``MEMORY_BYTES`` to the spool file; it probes with one message at a time until the stream
acknowledges again, then replays everything in order. ``finish`` queues the ``end`` message with
the final loss counts; the thread ends once the stream acknowledged it (or at ``close``'s
deadline, when what is left is given up: the spool file goes with the process).
"""

from __future__ import annotations

import os
import secrets
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openetw.fleet.connect import StreamOptions, require_stream_extra
from openetw.fleet.natsconn import ConnectionLost, PublishConnection, encode_headers
from openetw.fleet.spool import Item, Spool
from openetw.fleet.wire import (
    H_BUFFERS_LOST,
    H_EVENTS,
    H_EVENTS_LOST,
    H_GAP,
    H_HOST,
    H_KIND,
    H_SEQUENCE,
    H_SESSION,
    H_START,
    KIND_BUFFER,
    KIND_END,
    KIND_HEADER,
    message_id,
)
from openetw.service.sinks import LossKind, linger

if TYPE_CHECKING:
    from openetw.service.server import TraceService
    from openetw.service.sessions import SessionRuntime
    from openetw.session import SessionConfig

__all__ = ["StreamPublisher", "stream_sink"]

EXPECTED_STREAM = "Nats-Expected-Stream"  # JetStream refuses the message when another stream has its subject
WAKE_BATCH = 8  # new buffers that wake a thread waiting for acknowledgements, or end a linger
# Acknowledged buffers' memory is kept for new ones, up to the spool size (what the session may
# hold anyway): a burst the stream falls behind on costs fresh memory once, not at every burst.
# Once nothing has waited for IDLE_TRIM seconds, what is kept beyond RECYCLE_BYTES is given back.
RECYCLE_BYTES = 4 << 20
IDLE_TRIM = 10.0
LINGER = 0.005  # how long a buffer may wait for others to leave with it when nothing is in flight
WINDOW = 32  # publishes waiting for their acknowledgement at once
# With the window (nearly) full and buffers waiting, an acknowledgement that comes waits for the
# next few, up to this long: one wake, one read and one send for several buffers, not each.
ACK_GATHER = 0.01
ACK_DELAY = 0.05  # how long acknowledgements may wait to be read while the window has room
# What waits in memory while the stream is unreachable (at most an eighth of the spool); the rest goes to disk.
MEMORY_BYTES = 1 << 20
PUBLISH_TIMEOUT = 2.0
PROBE_TIMEOUT = 0.5  # while the stream does not answer: find out soon that it answers again
RETRY_PAUSE = 0.25


class StreamPublisher:
    """A streamed session's sink (``openetw.service.sinks.Sink``): see the module's docstring."""

    name = "stream"
    copies_offered = True  # ``offer`` keeps a copy, never the buffer: the service may hand it the file's own
    kind: LossKind = "realtime"  # a buffer the spool has no room for is lost for real-time delivery, as one no consumer takes

    def __init__(
        self, options: StreamOptions, *, host: str, session: str, subject: str, start: int, spool_path: Path, spool_bytes: int,
        log: Any = None,
    ) -> None:  # fmt: skip
        self.options = options
        self.host, self.session, self.subject, self.start = host, session, subject, start
        self.nonce = secrets.token_hex(8)  # in every message id: see wire.message_id
        self.spool_bytes = spool_bytes
        self._log = log
        self._lock = threading.Lock()
        self._incoming: deque[Item] = deque()
        self._held_bytes = 0  # accepted, not acknowledged yet
        self._next_sequence = 0
        self._gap_first: int | None = None
        self.accepted = 0
        self.buffers_lost = 0
        self.events_lost = 0  # the stream's own losses plus what the producers lost
        self.buffers_acknowledged = 0
        self.events_acknowledged = 0
        self.reachable = False
        self.last_error: str | None = None
        self._finishing = False
        self._done = threading.Event()
        self._wake_read = self._wake_write = -1  # the thread's wake-up pipe, made when it starts
        self._signalled = False  # a byte waits in the wake pipe
        self._idle = True  # the thread waits with nothing in flight
        self._room = True  # the thread could send more now (its window is not full)
        self._fixed_headers = encode_headers({H_HOST: host, H_SESSION: session, H_START: str(start), EXPECTED_STREAM: options.stream})[:-2]
        self._recycled: list[bytearray] = []  # acknowledged buffers' memory, for the next ones
        self._discovered: list[str] = []  # the cluster's other servers, as the last connection learnt them
        self._abandon = False
        self._spool = Spool(spool_path)
        self._thread = threading.Thread(target=self._run, name=f"openetw-stream-{session}", daemon=True)

    # -- the service's side ----------------------------------------------------------------------
    def begin(self, header: bytes) -> None:
        """Start publishing, the logfile header buffer first."""
        with self._lock:
            self._accept(KIND_HEADER, header, 0)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread.start()

    @property
    def lost(self) -> int:
        return self.buffers_lost

    def offer(self, data: Any, events: int, delivery: Any = None) -> bool:
        """Take one completed buffer (copied); False when the spool has no room: it is lost."""
        size = len(data)
        with self._lock:
            recycled = self._recycled.pop() if self._recycled and len(self._recycled[-1]) == size else None
        # Into the memory of a buffer the stream already acknowledged: a new 64 KB object for
        # each buffer held until its acknowledgement costs the service more in page faults
        # than this copy.
        if recycled is not None:
            recycled[:] = data
            copy = recycled
        else:
            copy = bytearray(data)
        with self._lock:
            if self._held_bytes + size > self.spool_bytes:
                sequence = self._next_sequence
                self._next_sequence += 1
                if self._gap_first is None:
                    self._gap_first = sequence
                self.buffers_lost += 1
                self.events_lost += events
                return False
            self._accept(KIND_BUFFER, copy, events)
            self.accepted += 1
            # A thread waiting for acknowledgements takes new buffers when the next one comes:
            # it is woken only when nothing else would wake it, or when a batch waits.
            wake = self._idle or (self._room and len(self._incoming) >= WAKE_BATCH)
        if delivery is not None:
            delivery.kept = True  # held for the stream, or spooled: no consumer's leaving loses it
        if wake:
            self._wake()
        return True

    def note_lost(self, events: int) -> None:
        """Events the producers lost before their buffers reached the service."""
        with self._lock:
            self.events_lost += events

    def finish(self) -> None:
        """No more buffers: the end message, then the thread ends once everything is acknowledged."""
        with self._lock:
            if self._finishing:
                return
            self._accept(KIND_END, b"", 0)
            self._finishing = True
        self._wake()

    def flush(self, *, wait: bool) -> None:
        """Nothing to do: every buffer is published as soon as the stream takes it."""

    def close(self) -> None:
        """The session ended: the end message goes last, and the service waits for it at its exit."""
        self.finish()
        linger(self)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the stream to take everything; True when it did."""
        self.finish()
        done = self._done.wait(timeout) if self._thread.is_alive() else True
        if not done:
            self._abandon = True
            self._wake()
            self._thread.join(1.0)
        return done

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "subject": self.subject,
                "host": self.host,
                "start": self.start,
                "reachable": self.reachable,
                "sequence": self._next_sequence,
                "buffers_acknowledged": self.buffers_acknowledged,
                "events_acknowledged": self.events_acknowledged,
                "held_bytes": self._held_bytes,
                "spooled_items": self._spool.disk_items,
                "spilled_items": self._spool.spilled,
                "buffers_lost": self.buffers_lost,
                "events_lost": self.events_lost,
                "last_error": self.last_error,
            }

    def _accept(self, kind: str, payload: bytes | bytearray, events: int) -> None:
        """(under the lock) number the message, note a gap that ends here, hold it."""
        sequence = self._next_sequence
        self._next_sequence += 1
        gap = None
        if self._gap_first is not None:
            gap = (self._gap_first, sequence - 1)
            self._gap_first = None
        self._incoming.append(Item(sequence, kind, payload, events, self.events_lost, self.buffers_lost, gap))
        self._held_bytes += len(payload)

    def _wake(self) -> None:
        with self._lock:  # written under the lock: a byte waits in the pipe exactly while ``_signalled``
            if self._signalled or self._wake_write < 0:
                return
            self._signalled = True
            try:
                os.write(self._wake_write, b"!")
            except OSError:
                pass  # the thread has ended (its pipe closed): nothing to wake

    # -- the publishing thread -----------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._main()
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the service
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self._log is not None:
                self._log(f"streaming {self.session!r} stopped: {self.last_error}")
        finally:
            with self._lock:
                wake_write, self._wake_write = self._wake_write, -1
            for fd in (self._wake_read, wake_write):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._spool.close()
            self._done.set()

    def _main(self) -> None:
        retry: deque[Item] = deque()
        in_flight: dict[int, tuple[Item, float]] = {}  # sequence -> (item, when its answer is late), in send order
        connection: PublishConnection | None = None
        ensured = False
        healthy = False
        server_index = 0
        next_connect = 0.0
        linger_until: float | None = None
        ack_interval = 0.0  # the time between acknowledgements lately (moving average)
        last_ack = busy_at = time.monotonic()  # busy_at: when something last waited for the stream
        try:
            while not self._abandon:
                with self._lock:
                    while self._incoming:
                        self._spool.push(self._incoming.popleft())
                    finishing = self._finishing
                if finishing and not in_flight and not retry and not len(self._spool):
                    return
                if connection is None and time.monotonic() >= next_connect:
                    next_connect = time.monotonic() + RETRY_PAUSE
                    try:
                        connection = PublishConnection(self.options, name=f"openetw {self.host} {self.session}", timeout=PUBLISH_TIMEOUT,
                                                       start=server_index, extra_servers=self._discovered)  # fmt: skip
                        if not ensured:
                            connection.ensure_stream(self.options.stream)
                            ensured = True
                        healthy = True
                        self._set_reachable(True)
                    except Exception as exc:  # noqa: BLE001 - every failure means: not yet
                        self._note_error(exc)
                        self._set_reachable(False)
                        server_index += 1
                        if connection is not None:
                            connection.close()
                            connection = None
                # With nothing in flight, a few new buffers wait up to LINGER for more: one send
                # and one wake for several buffers, not one each (what a session at a modest rate costs).
                holding = False
                if connection is not None and healthy and not in_flight and not finishing and 0 < len(retry) + len(self._spool) < WAKE_BATCH:
                    if linger_until is None:
                        linger_until = time.monotonic() + LINGER
                    holding = time.monotonic() < linger_until
                if not holding:
                    linger_until = None
                if connection is not None and not holding:
                    limit = WINDOW if healthy else (0 if in_flight else 1)  # unhealthy: one probe at a time
                    batch: list[Item] = []
                    while len(in_flight) + len(batch) < limit and (retry or len(self._spool)):
                        item = retry.popleft() if retry else self._spool.pop()
                        assert item is not None
                        batch.append(item)
                    if batch:
                        late = time.monotonic() + (PUBLISH_TIMEOUT if healthy else PROBE_TIMEOUT)
                        for item in batch:
                            in_flight[item.sequence] = (item, late)
                        try:
                            connection.publish([(self.subject, item.sequence, self._headers(item), item.payload) for item in batch])
                        except ConnectionLost as exc:
                            server_index = self._lost(connection, exc)
                            connection = None
                if not healthy or connection is None:
                    self._spool.spill(min(MEMORY_BYTES, self.spool_bytes // 8))
                # Sleep until the server answers, a new buffer comes, or the first answer is late.
                now = time.monotonic()
                if in_flight or retry or len(self._spool):
                    busy_at = now
                elif now - busy_at > IDLE_TRIM:
                    self._trim_recycled()
                    busy_at = float("inf")
                pause = RETRY_PAUSE if (connection is None or not healthy) and not in_flight else 1.0
                if in_flight:
                    pause = min(pause, next(iter(in_flight.values()))[1] - now)
                if linger_until is not None:
                    pause = min(pause, linger_until - now)
                # With room in the window, acknowledgements need not wake the thread: what came is
                # read when the next buffer wakes it, or ACK_DELAY later (at a modest rate, one
                # wake a buffer instead of one for the buffer and one for its acknowledgement).
                lazy = connection is not None and healthy and bool(in_flight) and not finishing and len(in_flight) <= WINDOW - WAKE_BATCH
                if lazy:
                    pause = min(pause, ACK_DELAY)
                room = connection is not None and len(in_flight) < (WINDOW if healthy else 1) and not holding
                with self._lock:
                    woken = self._signalled or (room and bool(self._incoming)) or self._finishing != finishing
                    # Nothing else wakes the thread soon (no answer it waits for): a new buffer must.
                    self._idle = (not in_flight or lazy) and not holding
                    self._room = room or holding  # a linger ends early when a batch comes
                if connection is not None and lazy:
                    if not woken:
                        select.select([self._wake_read], [], [], max(pause, 0.0))
                    readable = True  # whatever answers came, read without waiting for more
                elif connection is not None:
                    readable = connection.wait(0.0 if woken else pause, self._wake_read)
                    if readable and not woken and healthy and len(in_flight) > WINDOW - WAKE_BATCH and (retry or len(self._spool)):
                        # Buffers wait for room in the window: let more acknowledgements come first.
                        gather = min(ACK_GATHER, WAKE_BATCH * ack_interval, in_flight[next(iter(in_flight))][1] - time.monotonic())
                        if gather > 0:
                            time.sleep(gather)
                else:
                    readable = False
                    if not woken:
                        select.select([self._wake_read], [], [], max(pause, 0.0))
                self._drain_wake()
                failed: list[Item] = []
                if connection is not None and readable:
                    try:
                        acks = connection.read()
                    except ConnectionLost as exc:
                        acks = []
                        server_index = self._lost(connection, exc)
                        connection = None
                    if acks:
                        now = time.monotonic()
                        ack_interval = 0.75 * ack_interval + 0.25 * min((now - last_ack) / len(acks), ACK_GATHER)
                        last_ack = now
                    for sequence, error in acks:
                        entry = in_flight.pop(sequence, None)
                        if entry is None:
                            continue  # an answer to a publish given up on and sent again: the new one answers too
                        if error is None:
                            self._acknowledged(entry[0])
                            if not healthy:
                                healthy = True
                                self._set_reachable(True)
                        else:
                            self.last_error = error
                            failed.append(entry[0])
                now = time.monotonic()
                while in_flight:
                    sequence, (item, late) = next(iter(in_flight.items()))
                    if late > now:
                        break
                    del in_flight[sequence]
                    self._note_error(TimeoutError("no acknowledgement in time"))
                    failed.append(item)
                    if connection is not None and not connection.received_any:
                        server_index = self._lost(connection, ConnectionLost("the server says nothing"))
                        connection = None
                if connection is None and in_flight:  # the connection went: nothing in flight will be answered
                    failed += [item for item, _ in in_flight.values()]
                    in_flight.clear()
                if connection is not None and failed:
                    connection.received_any = False
                if failed:
                    healthy = False
                    self._set_reachable(False)
                    # Sent again first, in order, once the stream answers (duplicates are dropped by id).
                    retry = deque(sorted([*retry, *failed], key=lambda i: i.sequence))
                    if in_flight:
                        continue
                    time.sleep(RETRY_PAUSE)
        finally:
            if connection is not None:
                connection.close()

    def _lost(self, connection: PublishConnection, error: Exception) -> int:
        """Close a broken connection; the index of the server to try next."""
        self._note_error(error)
        connection.close()
        self._discovered = connection.discovered
        return connection.server_index + 1

    def _drain_wake(self) -> None:
        with self._lock:
            if self._signalled:
                try:
                    os.read(self._wake_read, 4096)
                except BlockingIOError:
                    pass
            self._signalled = self._idle = False

    def _headers(self, item: Item) -> bytes:
        """The message's header block: ``wire.message_headers`` plus the expected stream, the
        fields that never change encoded once (``_fixed_headers``)."""
        events_lost, buffers_lost = item.events_lost, item.buffers_lost
        if item.kind == KIND_END:
            with self._lock:  # the end message carries the counts as they are when it leaves
                events_lost, buffers_lost = self.events_lost, self.buffers_lost
        gap = f"{H_GAP}: {item.gap[0]}-{item.gap[1]}\r\n" if item.gap is not None else ""
        return self._fixed_headers + (
            f"Nats-Msg-Id: {message_id(self.host, self.session, self.start, item.sequence, self.nonce)}\r\n"
            f"{H_SEQUENCE}: {item.sequence}\r\n{H_KIND}: {item.kind}\r\n{H_EVENTS}: {item.events}\r\n"
            f"{H_EVENTS_LOST}: {events_lost}\r\n{H_BUFFERS_LOST}: {buffers_lost}\r\n{gap}\r\n"
        ).encode()

    def _acknowledged(self, item: Item) -> None:
        with self._lock:
            self._held_bytes -= item.size
            if item.kind == KIND_BUFFER:
                self.buffers_acknowledged += 1
                self.events_acknowledged += item.events
                if isinstance(item.payload, bytearray) and (len(self._recycled) + 1) * item.size <= max(self.spool_bytes, 2 * item.size):
                    self._recycled.append(item.payload)

    def _trim_recycled(self) -> None:
        """Give back the kept memory beyond ``RECYCLE_BYTES`` (at least two buffers stay)."""
        with self._lock:
            if self._recycled:
                keep = max(2, RECYCLE_BYTES // len(self._recycled[-1]))
                del self._recycled[keep:]

    def _set_reachable(self, value: bool) -> None:
        if value != self.reachable and self._log is not None:
            self._log(f"stream of {self.session!r}: {'publishing to' if value else 'cannot reach'} {','.join(self.options.servers)}"
                      + ("" if value else f" ({self.last_error}); buffers wait in the spool"))  # fmt: skip
        self.reachable = value

    def _note_error(self, error: BaseException) -> None:
        self.last_error = f"{type(error).__name__}: {error}".rstrip(": ")


def session_start_stamp() -> int:
    """A session's start as it names the session in the stream: microseconds since the epoch."""
    return time.time_ns() // 1000


DEFAULT_SPOOL_MB = 64.0


def stream_sink(service: TraceService, config: SessionConfig, spec: Any) -> Callable[[SessionRuntime], StreamPublisher]:
    """The trace service's factory for a start request's ``"stream"`` (``TraceService.sink_factories``):
    the publisher checked before the session starts, and what starts it once the session runs."""
    from openetw.errors import InvalidArgument
    from openetw.service.server import log

    if not config.mode.real_time:
        raise InvalidArgument(f"a streamed session delivers in real time; {config.mode.value} mode does not")
    publisher = prepare_stream(config.name, spec, host=service.host_name, spool_dir=service.socket_path.parent / "spool", log=log)

    def attach(runtime: SessionRuntime) -> StreamPublisher:
        attach_stream(runtime, publisher)
        return publisher

    return attach


def prepare_stream(name: str, spec: Any, *, host: str, spool_dir: Path, log: Any = None) -> StreamPublisher:
    """A publisher for session ``name`` as ``spec`` (a start request's ``stream`` object) says:
    ``options`` (``StreamOptions.to_json``), ``subject`` (a template), ``spool_mb``; checked
    before the session starts, started by ``attach_stream``."""
    from openetw.errors import InvalidArgument
    from openetw.fleet.wire import DEFAULT_SUBJECT, subject_for, subject_token

    if not isinstance(spec, dict):
        raise InvalidArgument("'stream' must be an object")
    require_stream_extra()  # the service's own installation must have the stream extra: said to the controller now
    options = StreamOptions.from_json(spec.get("options"))
    template = spec.get("subject") or DEFAULT_SUBJECT
    if not isinstance(template, str):
        raise InvalidArgument("the stream's subject must be a string")
    subject = subject_for(template, host, name)
    spool_mb = spec.get("spool_mb", DEFAULT_SPOOL_MB)
    if isinstance(spool_mb, bool) or not isinstance(spool_mb, (int, float)) or spool_mb <= 0:
        raise InvalidArgument("the spool size must be a positive number of MB")
    start = session_start_stamp()
    return StreamPublisher(
        options, host=host, session=name, subject=subject, start=start,
        spool_path=spool_dir / f"{subject_token(name)}-{start}.spool", spool_bytes=int(spool_mb * (1 << 20)), log=log,
    )  # fmt: skip


def attach_stream(runtime: SessionRuntime, publisher: StreamPublisher) -> None:
    """Start ``publisher`` with the session's logfile header; the caller adds it to the session's sinks."""
    publisher.begin(runtime.header_for_consumers())
