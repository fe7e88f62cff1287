"""The recorder of one kernel session of the trace service: a child process of the service.

The service starts it (``python -m openetw.service.kernel_recorder``) for a kernel session, with
one end of a socket pair and one buffer pool per CPU, all made for that session only (with
the ``syscall`` flag, a second pool per CPU for system calls written column-wise). The
recorder runs a :class:`~openetw.kernel.session.KernelSession` whose records go, through
:class:`PoolSink`, into the pool of the CPU they happened on: from there the service moves whole
buffers to the session's file and real-time consumers, as it does for any producer.

It speaks the producer side of the service's protocol over its socket (one-byte notices when a
buffer is FULL, ``flush`` → ``flushed``, ``close_pool`` → ``pool_closed``) and four requests of its
own, which the service takes from a recorder's connection only (and a recorder's connection
may send nothing else):

* ``kernel_started`` once tracing runs (``stats``), or ``kernel_failed`` (``error``) and exit;
* ``kernel_lost``: the events the kernel's ring buffers lost so far (cumulative ``events``);
* ``kernel_stats``: the KernelSession's counters, every second and last before the pools close.

The first ``close_pool`` stops the kernel session (tracing off, every CPU drained, the ftrace
instance removed); the recorder answers every pool asked and exits once all are closed. The end
of its socket (the service went away) and SIGTERM stop tracing too and end the recorder without
answering: the service then takes the pools as a dead producer's, and the session fails.

A test hook: when ``$OPENETW_KERNEL_READER_FAULT`` is set in the service's environment (which
its recorders inherit), every pool write of a recorder fails with that text once tracing runs,
so its reader fails as a broken source would: the tests of a failed reader use it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from openetw.errors import OpenEtwError
from openetw.ipc.pool import BufferPool, PoolWriter
from openetw.ipc.protocol import Channel

if TYPE_CHECKING:
    from openetw.etl.record import EventRecord

__all__ = ["READER_FAULT_ENV", "PoolSink", "main"]

READER_FAULT_ENV = "OPENETW_KERNEL_READER_FAULT"

STATS_INTERVAL = 1.0
MAX_RUN_BYTES = 4096  # rows of system calls copied into a pool buffer by one write
_DEFAULT_BUFFER_SIZE = 64 << 10


class PoolSink:
    """A :class:`~openetw.kernel.source.RecordSink` over one buffer pool per CPU.

    A record goes to the pool of its CPU (``cpu % len(writers)``), so every buffer holds the
    records of one processor, as a kernel logger's per-CPU buffers do (readers take a record's
    processor from its buffer). ``write`` returns ``False`` when the pool had no free buffer; the
    pool counts that loss itself. ``add_lost`` hands the kernel's own losses to ``on_lost`` (the
    cumulative count). ``flush`` marks every partly filled buffer FULL.

    With ``block_writers`` (a second pool per CPU) the sink has ``write_block``, and the session
    then hands it system calls column-wise: they go to these pools, apart from the merged
    records, so that every buffer stays in time order (a block's rows are newer than merged
    records still held back); consumers merge buffers by time, or take each buffer in order.
    Without them it has no ``write_block`` and the session maps system calls one by one.
    """

    def __init__(self, writers: list[PoolWriter], *, block_writers: list[PoolWriter] | None = None, on_lost: Any = None) -> None:
        if not writers:
            raise ValueError("a pool sink needs at least one pool")
        self.writers = list(writers)
        self.block_writers = list(block_writers or ())
        self._writes = [writer.write for writer in self.writers]
        self._block_writes = [writer.write for writer in self.block_writers]
        if self._block_writes:
            self.write_block = self._write_block
        self._on_lost = on_lost
        self.events_lost = 0
        self.buffers_lost = 0
        self.closed = False

    def write(self, record: EventRecord) -> bool:
        if self.closed:
            return False
        cpu = record.cpu
        return self._writes[cpu % len(self._writes)](record.raw, record.timestamp, cpu)

    def write_raw(self, raw: bytes, cpu: int, timestamp: int) -> bool:
        """A record given as its bytes (the session's fast path for system calls and context switches)."""
        if self.closed:
            return False
        return self._writes[cpu % len(self._writes)](raw, timestamp, cpu)

    def _write_block(self, block: bytes, cpu: int, row_size: int, timestamps: Any) -> int:
        """``len(block) // row_size`` records of processor ``cpu``, each ``row_size`` bytes (a
        multiple of 8), in time order, ``timestamps`` theirs, into that CPU's block pool.
        Returns how many went in.

        Rows go in runs of about 1/32 of a buffer, each one pool write: a buffer is a sequence
        of 8-byte aligned records, so a run copied whole reads back as its rows, and a buffer's
        time stays its last record's. A run that finds no free buffer is counted lost once by
        the pool; its other rows are counted here (``add_lost``), so that every row is either
        in a buffer or counted lost.
        """
        if self.closed:
            return 0
        if row_size < 8 or row_size % 8:  # not records a buffer can hold back to back
            self.add_lost(events=len(block) // row_size if row_size > 0 else 0)
            return 0
        writer = self.block_writers[cpu % len(self.block_writers)]
        write = self._block_writes[cpu % len(self._block_writes)]
        buffer_size = getattr(getattr(writer, "pool", None), "buffer_size", _DEFAULT_BUFFER_SIZE)
        run = max(1, min(buffer_size // 32, MAX_RUN_BYTES) // row_size)
        times = timestamps.tolist() if hasattr(timestamps, "tolist") else list(timestamps)
        count = min(len(times), len(block) // row_size)
        view = memoryview(block)
        written = unaccounted = 0
        for first in range(0, count, run):
            last = min(first + run, count)
            if write(view[first * row_size : last * row_size], times[last - 1], cpu):
                written += last - first
            else:
                unaccounted += last - first - 1
        if unaccounted:
            self.add_lost(events=unaccounted)
        return written

    def fail_writes(self, reason: str) -> None:
        """Every write from now on raises ``OSError(reason)`` (the test hook of the module doc)."""

        def failing(record: bytes | memoryview, timestamp: int, cpu: int = 0) -> bool:
            raise OSError(reason)

        self._writes = [failing] * len(self._writes)
        self._block_writes = [failing] * len(self._block_writes)

    def add_lost(self, events: int = 0, buffers: int = 0) -> None:
        self.events_lost += events
        self.buffers_lost += buffers
        if self._on_lost is not None and (events or buffers):
            self._on_lost(self.events_lost)

    def flush(self) -> None:
        for writer in self.writers + self.block_writers:
            writer.flush()

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self.closed = True


def _error_body(error: BaseException) -> dict[str, str]:
    kind = type(error).__name__ if isinstance(error, OpenEtwError) else "SessionError"
    return {"type": kind, "message": str(error) or kind}


class Recorder:
    """The recorder's main loop (see the module doc)."""

    def __init__(self, channel: Channel, pools: dict[int, BufferPool], settings: dict[str, Any]) -> None:
        self.channel = channel
        self.pools = pools  # pool id -> pool, in CPU order
        self.settings = settings
        self.open_pools = set(pools)
        self.session: Any = None
        self._stop = threading.Event()
        block_ids = set(settings.get("block_pools") or ())
        writers = [pool.writer(doorbell=self.channel) for pool_id, pool in pools.items() if pool_id not in block_ids]
        blocks = [pool.writer(doorbell=self.channel) for pool_id, pool in pools.items() if pool_id in block_ids]
        self.sink = PoolSink(writers, block_writers=blocks, on_lost=self._lost)

    def _lost(self, total: int) -> None:
        try:
            self.channel.send({"op": "kernel_lost", "events": total})
        except OSError:
            pass

    def _send_stats(self) -> None:
        if self.session is not None:
            try:
                self.channel.send({"op": "kernel_stats", "stats": _json_ready(self.session.stats)})
            except OSError:
                pass

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def run(self) -> int:
        from openetw.kernel.session import KernelSession

        settings = self.settings
        try:
            self.session = KernelSession(
                flags=settings["flags"], name=settings["instance"], buffer_size_kb=settings["buffer_size_kb"],
                flush_interval=settings.get("flush_interval", 0.25), sink=self.sink,
                source=settings.get("source", "auto"), profile_rate_hz=settings.get("profile_rate_hz"),
                syscall_args=settings.get("syscall_args") or None, syscall_args_pids=settings.get("syscall_args_pids") or None,
                syscall_args_execnames=settings.get("syscall_args_execnames") or None,
            )  # fmt: skip
            self.session.start()
        except BaseException as error:  # noqa: BLE001 - reported to the service, which answers the controller
            self.channel.send({"op": "kernel_failed", "error": _error_body(error)})
            return 1
        self.channel.send({"op": "kernel_started", "stats": _json_ready(self.session.stats)})
        fault = os.environ.get(READER_FAULT_ENV)
        if fault:
            self.sink.fail_writes(fault)
        next_stats = time.monotonic() + STATS_INTERVAL
        while self.open_pools and not self._stop.is_set():
            messages = self.channel.poll(min(0.25, max(0.0, next_stats - time.monotonic())))
            if messages is None:  # the service is gone: nobody takes the buffers any more
                self._stop_session()
                return 0
            for message in messages:
                self._on_message(message.body)
                message.close_fds()
            if time.monotonic() >= next_stats:
                self._send_stats()
                next_stats = time.monotonic() + STATS_INTERVAL
        if self.open_pools:
            # SIGTERM: tracing stops and every buffer is marked FULL; the end of this connection
            # tells the service to take the pools whole (the session fails: nobody stopped it).
            self._stop_session()
        return 0

    def _on_message(self, body: dict[str, Any]) -> None:
        event = body.get("event")
        if event == "flush":
            self.sink.flush()
            self.channel.send({"op": "flushed", "token": body.get("token")})
        elif event == "close_pool":
            pool_id = body.get("pool_id")
            self._stop_session()
            if pool_id in self.open_pools:
                self.open_pools.discard(pool_id)
                self.channel.send({"op": "pool_closed", "pool_id": pool_id})

    def _stop_session(self) -> None:
        session = self.session
        if session is None or session.state != "running":
            return
        try:
            session.stop()
        except OpenEtwError as error:
            print(f"openetw kernel recorder: {error}", file=sys.stderr, flush=True)
        self.sink.close()
        self._send_stats()


def _json_ready(stats: dict[str, Any]) -> dict[str, Any]:
    ready: dict[str, Any] = json.loads(json.dumps(stats, default=str))
    return ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openetw-kernel-recorder", description="Records one kernel session of the trace service.")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--pool", action="append", default=[], metavar="POOL_ID:FD",
                        help="one per CPU, in CPU order (then one per CPU for system-call blocks, named by settings' block_pools)")
    parser.add_argument("--settings", required=True,
                        help="JSON: flags, instance, buffer_size_kb, source, profile_rate_hz, syscall_args(_pids, _execnames), block_pools")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service's terminal's Ctrl-C is the service's to handle
    channel = Channel(socket.socket(fileno=args.socket_fd))
    pools: dict[int, BufferPool] = {}
    for item in args.pool:
        pool_id, fd = (int(part) for part in item.split(":"))
        pools[pool_id] = BufferPool.attach(fd)
    recorder = Recorder(channel, pools, json.loads(args.settings))
    signal.signal(signal.SIGTERM, recorder.request_stop)
    try:
        return recorder.run()
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
