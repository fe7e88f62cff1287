"""Where a session's buffers go: every destination is a ``Sink``.

A running session hands each buffer it takes from a pool to its sinks in turn (``SessionRuntime.deliver``)
and keeps the books once: a buffer some sink took counts written, a buffer no sink took has its events
lost, and a buffer every sink of one kind refused counts once in that kind's statistic
(``realtime_buffers_lost``, ``log_buffers_lost``). The service's own sinks are here: the buffering ring,
the real-time consumers attached over the control socket, and the log file. Others (the Event Log's
channels, a stream to other machines) are made by the programs that plug them in: the service knows
the protocol, not the destinations. A destination a start request names (``"stream": {...}``) gets
its sink from the factory registered under that key (``TraceService.sink_factories``).
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from openetw.service.connection import Delivery

if TYPE_CHECKING:
    from openetw.service.server import TraceService
    from openetw.service.sessions import SessionRuntime
    from openetw.session import SessionConfig

__all__ = [
    "Buffer",
    "ConsumerSink",
    "Delivery",
    "FileSink",
    "LossKind",
    "RingSink",
    "SINK_REQUEST_KEYS",
    "Sink",
    "SinkFactory",
    "linger",
    "wait_for_lingering",
]

Buffer = bytes | mmap.mmap  # a buffer taken out of a pool (or the file's spare it was taken into)
LossKind = Literal["realtime", "file", "ring"]


class Sink(Protocol):
    """One destination of a session's buffers.

    ``offer`` takes a buffer (its records already counted: ``events``) and says whether it took
    it; it never waits. A sink that keeps what it took (it cannot lose it later, as a consumer
    that goes away can) sets ``delivery.kept``. ``kind`` names the statistic a buffer is lost in
    when every sink of that kind refused it. ``accepted`` and ``lost`` count the buffers it took
    and refused. ``note_lost`` hears of events the producers lost before their buffers reached
    the session (a file's header and a stream's messages carry the count); ``flush`` makes what
    it took durable (``wait``: before it returns); ``close`` follows the session's last buffer.
    ``describe`` is what a session query shows of it under ``name`` (``None``: nothing).
    """

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> LossKind: ...

    @property
    def accepted(self) -> int: ...

    @property
    def lost(self) -> int: ...

    def offer(self, buffer: Buffer, events: int, delivery: Delivery) -> bool: ...

    def note_lost(self, events: int) -> None: ...

    def flush(self, *, wait: bool) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any] | None: ...


# The destinations a start request may name beside its log mode, each taken by the factory the
# program running the service registers under that key (``TraceService.sink_factories``).
SINK_REQUEST_KEYS = ("stream",)

# A destination named in a start request: called with the service, the session's settings and the
# request's value before the session starts (it raises ``InvalidArgument`` for a bad value), it
# returns what attaches the sink to the running session.
SinkFactory = Callable[["TraceService", "SessionConfig", Any], Callable[["SessionRuntime"], Sink]]


class _Counts:
    name = ""
    kind: LossKind = "realtime"

    def __init__(self) -> None:
        self.accepted = 0
        self.lost = 0

    def _count(self, took: bool) -> bool:
        if took:
            self.accepted += 1
        else:
            self.lost += 1
        return took

    def note_lost(self, events: int) -> None:
        pass

    def flush(self, *, wait: bool) -> None:
        pass

    def describe(self) -> dict[str, Any] | None:
        return None


class RingSink(_Counts):
    """A buffering session's ring: the newest ``maximum_buffers`` buffers, kept in memory for a snapshot."""

    name = "ring"
    kind: LossKind = "ring"

    def __init__(self, runtime: SessionRuntime) -> None:
        super().__init__()
        self.runtime = runtime

    def offer(self, buffer: Buffer, events: int, delivery: Delivery) -> bool:
        ring = self.runtime.ring
        ring.append((buffer, events))
        while len(ring) > self.runtime.config.maximum_buffers:
            ring.popleft()
        delivery.kept = True
        return self._count(True)

    def close(self) -> None:
        self.runtime.ring.clear()


class ConsumerSink(_Counts):
    """The real-time consumers attached to the session over the control socket (``runtime.consumers``)."""

    name = "consumers"
    kind: LossKind = "realtime"

    def __init__(self, runtime: SessionRuntime) -> None:
        super().__init__()
        self.runtime = runtime

    def offer(self, buffer: Buffer, events: int, delivery: Delivery) -> bool:
        consumers = self.runtime.consumers
        sent = False
        for consumer in list(consumers.values()):
            if consumer.closed:
                del consumers[consumer.connection_id]
                continue
            sent |= consumer.send(
                {"event": "buffer", "session_id": self.runtime.session_id},
                payload=buffer,
                is_buffer=True,
                delivery=delivery,
            )
        return self._count(sent)

    def close(self) -> None:
        runtime = self.runtime
        for consumer in runtime.consumers.values():
            consumer.send({"event": "end", "session_id": runtime.session_id})
            consumer.consuming.discard(runtime.session_id)
        runtime.consumers.clear()


class FileSink(_Counts):
    """The session's log file (``runtime.logfile``: sequential, circular or new-file; written on its own thread)."""

    name = "file"
    kind: LossKind = "file"

    def __init__(self, runtime: SessionRuntime) -> None:
        super().__init__()
        self.runtime = runtime

    def offer(self, buffer: Buffer, events: int, delivery: Delivery) -> bool:
        runtime, logfile = self.runtime, self.runtime.logfile
        if logfile is None:
            return self._count(False)
        written = False
        if runtime.write_error is None:
            try:
                written = logfile.write(buffer, events, counted_written=delivery.taken, owned=delivery.owned).written
            except OSError as exc:
                runtime.file_failed(f"cannot write {logfile.file_name}: {exc.strerror or exc}")
        if written:
            delivery.kept = True
        else:
            logfile.note_lost(events=events, buffers=1)  # the file's header counts it
        return self._count(written)

    def note_lost(self, events: int) -> None:
        if self.runtime.logfile is not None:
            self.runtime.logfile.note_lost(events=events)

    def flush(self, *, wait: bool) -> None:
        runtime, logfile = self.runtime, self.runtime.logfile
        if logfile is None or runtime.write_error is not None:
            return
        try:
            logfile.flush(wait=wait)
        except OSError as exc:
            runtime.file_failed(f"cannot write {logfile.file_name}: {exc.strerror or exc}")

    def close(self) -> None:
        runtime, logfile = self.runtime, self.runtime.logfile
        if logfile is None:
            return
        try:
            logfile.close()
        except OSError as exc:
            runtime.file_failed(f"cannot finish {logfile.file_name}: {exc}")


class Lingering(Protocol):
    def wait(self, timeout: float) -> bool: ...


_LINGERING: set[Lingering] = set()


def linger(sink: Lingering) -> None:
    """A closed sink that still delivers in the background (a stream's last buffers): the service
    gives it time at its exit (``wait_for_lingering``)."""
    _LINGERING.add(sink)


def wait_for_lingering(timeout: float) -> None:
    """At the service's exit: give every lingering sink up to ``timeout`` seconds (in all) to finish."""
    deadline = time.monotonic() + timeout
    for sink in list(_LINGERING):
        sink.wait(max(0.0, deadline - time.monotonic()))
        _LINGERING.discard(sink)
