"""A session's buffers published to the fleet's JetStream stream, from a thread of its own.

The service's loop hands each completed buffer to ``offer`` and goes on: ``offer`` never waits.
It numbers the buffer (sequence 0 is the logfile header buffer, sent first) and keeps it while
the bytes held for the stream stay within the spool size; past that the buffer is lost for the
stream (ETW's BuffersLost: ``offer`` returns False and the session counts it) and its sequence
number becomes a gap the next message names.

The publishing thread runs an asyncio loop with one NATS connection. It publishes in sequence
order with at most ``WINDOW`` acknowledgements outstanding; each message carries the id
``<host>:<session>:<start>:<sequence>``, so a publish repeated after a lost acknowledgement is
dropped by JetStream. When a publish fails (the cluster unreachable, no leader) the thread stops
sending, keeps the failed buffers to send again first, and moves what waits in memory beyond
``MEMORY_BYTES`` to the spool file; it probes with one message at a time until the stream
acknowledges again, then replays everything in order. ``finish`` queues the ``end`` message with
the final loss counts; the thread ends once the stream acknowledged it (or at ``close``'s
deadline, when what is left is given up: the spool file goes with the process).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openetw.fleet.connect import FleetError, StreamOptions, connect, ensure_stream, require_nats
from openetw.fleet.spool import Item, Spool
from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER, message_headers
from openetw.service.sinks import LossKind, linger

if TYPE_CHECKING:
    from openetw.service.server import TraceService
    from openetw.service.sessions import SessionRuntime
    from openetw.session import SessionConfig

__all__ = ["StreamPublisher", "stream_sink"]

WINDOW = 32  # publishes waiting for their acknowledgement at once
# What waits in memory while the stream is unreachable (at most an eighth of the spool); the rest goes to disk.
MEMORY_BYTES = 1 << 20
PUBLISH_TIMEOUT = 2.0
PROBE_TIMEOUT = 0.5  # while the stream does not answer: find out soon that it answers again
RETRY_PAUSE = 0.25


class StreamPublisher:
    """A streamed session's sink (``openetw.service.sinks.Sink``): see the module's docstring."""

    name = "stream"
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._abandon = False
        self._spool = Spool(spool_path)
        self._thread = threading.Thread(target=self._run, name=f"openetw-stream-{session}", daemon=True)

    # -- the service's side ----------------------------------------------------------------------
    def begin(self, header: bytes) -> None:
        """Start publishing, the logfile header buffer first."""
        with self._lock:
            self._accept(KIND_HEADER, header, 0)
        self._thread.start()

    @property
    def lost(self) -> int:
        return self.buffers_lost

    def offer(self, data: Any, events: int, delivery: Any = None) -> bool:
        """Take one completed buffer (copied); False when the spool has no room: it is lost."""
        size = len(data)
        with self._lock:
            if self._held_bytes + size > self.spool_bytes:
                sequence = self._next_sequence
                self._next_sequence += 1
                if self._gap_first is None:
                    self._gap_first = sequence
                self.buffers_lost += 1
                self.events_lost += events
                return False
            self._accept(KIND_BUFFER, bytes(data), events)
            self.accepted += 1
        if delivery is not None:
            delivery.kept = True  # held for the stream, or spooled: no consumer's leaving loses it
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

    def _accept(self, kind: str, payload: bytes, events: int) -> None:
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
        loop, wakeup = self._loop, self._wakeup
        if loop is not None and wakeup is not None:
            try:
                loop.call_soon_threadsafe(wakeup.set)
            except RuntimeError:
                pass  # the loop has ended

    # -- the publishing thread -----------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the service
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self._log is not None:
                self._log(f"streaming {self.session!r} stopped: {self.last_error}")
        finally:
            self._spool.close()
            self._done.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        retry: deque[Item] = deque()
        in_flight: dict[asyncio.Task[Any], Item] = {}
        finished: list[asyncio.Task[Any]] = []

        def wake(_task: Any) -> None:
            assert self._wakeup is not None
            self._wakeup.set()
        client = None
        js = None
        healthy = False
        try:
            while not self._abandon:
                with self._lock:
                    while self._incoming:
                        self._spool.push(self._incoming.popleft())
                    finishing = self._finishing
                if finishing and not in_flight and not retry and not len(self._spool):
                    return
                if client is None:
                    try:
                        client = await connect(self.options, name=f"openetw {self.host} {self.session}")
                        js = client.jetstream(timeout=PUBLISH_TIMEOUT)
                        await ensure_stream(js, self.options.stream)
                        healthy = True
                        self._set_reachable(True)
                    except (FleetError, Exception) as exc:  # noqa: BLE001 - every failure means: not yet
                        self._note_error(exc)
                        if client is not None:
                            await _close_quietly(client)
                        client = js = None
                if js is not None:
                    limit = WINDOW if healthy else (0 if in_flight else 1)  # unhealthy: one probe at a time
                    while len(in_flight) < limit and (retry or len(self._spool)):
                        item = retry.popleft() if retry else self._spool.pop()
                        assert item is not None
                        task = asyncio.ensure_future(self._publish(js, item, PUBLISH_TIMEOUT if healthy else PROBE_TIMEOUT))
                        task.add_done_callback(finished.append)
                        task.add_done_callback(wake)
                        in_flight[task] = item
                if not healthy or client is None:
                    self._spool.spill(min(MEMORY_BYTES, self.spool_bytes // 8))
                if not finished:  # a finished publish or a new buffer wakes the loop (one event, not a wait on every task)
                    pause = RETRY_PAUSE if (client is None or not healthy) and not in_flight else 1.0
                    try:
                        async with asyncio.timeout(pause):
                            await self._wakeup.wait()
                    except TimeoutError:
                        pass
                self._wakeup.clear()
                failed: list[Item] = []
                done, finished[:] = finished[:], []
                for task in done:
                    item = in_flight.pop(task)
                    error = task.exception()
                    if error is None:
                        self._acknowledged(item)
                        if not healthy:
                            healthy = True
                            self._set_reachable(True)
                    else:
                        self._note_error(error)
                        failed.append(item)
                if failed:
                    healthy = False
                    self._set_reachable(False)
                    # Sent again first, in order, once the stream answers (duplicates are dropped by id).
                    retry = deque(sorted([*retry, *failed], key=lambda i: i.sequence))
                    if in_flight:
                        continue
                    await asyncio.sleep(RETRY_PAUSE)
        finally:
            for task in in_flight:
                task.remove_done_callback(finished.append)
                task.cancel()
            if client is not None:
                await _close_quietly(client)

    async def _publish(self, js: Any, item: Item, timeout: float) -> None:
        headers = message_headers(
            host=self.host, session=self.session, start=self.start, sequence=item.sequence, kind=item.kind, events=item.events,
            events_lost=item.events_lost, buffers_lost=item.buffers_lost, gap=item.gap, nonce=self.nonce,
        )  # fmt: skip
        if item.kind == KIND_END:
            with self._lock:  # the end message carries the counts as they are when it leaves
                headers = message_headers(
                    host=self.host, session=self.session, start=self.start, sequence=item.sequence, kind=item.kind, events=0,
                    events_lost=self.events_lost, buffers_lost=self.buffers_lost, gap=item.gap, nonce=self.nonce,
                )  # fmt: skip
        await js.publish(self.subject, item.payload, timeout=timeout, stream=self.options.stream, headers=headers)

    def _acknowledged(self, item: Item) -> None:
        with self._lock:
            self._held_bytes -= item.size
            if item.kind == KIND_BUFFER:
                self.buffers_acknowledged += 1
                self.events_acknowledged += item.events

    def _set_reachable(self, value: bool) -> None:
        if value != self.reachable and self._log is not None:
            self._log(f"stream of {self.session!r}: {'publishing to' if value else 'cannot reach'} {','.join(self.options.servers)}"
                      + ("" if value else f" ({self.last_error}); buffers wait in the spool"))  # fmt: skip
        self.reachable = value

    def _note_error(self, error: BaseException) -> None:
        self.last_error = f"{type(error).__name__}: {error}".rstrip(": ")


async def _close_quietly(client: Any) -> None:
    try:
        await asyncio.wait_for(client.close(), 2.0)
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass


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
    require_nats()  # the service's own installation must have nats-py: said to the controller now
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
