"""``openetw kernel``: start, query and stop kernel trace sessions, and probe what the machine
offers (what ``xperf -on PROC_THREAD+CSWITCH`` / ``xperf -stop`` / ``xperf -loggers`` do)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from openetw.cli.failure import ReportedFailure

_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_FLAGS_HELP = "process, thread, image, disk, file, net, cswitch, pagefault, syscall, syscall_args, profile (see `openetw kernel probe`)"


def register(cli: click.Group) -> None:
    cli.add_command(kernel)


def _print_json(value: Any) -> None:
    from openetw.cli.json_time import with_iso_times

    click.echo(json.dumps(with_iso_times(value), indent=2, sort_keys=True, default=str))


def _registry() -> Any:
    from openetw.kernel.control import KernelSessionRegistry

    return KernelSessionRegistry()


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def _print_info(info: dict[str, Any], *, title: str | None = None) -> None:
    if title:
        click.echo(title)
    pid = f", recorder pid {info['pid']}" if info.get("pid") and info["state"] in ("running", "stopping") else ""
    click.echo(f"{info['name']}: {info['state']}, {info['mode']}, source {info.get('source', 'auto')}{pid}")
    click.echo(f"  flags: {','.join(info['flags'])}")
    size = f" ({info['output_bytes']} bytes)" if "output_bytes" in info else ""
    click.echo(f"  file: {info['output']}{size}")
    click.echo(f"  buffers: {info['buffer_size_kb']} KB per CPU; started {_when(info.get('started_at'))}, {info['duration_s']:.1f} s")
    click.echo(f"  events read {info['events_read']}  records written {info['records_written']}  events lost {info['events_lost']}")
    missing = (info.get("stats") or {}).get("missing_tracepoints")
    if missing:
        click.echo(f"  tracepoints this kernel lacks: {', '.join(missing)}")
    if info.get("failure"):
        click.echo(f"  failure: {info['failure']}")


def _say_mounted(info: dict[str, Any]) -> None:
    mounted = info.get("tracefs_mounted") or (info.get("stats") or {}).get("tracefs_mounted")
    if mounted:
        click.echo(f"mounted {mounted}: tracefs was not mounted", err=True)


@click.group()
def kernel() -> None:
    """Kernel trace sessions: Linux tracepoints recorded as NT Kernel Logger events (root only)."""


@kernel.command("start")
@click.argument("name", required=False)
@click.option("--flags", "flags", default="process,thread", show_default=True, metavar="FLAG[,FLAG...]", help=_FLAGS_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None, help="The .etl file (default: NAME.etl here).")
@click.option("--mode", type=click.Choice(["file", "circular", "realtime"]), default="file", show_default=True,
              help="circular: the kernel's ring buffer overwrites its oldest events when the recorder falls behind;"
                   " realtime: the trace service hosts the session for real-time consumers (no file).")
@click.option("--realtime", is_flag=True, help="Real-time delivery through the trace service; with -o, to the file too.")
@click.option("--buffer-size", type=int, default=4096, show_default=True, help="Ring buffer size per CPU in KB.")
@click.option("--profile-rate", type=int, default=None, metavar="HZ", help="CPU samples per second of the profile flag (default 1000).")
@click.option("--source", type=click.Choice(["auto", "tracefs", "proc-connector", "proc_connector"]), default="auto", show_default=True,
              help="auto: tracefs (+ perf for image, profile), root only; proc-connector: process and thread events for any user.")
@_json_option
def kernel_start(name: str | None, flags: str, output: str | None, mode: str, realtime: bool, buffer_size: int,
                 profile_rate: int | None, source: str, as_json: bool) -> None:  # fmt: skip
    """Start kernel session NAME (default openetw-kernel); it records in the background until
    `openetw kernel stop NAME`. "NT Kernel Logger" and "Global Logger" take the 2 reserved slots."""
    from openetw.kernel.control import DEFAULT_SESSION_NAME

    name = name or DEFAULT_SESSION_NAME
    if realtime and mode == "circular":
        raise click.UsageError("--realtime and --mode circular contradict each other")
    if realtime or mode == "realtime":
        info = _start_in_service(name, flags, output, buffer_size, source, profile_rate, file_too=mode == "file" and output is not None)
        _say_mounted(info)
        if as_json:
            _print_json(info)
            return
        _print_service_info(info, title=f"started kernel session {name} in the trace service")
        return
    info = _registry().start(name, flags, output, mode=mode, buffer_size_kb=buffer_size, source=source, profile_rate_hz=profile_rate)
    _say_mounted(info)
    if as_json:
        _print_json(info)
        return
    _print_info(info, title=f"started kernel session {name}")


def _start_in_service(name: str, flags: str, output: str | None, buffer_size: int, source: str, profile_rate: int | None,
                      *, file_too: bool) -> dict[str, Any]:  # fmt: skip
    """Real-time kernel sessions live in the trace service, which delivers to real-time consumers."""
    from openetw.controller.kernel import start_kernel_session
    from openetw.kernel.control import check_session_name, parse_flags

    check_session_name(name)
    kernel_flags = parse_flags(flags)
    if file_too:
        return start_kernel_session(
            name, kernel_flags, mode="file", output=output, buffer_size_kb=buffer_size, realtime=True, source=source, profile_rate_hz=profile_rate
        )
    return start_kernel_session(
        name, kernel_flags, mode="realtime", output=output, buffer_size_kb=buffer_size, source=source, profile_rate_hz=profile_rate
    )


def _service_kernel_session(name: str) -> dict[str, Any] | None:
    """The trace service's kernel session ``name``, when a service runs and has one."""
    from openetw.controller.kernel import query_kernel_session
    from openetw.errors import OpenEtwError

    try:
        info = query_kernel_session(name)
    except OpenEtwError:
        return None
    return info if info.get("kernel_flags") else None


def _print_service_info(info: dict[str, Any], *, title: str | None = None) -> None:
    if title:
        click.echo(title)
    click.echo(f"{info.get('name')}: {info.get('state')}, {info.get('mode')} (trace service)")
    click.echo(f"  flags: {','.join(info.get('kernel_flags') or [])}")
    rate = info.get("kernel_profile_rate_hz")
    click.echo(f"  source: {info.get('kernel_source', 'auto')}" + (f"; profile rate {rate} Hz" if rate is not None else ""))
    if info.get("file_name"):
        click.echo(f"  file: {info['file_name']}")
    click.echo(f"  real-time consumers: openetw trace --session {info.get('name')!r}, UserTrace(sessions=[...])")


@kernel.command("stop")
@click.argument("name", required=False)
@_json_option
def kernel_stop(name: str | None, as_json: bool) -> None:
    """Stop NAME (default openetw-kernel): tracing off, every CPU drained, the file finished,
    the recorder process and the ftrace instance gone."""
    from openetw.kernel.control import DEFAULT_SESSION_NAME
    from openetw.session.errors import NoSuchSession

    name = name or DEFAULT_SESSION_NAME
    try:
        info = _registry().stop(name)
    except NoSuchSession:
        if _service_kernel_session(name) is None:
            raise
        from openetw.controller.kernel import stop_kernel_session

        final = stop_kernel_session(name)
        if as_json:
            _print_json(final)
        else:
            _print_service_info(final, title=f"stopped kernel session {name} in the trace service")
        return
    if as_json:
        _print_json(info)
    else:
        _print_info(info, title=f"stopped kernel session {name}")
    if info["state"] != "stopped" or info.get("failure"):
        raise ReportedFailure(f"kernel session {name!r}: {info['state']}: {info.get('failure') or 'see above'}", exit_code=1)


@kernel.command("query")
@click.argument("name", required=False)
@_json_option
def kernel_query(name: str | None, as_json: bool) -> None:
    """State, flags, file and statistics of NAME; without NAME, of every kernel session."""
    from openetw.session.errors import NoSuchSession

    registry = _registry()
    if name is not None:
        try:
            info = registry.query(name)
        except NoSuchSession:
            hosted = _service_kernel_session(name)
            if hosted is None:
                raise
            if as_json:
                _print_json(hosted)
            else:
                _print_service_info(hosted)
            return
        if as_json:
            _print_json(info)
        else:
            _print_info(info)
        return
    sessions = registry.list()
    if as_json:
        _print_json(sessions)
        return
    if not sessions:
        click.echo("no kernel sessions")
    for info in sessions:
        _print_info(info)


@kernel.command("probe")
@_json_option
def kernel_probe(as_json: bool) -> None:
    """Which kernel event sources this process may use, and why not; which flags record."""
    from openetw.kernel.capabilities import probe
    from openetw.kernel.control import AVAILABLE_FLAGS, PLANNED_FLAGS, privilege_refusal

    capabilities = probe()
    refusal = privilege_refusal(capabilities)
    data = capabilities.as_dict()
    data["flags"] = {"available": list(AVAILABLE_FLAGS), "not_yet": list(PLANNED_FLAGS)}
    data["kernel_sessions"] = refusal is None
    data["refusal"] = str(refusal) if refusal is not None else None
    if as_json:
        _print_json(data)
        return
    click.echo(f"kernel {data['kernel']}, euid {data['euid']}")
    for item in capabilities.items:
        click.echo(f"  [{'x' if item.available else ' '}] {item.reason}")
        for detail in item.detail:
            click.echo(f"        {detail}")
    click.echo(f"flags: {', '.join(AVAILABLE_FLAGS)} (not yet: {', '.join(PLANNED_FLAGS)})")
    click.echo("kernel sessions: available" if refusal is None else f"kernel sessions: {refusal}")


__all__ = ["kernel", "register"]
