"""The Event Log inside the trace service: channel sessions that always listen, stored in logs.

``install_event_log(service)`` (called by ``openetw.daemon`` before the service says it is ready,
so channels listen before any provider registers) reads the installed manifests (the machine
service: the system store; a per-user service: the system store and the user's), makes a log
for every channel, and starts the channel sessions in the session table like any other session
(they count against the 64 and ``session list`` shows them): ``EventLog-Admin`` for every Admin
channel, ``EventLog-Operational`` for every Operational channel, ``EventLog-<log>`` for each
enabled Analytic or Debug channel. Each enables its providers with their channels' keyword
bits, so a provider's ``<event>_enabled`` is true while its channel listens.

A channel session is a real-time session whose one sink is in the service: a ``ChannelSink``
that takes each buffer as the session offers it, parses its records, sends each to the log
of its (provider, channel), refuses (and counts) the events of a writer the log's access does
not let write (the producer's credentials from ``SO_PEERCRED``), renders fields and message
from the manifests later, on a thread of their own. A drain's buffers are walked into rows on the
loop and stored on the store thread (``eventlog.writer``: one transaction per log, overlapped with
the next walk); the pool gets them back only once they are committed: a service killed before
loses none of them (the producer hands them to the next service), and each log records, in the
same transaction, the pool and the last buffer it stored, so that the next service skips those
(a service killed after the commit stores none of them twice).

The ``log_*`` requests (``openetw log`` through the service: settings, clear, import, export,
flush, and queries for callers who may not read the log's files) are added to the service's
handlers here; a controller may not start a session under a reserved ``EventLog-`` name.
"""

from __future__ import annotations

import grp
import os
import stat
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openetw.errors import AccessDenied, EventLogError, InvalidArgument, ManifestError
from openetw.eventlog.access import Caller as LogCaller
from openetw.eventlog.access import ReadAccess, may_configure, may_write, read_access
from openetw.eventlog.channels import SESSION_PREFIX, ChannelSpec, channel_specs, default_config, session_name
from openetw.eventlog.model import LogConfig
from openetw.eventlog.paths import default_logs_dir
from openetw.eventlog.records import Route, Run, buffer_sequence, collect_batch
from openetw.eventlog.sink import ChannelRuntime, ChannelSink, release_taken
from openetw.eventlog.store import LogStore
from openetw.eventlog.writer import StoreBatch, StoreWriter
from openetw.ipc.pool import BufferPool
from openetw.ipc.protocol import Message
from openetw.service.connection import Connection
from openetw.service.screen import ThreadCheck
from openetw.service.sessions import PoolEntry, SessionRuntime
from openetw.session import LogMode, SessionConfig, SessionState
from openetw.session.model import Caller

if TYPE_CHECKING:
    from openetw.service.server import TraceService
    from openetw.tdh.registry import SchemaRegistry

__all__ = ["READERS_GROUP", "WRITERS_GROUP", "ChannelSink", "EventLogService", "import_evtx", "install_event_log"]

READERS_GROUP = "openetw-log-readers"  # Windows' "Event Log Readers"
WRITERS_GROUP = "openetw-log-writers"  # the service accounts that may write System
LEVEL_ALL = 255
RENDER_QUIET = 0.2  # seconds without a stored buffer before the render thread takes the interpreter
RENDER_WAIT = 2.0  # ... but it renders a batch at least this often
RESERVE_FILE = ".reserve"  # in the logs' directory
MARKS_KEPT = 1024  # per log, the marks of pools of producers that may still hand one over


def _gid(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


class _Routes(dict[tuple[bytes, int], Route | None]):
    """(provider GUID bytes, channel) -> where its events go, for one writer, found on first use."""

    def __init__(self, hook: EventLogService, caller: LogCaller) -> None:
        super().__init__()
        self.hook = hook
        self.caller = caller

    def __missing__(self, key: tuple[bytes, int]) -> Route | None:
        spec = self.hook.catalog.specs.get(key)
        config = self.hook._configs.get(spec.log) if spec is not None else None
        route = None
        if spec is not None and config is not None and config.enabled:
            route = Route(spec.log, spec.provider_name, spec.provider_guid, config.level, config.keywords, may_write(config, self.caller))
        self[key] = route
        return route


@dataclass
class _Catalog:
    """The installed channels: by (provider GUID bytes, channel byte), and per log its settings."""

    specs: dict[tuple[bytes, int], ChannelSpec] = field(default_factory=dict)
    logs: dict[str, ChannelSpec] = field(default_factory=dict)  # log -> the first channel naming it
    registry: SchemaRegistry | None = None


class EventLogService:
    """The service's Event Log (see the module's docstring)."""

    def __init__(self, service: TraceService, directory: Path, manifest_dirs: list[Path], *, owner: int) -> None:
        self.service = service
        self.store = LogStore(directory, keep_open=True)  # the loop's: settings, counters, reads for callers
        self.render_store = LogStore(directory, keep_open=True)  # the render thread's own connections
        self.writer = StoreWriter(LogStore(directory, keep_open=True), on_stored=self._stored, log=_log)  # the store thread's
        self.writer.store.unsaved = self.store.unsaved  # books of failed writes: one tally that ``log_info`` reports
        self._marked: dict[str, set[str]] = defaultdict(set)  # pool identity -> the logs that hold its mark
        self.manifest_dirs = manifest_dirs
        self.owner = owner
        system = service.system
        self.readers = _gid(READERS_GROUP) if system else os.getegid()
        self.writers = _gid(WRITERS_GROUP) if system else None
        self.catalog = _Catalog()
        self.sessions: dict[str, int] = {}  # reserved session name -> session id
        self._configs: dict[str, LogConfig] = {}
        self._losses_seen: dict[int, int] = {}
        self._render_wanted = threading.Event()
        self._last_store = 0.0  # monotonic: rendering waits while events keep arriving

    # -- channels ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the installed manifests, make missing logs, start and steer the channel sessions."""
        from openetw.manifest.store.manifests import ManifestStore
        from openetw.tdh.from_files import build_registry

        manifests = []
        for directory in self.manifest_dirs:
            errors: list[ManifestError] = []
            try:
                manifests += ManifestStore(directory).load_all(errors)
            except (OSError, ManifestError) as exc:
                _log(f"event log: cannot read the manifests in {directory}: {exc}")
            for error in errors:
                _log(f"event log: {error}")
        # The service's own stores (the machine service reads the system store only), not the
        # caller's installed ones: the system store's first so that the user's win.
        registry = build_registry(manifests=manifests)
        catalog = _Catalog(registry=registry)
        for manifest in manifests:
            for provider in manifest.providers:
                if provider.guid is None:
                    continue
                for spec in channel_specs(str(provider.guid), provider.name, list(provider.channels)):
                    catalog.specs[(provider.guid.bytes_le, spec.channel_value)] = spec
                    catalog.logs.setdefault(spec.log, spec)
        if catalog.logs:  # the built-in logs exist wherever channels do
            for log in ("Application", "System", "Security"):
                if log not in catalog.logs:
                    catalog.logs[log] = ChannelSpec("", "", 0, 0, log, "Admin", True, "Application" if log == "Application" else "System")
        self.catalog = catalog
        if catalog.logs and not self.store.directory.is_dir():
            self.store.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.service.system:  # its files are 0600: who may not read them reads through the service
                os.chmod(self.store.directory, 0o755)
        for log, spec in catalog.logs.items():
            wanted = default_config(log, spec.type, spec.isolation, system=self.service.system, owner=self.owner,
                                    readers=self.readers if self.readers is not None else 0, writers=self.writers)  # fmt: skip
            try:
                config = self._ensure(log, wanted)
            except EventLogError as exc:
                _log(f"event log: {exc}")
                continue
            self._configs[log] = config
            try:  # marks of pools of producers long gone, never handed over
                self.store.forget_marks(log, keep=MARKS_KEPT)
            except EventLogError as exc:
                _log(f"event log: {exc}")
        if catalog.logs:  # room to count what a full disk refuses (see ``LogStore.keep_reserve``)
            self.writer.store.keep_reserve(self.store.directory / RESERVE_FILE)
        self._steer()

    def _ensure(self, log: str, config: LogConfig) -> LogConfig:
        """The log's settings, making it when missing; a damaged database (SQLite says it is
        not one, or its check fails) is set aside as ``<file>.damaged-<UTC time>`` with its
        -wal and -shm, reported, and the log begun anew with ``config``."""
        if self.store.exists(log):
            problem = self.store.damage(log)
            if problem is not None:
                aside = self.store.set_aside(log)
                _log(f"event log: the log {log!r} is damaged ({problem}); set aside as {aside.name}, a new one begun")
        return self.store.ensure(log, config)

    def _wanted(self) -> dict[str, dict[uuid.UUID, int]]:
        """Session name -> provider -> keyword bits, for the channels that listen now."""
        wanted: dict[str, dict[uuid.UUID, int]] = defaultdict(dict)
        for (guid_bytes, _), spec in self.catalog.specs.items():
            config = self._configs.get(spec.log)
            if config is None or not config.enabled:
                continue
            name = session_name(spec.type, spec.log)
            guid = uuid.UUID(bytes_le=guid_bytes)
            wanted[name][guid] = wanted[name].get(guid, 0) | spec.keyword_bit
        return wanted

    def _steer(self) -> None:
        """Start the sessions now wanted, stop the others, set each one's providers."""
        table = self.service.table
        wanted = self._wanted()
        for name in list(self.sessions):
            if name not in wanted:
                self._stop(name)
        for name, providers in wanted.items():
            session_id = self.sessions.get(name)
            if session_id is None:
                session_id = self._start(name)
            for guid, bits in providers.items():
                self.service.carry_out(table.enable(session_id, guid, level=LEVEL_ALL, match_any=bits))

    def _start(self, name: str) -> int:
        table = self.service.table
        # Pools of up to 512 buffers (32 MiB) per producer: a burst waits there for the store.
        config = SessionConfig(name=name, mode=LogMode.REAL_TIME, flush_timer=1, maximum_buffers=512)
        owner = Caller(os.geteuid(), os.getegid())
        now = time.time()
        session = table.create(config, owner, now=now)
        runtime = ChannelRuntime(session.session_id, session.logger_id, config, table)
        runtime.on_rejected = self.service.note_rejected
        runtime.secured_guids = self.service.provider_security.guid_bytes
        sink = ChannelSink(self, runtime)
        runtime.add_sink(sink)
        runtime.sink = sink
        self.service.runtimes[session.session_id] = runtime
        self.service.carry_out(table.start(session.session_id, now=now))
        self.sessions[name] = session.session_id
        return session.session_id

    def _stop(self, name: str) -> None:
        session_id = self.sessions.pop(name)
        runtime = self.service.runtimes.get(session_id)
        if runtime is not None:
            runtime.drain_all()
        table = self.service.table
        if table.session(session_id).state is SessionState.RUNNING:
            self.service.carry_out(table.stop(session_id, now=time.time()))

    # -- storing -------------------------------------------------------------------------------
    def store_buffer(self, runtime: ChannelRuntime, header: bytes, data: bytes) -> None:
        """Store a buffer's events in their logs, unrendered (the render thread renders them)."""
        self.store_buffers(runtime, header, [data])

    def store_buffers(self, runtime: ChannelRuntime, header: bytes, buffers: list[bytes], *, pool: BufferPool | None = None,
                      release: Callable[[], None] | None = None, wait: bool = False, skip: str | None = None) -> None:  # fmt: skip
        """Store the events of buffers from one producer in their logs, unrendered (the render
        thread renders them): walked into rows here, appended on the store thread in one
        transaction per log, the rows built from the buffers' header columns
        (``records.collect_batch``: no object per event). ``pool``: the pool they come
        from, whose mark the logs keep with them; ``release`` is called once they are stored;
        ``wait``: return once they are. ``skip``: a pool taken over from a dead service: the
        buffers each log's mark for it says it holds are left out."""
        producer = runtime.producer
        caller = LogCaller(producer.caller.uid, producer.caller.gids) if producer is not None else LogCaller(os.geteuid())
        routes = _Routes(self, caller)
        batch = StoreBatch(rows=defaultdict(list), refused=defaultdict(int), release=release, computer=_hostname(), uid=caller.uid)
        clock = runtime.clock
        if skip is None:
            collect_batch(buffers, routes, batch.rows, batch.refused, clock)
        else:
            marks: dict[str, int] = {}
            for data in buffers:
                rows: dict[str, list[Run]] = defaultdict(list)
                refused: dict[str, int] = defaultdict(int)
                collect_batch([data], routes, rows, refused, clock)
                sequence = buffer_sequence(data)
                for log in set(rows) | set(refused):
                    if log not in marks:
                        marks[log] = self._mark_of(log, skip)[0]
                    if sequence <= marks[log]:
                        continue  # stored by the service that died, after its commit and before it gave the buffer back
                    batch.rows[log] += rows.get(log, [])
                    batch.refused[log] += refused.get(log, 0)
        if pool is not None and buffers:
            identity = pool.identity
            batch.mark = (identity, max(buffer_sequence(data) for data in buffers))
            self._marked[identity].update(batch.rows, batch.refused)
        self.writer.submit(batch, wait=wait)
        self._count_losses(runtime)

    def _mark_of(self, log: str, pool: str) -> tuple[int, int]:
        """(SequenceNumber of the last buffer of ``pool`` that ``log`` holds, -1: none; the pool's
        losses counted there)."""
        try:
            return self.store.mark(log, pool) if self.store.exists(log) else (-1, 0)
        except EventLogError as exc:
            _log(f"event log: {exc}")
            return (-1, 0)

    def _stored(self) -> None:
        """Called by the store thread after a batch with rows: rendering waits its turn."""
        self._last_store = time.monotonic()
        self._render_wanted.set()

    def pool_closed(self, identity: str) -> None:
        """A pool of this service closed: nobody hands it over any more, its marks go."""
        logs = self._marked.pop(identity, set())
        if logs:
            self.writer.submit(StoreBatch(forget=identity, forget_logs=tuple(sorted(logs))))

    # -- rendering -----------------------------------------------------------------------------
    def start_rendering(self) -> None:
        """A thread that renders what was stored first, a batch at a time, oldest first."""
        thread = threading.Thread(target=self._render_loop, name="openetw-eventlog-render", daemon=True)
        thread.start()

    def _wait_for_quiet(self) -> None:
        """Storing comes first: wait until no buffer came for RENDER_QUIET, at most RENDER_WAIT."""
        deadline = time.monotonic() + RENDER_WAIT
        while time.monotonic() - self._last_store < RENDER_QUIET and time.monotonic() < deadline:
            time.sleep(RENDER_QUIET)

    def _render_loop(self) -> None:
        from openetw.eventlog.rendering import etw_renderer

        while True:
            self._render_wanted.wait(1.0)
            self._render_wanted.clear()
            self._wait_for_quiet()
            registry = self.catalog.registry
            if registry is None:
                continue
            render = etw_renderer(registry)
            for log in list(self.catalog.logs):
                try:
                    while self.render_store.exists(log) and self.render_store.render_pending(log, render, 1000) == 1000:
                        self._wait_for_quiet()
                except Exception as exc:  # noqa: BLE001 - rendering never stops; the events stay stored
                    _log(f"event log: rendering {log}: {exc}")

    def _count_losses(self, runtime: SessionRuntime, *, loss_mark: tuple[str, int] | None = None) -> None:
        """Events the session lost on their way (full pools): counted in its first log."""
        lost = self.service.table.session(runtime.session_id).statistics.events_lost
        new = lost - self._losses_seen.get(runtime.session_id, 0)
        if new > 0:
            self._losses_seen[runtime.session_id] = lost
            log = self._first_log(runtime.name)
            if log is not None:
                self.store.note_lost(log, new, loss_mark=loss_mark)
                if loss_mark is not None:
                    self._marked[loss_mark[0]].add(log)

    def _first_log(self, session: str) -> str | None:
        logs = sorted({s.log for s in self.catalog.specs.values() if session_name(s.type, s.log) == session})
        return logs[0] if logs else None

    def take_orphans(self, connection: Connection, session: str, pool: BufferPool) -> int:
        """A reattached producer's pool of a channel session of a service that died: its events
        are screened (as the producer's, by its credentials now) and stored, and what the
        producer counted lost in it is counted lost. Returns the buffers taken."""
        session_id = self.sessions.get(session)
        runtime = self.service.runtimes.get(session_id) if session_id is not None else None
        if not isinstance(runtime, ChannelRuntime) or runtime.sink is None:
            raise EventLogError(f"no channel session {session!r} here")
        if pool.producer_pid != connection.pid:
            raise AccessDenied(f"pid {connection.pid} hands over a pool of pid {pool.producer_pid}")
        entry = PoolEntry(-1, connection.connection_id, pool, producer=connection, threads=ThreadCheck(connection.pid))
        # What the dead service counted already: the pool says so, or the log, when the service
        # died after counting and before writing it in the pool.
        first = self._first_log(session)
        counted = self._mark_of(first, pool.identity)[1] if first is not None else 0
        entry.losses_seen = max(pool.losses_counted, counted)
        # The buffers stay TAKEN until their events are stored (this service may die too: the
        # producer hands the pool over again until a service answers), and the logs' marks say
        # which the dead service stored already.
        identity = pool.identity
        held = pool.hold_all_after_service_death()
        indices = [index for index, _ in held]
        try:
            buffers = [bytes(runtime.screen(entry, data)[0]) for _, data in held]
            if buffers:
                self.store_buffers(runtime, runtime.sink.header(), buffers, pool=pool, wait=True, skip=identity)
        finally:
            self._marked.pop(identity, None)  # handed over once stored: marks left to the pruning
            release_taken(pool, indices)
        runtime.count_pool_losses(entry)
        return len(buffers)

    def flush(self) -> None:
        """Every buffer the channel sessions' pools hold, stored."""
        for session_id in self.sessions.values():
            runtime = self.service.runtimes.get(session_id)
            if runtime is not None:
                runtime.drain_all()
        self.writer.wait()

    # -- requests ------------------------------------------------------------------------------
    def config(self, log: str) -> LogConfig:
        if not self.store.exists(log):
            raise EventLogError(f"no log {log!r}")
        config = self._configs.get(log) or self.store.config(log)
        self._configs[log] = config
        return config

    def set(self, log: str, caller: Caller, settings: dict[str, Any]) -> LogConfig:
        config = self.config(log)
        if not may_configure(config, LogCaller(caller.uid, caller.gids)):
            raise AccessDenied(f"uid {caller.uid} may not change the log {log!r}")
        try:
            new = replace(config, **settings)
        except TypeError as exc:
            raise InvalidArgument(f"log_set: {exc}") from None
        enabling = new.enabled and not config.enabled
        self.store.set_config(log, new)
        self._configs[log] = new
        if enabling and new.type in ("Analytic", "Debug"):
            self.store.clear(log)  # Windows: enabling an analytic or debug channel clears it
        if new.enabled != config.enabled:
            self.flush()
            self._steer()
        return new

    def check_read(self, log: str, caller: Caller) -> ReadAccess:
        access = read_access(self.config(log), LogCaller(caller.uid, caller.gids))
        if access is ReadAccess.NONE:
            raise AccessDenied(f"uid {caller.uid} may not read the log {log!r}")
        return access


def _log(message: str) -> None:
    from openetw.service.server import log

    log(message)


_HOST: list[str] = []


def _hostname() -> str:
    if not _HOST:
        _HOST.append(os.uname().nodename)
    return _HOST[0]


# -- the requests ----------------------------------------------------------------------------------


def _hook(service: TraceService) -> EventLogService:
    hook: EventLogService | None = getattr(service, "event_log", None)
    if hook is None:
        raise EventLogError("this trace service keeps no Event Log")
    return hook


def _log_name(message: Message) -> str:
    value = message.body.get("log")
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{message.body.get('op')} needs \"log\" as a non-empty string")
    return value


_SETTABLE: dict[str, type | tuple[type, ...]] = {"enabled": bool, "retention": str, "max_size": int, "level": (int, type(None)), "keywords": (int, type(None)),
             "owner": int, "group": int, "mode": int}  # fmt: skip


def log_set(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    settings = message.body.get("settings")
    if not isinstance(settings, dict):
        raise InvalidArgument("log_set needs \"settings\" as an object")
    for key, value in settings.items():
        kinds = _SETTABLE.get(key)
        if kinds is None:
            raise InvalidArgument(f"log_set: no setting {key!r} (settings: {', '.join(_SETTABLE)})")
        if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
            raise InvalidArgument(f"log_set: {key!r} has the wrong type")
    config = _hook(service).set(_log_name(message), connection.caller, settings)
    return {"log": _log_name(message), "config": config.to_json()}


def log_flush(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    hook = _hook(service)
    hook.flush()
    return {"sessions": sorted(hook.sessions)}


def log_reload(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    """The installed manifests changed: channels to add, sessions to steer."""
    hook = _hook(service)
    hook.load()
    return {"logs": sorted(hook.catalog.logs), "sessions": sorted(hook.sessions)}


def log_clear(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    hook = _hook(service)
    log = _log_name(message)
    config = hook.config(log)
    if not may_configure(config, LogCaller(connection.caller.uid, connection.caller.gids)):
        raise AccessDenied(f"uid {connection.caller.uid} may not clear the log {log!r}")
    hook.flush()
    backup = None
    if message.body.get("backup"):
        fd = message.take_fd()
        try:
            backup = _export_to_fd(hook.store, log, fd, None)
        finally:
            os.close(fd)
    return {"log": log, "cleared": hook.store.clear(log), "backup": backup}


def log_export(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    hook = _hook(service)
    log = _log_name(message)
    access = hook.check_read(log, connection.caller)
    query = message.body.get("query")
    fd = message.take_fd()
    try:
        hook.flush()
        written = _export_to_fd(hook.store, log, fd, query if isinstance(query, str) else None,
                                own_uid=connection.caller.uid if access is ReadAccess.READ_OWN else None)  # fmt: skip
    finally:
        os.close(fd)
    return {"log": log, "exported": written}


def log_import(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    hook = _hook(service)
    log = _log_name(message)
    from openetw.consumer.evtx_source import FileBytes

    fd = message.take_fd()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgument("log_import reads a regular file")
        data = FileBytes(fd)
        return _import_from(hook, connection, log, data)
    finally:
        os.close(fd)


def _import_from(hook: EventLogService, connection: Connection, log: str, data: Any) -> dict[str, Any]:
    caller = LogCaller(connection.caller.uid, connection.caller.gids)
    if hook.store.exists(log):
        if not may_configure(hook.config(log), caller):
            raise AccessDenied(f"uid {caller.uid} may not import into the log {log!r}")
    else:
        hook.store.create(log, LogConfig(owner=caller.uid, group=hook.readers or 0, mode=0o640, isolation="Custom", type="Operational"))
    result = import_evtx(hook.store, log, data)
    return {"log": log, "imported": result}


def log_query(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    """Events of a log for a caller who may not read its files (at most 10,000 per request)."""
    hook = _hook(service)
    log = _log_name(message)
    access = hook.check_read(log, connection.caller)
    hook.flush()
    body = message.body
    count = body.get("count")
    limit = min(int(count), 10_000) if isinstance(count, int) and not isinstance(count, bool) else 10_000
    after = body.get("after_record_id")
    events = hook.store.query(
        log, xpath=body.get("query") if isinstance(body.get("query"), str) else None, count=limit,
        reverse=bool(body.get("reverse")), after_record_id=after if isinstance(after, int) else None,
        text=body.get("text") if isinstance(body.get("text"), str) else None,
        own_uid=connection.caller.uid if access is ReadAccess.READ_OWN else None,
    )  # fmt: skip
    return {"log": log, "log_id": hook.store.info(log).log_id, "events": [e.to_json() for e in events]}


def log_orphans(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    """A producer reattached after its service died hands over a channel session's pool."""
    session = message.body.get("session")
    if not isinstance(session, str) or not session.startswith(SESSION_PREFIX):
        raise InvalidArgument(f"log_orphans needs \"session\" as a channel session's name ({SESSION_PREFIX}...)")
    fd = message.take_fd()
    try:
        pool = BufferPool.attach(fd)
    except BaseException:
        os.close(fd)
        raise
    try:
        taken = _hook(service).take_orphans(connection, session, pool)
    finally:
        pool.close()
    return {"session": session, "buffers": taken}


def log_info(service: TraceService, connection: Connection, message: Message) -> dict[str, Any]:
    hook = _hook(service)
    log = _log_name(message)
    hook.check_read(log, connection.caller)
    hook.flush()
    return {"log": log, "config": hook.config(log).to_json(), "info": hook.store.info(log).to_json()}


def import_evtx(store: LogStore, log: str, data: Any, *, batch: int = 1000) -> int:
    """Append the events of an ``.evtx`` image to ``log``; returns how many were stored.

    ``data`` is bytes or a ``FileBytes``: chunks are read, parsed and stored a batch at a time,
    each record bounded by the reader (a template bomb is one lost record), so no file can take
    the memory of the process that imports it.
    """
    from openetw.consumer.evtx_source import chunk_order
    from openetw.eventlog.render import from_evtx_record
    from openetw.evtx.reader import EvtxReader

    reader = EvtxReader(data)
    stored = 0
    events = []
    for index in chunk_order(reader):
        for record in sorted(reader.chunk_records(index), key=lambda r: r.record_id):
            events.append(from_evtx_record(record))
        if len(events) >= batch:
            stored += store.append(log, events).stored
            events = []
    if events:
        stored += store.append(log, events).stored
    return stored


def _export_to_fd(store: LogStore, log: str, fd: int, query: str | None, *, own_uid: int | None = None) -> int:
    from openetw.eventlog.export import write_evtx

    with os.fdopen(os.dup(fd), "wb") as out:
        return write_evtx(store.query(log, xpath=query, own_uid=own_uid), out)


EVENT_LOG_HANDLERS: dict[str, Callable[[TraceService, Connection, Message], dict[str, Any] | None]] = {
    "log_set": log_set,
    "log_flush": log_flush,
    "log_reload": log_reload,
    "log_clear": log_clear,
    "log_export": log_export,
    "log_import": log_import,
    "log_query": log_query,
    "log_info": log_info,
    "log_orphans": log_orphans,
}


def install_event_log(service: TraceService) -> EventLogService:
    """Give ``service`` its Event Log (see the module's docstring) and start its channels."""
    from openetw.manifest.store.manifests import default_data_dirs

    user_dir, system_dir = default_data_dirs()
    manifest_dirs = [system_dir / "manifests"] if service.system else [system_dir / "manifests", user_dir / "manifests"]
    hook = EventLogService(service, default_logs_dir(service.system), manifest_dirs, owner=0 if service.system else os.geteuid())
    service.event_log = hook  # type: ignore[attr-defined]
    handlers = dict(service.handlers)
    handlers.update(EVENT_LOG_HANDLERS)
    start = handlers["start_session"]

    def start_session(service: TraceService, connection: Connection, message: Message) -> dict[str, Any] | None:
        config = message.body.get("config")
        name = config.get("name") if isinstance(config, dict) else None
        if isinstance(name, str) and name.casefold().startswith(SESSION_PREFIX.casefold()):
            raise InvalidArgument(f"session names beginning {SESSION_PREFIX!r} are the Event Log's")
        return start(service, connection, message)

    handlers["start_session"] = start_session
    service.handlers = handlers
    hook.load()
    hook.start_rendering()
    return hook
