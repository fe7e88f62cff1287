"""A real-time consumer: a session's buffers as they are taken from the producers, read as records.

The service answers the attach request with the session's header buffer and then sends every
buffer it takes, whole; the consumer says which buffers it received (``realtime_received``), so
that the buffers on their way to a consumer that dies are counted lost by the session. Together they are an ETL stream, read by ``openetw.etl.EtlReader`` front
to back as the buffers arrive: iterating blocks until the next buffer comes, and ends when the
session stops (or ``close()`` is called from another thread).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

from openetw.controller.client import ServiceClient, error_from_reply
from openetw.errors import ServiceError
from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord
from openetw.etl.relog import is_logfile_header_record

__all__ = ["RealtimeConsumer"]


class _BufferStream(io.RawIOBase):
    """The header buffer, then each buffer as it arrives, as one unseekable byte stream."""

    def __init__(self, consumer: RealtimeConsumer, first: bytes) -> None:
        self._consumer = consumer
        self._pending = memoryview(first)

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            data = self._consumer.next_buffer()
            if data is None:
                return 0
            self._pending = memoryview(data)
        count = min(len(target), len(self._pending))
        target[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


class RealtimeConsumer:
    """``for record in RealtimeConsumer("MySession"): ...`` (or ``session.consumer()``).

    ``buffers_received`` counts the buffers taken; ``ended`` tells whether the session stopped.
    """

    def __init__(self, session: str, *, socket: str | os.PathLike[str] | None = None) -> None:
        self.session = session
        self._client = ServiceClient(socket, autostart=False)
        channel = self._client.channel
        request_id = channel.new_id()
        channel.send({"op": "realtime", "id": request_id, "session": session, "acks": True})
        reply = channel.receive()
        if reply is None:
            self._client.close()
            raise ServiceError("the trace service closed the connection")
        if not reply.body.get("ok"):
            self._client.close()
            raise error_from_reply(reply.body)
        self.header_buffer = reply.payload
        self.buffer_size = int(reply.body.get("buffer_size", len(reply.payload)))
        self.session_id = reply.body.get("session_id")
        self.buffers_received = 0
        self.ended = False

    def next_buffer(self) -> bytes | None:
        """The next whole buffer, blocking; ``None`` once the session ended or the link closed."""
        if self.ended:
            return None
        while True:
            message = self._client.channel.receive()
            if message is None:
                self.ended = True
                return None
            message.close_fds()
            event = message.body.get("event")
            if event == "buffer":
                self.buffers_received += 1
                self._say_received()
                return message.payload
            if event == "end":
                self.ended = True
                return None

    def _say_received(self) -> None:
        if not isinstance(self.session_id, int):
            return  # a service that does not take acknowledgements
        try:
            self._client.channel.send({"op": "realtime_received", "session": self.session_id, "buffers": 1})
        except OSError:
            pass  # the service is gone: the stream ends with the next read

    def buffer_waiting(self, timeout: float = 0.0) -> bool:
        """Whether the service already sent more (a buffer, or the end of the session), or does
        within ``timeout`` seconds: the next ``next_buffer()`` then returns without waiting."""
        return not self.ended and self._client.channel.has_message(timeout)

    def buffers(self) -> Iterator[bytes]:
        while (data := self.next_buffer()) is not None:
            yield data

    def records(self) -> Iterator[EventRecord]:
        """Every event of the session from now on, as ``EventRecord``s."""
        reader = EtlReader(_BufferStream(self, self.header_buffer), strict=False)  # type: ignore[arg-type]
        for record in reader:
            if not is_logfile_header_record(record):
                yield record

    __iter__ = records

    def close(self) -> None:
        self.ended = True
        try:
            self._client.channel.sock.shutdown(2)
        except OSError:
            pass
        self._client.close()

    def __enter__(self) -> RealtimeConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
