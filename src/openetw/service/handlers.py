"""The service's requests, one function each: ``(service, connection, message) -> reply | None``.

A function returns the reply's fields (``"ok": true`` is added), or ``None`` when the answer
comes later (stop waits for the pools to be handed over, flush for the producers' buffers).
``OpenEtwError`` becomes an error reply; ``ProtocolError`` closes the connection.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from openetw.errors import AccessDenied, InvalidArgument
from openetw.guids import format_guid
from openetw.ipc.protocol import Message, ProtocolError
from openetw.ipc.wire import config_changes_from_json, config_from_json, enable_state_to_json, rule_from_json
from openetw.service.connection import Connection
from openetw.service.logfile import LogFile
from openetw.service.sessions import PendingFlush, SessionRuntime
from openetw.service.sinks import SINK_REQUEST_KEYS, Sink
from openetw.session import Caller, EnableRule, InvalidSessionConfig, LogMode, SessionConfig, SessionKind, SessionState
from openetw.session.config import resolve_provider
from openetw.session.security import Principal

if TYPE_CHECKING:
    from openetw.service.server import TraceService

__all__ = ["HANDLERS"]

Reply = dict[str, Any] | None
Handler = Callable[["TraceService", Connection, Message], Reply]
FLUSH_TIMEOUT = 2.0


def _text(message: Message, key: str) -> str:
    value = message.body.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{message.body.get('op')} needs {key!r} as a non-empty string")
    return value


def _int(message: Message, key: str, default: int | None = None) -> int:
    value = message.body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{message.body.get('op')} needs {key!r} as an integer")
    return value


def _checked_output_fd(fd: int) -> None:
    """The controller's output must be a regular file open for writing (pwrite needs one)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise InvalidArgument("the output descriptor is not a regular file")
    access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    if access == os.O_RDONLY:
        raise InvalidArgument("the output descriptor is not open for writing")


# -- sessions ----------------------------------------------------------------------------------


def start_session(service: TraceService, connection: Connection, message: Message) -> Reply:
    """StartTrace: create and start a session; a file mode brings the output file's descriptor.

    A kernel session's answer waits for its recorder to report that tracing runs (see
    ``openetw.service.kernel_sessions``)."""
    config = config_from_json(message.body.get("config"))
    if config.kind is SessionKind.KERNEL:
        # Refused before anything is made: the caller's rights, the service's own, then the
        # machine's kernel slots (a name this table holds is the table's SessionExists instead).
        service.table.check_kernel_caller(connection.caller)
        service.kernel.check_can_record(config)
        if not any(session.name.casefold() == config.name.casefold() for session in service.table):
            service.kernel.check_machine_capacity(config.name)
    enables = []
    providers = message.body.get("providers") or []
    if not isinstance(providers, list):
        raise InvalidSessionConfig("the providers to enable must be a list")
    for item in providers:
        if not isinstance(item, dict):
            raise InvalidSessionConfig("each provider to enable must be an object")
        enables.append((_provider(item), rule_from_json(item)))
    attachers = _sinks_for(service, config, message.body)
    ends_with_connection = message.body.get("end_with_connection", False)
    if not isinstance(ends_with_connection, bool):
        raise InvalidSessionConfig("end_with_connection must be true or false")
    fd = message.take_fd() if config.mode.writes_file else -1
    session_id = begin_session(service, config, connection.caller, fd, enables)
    if ends_with_connection:
        service.owned_sessions.setdefault(connection.connection_id, set()).add(session_id)
    for attach in attachers:
        runtime = service.runtimes[session_id]
        runtime.add_sink(attach(runtime))
    if config.kind is SessionKind.KERNEL:
        try:
            service.kernel.start(service.runtimes[session_id], connection, message.body.get("id"))
        except BaseException:
            _discard_started(service, session_id)
            raise
        return None
    return {"session": service.table.query(session_id)}


def _sinks_for(service: TraceService, config: SessionConfig, body: dict[str, Any]) -> list[Callable[[SessionRuntime], Sink]]:
    """The sinks a start request names beside the log mode's (a ``"stream"``), each checked by its
    factory before the session starts; a destination no factory takes is refused."""
    attachers = []
    for key in SINK_REQUEST_KEYS:
        if body.get(key) is None:
            continue
        factory = service.sink_factories.get(key)
        if factory is None:
            raise InvalidArgument(f"this trace service takes no {key!r} (it runs without that sink)")
        attachers.append(factory(service, config, body[key]))
    return attachers


def _discard_started(service: TraceService, session_id: int) -> None:
    """A session that started in the table but could not get its kernel recorder."""
    runtime = service.runtimes.pop(session_id, None)
    if runtime is not None:
        for pool_id in list(runtime.pools):
            service.pool_sessions.pop(pool_id, None)
        runtime.finish()
    service.carry_out(service.table.fail(session_id, "no kernel recorder", now=time.time()))
    service.carry_out(service.table.remove(session_id))


def begin_session(
    service: TraceService, config: SessionConfig, owner: Caller, fd: int, enables: Iterable[tuple[uuid.UUID | str, EnableRule]] = ()
) -> int:
    """Create and start a session owned by ``owner``; returns its id.

    ``fd`` (-1 for modes without a file) is the output file, owned by this function from the
    call on: it is closed whatever happens. A new-file session's next files are opened with
    ``owner``'s identity. Nothing is left behind when starting fails.
    """
    table = service.table
    now = time.time()
    try:
        if fd >= 0:
            _checked_output_fd(fd)
        service.quotas.check_session((s.owner_uid for s in table), owner.uid)
        session = table.create(config, owner, now=now)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    try:
        for provider, rule in enables:
            table.enable(
                session.session_id, provider, level=rule.level, match_any=rule.match_any,
                match_all=rule.match_all, properties=rule.properties, filters=rule.filters,
            )  # fmt: skip
        runtime = SessionRuntime(session.session_id, session.logger_id, config, table)
        runtime.on_rejected = service.note_rejected
        runtime.secured_guids = service.provider_security.guid_bytes
        if fd >= 0:
            runtime.logfile = _logfile(runtime, fd, config, owner)
            fd = -1
        service.runtimes[session.session_id] = runtime
        service.carry_out(table.start(session.session_id, now=now))
    except BaseException:
        if fd >= 0:
            os.close(fd)
        runtime_left = service.runtimes.pop(session.session_id, None)
        if runtime_left is not None and runtime_left.logfile is not None:
            runtime_left.logfile.close()
        if table.session(session.session_id).state is SessionState.CREATED:
            table.remove(session.session_id)
        raise
    return session.session_id


def _logfile(runtime: SessionRuntime, fd: int, config: SessionConfig, owner: Caller) -> LogFile:
    assert config.file_name is not None
    open_next = None
    if config.mode is LogMode.NEW_FILE:

        def open_next(sequence: int) -> tuple[int, str]:
            name = config.file_name_for(sequence)
            return open_output_as(owner, name), name

    return LogFile(
        fd,
        session_name=config.name,
        file_name=config.file_name_for(1),
        logger_id=runtime.logger_id,
        buffer_size=config.buffer_size,
        log_file_mode=config.log_file_mode,
        max_file_mb=config.max_file_mb,
        circular=config.mode is LogMode.CIRCULAR_FILE,
        clock=runtime.clock,
        open_next=open_next,
    )


def open_output_as(owner: Caller, path: str) -> int:
    """Create (or truncate) an output file with ``owner``'s credentials, never the service's.

    Used where no controller passes a descriptor: a new-file session's next files and the files
    of autologger sessions. The service is single-threaded, so switching the effective ids
    around one ``open`` is safe. A symbolic link is not followed, and anything but a regular
    file is refused (``O_NONBLOCK``: opening a FIFO nobody reads must not hang the service).
    A new file is its owner's only (0600), as the controller makes the first one.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    euid = os.geteuid()
    if euid != 0 or owner.uid == 0:
        if euid != owner.uid and euid != 0:
            raise AccessDenied("the service cannot create files for another user")
        fd = os.open(path, flags, 0o600)
    else:
        saved_groups = os.getgroups()
        os.setgroups(sorted(owner.gids))
        os.setegid(owner.gid)
        os.seteuid(owner.uid)
        try:
            fd = os.open(path, flags, 0o600)
        finally:
            os.seteuid(0)
            os.setegid(0)
            os.setgroups(saved_groups)
    try:
        _checked_output_fd(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _provider(body: dict[str, Any]) -> uuid.UUID | str:
    provider = body.get("provider")
    if not isinstance(provider, str) or not provider.strip():
        raise InvalidSessionConfig("a provider needs a GUID or a name")
    return provider


def stop_session(service: TraceService, connection: Connection, message: Message) -> Reply:
    """ControlTrace STOP: the answer comes once every pool is handed over and the file is closed."""
    name = _text(message, "session")
    table = service.table
    session = table.session(name)
    if session.state is SessionState.FAILED:
        table.check_access(session, connection.caller.uid, connection.caller.gids)
        failed_runtime = service.runtimes.get(session.session_id)
        if failed_runtime is not None:  # still draining its pools: answered once it has finished
            failed_runtime.release_when_finished = True
            failed_runtime.stop_waiters.append((connection, message.body.get("id")))
            return None
        info = table.query(session.session_id)
        service.carry_out(table.remove(session.session_id))
        return {"session": info}
    actions = table.stop(session.session_id, now=time.time(), caller=connection.caller)
    runtime = service.runtimes.get(session.session_id)
    if runtime is None:
        info = table.query(session.session_id)
        service.carry_out(table.remove(session.session_id))
        return {"session": info}
    runtime.stop_waiters.append((connection, message.body.get("id")))
    service.carry_out(actions)
    return None


def enable(service: TraceService, connection: Connection, message: Message) -> Reply:
    name = _text(message, "session")
    rule = rule_from_json(message.body)
    actions = service.table.enable(
        name, _provider(message.body), level=rule.level, match_any=rule.match_any, match_all=rule.match_all,
        properties=rule.properties, filters=rule.filters, caller=connection.caller,
    )
    service.carry_out(actions)
    return {"session": service.table.query(name)}


def disable(service: TraceService, connection: Connection, message: Message) -> Reply:
    name = _text(message, "session")
    service.carry_out(service.table.disable(name, _provider(message.body), caller=connection.caller))
    return {"session": service.table.query(name)}


def update(service: TraceService, connection: Connection, message: Message) -> Reply:
    name = _text(message, "session")
    changes = config_changes_from_json(message.body.get("changes") or {})
    session = service.table.session(name)
    runtime = service.runtimes.get(session.session_id)
    if "file_name" in changes:
        # A new file for a running session: the controller opened it and passes it along.
        if runtime is None or not session.config.mode.writes_file or session.config.mode is LogMode.NEW_FILE:
            raise InvalidSessionConfig("only a running sequential, circular or file + real-time session switches files")
        fd = message.take_fd()
        _checked_output_fd(fd)
        try:
            actions = service.table.update(name, caller=connection.caller, **changes)
        except BaseException:
            os.close(fd)
            raise
        runtime.drain_all()
        if runtime.logfile is not None:
            runtime.logfile.close()
        runtime.config = service.table.session(name).config
        runtime.logfile = _logfile(runtime, fd, runtime.config, connection.caller)
        service.carry_out(actions)
    else:
        service.carry_out(service.table.update(name, caller=connection.caller, **changes))
        if runtime is not None and runtime.logfile is not None and "max_file_mb" in changes:
            runtime.logfile.set_max_size(changes["max_file_mb"])
    return {"session": service.table.query(name)}


def flush(service: TraceService, connection: Connection, message: Message) -> Reply:
    """ControlTrace FLUSH: producers hand over their partly filled buffers, then the file is current."""
    name = _text(message, "session")
    session = service.table.session(name)
    service.carry_out(service.table.flush(session.session_id, now=time.time(), caller=connection.caller))
    runtime = service.runtimes.get(session.session_id)
    if runtime is None:
        return {"session": service.table.query(name)}
    token = service.new_flush_token()
    waiting = set()
    for connection_id, pool_id in runtime.active.items():
        producer = service.connections.get(connection_id)
        if producer is not None and not producer.closed:
            producer.send({"event": "flush", "pool_id": pool_id, "token": token})
            waiting.add(connection_id)
    pending = PendingFlush(connection, message.body.get("id"), waiting, time.monotonic() + FLUSH_TIMEOUT, token)
    runtime.flushes.append(pending)
    if not waiting:
        service.complete_flush(runtime, pending)
    return None


def query(service: TraceService, connection: Connection, message: Message) -> Reply:
    name = _text(message, "session")
    session = service.table.session(name)
    runtime = service.runtimes.get(session.session_id)
    if runtime is not None:
        service.table.check_access(session, connection.caller.uid, connection.caller.gids)
        runtime.drain_all()
        runtime.update_buffer_gauges()
    info = service.table.query(name, caller=connection.caller)
    info["realtime_consumers"] = len(runtime.consumers) if runtime is not None else 0
    kernel = service.kernel.describe(session.session_id)
    if kernel is not None:
        info["kernel"] = kernel
    if runtime is not None and runtime.write_error:
        info["failure"] = runtime.write_error
    for sink in runtime.sinks if runtime is not None else ():
        described = sink.describe()
        if described is not None:
            info[sink.name] = described
    return {"session": info}


def list_sessions(service: TraceService, connection: Connection, message: Message) -> Reply:
    for runtime in service.runtimes.values():
        runtime.update_buffer_gauges()
    return {"sessions": service.table.list(caller=connection.caller)}


def capture_state(service: TraceService, connection: Connection, message: Message) -> Reply:
    name = _text(message, "session")
    actions = service.table.capture_state(name, _provider(message.body), caller=connection.caller)
    service.carry_out(actions)
    return {"notified": len(actions)}


def snapshot(service: TraceService, connection: Connection, message: Message) -> Reply:
    """A buffering session's ring, written to the file the controller opened."""
    name = _text(message, "session")
    file_name = _text(message, "file_name")
    fd = message.take_fd()
    try:
        _checked_output_fd(fd)
        service.table.snapshot(name, file_name, caller=connection.caller)
        runtime = service.runtimes[service.table.session(name).session_id]
        runtime.drain_all()
    except BaseException:
        os.close(fd)
        raise
    buffers = runtime.snapshot(fd, file_name)
    return {"buffers": buffers, "file_name": file_name}


def realtime(service: TraceService, connection: Connection, message: Message) -> Reply:
    """Attach a real-time consumer: the answer carries the header buffer to read buffers with."""
    name = _text(message, "session")
    session = service.table.session(name)
    service.table.check_access(session, connection.caller.uid, connection.caller.gids)
    runtime = service.runtimes.get(session.session_id)
    if runtime is None or not runtime.mode.real_time:
        raise InvalidSessionConfig(f"session {name!r} is not a running real-time session")
    runtime.consumers[connection.connection_id] = connection
    connection.consuming.add(session.session_id)
    if message.body.get("acks"):
        connection.acknowledges(session.session_id)
    connection.widen_send_buffer()
    connection.send(
        {"id": message.body.get("id"), "ok": True, "session_id": session.session_id, "buffer_size": runtime.config.buffer_size},
        payload=runtime.header_for_consumers(),
    )
    return None


def realtime_received(service: TraceService, connection: Connection, message: Message) -> Reply:
    """A consumer that attached with ``acks`` took the next ``buffers`` buffers of a session
    (no answer: it says so as it reads, and a buffer it never took is lost when it goes)."""
    session_id, buffers = message.body.get("session"), message.body.get("buffers")
    if isinstance(session_id, int) and isinstance(buffers, int):
        connection.received(session_id, buffers)
    return None


# -- providers ---------------------------------------------------------------------------------


def register(service: TraceService, connection: Connection, message: Message) -> Reply:
    """EventRegister: the answer follows the pools and the enable state the provider starts with."""
    provider = _text(message, "provider")
    name = message.body.get("name")
    classic = bool(message.body.get("classic", False))
    service.provider_security.check_register(resolve_provider(provider)[0], connection.caller.uid, connection.caller.gids)
    registration, actions = service.table.register_provider(
        connection.connection_id, provider, connection.pid, connection.credentials.exe, classic=classic,
        name=name if isinstance(name, str) and name.strip() else None, uid=connection.caller.uid,
    )
    connection.registrations.add(registration.registration_id)
    connection.note_registration(registration.provider_guid, classic=classic)
    service.registration_names[registration.registration_id] = name if isinstance(name, str) else None
    service.carry_out(actions)
    return {
        "registration": registration.registration_id,
        "provider": str(registration.provider_guid),
        "state": enable_state_to_json(registration.enable_state),
    }


def unregister(service: TraceService, connection: Connection, message: Message) -> Reply:
    registration_id = _int(message, "registration")
    if registration_id not in connection.registrations:
        raise InvalidArgument(f"registration {registration_id} is not this connection's")
    connection.registrations.discard(registration_id)
    service.registration_names.pop(registration_id, None)
    service.carry_out(service.table.unregister_provider(registration_id))
    return {}


def pool_closed(service: TraceService, connection: Connection, message: Message) -> Reply:
    """A producer stopped writing into a pool: take everything in it and close it."""
    pool_id = _int(message, "pool_id")
    session_id = service.pool_sessions.get(pool_id)
    runtime = service.runtimes.get(session_id) if session_id is not None else None
    if runtime is None or pool_id not in runtime.pools:
        return None
    if runtime.pools[pool_id].connection_id != connection.connection_id:
        raise ProtocolError(f"pool {pool_id} is not this connection's")
    if runtime.pools[pool_id].closing_deadline is None:
        raise ProtocolError(f"pool {pool_id} was not asked to close")
    service.finish_pool(pool_id)
    return None


def flushed(service: TraceService, connection: Connection, message: Message) -> Reply:
    token = _int(message, "token")
    for runtime in list(service.runtimes.values()):
        for pending in list(runtime.flushes):
            if pending.token == token:
                pending.waiting.discard(connection.connection_id)
                runtime.drain_connection(connection.connection_id)
                if not pending.waiting:
                    service.complete_flush(runtime, pending)
    return None


def providers(service: TraceService, connection: Connection, message: Message) -> Reply:
    """Registered providers with their processes (others' processes only for the privileged)."""
    table = service.table
    caller = connection.caller
    privileged = table.is_privileged(caller.uid, caller.gids)
    owners = {c.connection_id: c.credentials.uid for c in service.connections.values()}
    found = []
    for registration in table.registry:
        if not privileged and owners.get(registration.connection_id) != caller.uid:
            continue
        found.append(
            {
                "registration": registration.registration_id,
                "guid": format_guid(registration.provider_guid),
                "name": service.registration_names.get(registration.registration_id),
                "pid": registration.pid,
                "exe": registration.exe,
                "classic": registration.classic,
                "sessions": sorted(table.session(s).name for s in registration.enable_state.session_ids),
            }
        )
    return {"providers": found, "security": service.provider_security.as_json()}


def secure_provider(service: TraceService, connection: Connection, message: Message) -> Reply:
    """Only the given users and groups (and root) may register the provider from now on."""
    guid, name = resolve_provider(_text(message, "provider"))
    owners = message.body.get("owners")
    if not isinstance(owners, list) or not owners or not all(isinstance(o, dict) for o in owners):
        raise InvalidArgument("secure_provider needs \"owners\": a non-empty list of {\"kind\": \"user\"|\"group\", \"id\": N}")
    principals = [Principal(str(owner.get("kind")), owner.get("id")) for owner in owners]
    service.provider_security.secure(guid, principals, name=name, caller_uid=connection.caller.uid)
    service.save_provider_security()  # the change holds from now on, saved or not
    return {"security": service.provider_security.as_json()}


# -- kernel recorders (their own connections only) ------------------------------------------------


def kernel_started(service: TraceService, connection: Connection, message: Message) -> Reply:
    service.kernel.on_started(connection, message.body.get("stats"))
    return None


def kernel_failed(service: TraceService, connection: Connection, message: Message) -> Reply:
    service.kernel.on_failed(connection, message.body.get("error"))
    return None


def kernel_lost(service: TraceService, connection: Connection, message: Message) -> Reply:
    service.kernel.on_lost(connection, message.body.get("events"))
    return None


def kernel_stats(service: TraceService, connection: Connection, message: Message) -> Reply:
    service.kernel.on_stats(connection, message.body.get("stats"))
    return None


# -- the service itself ------------------------------------------------------------------------


def status(service: TraceService, connection: Connection, message: Message) -> Reply:
    return {
        "pid": os.getpid(),
        "socket": str(service.socket_path),
        "system": service.system,
        "started_at": service.started_at,
        "sessions": len(service.table),
        "connections": len(service.connections),
        "registrations": len(service.table.registry),
        "autologger": service.autologger.as_json() if service.autologger is not None else None,
    }


def shutdown(service: TraceService, connection: Connection, message: Message) -> Reply:
    caller = connection.caller
    if caller.uid != os.geteuid() and not service.table.is_privileged(caller.uid, caller.gids):
        raise AccessDenied(f"uid {caller.uid} may not stop the trace service")
    service.request_stop()
    return {"stopping": True}


HANDLERS: dict[str, Handler] = {
    "start_session": start_session,
    "stop_session": stop_session,
    "enable": enable,
    "disable": disable,
    "update": update,
    "flush": flush,
    "query": query,
    "list": list_sessions,
    "capture_state": capture_state,
    "snapshot": snapshot,
    "realtime": realtime,
    "realtime_received": realtime_received,
    "register": register,
    "unregister": unregister,
    "pool_closed": pool_closed,
    "flushed": flushed,
    "kernel_started": kernel_started,
    "kernel_failed": kernel_failed,
    "kernel_lost": kernel_lost,
    "kernel_stats": kernel_stats,
    "providers": providers,
    "secure_provider": secure_provider,
    "status": status,
    "shutdown": shutdown,
}
