"""The fleet's stream as a trace's source: ``UserTrace(streams=["nats://HOST:PORT"])``.

A ``StreamSource`` is a real-time source like a live session, fed by the fleet's JetStream
stream instead of the local trace service: an ordered consumer (nothing acknowledged, nothing
kept on the servers) on ``etw.<host>.>`` (every host unless ``hosts`` names some), from the
messages published from now on (``start="now"``) or from the stream's first (``"start"``).

Each message is one ETL buffer of one host's session. A session's logfile header buffer (its
sequence 0) gives the context its buffers decode with; when the view starts after it was
published, it is looked up once in the stream (from the session's start time on). Buffers
are delivered as they come, each in its own order, and a buffer seen twice (a host's publish
repeated after a lost acknowledgement) once. Like a live session, the header's event is not
delivered; ``stop()`` ends the stream from any thread.
"""

from __future__ import annotations

import asyncio
import datetime
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from openetw.consumer.errors import LiveSessionUnavailable
from openetw.consumer.sources import Source, records_from_buffer
from openetw.consumer.stats import SourceStatistics
from openetw.errors import InvalidArgument, OpenEtwError
from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord, RecordContext

__all__ = ["StreamSource"]

STARTS = ("now", "start")
SEEN_KEPT = 4096
_END = object()


class StreamSource(Source):
    live = True

    def __init__(self, servers: Any, *, hosts: Sequence[str] = (), start: str = "now") -> None:
        from openetw.fleet.connect import StreamOptions
        from openetw.fleet.wire import subject_token

        if start not in STARTS:
            raise InvalidArgument(f"a stream is read from 'now' or 'start', not {start!r}")
        self.options = servers if isinstance(servers, StreamOptions) else StreamOptions.build(servers)
        self.hosts = [subject_token(host) for host in hosts]
        self.start = start
        self.name = ",".join(self.options.servers)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1024)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._contexts: dict[tuple[str, str, int], RecordContext] = {}
        self._seen: dict[tuple[str, str, int], set[int]] = {}  # per session, the recent sequences
        self.buffers_received = 0
        self.duplicates = 0
        self.messages_refused = 0  # messages that failed the fleet's message check (openetw.fleet.check)

    def open(self) -> None:
        from openetw.fleet.connect import require_nats

        require_nats()
        self._thread = threading.Thread(target=self._run, name="openetw-stream-view", daemon=True)
        self._thread.start()
        self._ready.wait(15.0)
        if self._error is not None:
            raise LiveSessionUnavailable(f"cannot read the fleet's stream: {self._error}") from self._error
        if not self._ready.is_set():
            self.stop()
            raise LiveSessionUnavailable(f"the fleet's stream on {self.name} did not answer")

    def records(self) -> Iterator[EventRecord]:
        if self._thread is None:
            self.open()
        number = 0
        while True:
            item = self._queue.get()
            if item is _END:
                if self._error is not None and not self._stopped.is_set():
                    raise OpenEtwError(f"reading the fleet's stream: {self._error}")
                return
            context, data = item
            number += 1
            yield from records_from_buffer(data, context, number)

    def stop(self) -> None:
        self._stopped.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:
                pass

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(5.0)

    def statistics(self) -> SourceStatistics:
        stats = SourceStatistics()
        stats.records = self.buffers_received
        return stats

    def __repr__(self) -> str:
        return f"<StreamSource {self.name} {self.start}>"

    # -- the reading thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - handed to the reading side
            self._error = exc
        finally:
            self._ready.set()
            self._put(_END)

    def _put(self, item: Any) -> None:
        while not self._stopped.is_set() or item is _END:
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if item is _END:
                    try:
                        self._queue.get_nowait()  # the reader is gone or slow: make room for the end
                    except queue.Empty:
                        pass

    async def _main(self) -> None:
        from nats.js.api import DeliverPolicy

        from openetw.fleet.connect import connect

        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        client = await connect(self.options, name="openetw trace --stream")
        try:
            js = client.jetstream(timeout=5.0)
            policy = DeliverPolicy.NEW if self.start == "now" else DeliverPolicy.ALL
            subjects = [f"etw.{host}.>" for host in self.hosts] or ["etw.>"]
            subscriptions = []

            async def on_message(message: Any) -> None:
                await self._on_message(js, message)

            for subject in subjects:
                subscriptions.append(await js.subscribe(subject, stream=self.options.stream, ordered_consumer=True, deliver_policy=policy,
                                                        cb=on_message))  # fmt: skip
            self._ready.set()
            await self._stopping.wait()
            for subscription in subscriptions:
                try:
                    await subscription.unsubscribe()
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
        finally:
            try:
                await asyncio.wait_for(client.close(), 3.0)
            except Exception:  # noqa: BLE001
                pass

    async def _on_message(self, js: Any, message: Any) -> None:
        from openetw.fleet.check import check_message
        from openetw.fleet.wire import KIND_BUFFER, KIND_HEADER

        try:
            checked = check_message(message.subject, message.headers, message.data)
        except InvalidArgument:
            self.messages_refused += 1  # the collector's check: not a message of the host it came from
            return
        info = checked.info
        if info.kind == KIND_HEADER:
            self._contexts.setdefault(info.key, _context_of(checked.payload))
            return
        if info.kind != KIND_BUFFER:
            return
        seen = self._seen.setdefault(info.key, set())
        if info.sequence in seen:
            self.duplicates += 1
            return
        seen.add(info.sequence)
        if len(seen) > SEEN_KEPT:  # a repeated publish comes within the window: older numbers can go
            for old in sorted(seen)[: SEEN_KEPT // 2]:
                seen.discard(old)
        context = self._contexts.get(info.key)
        if context is None:
            context = await self._look_up_header(js, message.subject, info.key)
            if context is None:
                return  # the session's header is no longer in the stream: its buffers cannot be decoded
        self.buffers_received += 1
        await asyncio.get_running_loop().run_in_executor(None, self._put, (context, checked.payload))

    async def _look_up_header(self, js: Any, subject: str, key: tuple[str, str, int]) -> RecordContext | None:
        """The header of a session that began before the view: the first message on its
        subject from the session's start on."""
        from nats.js.api import DeliverPolicy

        from openetw.fleet.check import check_message
        from openetw.fleet.wire import KIND_HEADER

        since = datetime.datetime.fromtimestamp(key[2] / 1e6 - 1.0, tz=datetime.UTC)
        found: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def look(message: Any) -> None:
            try:
                info = check_message(message.subject, message.headers, message.data).info
            except InvalidArgument:
                return
            if info.kind == KIND_HEADER and info.key == key and not found.done():
                found.set_result(bytes(message.data))

        from nats.js.api import ConsumerConfig

        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since)
        subscription = await js.subscribe(subject, stream=self.options.stream, ordered_consumer=True, config=config, cb=look)
        try:
            data = await asyncio.wait_for(found, 5.0)
        except TimeoutError:
            return None
        finally:
            await subscription.unsubscribe()
        return self._contexts.setdefault(key, _context_of(data))


def _context_of(header: bytes) -> RecordContext:
    with EtlReader(bytes(header), strict=False) as reader:
        context = reader.context
    assert context is not None
    return context
