"""Running the trace service as a program: signals, the readiness report, systemd's notify socket."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from openetw.errors import OpenEtwError, ServiceError
from openetw.kernel.priority import boost_reader
from openetw.service.autologger import start_autologger_file
from openetw.service.server import TraceService, log
from openetw.service.sinks import SinkFactory
from openetw.session.quotas import UserQuotas

__all__ = ["own_scheduling_group", "run_service"]


def run_service(
    socket_path: Path, *, system: bool = False, ready_fd: int | None = None, autologger: Path | None = None, autologger_required: bool = False,
    host_name: str | None = None, sink_factories: Mapping[str, SinkFactory] | None = None,
    before_ready: Sequence[Callable[[TraceService], None]] = (),
) -> int:
    """Run until SIGTERM/SIGINT or a shutdown request; returns the exit status.

    ``autologger`` names a configuration file whose sessions start before the service says it
    is ready. When it cannot be used (unreadable, writable by others, does not parse) the
    service logs why and runs without it, unless ``autologger_required``: then it exits with 1.

    What the program running the service plugs in (``openetw.daemon``): ``sink_factories``, the
    destinations a start request may name (``TraceService.sink_factories``), and ``before_ready``,
    called with the listening service once the autologger's sessions started and before it
    says it is ready (the Event Log's channels listen before any provider is accepted).
    """
    try:
        quotas = _quotas_from_environment()
    except (ValueError, OpenEtwError) as exc:
        log(f"{' / '.join(variable for variable, _ in _QUOTA_VARIABLES)}: {exc}")
        return 1
    grouping = own_scheduling_group()
    boosted = boost_reader(SERVICE_NICE)  # refused without CAP_SYS_NICE: the group of its own is what counts then
    if boosted is not None:
        grouping += f"; {boosted}"
    service = TraceService(socket_path, system=system, quotas=quotas)
    service.sink_factories.update(sink_factories or {})
    if host_name:
        service.host_name = host_name
    try:
        service.listen()
    except ServiceError as exc:
        log(str(exc))
        return 1
    if autologger is not None and not start_autologger_file(service, autologger, log=log) and autologger_required:
        service.close()
        return 1
    for plug_in in before_ready:
        plug_in(service)
    signal.signal(signal.SIGTERM, lambda *_: service.request_stop())
    signal.signal(signal.SIGINT, lambda *_: service.request_stop())
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if ready_fd is not None:
        try:
            os.write(ready_fd, f"ready {os.getpid()}\n".encode())
            os.close(ready_fd)
        except OSError:
            pass
    _notify_systemd(b"READY=1")
    log(f"listening on {socket_path} (pid {os.getpid()}); {grouping}")
    service.serve_forever()
    _notify_systemd(b"STOPPING=1")
    log("stopped")
    return 0


SERVICE_NICE = -10
"""The priority the service asks for (granted to root or with CAP_SYS_NICE): producers never
wait for it, so when it waits for the CPU they drop events; it uses little CPU itself."""


def own_scheduling_group() -> str:
    """Leave the starting process's session, so the scheduler weighs the service on its own.

    Under CONFIG_SCHED_AUTOGROUP each session is one scheduling group with an equal share of the
    CPU. A service started from the session its producers run in (a shell, a test run) is one
    task among theirs: with 16 producer processes writing flat out it got 1/17 of the CPU, each
    wakeup waited about 14 ms in the run queue (``/proc/<pid>/schedstat``), the pools filled
    and 17-28% of the events were dropped. In a session of its own it gets the CPU it needs and
    none is. systemd and the controller's autostart start the service in a session of its own
    already; a service run from a terminal keeps its terminal (and Ctrl-C) and is told why
    loads may drop events. Returns what was done, for the service's log.
    """
    try:
        if os.getsid(0) == os.getpid():
            return "in a session of its own"
        if os.isatty(0):
            return "in its terminal's session: producers of that session compete with it for the CPU"
        os.setsid()
    except OSError as exc:
        return f"in its parent's session ({exc.strerror or exc})"
    return "in a new session of its own"


_QUOTA_VARIABLES = (
    ("OPENETW_MAX_USER_SESSIONS", "sessions_per_user"),
    ("OPENETW_ROOT_SESSIONS", "reserved_for_root"),
    ("OPENETW_MAX_USER_POOLS", "pools_per_user"),
    ("OPENETW_MAX_USER_CONNECTIONS", "connections_per_user"),
)


def _quotas_from_environment() -> UserQuotas:
    """The per-user limits, from OPENETW_MAX_USER_SESSIONS (sessions a user other than root
    may hold), OPENETW_ROOT_SESSIONS (slots kept for root), OPENETW_MAX_USER_POOLS and
    OPENETW_MAX_USER_CONNECTIONS when set."""
    changes = {}
    for variable, field in _QUOTA_VARIABLES:
        value = os.environ.get(variable)
        if value:
            changes[field] = int(value)
    return UserQuotas(**changes)


def _notify_systemd(state: bytes) -> None:
    """sd_notify: tell systemd (Type=notify) that the socket listens, or that we are stopping."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as notify:
            notify.sendto(state, address)
    except OSError:
        pass
