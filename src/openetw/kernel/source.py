"""What every kernel event source gives a kernel session: raw events in time order.

A source is a shell over one kernel facility (tracefs, perf_event_open, the proc connector).
It turns that facility's records into *raw kernel events*: ``(timestamp, cpu, name, values)``
with the timestamp in CLOCK_MONOTONIC nanoseconds (the file's QPC), ``name`` the event's name
(a tracepoint name such as ``"sched_process_fork"``, or a source-specific one such as
``"perf_mmap2"``) and ``values`` a mapping of its fields. The session merges the events of all
its sources in time order and gives them to :class:`~openetw.kernel.classes.KernelEventMapper`,
whose handlers (one per event name) make the NT Kernel Logger records.

Sources never write files and never map events: that keeps each one testable on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from openetw.etl.record import EventRecord

__all__ = ["KernelEventSource", "RawKernelEvent", "RecordSink"]

RawKernelEvent = tuple[int, int, str, Mapping[str, Any]]
"""``(timestamp_ns, cpu, name, values)``: one event as a source read it."""


class KernelEventSource(Protocol):
    """One kernel facility feeding a kernel session.

    Life cycle: ``start()`` once, then ``read(timeout)`` from the session's reader thread until
    the session stops, then ``stop()`` and a final ``drain()``, then ``close()`` (always, also
    after a failed start).
    """

    name: str
    """Short source name for statistics and errors: ``"tracefs"``, ``"perf"``, ``"proc_connector"``."""

    def start(self) -> None:
        """Begin recording. Raises an :class:`openetw.errors.OpenEtwError` that says why not."""

    def read(self, timeout: float) -> list[RawKernelEvent]:
        """Events available now, waiting at most ``timeout`` seconds for the first; may be empty."""

    @property
    def watermark(self) -> int:
        """Every event with a timestamp at or below this has been returned by ``read``."""

    def stop(self) -> None:
        """Stop recording; events already recorded stay readable through :meth:`drain`."""

    def drain(self) -> list[RawKernelEvent]:
        """Everything still unread after :meth:`stop`."""

    def lost(self) -> int:
        """Events this source knows were lost (kernel counters, overruns, ENOBUFS...), cumulative."""

    def close(self) -> None:
        """Release every kernel resource (instances, perf fds, sockets). Idempotent."""


class RecordSink(Protocol):
    """Where a kernel session puts its NT Kernel Logger records.

    :class:`~openetw.etl.writer.EtlWriter` is one (a session to a file); a trace service's buffer
    pool or an in-process real-time consumer can be others. Called from one thread at a time.
    """

    def write(self, record: EventRecord) -> bool:
        """Keep one record; ``False`` when it was dropped (the sink counts it lost)."""

    # Optional: ``write_raw(raw: bytes, cpu: int, timestamp: int) -> bool`` keeps a record given
    # as its bytes (header included, built without a context: the file's clock). A session gives
    # the hot records (system calls, context switches) to it when the sink has it.
    # Optional: ``write_block(block, cpu, row_size, timestamps) -> int`` keeps records of one
    # processor given as one block of ``row_size``-byte rows in time order, in buffers apart from
    # write()'s (:meth:`EtlWriter.write_block <openetw.etl.writer.EtlWriter.write_block>`). A
    # session gives it the system calls column-wise, as they are read, outside its time-ordered merge.

    def add_lost(self, events: int = 0, buffers: int = 0) -> None:
        """Note events the kernel lost before they reached the session."""

    def flush(self) -> None:
        """Make what was written so far visible (the flush timer)."""

    def close(self) -> None:
        """No more records. Idempotent."""
