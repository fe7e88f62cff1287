"""Kernel sessions in the trace service: a recorder process per session, writing into its pools.

A kernel session is an ordinary session of the table (kind ``KERNEL``: root only, 8 at most
on the machine, two of them kept for the reserved names, see :meth:`KernelRecorders.check_machine_capacity`)
whose events come from the kernel instead of from registered providers. Its settings name the
kernel flags, the event source (``kernel_source``) and the CPU sampling rate of the ``profile``
flag (``kernel_profile_rate_hz``) and the system calls whose arguments the ``syscall_args`` flag
records, and of which processes (``kernel_syscall_args``, ``kernel_syscall_args_pids``,
``kernel_syscall_args_execnames``); the recorder gets them as its own settings. Before the session
is made, the machine-wide limit is checked (:meth:`KernelRecorders.check_machine_capacity`), so a
refused start leaves nothing behind. When one starts, the service

1. makes one buffer pool per CPU for it, and with the ``syscall`` flag a second one per CPU
   for the system calls the recorder writes column-wise (see :class:`~openetw.service.kernel_recorder.PoolSink`;
   ``maximum_buffers`` shared out between them all),
2. makes a socket pair, keeps one end as a connection of its own, and
3. starts ``python -m openetw.service.kernel_recorder`` with the other end and the pools.

The recorder (see :mod:`openetw.service.kernel_recorder`) runs a ``KernelSession`` whose records
go into those pools; to the service it is a producer bound to exactly this session: its pools
drain, flush and close as any producer's do, so every log mode, the statistics and real-time
delivery work as for user sessions. What only a kernel session has: the kernel's own losses
(``kernel_lost``, added to ``events_lost``) and the recorder's counters (``kernel_stats``, shown
under ``"kernel"`` by query and stop). The controller's answer to a start waits for the recorder
to say tracing runs (or why not). A recorder that exits while its session runs fails the session.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openetw.errors import AccessDenied, OpenEtwError, ServiceError
from openetw.ipc.pool import MAX_BUFFER_COUNT, BufferPool
from openetw.kernel.tracefs import INSTANCE_PREFIX
from openetw.service.connection import Connection
from openetw.service.sessions import SessionRuntime, count_typed_records
from openetw.session import InvalidSessionConfig, SessionConfig, SessionKind
from openetw.session.config import is_reserved_name

if TYPE_CHECKING:
    from openetw.service.server import TraceService

__all__ = ["KernelRecorders", "RECORDER_OPS", "RecorderProcess"]

RECORDER_OPS = frozenset({"kernel_started", "kernel_failed", "kernel_lost", "kernel_stats", "pool_closed", "flushed"})
START_TIMEOUT = 30.0  # interpreter start, tracefs instance, /proc rundown
CLOSE_TIMEOUT = 15.0  # tracing off and every CPU drained, before the pools are taken as they are
EXIT_TIMEOUT = 5.0
MAX_KERNEL_POOL_BYTES = 64 << 20
MIN_BUFFERS_PER_CPU = 4


@dataclass
class RecorderProcess:
    session_id: int
    process: subprocess.Popen[bytes]
    connection_id: int
    pool_ids: list[int]
    start_reply: tuple[Connection, Any] | None
    start_deadline: float
    started: bool = False
    lost_seen: int = 0
    instance: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"recorder_pid": self.process.pid, "pools": len(self.pool_ids), **self.stats}


def instance_name(session_name: str, logger_id: int) -> str:
    """The ftrace instance (after ``openetw_``) of a kernel session of this service. A reserved
    name ("NT Kernel Logger") names its instance itself: there is one such logger per machine,
    whoever hosts it, and the instance holds that name's reserved slot (see
    :meth:`~openetw.kernel.control.KernelSessionRegistry.check_capacity`)."""
    if is_reserved_name(session_name):
        return session_name
    return f"svc{os.getpid()}_{logger_id}"


def possible_cpus() -> int:
    try:
        return max(1, int(os.sysconf("SC_NPROCESSORS_CONF")))
    except (ValueError, OSError):
        return os.cpu_count() or 1


class KernelRecorders:
    """The recorder of every running kernel session of one service."""

    def __init__(self, service: TraceService) -> None:
        self.service = service
        self.by_session: dict[int, RecorderProcess] = {}
        self.by_connection: dict[int, int] = {}  # recorder connection id -> session id
        self.exited: list[subprocess.Popen[bytes]] = []  # stopped recorders not reaped yet

    # -- starting ------------------------------------------------------------------------------
    def check_can_record(self, config: SessionConfig) -> None:
        """Flags the recorder knows, and a service that is root (tracefs is root's only; a hosted
        session records for the whole machine). The source, the rate and which flags the source
        records were checked by :class:`~openetw.session.SessionConfig`."""
        from openetw.kernel.classes import tracepoints_for

        if not config.kernel_flags:
            raise InvalidSessionConfig("a kernel session needs at least one kernel flag (process, thread, cswitch, ...)")
        tracepoints_for(list(config.kernel_flags))  # InvalidArgument names the known flags
        if os.geteuid() != 0:
            raise AccessDenied(
                f"this trace service runs as uid {os.geteuid()} and cannot record the kernel: kernel sessions"
                " need the system service (run as root); `openetw kernel start` records one without the service"
            )

    def start(self, runtime: SessionRuntime, reply_to: Connection, request_id: Any) -> None:
        """Pools, socket pair and recorder process for a session the table just started; the
        controller's answer follows when the recorder reports."""
        config = runtime.config
        assert config.kind is SessionKind.KERNEL
        instance = instance_name(config.name, runtime.logger_id)
        cpus = possible_cpus()
        count = cpus * (2 if "syscall" in config.kernel_flags else 1)
        buffer_size = config.buffer_size
        per_pool = max(MIN_BUFFERS_PER_CPU, -(-config.maximum_buffers // count))
        per_pool = min(per_pool, MAX_BUFFER_COUNT, max(2, MAX_KERNEL_POOL_BYTES // (buffer_size * count)))
        pools: list[BufferPool] = []
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            for _ in range(count):
                pools.append(
                    BufferPool.create(
                        buffer_size, per_pool, logger_id=runtime.logger_id, producer_pid=0,
                        flush_interval_ms=config.flush_timer * 1000,
                    )
                )
            pool_ids = [self.service.new_pool_id() for _ in pools]
            settings = {
                "flags": list(config.kernel_flags),
                "instance": instance,
                "buffer_size_kb": config.kernel_buffer_kb,
                "source": config.kernel_source,
                "profile_rate_hz": config.kernel_profile_rate_hz,
                "syscall_args": list(config.kernel_syscall_args),
                "syscall_args_pids": list(config.kernel_syscall_args_pids),
                "syscall_args_execnames": list(config.kernel_syscall_args_execnames),
                "block_pools": pool_ids[cpus:],
            }
            argv = [sys.executable, "-m", "openetw.service.kernel_recorder", "--socket-fd", str(theirs.fileno()),
                    "--settings", json.dumps(settings)]  # fmt: skip
            for pool_id, pool in zip(pool_ids, pools, strict=True):
                argv += ["--pool", f"{pool_id}:{pool.fileno()}"]
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
                pass_fds=(theirs.fileno(), *(pool.fileno() for pool in pools)),
            )  # fmt: skip
        except BaseException as error:
            ours.close()
            for pool in pools:
                pool.close()
            if isinstance(error, OSError):
                raise ServiceError(f"cannot start the kernel recorder: {error.strerror or error}") from error
            raise
        finally:
            theirs.close()
        try:
            connection = self.service.adopt_connection(ours)
        except OSError as error:
            process.kill()
            process.wait()
            ours.close()
            for pool in pools:
                pool.close()
            raise ServiceError(f"cannot reach the kernel recorder: {error.strerror or error}") from error
        runtime.count_records = count_typed_records
        for pool_id, pool in zip(pool_ids, pools, strict=True):
            runtime.add_pool(pool_id, connection.connection_id, pool)
            self.service.pool_sessions[pool_id] = runtime.session_id
        recorder = RecorderProcess(
            runtime.session_id, process, connection.connection_id, pool_ids, (reply_to, request_id),
            time.monotonic() + START_TIMEOUT, instance=instance,
        )  # fmt: skip
        self.by_session[runtime.session_id] = recorder
        self.by_connection[connection.connection_id] = runtime.session_id

    def check_machine_capacity(self, name: str) -> None:
        """The limit of 8 kernel sessions (2 for the reserved names) over the whole machine: the
        sessions of ``openetw kernel start`` and of other services count too (one rule, in
        :meth:`KernelSessionRegistry.check_capacity <openetw.kernel.control.KernelSessionRegistry.check_capacity>`).
        This service's own sessions whose recorder has not made its ftrace instance yet are
        counted by name; the table counts this service's sessions on its own as well. The start
        handler calls it before the session is created, so a refusal leaves nothing behind."""
        from openetw.kernel.control import KernelSessionRegistry

        pending = [f"{INSTANCE_PREFIX}{r.instance}" for r in self.by_session.values() if not r.started]
        KernelSessionRegistry().check_capacity(name, pending=pending)

    def recorder_of(self, connection: Connection) -> RecorderProcess:
        session_id = self.by_connection.get(connection.connection_id)
        recorder = self.by_session.get(session_id) if session_id is not None else None
        if recorder is None:
            raise AccessDenied("only a kernel session's recorder sends kernel records")
        return recorder

    def is_recorder(self, connection: Connection) -> bool:
        return connection.connection_id in self.by_connection

    # -- what the recorder says ----------------------------------------------------------------
    def on_started(self, connection: Connection, stats: Any) -> None:
        recorder = self.recorder_of(connection)
        recorder.started = True
        if isinstance(stats, dict):
            recorder.stats = stats
        reply, recorder.start_reply = recorder.start_reply, None
        if reply is not None:
            info = self.service.table.query(recorder.session_id)
            info["kernel"] = recorder.describe()
            reply[0].send({"id": reply[1], "ok": True, "session": info})

    def on_failed(self, connection: Connection, error: Any) -> None:
        recorder = self.recorder_of(connection)
        body = error if isinstance(error, dict) else {}
        self._abort_start(recorder, str(body.get("type") or "SessionError"), str(body.get("message") or "the kernel recorder failed"))

    def on_lost(self, connection: Connection, total: Any) -> None:
        recorder = self.recorder_of(connection)
        if isinstance(total, bool) or not isinstance(total, int) or total < recorder.lost_seen:
            return
        new, recorder.lost_seen = total - recorder.lost_seen, total
        runtime = self.service.runtimes.get(recorder.session_id)
        if new and runtime is not None:
            runtime.note_lost(new)  # counted, and told to the file's header and any other sink

    def on_stats(self, connection: Connection, stats: Any) -> None:
        recorder = self.recorder_of(connection)
        if not isinstance(stats, dict):
            return
        recorder.stats = stats
        runtime = self.service.runtimes.get(recorder.session_id)
        if runtime is None:
            return
        statistics = self.service.table.session(recorder.session_id).statistics
        truncated = stats.get("events_truncated")
        if isinstance(truncated, int) and not isinstance(truncated, bool) and truncated > statistics.events_truncated:
            statistics.add_events_truncated(truncated - statistics.events_truncated)
        if stats.get("state") == "failed" and not runtime.finishing:
            # A reader that failed is no running session: say so, with the reason.
            reason = str(stats.get("failure") or "the kernel reader failed")
            self.service.carry_out(self.service.table.fail(recorder.session_id, reason, now=time.time()))

    def describe(self, session_id: int) -> dict[str, Any] | None:
        recorder = self.by_session.get(session_id)
        return None if recorder is None else recorder.describe()

    # -- stopping ------------------------------------------------------------------------------
    def finish(self, runtime: SessionRuntime) -> None:
        """The session stops: ask the recorder to stop tracing and hand over every pool."""
        recorder = self.by_session.get(runtime.session_id)
        if recorder is None:
            return
        connection = self.service.connections.get(recorder.connection_id)
        runtime.active.pop(recorder.connection_id, None)
        deadline = time.monotonic() + CLOSE_TIMEOUT
        for pool_id in recorder.pool_ids:
            entry = runtime.pools.get(pool_id)
            if entry is None or entry.closing_deadline is not None:
                continue
            entry.closing_deadline = deadline
            if connection is not None and not connection.closed:
                connection.send({"event": "close_pool", "pool_id": pool_id, "session_id": runtime.session_id})
        if connection is None or connection.closed:
            for pool_id in list(recorder.pool_ids):
                self.service.finish_pool(pool_id)

    def forget(self, session_id: int) -> None:
        """The session is finished: its recorder exits on its own (reaped later)."""
        recorder = self.by_session.pop(session_id, None)
        if recorder is None:
            return
        self.by_connection.pop(recorder.connection_id, None)
        self.exited.append(recorder.process)

    def connection_lost(self, connection_id: int) -> None:
        """The recorder's socket closed: it exited (or crashed)."""
        session_id = self.by_connection.get(connection_id)
        recorder = self.by_session.get(session_id) if session_id is not None else None
        if recorder is None:
            return
        status = recorder.process.poll()
        why = f"the kernel recorder (pid {recorder.process.pid}) exited" + (f" with status {status}" if status is not None else "")
        if not recorder.started:
            self._abort_start(recorder, "SessionError", why)
            return
        runtime = self.service.runtimes.get(recorder.session_id)
        if runtime is not None and not runtime.finishing and runtime.write_error is None:
            runtime.write_error = why

    def _abort_start(self, recorder: RecorderProcess, kind: str, message: str) -> None:
        """Starting failed: the session goes as if it had never been, the controller is told why."""
        service = self.service
        reply, recorder.start_reply = recorder.start_reply, None
        self.forget(recorder.session_id)
        runtime = service.runtimes.pop(recorder.session_id, None)
        if runtime is not None:
            for pool_id in list(runtime.pools):
                service.pool_sessions.pop(pool_id, None)
            runtime.finish()
        connection = service.connections.get(recorder.connection_id)
        if connection is not None:
            service.drop_connection(connection)
        try:
            service.carry_out(service.table.fail(recorder.session_id, message, now=time.time()))
            service.carry_out(service.table.remove(recorder.session_id))
        except OpenEtwError:
            pass
        if recorder.process.poll() is None:
            recorder.process.terminate()
        if reply is not None:
            reply[0].send({"id": reply[1], "ok": False, "error": {"type": kind, "message": f"kernel session not started: {message}"}})

    # -- timers and the end --------------------------------------------------------------------
    def on_tick(self, now: float) -> None:
        for recorder in list(self.by_session.values()):
            if not recorder.started and now >= recorder.start_deadline:
                recorder.process.kill()
                self._abort_start(recorder, "SessionError", f"the kernel recorder did not start within {START_TIMEOUT:.0f} s")
        self.exited = [process for process in self.exited if process.poll() is None]

    def close(self) -> None:
        """The service exits: recorders still running stop tracing (SIGTERM) and are waited for."""
        processes = [recorder.process for recorder in self.by_session.values()] + self.exited
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + EXIT_TIMEOUT
        for process in processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.by_session.clear()
        self.by_connection.clear()
        self.exited.clear()
