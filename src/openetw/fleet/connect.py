"""Reaching the fleet's NATS servers: where they are, who we are, and the stream made ready.

``nats-py`` is optional (``pip install 'openetw[stream]'``); it is imported only when a
connection is made, and its absence is a ``MissingDependency`` saying how to install it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.fleet.wire import DEFAULT_STREAM, STREAM_SUBJECTS, subject_token

__all__ = ["FleetError", "MissingDependency", "StreamOptions", "connect", "ensure_stream", "inbox_prefix", "parse_servers", "require_nats"]


class FleetError(OpenEtwError):
    """The fleet's servers refused or could not be reached."""


class MissingDependency(OpenEtwError):
    """``nats-py`` is not installed (the service imports this module: no export package here)."""

    exit_code = 2


def require_nats() -> ModuleType:
    """``nats`` (nats-py), or ``MissingDependency`` saying ``pip install 'openetw[stream]'``."""
    try:
        return importlib.import_module("nats")
    except ImportError as error:
        raise MissingDependency(
            "streaming to NATS JetStream needs the Python package 'nats-py', which is not installed:"
            " pip install 'openetw[stream]' (or pip install nats-py)"
        ) from error


def parse_servers(text: str) -> list[str]:
    """``nats://HOST:PORT[,HOST:PORT...]`` as a list of URLs (each item may repeat the scheme)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("no NATS server given (nats://HOST:PORT[,HOST:PORT...])")
    items = [item.strip() for item in text.split(",") if item.strip()]
    scheme = "nats://"
    servers = []
    for item in items:
        if "://" in item:
            scheme = item.split("://", 1)[0] + "://"
            if scheme not in ("nats://", "tls://"):
                raise InvalidArgument(f"{item!r}: a NATS server is nats://HOST:PORT (or tls://)")
        else:
            item = scheme + item
        host_port = item.split("://", 1)[1]
        if not host_port or host_port.startswith(":"):
            raise InvalidArgument(f"{item!r}: no host")
        servers.append(item)
    return servers


@dataclass(frozen=True)
class StreamOptions:
    """Where and as whom: ``servers`` (URLs), and either a credentials file's text (``creds``),
    or ``user`` and ``password``, or nothing (a server without authentication)."""

    servers: tuple[str, ...]
    stream: str = DEFAULT_STREAM
    creds: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def build(
        cls, servers: str | list[str] | tuple[str, ...], *, stream: str = DEFAULT_STREAM, creds_file: str | Path | None = None,
        user: str | None = None, password_file: str | Path | None = None, password: str | None = None,
    ) -> StreamOptions:  # fmt: skip
        """From what a user gives: files are read here (with the caller's rights)."""
        urls = tuple(parse_servers(servers) if isinstance(servers, str) else servers)
        if creds_file is not None and (user is not None or password_file is not None or password is not None):
            raise InvalidArgument("--creds and --user/--password-file exclude each other")
        if (password_file is not None or password is not None) and user is None:
            raise InvalidArgument("a password needs --user")
        creds = None
        if creds_file is not None:
            creds = _read_secret(creds_file, "credentials file")
        if password_file is not None:
            password = _read_secret(password_file, "password file").strip("\r\n")
        if user is not None and password is None:
            raise InvalidArgument("--user needs --password-file")
        return cls(urls, stream, creds, user, password)

    def to_json(self) -> dict[str, Any]:
        return {"servers": list(self.servers), "stream": self.stream, "creds": self.creds, "user": self.user, "password": self.password}

    @classmethod
    def from_json(cls, value: Any) -> StreamOptions:
        if not isinstance(value, dict):
            raise InvalidArgument("stream options must be an object")
        servers = value.get("servers")
        if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
            raise InvalidArgument("stream options need 'servers' as a non-empty list of URLs")
        fields = {}
        for key in ("creds", "user", "password"):
            item = value.get(key)
            if item is not None and not isinstance(item, str):
                raise InvalidArgument(f"stream option {key!r} must be a string")
            fields[key] = item
        stream = value.get("stream") or DEFAULT_STREAM
        if not isinstance(stream, str):
            raise InvalidArgument("stream option 'stream' must be a string")
        return cls(tuple(servers), stream, **fields)

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"servers": list(self.servers)}
        if self.creds is not None:
            from nats.aio.client import RawCredentials

            kwargs["user_credentials"] = RawCredentials(self.creds)
        elif self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password or ""
            # Replies (acknowledgements, fetched batches) come to the user's own inboxes, so
            # permissions can keep every other user from subscribing to them.
            kwargs["inbox_prefix"] = inbox_prefix(self.user)
        return kwargs


def inbox_prefix(user: str) -> str:
    """Where a password user's replies come: ``_INBOX.<user>`` (subscribe: ``_INBOX.<user>.>``)."""
    return f"_INBOX.{subject_token(user)}"


def _read_secret(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise InvalidArgument(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


async def connect(options: StreamOptions, *, name: str, reconnect: bool = True, connect_timeout: float = 2.0, **extra: Any) -> Any:
    """A connected ``nats.aio.client.Client``; ``FleetError`` when no server takes us."""
    nats = require_nats()
    kwargs = options.connect_kwargs()
    kwargs.update(
        name=name,
        connect_timeout=connect_timeout,
        allow_reconnect=reconnect,
        max_reconnect_attempts=-1 if reconnect else 0,
        reconnect_time_wait=0.25,
    )
    kwargs.update(extra)

    async def quiet(_error: Exception) -> None:  # nats-py prints every error otherwise
        return None

    kwargs.setdefault("error_cb", quiet)
    try:
        return await nats.connect(**kwargs)
    except Exception as exc:  # noqa: BLE001 - nats-py raises many kinds; all mean "not reachable"
        raise FleetError(f"cannot connect to {','.join(options.servers)}: {exc or type(exc).__name__}") from None


async def ensure_stream(js: Any, name: str = DEFAULT_STREAM, *, replicas: int | None = None) -> Any:
    """The stream ``name`` (subjects ``etw.>``, file storage), made when it does not exist with
    min(3, cluster size) replicas; an existing one is used as it is. Returns its info."""
    from nats.js.api import StorageType, StreamConfig
    from nats.js.errors import APIError, NotFoundError

    try:
        return await js.stream_info(name)
    except NotFoundError:
        pass
    last: Exception | None = None
    for count in ([replicas] if replicas else [3, 2, 1]):
        try:
            return await js.add_stream(
                StreamConfig(name=name, subjects=[STREAM_SUBJECTS], storage=StorageType.FILE, num_replicas=count, duplicate_window=120.0)
            )
        except APIError as exc:
            last = exc
            if exc.err_code == 10058:  # made meanwhile by another host
                return await js.stream_info(name)
            continue  # fewer peers than replicas: try fewer
    raise FleetError(f"cannot create the stream {name}: {last}")
