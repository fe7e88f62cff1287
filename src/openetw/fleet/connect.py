"""Reaching the fleet's NATS servers: where they are, who we are, and the stream made ready.

``nats-py`` is optional (``pip install 'openetw[stream]'``); it is imported only when a
connection is made, and its absence is a ``MissingDependency`` saying how to install it.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

from openetw.errors import OpenEtwError
from openetw.fleet.wire import DEFAULT_STREAM, STREAM_SUBJECTS
from openetw.ipc.stream_options import StreamOptions, inbox_prefix, parse_servers  # here before they moved down

__all__ = [
    "FleetError", "MissingDependency", "StreamOptions", "connect", "ensure_stream", "inbox_prefix", "parse_servers", "require_nats",
    "require_stream_extra",
]


class FleetError(OpenEtwError):
    """The fleet's servers refused or could not be reached."""


class MissingDependency(OpenEtwError):
    """``nats-py`` is not installed (the service imports this module: no export package here)."""

    exit_code = 2


_MISSING = "streaming to NATS JetStream needs the Python package 'nats-py', which is not installed: pip install 'openetw[stream]' (or pip install nats-py)"


def require_nats() -> ModuleType:
    """``nats`` (nats-py), or ``MissingDependency`` saying ``pip install 'openetw[stream]'``."""
    try:
        return importlib.import_module("nats")
    except ImportError as error:
        raise MissingDependency(_MISSING) from error


def require_stream_extra() -> None:
    """``MissingDependency`` as ``require_nats`` says it, without the cost of importing nats-py
    (the trace service's publisher speaks NATS itself, but a host installs the stream extra)."""
    if importlib.util.find_spec("nats") is None:
        raise MissingDependency(_MISSING)


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
