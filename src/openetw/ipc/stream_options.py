"""Where and as whom a session streams: the ``"stream"`` settings a start request carries.

A controller builds ``StreamOptions`` from what a user gives (``--stream nats://HOST:PORT``,
credentials files read with the caller's rights) and sends ``to_json()``; the trace service's
stream sink reads them back with ``from_json`` and connects with ``connect_kwargs``. Neither side
needs the stream's code for that: this module is plain data (``nats-py`` is imported only by
``connect_kwargs``, for a credentials file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openetw.errors import InvalidArgument

__all__ = ["DEFAULT_STREAM", "StreamOptions", "inbox_prefix", "parse_servers", "subject_token"]

DEFAULT_STREAM = "ETW"
_TOKEN_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def subject_token(text: str) -> str:
    """``text`` as one subject token: NATS tokens hold no dots, spaces or wildcards."""
    token = _TOKEN_UNSAFE.sub("_", text)
    return token or "_"


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
