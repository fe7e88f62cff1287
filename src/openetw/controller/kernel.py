"""Kernel sessions of the trace service, for ``openetw kernel`` and scripts.

A kernel session of the service is an ordinary session with kernel flags (see
``Session.start(..., kernel_flags=[...])``): the service records the kernel events into the
session's buffers, so files, circular and new-file modes, real-time consumers (``openetw trace
--session NAME``, ``UserTrace(sessions=[NAME])``), flush, query and stop work as for any session.

::

    info = start_kernel_session("kt", ["process", "thread"], mode="realtime")
    ...
    final = stop_kernel_session("kt")       # the statistics, and the recorder's under "kernel"
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from openetw.controller.client import ServiceClient
from openetw.controller.session import Session
from openetw.errors import InvalidArgument
from openetw.kernel.control import parse_flags

__all__ = ["DEFAULT_KERNEL_RING_KB", "query_kernel_session", "start_kernel_session", "stop_kernel_session"]

DEFAULT_KERNEL_RING_KB = 4096


def start_kernel_session(
    name: str,
    flags: Iterable[str] | str,
    mode: str | None = "file",
    output: str | os.PathLike[str] | None = None,
    buffer_size_kb: int = DEFAULT_KERNEL_RING_KB,
    realtime: bool = False,
    *,
    max_size: int = 0,
    flush_timer: int = 1,
    socket: str | os.PathLike[str] | None = None,
    autostart: bool | None = None,
    source: str = "auto",
    profile_rate_hz: int | None = None,
) -> dict[str, Any]:
    """Start kernel session ``name`` in the trace service; returns its description (``query``'s).

    ``flags``: ``"process,thread"`` or a list (the names of ``openetw kernel start --flags``).
    ``mode``: ``file`` (the default; ``output`` defaults to ``NAME.etl`` here), ``circular`` and
    ``newfile`` (need ``max_size`` in MB), ``realtime``, ``buffering``, ``file+realtime``;
    ``realtime=True`` with ``file`` is ``file+realtime``. ``buffer_size_kb`` is the kernel ring
    buffer per CPU. ``source`` (``auto``, ``tracefs``, ``proc_connector``) and ``profile_rate_hz``
    (CPU samples per second of the ``profile`` flag) are the session's ``kernel_source`` and
    ``kernel_profile_rate_hz`` settings, which the service hands to its recorder's
    ``KernelSession``. The session records until
    :func:`stop_kernel_session`, whoever started it; ``AccessDenied`` when the caller is not root;
    ``TooManyKernelSessions`` when the machine's 8 kernel sessions (6 for ordinary names) run.
    """
    kernel_flags = parse_flags(flags)
    chosen = (mode or ("realtime" if realtime and output is None else "file")).lower()
    if chosen in ("realtime", "real-time", "buffering"):
        if output is not None:
            raise InvalidArgument(f"{chosen} mode writes no file; drop the output")
    elif output is None:
        output = f"{name}.etl"
    session = Session.start(
        name, output, mode=chosen, realtime=realtime, max_size=max_size, flush_timer=flush_timer,
        kernel_flags=kernel_flags, kernel_buffer_size=buffer_size_kb, kernel_source=source,
        kernel_profile_rate=profile_rate_hz, socket=socket, autostart=autostart,
    )  # fmt: skip
    try:
        return dict(session.info_at_start)
    finally:
        session.detach()


def stop_kernel_session(name: str, *, socket: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Stop a kernel session of the service; its final description (statistics, ``"kernel"``)."""
    session = Session.attach(name, socket=socket)
    session.stop()
    return dict(session.final or {})


def query_kernel_session(name: str, *, socket: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    with ServiceClient(socket, autostart=False) as client:
        return dict(client.call("query", session=name)["session"])
