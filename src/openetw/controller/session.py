"""The controller API: start, steer and stop trace sessions (StartTrace, EnableTraceEx2, ControlTrace).

::

    with Session.start("MyTrace", output="trace.etl", flush_timer=1) as session:
        session.enable("MyCompany.MyComponent", level=4, any=0x10)
        ...
        print(session.query())        # the statistics
    # stopped: trace.etl is complete

The controller opens the output file itself and passes the descriptor to the service, which never
opens a path it is given: the file is created with the caller's rights.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from openetw.controller.client import ServiceClient
from openetw.errors import InvalidArgument
from openetw.ipc.wire import config_from_json, config_to_json, filters_to_json, rule_from_json
from openetw.session import STATISTICS_KEYS, EventFilters, LogMode, SessionKind
from openetw.session.config import DEFAULT_KERNEL_BUFFER_KB, DEFAULT_MAXIMUM_BUFFERS, ProviderEnable, SessionConfig

if TYPE_CHECKING:
    from openetw.ipc.stream_options import StreamOptions

__all__ = ["MODE_NAMES", "Session", "list_sessions", "parse_mode", "registered_providers", "session_config"]

MODE_NAMES: dict[str, LogMode] = {
    "file": LogMode.SEQUENTIAL_FILE,
    "sequential": LogMode.SEQUENTIAL_FILE,
    "circular": LogMode.CIRCULAR_FILE,
    "newfile": LogMode.NEW_FILE,
    "realtime": LogMode.REAL_TIME,
    "buffering": LogMode.BUFFERING,
    "file+realtime": LogMode.FILE_AND_REAL_TIME,
}
MODE_NAMES.update({mode.value: mode for mode in LogMode})

ProviderRef = uuid.UUID | str


def parse_mode(mode: LogMode | str | None, *, output: str | None, realtime: bool) -> LogMode:
    """The log mode from the friendly arguments: a file mode plus ``realtime`` is file + real-time."""
    if mode is None:
        chosen = LogMode.SEQUENTIAL_FILE if output else LogMode.REAL_TIME
    elif isinstance(mode, LogMode):
        chosen = mode
    else:
        try:
            chosen = MODE_NAMES[mode.lower()]
        except KeyError:
            raise InvalidArgument(f"unknown mode {mode!r} (choose from {', '.join(sorted(MODE_NAMES))})") from None
    if realtime:
        if chosen is LogMode.SEQUENTIAL_FILE:
            return LogMode.FILE_AND_REAL_TIME
        if chosen not in (LogMode.REAL_TIME, LogMode.FILE_AND_REAL_TIME):
            raise InvalidArgument(f"{chosen.value} mode cannot also deliver in real time")
    return chosen


def _filters_json(filters: EventFilters | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if filters is None:
        return None
    if isinstance(filters, EventFilters):
        return filters_to_json(filters)
    return dict(filters)


def _provider_text(provider: ProviderRef) -> str:
    """What is sent to the service for a provider (``openetw.provider_names``' order): a GUID, or
    an installed manifest's provider as its GUID (the caller's stores, read with the caller's
    rights), or ``*Name`` for the name hash on purpose; any other name is sent as it is, and the
    service resolves it against registered providers' names or keeps it pending by name."""
    from openetw.manifest.store.lookup import resolve_provider

    resolved = resolve_provider(provider)
    if resolved.source == "explicit-hash":
        return f"*{resolved.name}"
    return str(resolved.guid) if resolved.name is None or resolved.source == "manifest" else resolved.name


def _announce_pending(info: Mapping[str, Any] | None, sent: Iterable[str]) -> None:
    """Warn (``ProviderNameWarning``) for each name the service could only hash and keeps pending."""
    from openetw.provider_names import resolve_provider_name

    names = {text.casefold() for text in sent}
    for item in (info or {}).get("providers", ()):
        name = item.get("name")
        if item.get("pending") and name and name.casefold() in names:
            resolve_provider_name(name).warn(pending=True, stacklevel=4)


def _open_output(path: str) -> int:
    """A new output file is its owner's only (0600): traces may hold anything a process logged."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)


def _statistics(info: Mapping[str, Any]) -> dict[str, int]:
    return {key: int(info.get(key, 0)) for key in STATISTICS_KEYS}


class Session:
    """A running trace session, steered through the service. Use ``Session.start`` or ``Session.attach``."""

    def __init__(self, name: str, client: ServiceClient, info: dict[str, Any] | None = None) -> None:
        self.name = name
        self._client = client
        self.info_at_start = info or {}
        self.final: dict[str, Any] | None = None

    # -- creation ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        config: SessionConfig | str,
        output: str | os.PathLike[str] | None = None,
        *,
        socket: str | os.PathLike[str] | None = None,
        autostart: bool | None = None,
        stream: str | StreamOptions | None = None,
        subject: str | None = None,
        spool_size: float | None = None,
        end_with_connection: bool = False,
        **settings: Any,
    ) -> Session:
        """StartTrace: the session ``config`` describes (``openetw.session.SessionConfig``).

        The file a file mode writes (``config.file_name``; a new-file session's name holds one
        ``%d``) is opened here, with the caller's rights, and its descriptor handed to the
        service; ``config.providers`` are enabled before the first event can flow.

        ``end_with_connection``: the service stops the session when this ``Session``'s
        connection closes (its process ended, killed or not), as a tool's private session should.

        ``stream`` (``nats://HOST:PORT[,...]`` or ``openetw.fleet.StreamOptions`` with
        credentials) streams the session's buffers to the fleet's JetStream stream, on ``subject``
        (default ``etw.{host}.{session}``), holding at most ``spool_size`` MB (default 64) while
        the cluster is unreachable. The session then delivers in real time (a file mode becomes
        file + real time).

        The keyword form, ``Session.start(name, output, mode=..., providers=..., ...)``, is kept
        for one release: :func:`session_config` builds the config from those keywords.
        """
        stream_body = _stream_body(stream, subject, spool_size)
        if isinstance(config, str):
            if stream_body is not None:
                settings["realtime"] = True
            config = session_config(config, output, **settings)
        elif settings or output is not None:
            raise InvalidArgument("give the session's settings in its SessionConfig, or a name and keywords; not both")
        else:
            if stream_body is not None and not config.mode.real_time:
                config = config.with_changes(mode=parse_mode(config.mode, output=config.file_name, realtime=True))
            if config.file_name is not None:
                config = config.with_changes(file_name=os.path.abspath(config.file_name))
        enables = [_enable_body_of(enable) for enable in config.providers]
        session = cls._start(config, enables, socket, autostart, stream_body, end_with_connection)
        _announce_pending(session.info_at_start, [body["provider"] for body in enables])
        return session

    @classmethod
    def _start(
        cls, config: SessionConfig, enables: list[dict[str, Any]], socket: str | os.PathLike[str] | None,
        autostart: bool | None, stream_body: dict[str, Any] | None, end_with_connection: bool,
    ) -> Session:  # fmt: skip
        fds: tuple[int, ...] = ()
        if config.file_name is not None:
            first = config.file_name.replace("%d", "1") if config.mode is LogMode.NEW_FILE else config.file_name
            fds = (_open_output(first),)
        client = ServiceClient(socket, autostart=autostart)
        try:
            extra: dict[str, Any] = {"stream": stream_body} if stream_body is not None else {}
            if end_with_connection:
                extra["end_with_connection"] = True
            reply = client.call("start_session", fds, config=config_to_json(config), providers=enables, **extra)
        except BaseException:
            client.close()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return cls(config.name, client, reply.get("session"))

    @classmethod
    def attach(cls, name: str, *, socket: str | os.PathLike[str] | None = None, autostart: bool | None = False) -> Session:
        """A session someone already started (to stop, query or steer it)."""
        client = ServiceClient(socket, autostart=autostart)
        try:
            info = client.call("query", session=name)["session"]
        except BaseException:
            client.close()
            raise
        return cls(info.get("name", name), client, info)

    # -- steering ------------------------------------------------------------------------------
    def enable(
        self,
        provider: ProviderRef,
        level: int = 0,
        any: int = 0,  # noqa: A002 - ETW's MatchAnyKeyword, named as users know it
        all: int = 0,  # noqa: A002 - ETW's MatchAllKeyword
        *,
        properties: int = 0,
        filters: EventFilters | Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """EnableTraceEx2(ENABLE_PROVIDER): add or replace this session's rule for a provider."""
        sent = _provider_text(provider)
        info = self._session_call(
            "enable", provider=sent, level=level, match_any=any, match_all=all,
            properties=int(properties), filters=_filters_json(filters),
        )
        _announce_pending(info, [sent])
        return info

    def disable(self, provider: ProviderRef) -> dict[str, Any]:
        return self._session_call("disable", provider=_provider_text(provider))

    def update(
        self,
        *,
        flush_timer: int | None = None,
        max_size: int | None = None,
        max_buffers: int | None = None,
        output: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """ControlTrace(UPDATE): flush timer, maximum file size, maximum buffers, or a new output file."""
        changes: dict[str, Any] = {}
        if flush_timer is not None:
            changes["flush_timer"] = flush_timer
        if max_size is not None:
            changes["max_file_mb"] = max_size
        if max_buffers is not None:
            changes["maximum_buffers"] = max_buffers
        fds: tuple[int, ...] = ()
        if output is not None:
            changes["file_name"] = os.path.abspath(os.fspath(output))
            fds = (_open_output(os.fspath(output)),)
        try:
            return self._session_call("update", fds, changes=changes)
        finally:
            for fd in fds:
                os.close(fd)

    def flush(self) -> dict[str, int]:
        """ControlTrace(FLUSH): every event written before this call is in the file when it returns."""
        return _statistics(self._call("flush")["session"])

    def query(self) -> dict[str, int]:
        """ControlTrace(QUERY): the statistics (``buffers``, ``free_buffers``, ``events_written``,
        ``events_lost``, ``buffers_written``, ``log_buffers_lost``, ``realtime_buffers_lost``)."""
        if self.final is not None:
            return _statistics(self.final)
        return _statistics(self._call("query")["session"])

    def info(self) -> dict[str, Any]:
        """Settings, state, enabled providers and statistics, as the service describes the session."""
        if self.final is not None:
            return dict(self.final)
        return self._session_call("query")

    def capture_state(self, provider: ProviderRef) -> int:
        """EVENT_CONTROL_CODE_CAPTURE_STATE: ask the provider's processes to log their state."""
        return int(self._call("capture_state", provider=_provider_text(provider))["notified"])

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        """Write a buffering session's in-memory buffers to ``path``; returns the buffers written."""
        fd = _open_output(os.fspath(path))
        try:
            return int(self._call("snapshot", (fd,), file_name=os.path.abspath(os.fspath(path)))["buffers"])
        finally:
            os.close(fd)

    def stop(self) -> dict[str, int]:
        """ControlTrace(STOP): producers hand over their buffers, the file gets its final header.
        Returns the final statistics. Stopping twice returns the same numbers."""
        if self.final is None:
            self.final = self._call("stop_session")["session"]
            self._client.close()
        return _statistics(self.final)

    def stream_state(self) -> dict[str, Any] | None:
        """A streamed session's publishing: ``reachable``, ``sequence`` (messages numbered so
        far), ``buffers_acknowledged``, ``held_bytes`` (waiting for the stream), ``spooled_items``
        (of those, on disk), ``buffers_lost`` / ``events_lost``, ``last_error``; None otherwise."""
        state = self._call("query")["session"].get("stream")
        return dict(state) if state is not None else None

    def detach(self) -> None:
        """Close this controller's connection; the session goes on in the service."""
        self._client.close()

    def consumer(self, **kwargs: Any) -> Any:
        """A real-time consumer of this session (see ``RealtimeConsumer``)."""
        from openetw.controller.realtime import RealtimeConsumer

        return RealtimeConsumer(self.name, socket=self._client.socket_path, **kwargs)

    def _session_call(self, op: str, fds: tuple[int, ...] = (), **fields: Any) -> dict[str, Any]:
        """``_call`` for the operations whose reply describes the session: that description."""
        session: dict[str, Any] = self._call(op, fds, **fields)["session"]
        return session

    def _call(self, op: str, fds: tuple[int, ...] = (), **fields: Any) -> dict[str, Any]:
        if self.final is not None:
            raise InvalidArgument(f"session {self.name!r} is stopped")
        return self._client.call(op, fds, session=self.name, **fields)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.final is None:
            try:
                self.stop()
            except Exception:
                if exc[0] is None:
                    raise

    def __repr__(self) -> str:
        return f"Session({self.name!r}{', stopped' if self.final is not None else ''})"


def session_config(
    name: str,
    output: str | os.PathLike[str] | None = None,
    *,
    mode: LogMode | str | None = None,
    buffer_size: int = 64,
    flush_timer: int = 1,
    realtime: bool = False,
    max_size: int = 0,
    min_buffers: int = 4,
    max_buffers: int = DEFAULT_MAXIMUM_BUFFERS,
    providers: Iterable[ProviderRef | tuple[ProviderRef, Mapping[str, Any]]] = (),
    kernel_flags: Iterable[str] | str | None = None,
    kernel_buffer_size: int = DEFAULT_KERNEL_BUFFER_KB,
    kernel_source: str = "auto",
    kernel_profile_rate: int | None = None,
    kernel_syscall_args: Iterable[str] | None = None,
    kernel_syscall_args_pids: Iterable[int] | None = None,
    kernel_syscall_args_execnames: Iterable[str] | None = None,
) -> SessionConfig:
    """The ``SessionConfig`` of the friendly keywords (``Session.start``'s keyword form):
    ``buffer_size`` in KB, ``max_size`` in MB, ``flush_timer`` in seconds.

    ``output`` is the file (a new-file session's name holds one ``%d``); ``mode`` defaults to a
    sequential file with an output, real time without; ``realtime`` adds real-time delivery to a
    file mode. ``providers``: names/GUIDs, or (provider, {"level": .., "any": .., "all": ..,
    "properties": .., "filters": ..}) pairs; a name of an installed manifest's provider is taken
    as its GUID.

    ``kernel_flags`` (``["process", "thread"]`` or ``"process,thread"``; the names of
    ``openetw kernel start --flags``) make it a kernel session: the service records those
    kernel events into it, through a kernel ring buffer of ``kernel_buffer_size`` KB per CPU.
    ``kernel_source`` is where those events come from (``auto``: tracefs, plus perf for
    ``image`` and ``profile``; ``tracefs``; ``proc_connector``: ``process`` and ``thread``
    only) and ``kernel_profile_rate`` the CPU samples per second of the ``profile`` flag
    (1..100000; default 1000). ``kernel_syscall_args`` names the system calls whose arguments
    the ``syscall_args`` flag records (names or patterns of ``syscalls/sys_enter_<name>``,
    ``"*"`` every call; default: the path-taking calls), ``kernel_syscall_args_pids`` of which
    processes (and the processes they start; default: every process's) and
    ``kernel_syscall_args_execnames`` of which thread names (default: any). Only root may start
    one (``AccessDenied`` otherwise).

    Settings are refused here (``InvalidArgument``, ``InvalidSessionConfig``), before a service
    is asked or started and before the output file is made; the service checks them again.
    """
    output_text = os.fspath(output) if output is not None else None
    log_mode = parse_mode(mode, output=output_text, realtime=realtime)
    body: dict[str, Any] = {
        "name": name,
        "mode": log_mode.value,
        "file_name": None,
        "max_file_mb": max_size,
        "buffer_size_kb": buffer_size,
        "minimum_buffers": min(min_buffers, max_buffers),
        "maximum_buffers": max_buffers,
        "flush_timer": flush_timer,
    }
    if kernel_flags is not None:
        from openetw.kernel.control import parse_flags

        body["kind"] = SessionKind.KERNEL.value
        body["kernel_flags"] = parse_flags(kernel_flags)
        body["kernel_buffer_kb"] = kernel_buffer_size
        body["kernel_source"] = kernel_source
        if kernel_profile_rate is not None:
            body["kernel_profile_rate_hz"] = kernel_profile_rate
        if kernel_syscall_args is not None:
            body["kernel_syscall_args"] = list(kernel_syscall_args)
        if kernel_syscall_args_pids is not None:
            body["kernel_syscall_args_pids"] = list(kernel_syscall_args_pids)
        if kernel_syscall_args_execnames is not None:
            body["kernel_syscall_args_execnames"] = list(kernel_syscall_args_execnames)
    elif kernel_source != "auto" or kernel_profile_rate is not None:
        raise InvalidArgument("kernel_source and kernel_profile_rate need kernel_flags (a kernel session)")
    elif (kernel_syscall_args, kernel_syscall_args_pids, kernel_syscall_args_execnames) != (None, None, None):
        raise InvalidArgument("kernel_syscall_args, kernel_syscall_args_pids and kernel_syscall_args_execnames need kernel_flags with syscall_args")
    if log_mode.writes_file:
        if not output_text:
            raise InvalidArgument(f"{log_mode.value} mode needs an output file")
        body["file_name"] = os.path.abspath(output_text)
    elif output_text:
        raise InvalidArgument(f"{log_mode.value} mode writes no file; drop the output")
    # the wire's reading of the settings: the same checks of types and ranges the service makes
    config = config_from_json(body)
    return config.with_changes(providers=tuple(_provider_enable(item) for item in providers))


def _stream_body(stream: str | StreamOptions | None, subject: str | None, spool_size: float | None) -> dict[str, Any] | None:
    if stream is None:
        if subject is not None or spool_size is not None:
            raise InvalidArgument("subject and spool_size need stream")
        return None
    from openetw.ipc.stream_options import StreamOptions as _Options

    options = stream if isinstance(stream, _Options) else _Options.build(stream)
    body: dict[str, Any] = {"options": options.to_json(), "subject": subject}
    if spool_size is not None:
        if spool_size <= 0:
            raise InvalidArgument("the spool size must be a positive number of MB")
        body["spool_mb"] = spool_size
    return body


def _provider_enable(item: ProviderRef | tuple[ProviderRef, Mapping[str, Any]]) -> ProviderEnable:
    """One entry of the keywords' ``providers`` as the config holds it, resolved as
    :func:`_provider_text` says (the name kept only where the service must see it)."""
    from openetw.manifest.store.lookup import resolve_provider

    provider, options = item if isinstance(item, tuple) else (item, {})
    filters = options.get("filters")
    rule = rule_from_json({
        "level": int(options.get("level", 0)),
        "match_any": int(options.get("any", options.get("match_any", 0))),
        "match_all": int(options.get("all", options.get("match_all", 0))),
        "properties": int(options.get("properties", 0)),
        "filters": filters_to_json(filters) if isinstance(filters, EventFilters) else filters,
    })  # fmt: skip
    resolved = resolve_provider(provider)
    if resolved.name is None or resolved.source == "manifest":
        return ProviderEnable(resolved.guid, rule)
    return ProviderEnable(resolved.guid, rule, resolved.name, by_name=resolved.source != "explicit-hash")


def _enable_body_of(enable: ProviderEnable) -> dict[str, Any]:
    """What the service is sent to enable one provider: its GUID, its name when the service is to
    resolve it (or keep it pending), ``*Name`` for the name hash on purpose; and the rule."""
    name, guid = enable.provider_name, enable.provider_guid
    if name is None:
        text = str(guid)
    elif enable.by_name:
        text = name
    else:
        from openetw.guids import provider_guid_from_name

        text = f"*{name}" if provider_guid_from_name(name) == guid else str(guid)
    rule = enable.rule
    return {
        "provider": text,
        "level": rule.level,
        "match_any": rule.match_any,
        "match_all": rule.match_all,
        "properties": rule.properties,
        "filters": None if rule.filters == EventFilters() else filters_to_json(rule.filters),
    }


def list_sessions(*, socket: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """QueryAllTraces: every session you may see (no service running: none)."""
    with ServiceClient(socket, autostart=False) as client:
        return list(client.call("list")["sessions"])


def registered_providers(*, socket: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Providers registered with the service, with their processes and the sessions enabling them."""
    with ServiceClient(socket, autostart=False) as client:
        return list(client.call("providers")["providers"])


def provider_security(*, socket: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The service's provider security table: each secured provider and who may register it."""
    with ServiceClient(socket, autostart=False) as client:
        return list(client.call("providers").get("security") or [])


def secure_provider(provider: str, owners: list[dict[str, Any]], *, socket: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Only ``owners`` (``{"kind": "user"|"group", "id": N}``) and root may register ``provider``
    from now on (root only); returns the table."""
    with ServiceClient(socket, autostart=False) as client:
        return list(client.call("secure_provider", provider=provider, owners=owners)["security"])
