"""The trace service: one process, one selectors loop, the session table driven by real sockets.

Everything happens on the loop's thread: accepting connections (SO_PEERCRED on each), decoding
requests, carrying out the session table's actions (pools made and sent to producers, enable
notifications, pools closed and drained, files finished), the flush timer, and the deadlines of
producers asked to close a pool or flush. A connection that breaks the protocol is closed; the
others and the sessions go on.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import selectors
import socket
import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from openetw.errors import OpenEtwError, ServiceError
from openetw.ipc.paths import prepare_socket_dir, system_group_gid
from openetw.ipc.pool import MAX_BUFFER_COUNT, BufferPool
from openetw.ipc.protocol import Message, ProtocolError, error_reply
from openetw.ipc.wire import enable_state_to_json
from openetw.service.connection import Connection, check_message
from openetw.service.kernel_sessions import RECORDER_OPS, KernelRecorders
from openetw.service.schema import InvalidRequest
from openetw.service.screen import ScreenResult
from openetw.service.security_store import load_provider_security, save_provider_security, security_table_path
from openetw.service.sessions import PendingFlush, SessionRuntime
from openetw.service.sinks import SinkFactory, wait_for_lingering
from openetw.session import (
    Action,
    CaptureState,
    ClosePool,
    FinishSession,
    FlushSession,
    NotifyProvider,
    OpenPool,
    SessionKind,
    SessionState,
    SessionTable,
    SessionUpdated,
    SnapshotToFile,
    StartSession,
)
from openetw.session.quotas import DEFAULT_QUOTAS, UserQuotas
from openetw.session.security import ProviderSecurity

if TYPE_CHECKING:
    from openetw.service.autologger import AutologgerReport

__all__ = ["TraceService", "log"]

LINGER_WAIT = 5.0  # at the service's exit, what sinks still deliver gets this long in all
TICK = 0.25  # the loop wakes at least this often (deadlines, flush timer)
# After taking a producer's FULL buffers, the loop waits this long before it looks again, so
# that one wakeup takes several buffers: a wakeup per buffer was most of the service's CPU time
# per event. Not when a pool was found at least PAUSE_FILL_LIMIT full: then producers are close
# to dropping events (and small pools never wait). The pause looks at the pools every
# PAUSE_STEP and ends as soon as one is PAUSE_FILL_LIMIT full: a producer writing a burst fills
# a pool in a few milliseconds, far sooner than NOTICE_PAUSE. The pause holds back the pools
# only: frames queued for clients (real-time buffers above all) keep going out as their sockets
# take them, or a real-time consumer would get one socket buffer's worth per pause.
NOTICE_PAUSE = 0.02
PAUSE_STEP = 0.002
PAUSE_FILL_LIMIT = 0.25
MAX_POOL_BYTES = 64 << 20  # one producer's pool for one session
SHUTDOWN_GRACE = 3.0


def log(message: str) -> None:
    """A line in the service's log (its stderr)."""
    print(f"openetw service: {message}", file=sys.stderr, flush=True)


class TraceService:
    def __init__(self, socket_path: Path, *, system: bool = False, quotas: UserQuotas = DEFAULT_QUOTAS) -> None:
        self.socket_path = Path(socket_path)
        self.system = system
        self.quotas = quotas
        self.security_path = security_table_path(self.socket_path, system=system)
        self.provider_security: ProviderSecurity = load_provider_security(self.security_path, log)
        group = system_group_gid() if system else None
        self.table = SessionTable(admin_gids=frozenset({group}) if group is not None else frozenset())
        self.selector = selectors.DefaultSelector()
        self.connections: dict[int, Connection] = {}
        self.runtimes: dict[int, SessionRuntime] = {}
        self.pool_sessions: dict[int, int] = {}  # pool id -> session id
        self.owned_sessions: dict[int, set[int]] = {}  # connection id -> sessions that end with it (end_with_connection)
        self.registration_names: dict[int, str | None] = {}
        self._rejections_logged: dict[int, float] = {}
        self.started_at = time.time()
        self._next_connection_id = 1
        self._next_pool_id = 1
        self._next_flush_token = 1
        self._listener: socket.socket | None = None
        self._lock_fd = -1
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._stop_requested = False
        self._pause_until = 0.0  # monotonic; see NOTICE_PAUSE
        self._fullest_seen = -1.0  # the largest share of a pool found FULL on a notice, this round
        self._shutdown_deadline: float | None = None
        self.autologger: AutologgerReport | None = None
        self.kernel = KernelRecorders(self)
        self.host_name = socket.gethostname()  # what streamed sessions say they come from (--host-name)
        # Destinations a start request may name (``"stream": {...}``), plugged in by the program
        # that runs the service (``openetw.daemon``); see ``openetw.service.sinks``.
        self.sink_factories: dict[str, SinkFactory] = {}
        from openetw.service.handlers import HANDLERS

        self.handlers = dict(HANDLERS)  # op -> handler; a program plugging into the service may add its own

    # -- life cycle ----------------------------------------------------------------------------
    def listen(self) -> None:
        """Take the socket (one service per socket, kept by a lock file) and start listening."""
        prepare_socket_dir(self.socket_path, system=self.system)
        lock_path = self.socket_path.with_name(self.socket_path.name + ".lock")
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise ServiceError(f"another trace service already listens on {self.socket_path}") from None
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o117 if self.system else 0o177)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old_umask)
        if self.system:
            group = system_group_gid()
            if group is not None:
                os.chown(self.socket_path, -1, group)
            os.chmod(self.socket_path, 0o660)
        else:
            os.chmod(self.socket_path, 0o600)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self.selector.register(listener, selectors.EVENT_READ, "listener")
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wakeup = (reader, writer)
        self.selector.register(reader, selectors.EVENT_READ, "wakeup")

    def save_provider_security(self) -> None:
        """Save the provider security table where the next start reads it (``ServiceError`` when it cannot)."""
        try:
            save_provider_security(self.security_path, self.provider_security, system=self.system)
        except OSError as exc:
            log(f"provider security table not saved to {self.security_path}: {exc}")
            raise ServiceError(
                f"the change holds until the service stops, but it could not be saved to {self.security_path}: {exc.strerror or exc}"
            ) from None

    def request_stop(self) -> None:
        self._stop_requested = True
        if self._wakeup is not None:
            try:
                self._wakeup[1].send(b"x")
            except OSError:
                pass

    def serve_forever(self) -> None:
        if self._listener is None:
            self.listen()
        try:
            while True:
                self._pause_after_draining()
                self._run_once()
                if self._stop_requested and self._shutdown_deadline is None:
                    self._begin_shutdown()
                if self._shutdown_deadline is not None and self._shutdown_complete():
                    break
        finally:
            self.close()

    def _pause_after_draining(self) -> None:
        now = time.monotonic()
        deadline = min(self._pause_until, now + NOTICE_PAUSE)
        self._pause_until = 0.0
        if self._stop_requested:
            return
        while (remaining := deadline - now) > 0:
            self._send_while_pausing(min(remaining, PAUSE_STEP))
            if self._a_pool_is_filling():
                return
            now = time.monotonic()

    def _send_while_pausing(self, timeout: float) -> None:
        """Wait ``timeout`` seconds, sending queued frames to every socket that takes them meanwhile."""
        waiting = [connection for connection in self.connections.values() if connection.wants_write]
        if not waiting:
            time.sleep(timeout)
            return
        poller = select.poll()
        by_fd = {}
        for connection in waiting:
            by_fd[connection.fileno()] = connection
            poller.register(connection.fileno(), select.POLLOUT)
        for fd, _ in poller.poll(timeout * 1000):
            connection = by_fd[fd]
            if not connection.closed:
                self._flush_connection(connection)  # a broken socket drops its connection here

    def _a_pool_is_filling(self) -> bool:
        return any(
            entry.pool.full_share() >= PAUSE_FILL_LIMIT
            for runtime in self.runtimes.values()
            for entry in list(runtime.pools.values())
        )

    def _run_once(self) -> None:
        self._fullest_seen = -1.0  # no notice yet in this round
        for key, events in self.selector.select(self._timeout()):
            tag = key.data
            if tag == "listener":
                self._accept()
            elif tag == "wakeup":
                try:
                    key.fileobj.recv(4096)  # type: ignore[union-attr]
                except OSError:
                    pass
            else:
                connection = tag
                if events & selectors.EVENT_READ and not connection.closed:
                    self._on_readable(connection)
                if events & selectors.EVENT_WRITE and not connection.closed:
                    self._flush_connection(connection)
        self._on_tick()
        for connection in list(self.connections.values()):
            if connection.overflowed:
                log(f"connection {connection.connection_id} (pid {connection.pid}) does not read what it is sent; closed")
                self._drop_connection(connection)
            elif connection.outgoing:
                self._flush_connection(connection)
        if 0.0 <= self._fullest_seen < PAUSE_FILL_LIMIT:
            self._pause_until = time.monotonic() + NOTICE_PAUSE

    def _timeout(self) -> float:
        timeout = TICK
        next_flush = self.table.next_flush_at()
        if next_flush is not None:
            timeout = min(timeout, max(0.0, next_flush - time.time()))
        return timeout

    def close(self) -> None:
        for runtime in list(self.runtimes.values()):
            try:
                runtime.finish()
            except Exception as exc:  # noqa: BLE001 - never leave the other files unfinished
                log(f"finishing session {runtime.name!r}: {exc}")
        self.runtimes.clear()
        wait_for_lingering(LINGER_WAIT)  # a stream's last buffers get a few seconds to leave
        for connection in list(self.connections.values()):
            self._drop_connection(connection, notify_table=False)
        self.kernel.close()
        if self._listener is not None:
            self.selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
            try:
                self.socket_path.unlink()
            except OSError:
                pass
        if self._wakeup is not None:
            for end in self._wakeup:
                end.close()
            self._wakeup = None
        self.selector.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _begin_shutdown(self) -> None:
        """Stop every session (producers are asked to hand over their pools), then exit."""
        self._shutdown_deadline = time.monotonic() + SHUTDOWN_GRACE
        for session in self.table:
            if session.state is SessionState.RUNNING:
                try:
                    self.carry_out(self.table.stop(session.session_id, now=time.time()))
                except OpenEtwError as exc:
                    log(f"stopping {session.name!r}: {exc}")

    def _shutdown_complete(self) -> bool:
        assert self._shutdown_deadline is not None
        unfinished = [r for r in self.runtimes.values() if r.finishing]
        if not unfinished:
            return True
        return time.monotonic() >= self._shutdown_deadline

    # -- connections ---------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    log("out of file descriptors; connection refused")
                    return
                raise
            try:
                connection = self.adopt_connection(sock)
            except OSError:
                sock.close()
                continue
            uid = connection.credentials.uid
            if not self.quotas.allows_connection(sum(c.credentials.uid == uid for c in self.connections.values()) - 1, uid):
                log(f"uid {uid} has {self.quotas.connections_per_user} connections already; one more refused")
                self._refuse_connection(connection, f"uid {uid} already holds {self.quotas.connections_per_user} connections"
                                        f" to the trace service (at most {self.quotas.connections_per_user} per user); connection refused")

    def _refuse_connection(self, connection: Connection, reason: str) -> None:
        """Tell the client why (one frame without an id, ``refused``), then close the connection."""
        connection.send({"ok": False, "refused": True, "error": {"type": "ServiceError", "message": reason}})
        try:
            connection.flush_outgoing()  # a fresh socket takes one small frame at once
        except OSError:
            pass
        self._drop_connection(connection)

    def adopt_connection(self, sock: socket.socket) -> Connection:
        """A connected socket becomes a connection of the loop (``OSError`` leaves ``sock`` open)."""
        connection_id = self._next_connection_id
        self._next_connection_id += 1
        connection = Connection(connection_id, sock)
        self.connections[connection_id] = connection
        self.selector.register(sock, selectors.EVENT_READ, connection)
        return connection

    def note_rejected(self, runtime: SessionRuntime, producer: Connection, result: ScreenResult) -> None:
        """A producer's buffer held records that failed the check (at most one line a second per session)."""
        now = time.monotonic()
        if now - self._rejections_logged.get(runtime.session_id, -1.0) >= 1.0:
            self._rejections_logged[runtime.session_id] = now
            log(f"session {runtime.name!r}: {result.rejected} record(s) of pid {producer.pid} rejected: {'; '.join(result.reasons)}")

    def new_pool_id(self) -> int:
        pool_id = self._next_pool_id
        self._next_pool_id += 1
        return pool_id

    def _on_readable(self, connection: Connection) -> None:
        try:
            messages = connection.read()
        except Exception as exc:  # noqa: BLE001 - ProtocolError above all; whatever it is, it ends this connection only
            log(f"connection {connection.connection_id} (pid {connection.pid}): {exc}; closed")
            self._drop_connection(connection)
            return
        if messages is None:
            self._drop_connection(connection)
            return
        if connection.take_notices():
            for runtime in self.runtimes.values():
                self._fullest_seen = max(self._fullest_seen, runtime.drain_connection(connection.connection_id))
        for message in messages:
            if connection.closed:
                message.close_fds()
                continue
            try:
                self._dispatch(connection, message)
            except ProtocolError as exc:
                message.close_fds()
                log(f"connection {connection.connection_id} (pid {connection.pid}): {exc}; closed")
                self._drop_connection(connection)
            except Exception:  # noqa: BLE001 - nothing one client sends may reach the loop: that client goes
                message.close_fds()
                log(f"connection {connection.connection_id} (pid {connection.pid}): {traceback.format_exc()}; closed")
                self._drop_connection(connection)
            if connection.overflowed:
                log(f"connection {connection.connection_id} (pid {connection.pid}) does not read its replies; closed")
                self._drop_connection(connection)

    def _dispatch(self, connection: Connection, message: Message) -> None:
        try:
            op, request_id = check_message(message)
        except InvalidRequest as exc:
            message.close_fds()
            connection.send(error_reply(message.body.get("id"), exc))
            return
        handler = self.handlers.get(op)
        if handler is None:
            message.close_fds()
            raise ProtocolError(f"unknown operation {op!r}")
        if op not in RECORDER_OPS and self.kernel.is_recorder(connection):
            message.close_fds()
            raise ProtocolError(f"a kernel recorder does not send {op!r}")
        try:
            result = handler(self, connection, message)
        except ProtocolError:
            raise
        except OpenEtwError as exc:
            message.close_fds()
            connection.send(error_reply(request_id, exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not take the service (and every session) down
            message.close_fds()
            log(f"{op} failed: {traceback.format_exc()}")
            connection.send(error_reply(request_id, ServiceError(f"internal error: {exc}")))
            return
        message.close_fds()
        if result is not None and request_id is not None:
            connection.send({"id": request_id, "ok": True, **result})

    def _flush_connection(self, connection: Connection) -> None:
        try:
            connection.flush_outgoing()
        except OSError:
            self._drop_connection(connection)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.wants_write else 0)
        try:
            if self.selector.get_key(connection.sock).events != events:
                self.selector.modify(connection.sock, events, connection)
        except (KeyError, ValueError):
            pass

    def drop_connection(self, connection: Connection) -> None:
        self._drop_connection(connection)

    def _drop_connection(self, connection: Connection, *, notify_table: bool = True) -> None:
        """A connection ended: its registrations go, its pools are rescued, its consumers detached."""
        if connection.connection_id not in self.connections:
            return
        del self.connections[connection.connection_id]
        try:
            self.selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        for delivery in connection.take_unreceived():  # a consumer gone with buffers on their way to it
            runtime = self.runtimes.get(delivery.session_id)
            if delivery.abandoned_by_one() and runtime is not None:
                runtime.abandoned(delivery)
        connection.close()
        for registration_id in connection.registrations:
            self.registration_names.pop(registration_id, None)
        for runtime in self.runtimes.values():
            runtime.consumers.pop(connection.connection_id, None)
            # The producer can write no more: every pool it held may be taken whole.
            for pool_id in runtime.pools_of_connection(connection.connection_id):
                runtime.close_pool(pool_id)
                self.pool_sessions.pop(pool_id, None)
            for flush in runtime.flushes:
                flush.waiting.discard(connection.connection_id)
        self.kernel.connection_lost(connection.connection_id)
        if notify_table:
            self.carry_out(self.table.connection_closed(connection.connection_id))
            self._end_owned_sessions(connection)
            self._check_finished()

    def _end_owned_sessions(self, connection: Connection) -> None:
        """Stop the sessions started to end with this connection (a probe's private sessions):
        their controller went away, killed or not, and nobody else would stop them."""
        table = self.table
        for session_id in sorted(self.owned_sessions.pop(connection.connection_id, ())):
            try:
                session = table.session(session_id)
            except OpenEtwError:
                continue  # stopped and gone already
            if session.state in (SessionState.STOPPING, SessionState.STOPPED):
                continue  # its stop is under way
            try:
                if session.state is SessionState.FAILED:
                    runtime = self.runtimes.get(session_id)
                    if runtime is not None:
                        runtime.release_when_finished = True
                    else:
                        self.carry_out(table.remove(session_id))
                    continue
                actions = table.stop(session_id, now=time.time(), caller=connection.caller)
                if self.runtimes.get(session_id) is None:
                    self.carry_out(table.remove(session_id))
                else:
                    self.carry_out(actions)
                log(f"stopped {session.name!r}: its controller (pid {connection.pid}) went away")
            except OpenEtwError as exc:
                log(f"stopping {session.name!r}, whose controller went away: {exc}")

    # -- actions -------------------------------------------------------------------------------
    def carry_out(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, OpenPool):
                self._open_pool(action)
            elif isinstance(action, NotifyProvider):
                self._notify(action)
            elif isinstance(action, ClosePool):
                self._close_pool(action)
            elif isinstance(action, CaptureState):
                connection = self.connections.get(action.connection_id)
                if connection is not None:
                    connection.send({"event": "capture_state", "registration": action.registration_id, "session_id": action.session_id})
            elif isinstance(action, FlushSession):
                runtime = self.runtimes.get(action.session_id)
                if runtime is not None:
                    runtime.drain_all()
                    # The header is queued behind the buffers: the loop never waits for the disk
                    # here (a controller's FLUSH waits in complete_flush).
                    runtime.flush_file(wait=False)
            elif isinstance(action, SessionUpdated):
                runtime = self.runtimes.get(action.session_id)
                if runtime is not None:
                    runtime.config = action.config
            elif isinstance(action, FinishSession):
                runtime = self.runtimes.get(action.session_id)
                if runtime is not None:
                    runtime.finishing = True
                    runtime.failed = action.failed
                    if runtime.config.kind is SessionKind.KERNEL:
                        self.kernel.finish(runtime)
            elif isinstance(action, (StartSession, SnapshotToFile)):
                pass  # carried out by the request that caused them (they need its descriptor)
        self._check_finished()

    def _open_pool(self, action: OpenPool) -> None:
        connection = self.connections.get(action.connection_id)
        runtime = self.runtimes.get(action.session_id)
        if connection is None or connection.closed or runtime is None:
            return
        uid = connection.credentials.uid
        if uid != 0:
            pools = sum(
                1 for r in self.runtimes.values() for e in r.pools.values() if e.producer is not None and e.producer.credentials.uid == uid
            )
            if not self.quotas.allows_pool(pools, uid):
                log(f"uid {uid} has {pools} pools already; none for pid {connection.pid} in session {runtime.name!r}")
                return
        count = max(2, min(action.maximum_buffers, MAX_BUFFER_COUNT, MAX_POOL_BYTES // action.buffer_size))
        try:
            pool = BufferPool.create(
                action.buffer_size,
                count,
                logger_id=action.logger_id,
                producer_pid=connection.pid,
                flush_interval_ms=action.flush_interval_ms,
            )
        except OpenEtwError as exc:
            log(f"no pool for pid {connection.pid} in session {runtime.name!r}: {exc}")
            return
        pool_id = self._next_pool_id
        self._next_pool_id += 1
        runtime.add_pool(pool_id, connection.connection_id, pool, producer=connection)
        self.pool_sessions[pool_id] = runtime.session_id
        connection.send(
            {
                "event": "pool",
                "pool_id": pool_id,
                "session_id": runtime.session_id,
                "session_name": runtime.name,
                "logger_id": action.logger_id,
                "flush_interval_ms": action.flush_interval_ms,
            },
            fds=(pool.fileno(),),
        )

    def _notify(self, action: NotifyProvider) -> None:
        connection = self.connections.get(action.connection_id)
        if connection is None:
            return
        connection.send(
            {
                "event": "enable",
                "registration": action.registration_id,
                "provider": str(action.provider_guid),
                "state": enable_state_to_json(action.state),
            }
        )

    def _close_pool(self, action: ClosePool) -> None:
        runtime = self.runtimes.get(action.session_id)
        if runtime is None:
            return
        connection = self.connections.get(action.connection_id)
        pool_id = runtime.start_closing(action.connection_id, time.monotonic())
        if pool_id is None:
            return
        if connection is None or connection.closed:
            self.finish_pool(pool_id)
        else:
            connection.send({"event": "close_pool", "pool_id": pool_id, "session_id": runtime.session_id})

    def finish_pool(self, pool_id: int) -> None:
        session_id = self.pool_sessions.pop(pool_id, None)
        runtime = self.runtimes.get(session_id) if session_id is not None else None
        if runtime is not None:
            runtime.close_pool(pool_id)
        self._check_finished()

    def _check_finished(self) -> None:
        """Sessions asked to finish whose pools are all closed: final header, file closed, answer."""
        for runtime in list(self.runtimes.values()):
            # Finishing one session carries out actions, which may finish others first.
            if runtime.finishing and not runtime.pools and self._is_live(runtime):
                self._finish_session(runtime)

    def _is_live(self, runtime: SessionRuntime) -> bool:
        return self.runtimes.get(runtime.session_id) is runtime

    def _finish_session(self, runtime: SessionRuntime) -> None:
        """Final header, file closed, waiters answered. A stopped session leaves the table (its
        name is free again); a failed one stays, failed, until a controller stops it."""
        runtime.finish()
        del self.runtimes[runtime.session_id]
        session_id = runtime.session_id
        if not runtime.failed:
            try:
                self.carry_out(self.table.stop_complete(session_id, now=time.time()))
            except OpenEtwError as exc:
                log(f"completing the stop of {runtime.name!r}: {exc}")
        info = self.table.query(session_id)
        kernel = self.kernel.describe(session_id)
        if kernel is not None:
            info["kernel"] = kernel
        self.kernel.forget(session_id)
        if runtime.write_error:
            info["failure"] = info.get("failure") or runtime.write_error
        if not runtime.failed or runtime.release_when_finished:
            self.carry_out(self.table.remove(session_id))
        for connection, request_id in runtime.stop_waiters:
            connection.send({"id": request_id, "ok": True, "session": info})
        for flush in runtime.flushes:
            flush.reply_to.send({"id": flush.request_id, "ok": True, "session": info})
        runtime.stop_waiters.clear()
        runtime.flushes.clear()

    # -- timers --------------------------------------------------------------------------------
    def _on_tick(self) -> None:
        now_wall = time.time()
        self.carry_out(self.table.due_flushes(now_wall))
        now = time.monotonic()
        self.kernel.on_tick(now)
        for runtime in list(self.runtimes.values()):
            if not self._is_live(runtime):
                continue
            if runtime.write_error and not runtime.finishing:
                log(f"session {runtime.name!r} failed: {runtime.write_error}")
                self.carry_out(self.table.fail(runtime.session_id, runtime.write_error, now=now_wall))
            for pool_id in runtime.overdue_closes(now):
                log(f"a producer did not hand over pool {pool_id} of {runtime.name!r} in time; taken as it is")
                self.finish_pool(pool_id)
            if not self._is_live(runtime):
                continue  # finished meanwhile: its flushes were answered
            for flush in list(runtime.flushes):
                if not flush.waiting or now >= flush.deadline:
                    self.complete_flush(runtime, flush)
        if self._shutdown_deadline is not None and now >= self._shutdown_deadline:
            for runtime in list(self.runtimes.values()):
                for pool_id in list(runtime.pools):
                    self.finish_pool(pool_id)

    def complete_flush(self, runtime: SessionRuntime, flush: PendingFlush) -> None:
        if flush in runtime.flushes:
            runtime.flushes.remove(flush)
        runtime.drain_all()
        runtime.flush_file()
        runtime.update_buffer_gauges()
        info = self.table.query(runtime.session_id)
        flush.reply_to.send({"id": flush.request_id, "ok": True, "session": info})

    def new_flush_token(self) -> int:
        token = self._next_flush_token
        self._next_flush_token += 1
        return token
