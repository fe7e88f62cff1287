"""openetwd: the trace service as the program ``openetw service run`` runs.

The service (``openetw.service``) is ETW's engine and knows its sinks by their protocol only
(``openetw.service.sinks``). This module puts the applications that plug into it together with it:
the Event Log, whose channels are sessions of the service with a sink of their own, and the fleet's
stream, the sink a start request names with ``"stream"``. It is the one place that knows all three.
"""

from __future__ import annotations

from pathlib import Path

from openetw.errors import OpenEtwError
from openetw.service.run import run_service as run_engine
from openetw.service.server import TraceService, log

__all__ = ["run_service"]


def run_service(
    socket_path: Path, *, system: bool = False, ready_fd: int | None = None, autologger: Path | None = None, autologger_required: bool = False,
    host_name: str | None = None,
) -> int:
    """Run the trace service with the Event Log and the fleet's stream sink until it stops
    (see ``openetw.service.run.run_service``); returns the exit status."""
    from openetw.fleet.publisher import stream_sink

    return run_engine(
        socket_path, system=system, ready_fd=ready_fd, autologger=autologger, autologger_required=autologger_required,
        host_name=host_name, sink_factories={"stream": stream_sink}, before_ready=[start_event_log],
    )  # fmt: skip


def start_event_log(service: TraceService) -> None:
    """The Event Log's channel sessions, started before the service says it is ready; a service
    whose Event Log cannot start runs without it."""
    try:
        from openetw.eventlog.service import install_event_log

        install_event_log(service)
    except (OpenEtwError, OSError) as exc:
        log(f"the Event Log could not start: {exc}")
