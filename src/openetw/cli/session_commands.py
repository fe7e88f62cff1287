"""``openetw service``, ``session``, ``providers`` and ``trace``: the trace service and its sessions
(what logman / tracelog / xperf do on Windows)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from openetw.cli.failure import ReportedFailure
from openetw.cli.index_options import streamed_no_index_option
from openetw.cli.json_time import datetime_iso
from openetw.cli.provider_spec import SPEC_HELP, EnableOptions, filter_options, parse_provider_spec
from openetw.errors import InvalidArgument, OpenEtwError, ServiceError
from openetw.provider_names import parse_provider_guid
from openetw.session import STATISTICS_KEYS
from openetw.session.config import DEFAULT_MAXIMUM_BUFFERS

_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_socket_option = click.option(
    "--socket", "socket_path", type=click.Path(path_type=str), default=None,
    help="The service's control socket (default: $OPENETW_SOCKET, else yours, else the system one).",
)


def register(cli: click.Group) -> None:
    cli.add_command(service)
    cli.add_command(session)
    cli.add_command(providers_command)
    cli.add_command(trace)


def _print_json(value: Any) -> None:
    from openetw.cli.json_time import with_iso_times

    click.echo(json.dumps(with_iso_times(value), indent=2, sort_keys=True, default=str))


# -- openetw service ---------------------------------------------------------------------------


@click.group()
def service() -> None:
    """Run, inspect and stop the trace service (the part of ETW that lives in the NT kernel)."""


@service.command("run")
@click.option("--system", "scope", flag_value="system", help="The machine's service: /run/openetw/control.sock.")
@click.option("--user", "scope", flag_value="user", help="Your own service: $XDG_RUNTIME_DIR/openetw/control.sock.")
@_socket_option
@click.option(
    "--autologger", "autologger", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Sessions to start with the service (TOML). Default: $XDG_CONFIG_HOME/openetw/autologger.toml"
    " (user service) or /etc/openetw/autologger.toml (system service), when present.",
)
@click.option("--no-autologger", is_flag=True, help="Start no sessions of a default autologger file.")
@click.option("--ready-fd", type=int, default=None, hidden=True)
@click.option("--host-name", default=None, metavar="NAME", help="The host name streamed sessions publish as (default: the machine's).")
@_json_option
def service_run(scope: str | None, socket_path: str | None, autologger: Path | None, no_autologger: bool, ready_fd: int | None,
                host_name: str | None, as_json: bool) -> None:  # fmt: skip
    """Run the trace service in the foreground until SIGTERM, Ctrl-C or `openetw service stop`.
    With --json, one JSON document when it ends: socket, system, pid, status.

    Sessions an autologger file describes start with it; their output files are created with the
    identity of the file's owner, and a file others may write is refused.
    """
    from openetw.daemon import run_service
    from openetw.ipc.paths import default_socket
    from openetw.service.autologger import default_autologger

    system = scope == "system" or (scope is None and socket_path is None and os.geteuid() == 0 and not os.environ.get("OPENETW_SOCKET"))
    if socket_path is not None:
        path = Path(socket_path)
    elif scope is not None:
        path = default_socket(system=system)
    else:
        path = default_socket()
    if autologger is not None and no_autologger:
        raise InvalidArgument("--autologger and --no-autologger exclude each other")
    required = autologger is not None
    if autologger is None and not no_autologger:
        autologger = default_autologger(path, system=system)
    status = run_service(path, system=system, ready_fd=ready_fd, autologger=autologger, autologger_required=required,
                         host_name=host_name)
    if as_json:
        _print_json({"socket": str(path), "system": system, "pid": os.getpid(), "status": status})
    if status:
        raise ServiceError(f"the trace service could not start on {path}")


@service.command("status")
@_socket_option
@_json_option
def service_status(socket_path: str | None, as_json: bool) -> None:
    """Whether a service runs, where, and what it holds."""
    from openetw.controller.client import ServiceClient

    with ServiceClient(socket_path, autostart=False) as client:
        reply = client.call("status")
    reply.pop("id", None)
    reply.pop("ok", None)
    if as_json:
        _print_json(reply)
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(reply["started_at"]))
    click.echo(f"trace service pid {reply['pid']} on {reply['socket']} ({'system' if reply['system'] else 'user'}), since {started}")
    click.echo(f"  sessions: {reply['sessions']}  connections: {reply['connections']}  provider registrations: {reply['registrations']}")
    autologger = reply.get("autologger")
    if autologger:
        started = ", ".join(autologger["started"]) or "none"
        click.echo(f"  autologger {autologger['file']}: started {started}")
        for name, reason in autologger["failed"].items():
            click.echo(f"    {'the file' if name == '*' else name}: {reason}")


@service.command("stop")
@_socket_option
@click.option("--wait/--no-wait", default=True, help="Wait until the service has exited.")
@_json_option
def service_stop(socket_path: str | None, wait: bool, as_json: bool) -> None:
    """Stop the service: running sessions are stopped and their files finished first."""
    from openetw.controller.client import ServiceClient

    with ServiceClient(socket_path, autostart=False) as client:
        pid = client.call("status")["pid"]
        client.call("shutdown")
    if wait:
        deadline = time.monotonic() + 15
        while not _exited(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if as_json:
        _print_json({"pid": pid, "stopped": _exited(pid)})
    else:
        click.echo(f"trace service {pid} stopped", err=True)


def _exited(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    except OSError:
        return False


def _trace_stream(servers: str, hosts: tuple[str, ...], start: str, provider_specs: tuple[str, ...], creds_file: str | None,
                  stream_user: str | None, password_file: str | None, as_json: bool) -> None:  # fmt: skip
    """``openetw trace --stream``: the fleet's stream through ``UserTrace(streams=[...])``."""
    from openetw.consumer import Provider, UserTrace
    from openetw.controller.live import LiveFormatter
    from openetw.fleet.connect import StreamOptions
    from openetw.fleet.source import StreamSource

    options = StreamOptions.build(servers, creds_file=creds_file, user=stream_user, password_file=password_file)
    trace = UserTrace(streams=[StreamSource(options, hosts=hosts, start=start)])
    formatter = LiveFormatter(as_json=as_json)
    shown = 0

    def show(record: Any, _context: Any) -> None:
        nonlocal shown
        click.echo(formatter.format(record))
        shown += 1

    for spec in provider_specs:
        provider = Provider(spec.split(":", 1)[0] if not spec.startswith("{") else spec)
        provider.add_on_event_callback(show)
        trace.enable(provider)
    if not provider_specs:
        trace.set_default_event_callback(show)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        trace.start()
    except KeyboardInterrupt:
        trace.stop()
        trace.close()
    click.echo(f"{shown} events", err=True)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def statistics_line(info: dict[str, Any]) -> str:
    return "  ".join(f"{key}={info.get(key, 0)}" for key in STATISTICS_KEYS)
# -- openetw session ---------------------------------------------------------------------------

_providers_option = click.option(
    "-p", "--provider", "provider_specs", multiple=True, metavar="NAME_OR_GUID[:ANY[:LEVEL[:ALL]]][;OPTION...]",
    help=SPEC_HELP,
)


def _print_session(info: dict[str, Any], as_json: bool, *, title: str | None = None) -> None:
    if as_json:
        _print_json(info)
        return
    if title:
        click.echo(title)
    click.echo(f"{info['name']}: {info['state']}, {info['mode']}, logger id {info['logger_id']}")
    if info.get("file_name"):
        click.echo(f"  file: {info['file_name']}" + (f" (max {info['max_file_mb']} MB)" if info.get("max_file_mb") else ""))
    click.echo(
        f"  buffers: {info['buffer_size_kb']} KB, {info['minimum_buffers']}..{info['maximum_buffers']} per process;"
        f" flush timer {info['flush_timer']} s"
    )
    if info.get("kernel_flags"):
        kernel = info.get("kernel") or {}
        recorder = f", recorder pid {kernel['recorder_pid']}" if kernel.get("recorder_pid") else ""
        click.echo(f"  kernel flags: {','.join(info['kernel_flags'])}; ring buffer {info.get('kernel_buffer_kb')} KB per CPU{recorder}")
        rate = info.get("kernel_profile_rate_hz")
        click.echo(f"  kernel source: {info.get('kernel_source', 'auto')}" + (f"; profile rate {rate} Hz" if rate is not None else ""))
        if kernel.get("missing_tracepoints"):
            click.echo(f"  tracepoints this kernel lacks: {', '.join(kernel['missing_tracepoints'])}")
    for provider in info.get("providers", []):
        label = provider.get("name") or provider["guid"]
        click.echo(f"  provider {label}: level {provider['level']} any {provider['match_any']:#x} all {provider['match_all']:#x}")
    click.echo(f"  {statistics_line(info)}")
    if info.get("failure"):
        click.echo(f"  failure: {info['failure']}")


@click.group()
def session() -> None:
    """Start, steer, query and stop trace sessions (logman / tracelog / xperf)."""


@session.command("start")
@click.argument("name")
@_providers_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), help="The .etl file (new-file mode: a name with %d).")
@click.option("--mode", type=click.Choice(["file", "circular", "newfile", "realtime", "buffering"]), default=None,
              help="Where buffers go (default: file with -o, else realtime).")
@click.option("--realtime", is_flag=True, help="Also deliver buffers to real-time consumers (file + real time).")
@click.option("--buffer-size", type=int, default=64, show_default=True, help="Buffer size in KB.")
@click.option("--max-size", type=int, default=0, help="Maximum file size in MB (circular and newfile need one).")
@click.option("--flush-timer", type=int, default=1, show_default=True, help="Seconds between flushes (0: none).")
@click.option("--min-buffers", type=int, default=4, show_default=True)
@click.option("--max-buffers", type=int, default=DEFAULT_MAXIMUM_BUFFERS, show_default=True, help="Buffers per producer process.")
@click.option("--kernel-flags", default=None, metavar="FLAG[,FLAG...]",
              help="Make it a kernel session recording these kernel events (root only); the flags of"
                   " `openetw kernel start --flags` (process, thread, image, cswitch, disk, net, ...).")  # fmt: skip
@click.option("--kernel-buffer-size", type=int, default=1024, show_default=True,
              help="Kernel sessions: the kernel's ring buffer per CPU in KB.")
@click.option("--kernel-source", type=click.Choice(["auto", "tracefs", "proc-connector", "proc_connector"]), default="auto",
              show_default=True, help="Kernel sessions: where the kernel events come from (auto: tracefs, plus perf for"
                                      " image and profile; proc-connector: process and thread only).")  # fmt: skip
@click.option("--profile-rate", type=int, default=None, metavar="HZ",
              help="Kernel sessions: CPU samples per second of the profile flag (1..100000; default 1000).")
@click.option("--stream", "stream_servers", default=None, metavar="nats://HOST:PORT[,...]",
              help="Also stream the session's buffers to the fleet's NATS JetStream cluster (stream ETW).")
@click.option("--subject", default=None, metavar="TEMPLATE", help="With --stream: the subject (default etw.{host}.{session}).")
@click.option("--spool-size", type=float, default=None, metavar="MB",
              help="With --stream: what is kept while the cluster is unreachable (default 64 MB); beyond it, buffers are lost.")
@click.option("--creds", "creds_file", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="With --stream: a NATS credentials file.")
@click.option("--stream-user", "--user", "stream_user", default=None, help="With --stream: the NATS user (with --password-file).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=str), default=None, help="With --stream: the user's password.")
@_socket_option
@_json_option
@filter_options
def session_start(name: str, provider_specs: tuple[str, ...], output: str | None, mode: str | None, realtime: bool,
                  buffer_size: int, max_size: int, flush_timer: int, min_buffers: int, max_buffers: int,
                  kernel_flags: str | None, kernel_buffer_size: int, kernel_source: str, profile_rate: int | None,
                  stream_servers: str | None, subject: str | None, spool_size: float | None, creds_file: str | None,
                  stream_user: str | None, password_file: str | None,
                  socket_path: str | None, as_json: bool, enable: EnableOptions) -> None:  # fmt: skip
    """Start session NAME; it runs until `openetw session stop NAME` (or the service stops).

    With --kernel-flags it is a kernel session: the service records those kernel events into it
    (every mode, query, flush and real-time consumers work as for other sessions).

    \b
    -p SPEC:  PROVIDER[:ANY[:LEVEL[:ALL]]][;OPTION...]
      PROVIDER  a GUID, *NAME (the name hash) or a NAME (order: `openetw --help`)
      ANY, ALL  keyword masks (decimal or 0x hex); LEVEL 0..255 or critical..verbose
      OPTION    event-ids=1,2 | exclude-event-ids=3 | pids=10,11 | exe=app,tool | stack | sid | ts
    An OPTION replaces the command's --event-ids/--exclude-event-ids, --pids or --exe for that
    provider; stack, sid and ts add to --stack, --sid and --ts. Example:
      -p "MyCompany.Web:0x10:info;event-ids=1,2;stack" --pids 4242"""
    from openetw.controller import Session

    stream = None
    if stream_servers is not None:
        from openetw.fleet.connect import StreamOptions

        stream = StreamOptions.build(stream_servers, creds_file=creds_file, user=stream_user, password_file=password_file)
    elif creds_file or stream_user or password_file or subject or spool_size is not None:
        raise InvalidArgument("--subject, --spool-size, --creds, --user and --password-file go with --stream")
    started = Session.start(
        name, output, mode=mode, realtime=realtime, buffer_size=buffer_size, max_size=max_size,
        flush_timer=flush_timer, min_buffers=min_buffers, max_buffers=max_buffers,
        providers=[parse_provider_spec(spec, enable) for spec in provider_specs], kernel_flags=kernel_flags,
        kernel_buffer_size=kernel_buffer_size, kernel_source=kernel_source, kernel_profile_rate=profile_rate,
        socket=socket_path, stream=stream, subject=subject, spool_size=spool_size,
    )  # fmt: skip
    info = started.info_at_start
    started.detach()  # the session stays: it belongs to the service now
    _print_session(info, as_json, title=None if as_json else f"started trace session {name}")


def _attach(name: str, socket_path: str | None) -> Any:
    from openetw.controller import Session

    return Session.attach(name, socket=socket_path)


@session.command("stop")
@click.argument("name")
@_socket_option
@_json_option
def session_stop(name: str, socket_path: str | None, as_json: bool) -> None:
    """Stop NAME: producers hand over their buffers, the file gets its final header."""
    running = _attach(name, socket_path)
    running.stop()
    _print_session(running.info(), as_json, title=None if as_json else f"stopped trace session {name}")


@session.command("update")
@click.argument("name")
@_providers_option
@click.option("--disable", "disable_specs", multiple=True, metavar="NAME_OR_GUID", help="A provider to disable (repeatable).")
@click.option("--flush-timer", type=int, default=None)
@click.option("--max-size", type=int, default=None, help="Maximum file size in MB.")
@click.option("--max-buffers", type=int, default=None)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None, help="Switch to this file.")
@_socket_option
@_json_option
@filter_options
def session_update(name: str, provider_specs: tuple[str, ...], disable_specs: tuple[str, ...], flush_timer: int | None,
                   max_size: int | None, max_buffers: int | None, output: str | None, socket_path: str | None,
                   as_json: bool, enable: EnableOptions) -> None:  # fmt: skip
    """Enable or disable providers of NAME, or change its settings while it runs.

    The filter and property options apply to every -p of the command."""
    parsed = [parse_provider_spec(spec, enable) for spec in provider_specs]
    for spec in disable_specs:
        parse_provider_guid(spec)
    running = _attach(name, socket_path)
    for provider, options in parsed:
        running.enable(
            provider, options.get("level", 0), options.get("any", 0), options.get("all", 0),
            properties=options.get("properties", 0), filters=options.get("filters"),
        )
    for spec in disable_specs:
        running.disable(spec)
    if any(value is not None for value in (flush_timer, max_size, max_buffers, output)):
        running.update(flush_timer=flush_timer, max_size=max_size, max_buffers=max_buffers, output=output)
    _print_session(running.info(), as_json)


@session.command("flush")
@click.argument("name")
@_socket_option
@_json_option
def session_flush(name: str, socket_path: str | None, as_json: bool) -> None:
    """Write every event NAME holds to its destination now."""
    running = _attach(name, socket_path)
    running.flush()
    _print_session(running.info(), as_json)


@session.command("query")
@click.argument("name")
@_socket_option
@_json_option
def session_query(name: str, socket_path: str | None, as_json: bool) -> None:
    """Settings, providers and statistics of NAME."""
    _print_session(_attach(name, socket_path).info(), as_json)


@session.command("snapshot")
@click.argument("name")
@click.argument("output", type=click.Path(dir_okay=False, path_type=str))
@_socket_option
@_json_option
def session_snapshot(name: str, output: str, socket_path: str | None, as_json: bool) -> None:
    """Write a buffering session's in-memory buffers to OUTPUT (.etl)."""
    buffers = _attach(name, socket_path).snapshot(output)
    if as_json:
        _print_json({"output": output, "buffers": buffers})
    else:
        click.echo(f"{output}: {buffers} buffers")


@session.command("capture-state")
@click.argument("name")
@click.option("-p", "--provider", "provider", required=True, metavar="NAME_OR_GUID")
@_socket_option
@_json_option
def session_capture_state(name: str, provider: str, socket_path: str | None, as_json: bool) -> None:
    """Ask PROVIDER's processes to log their state into NAME."""
    parse_provider_guid(provider)  # a malformed GUID is refused before the service is asked
    notified = _attach(name, socket_path).capture_state(provider)
    if as_json:
        _print_json({"notified": notified})
    else:
        click.echo(f"{notified} registration(s) asked to capture their state")


@session.command("list")
@_socket_option
@_json_option
def session_list(socket_path: str | None, as_json: bool) -> None:
    """Every session you may see."""
    from openetw.controller import list_sessions

    try:
        sessions = list_sessions(socket=socket_path)
    except ServiceError:
        sessions = []
    if as_json:
        _print_json(sessions)
        return
    if not sessions:
        click.echo("no trace sessions")
    for info in sessions:
        target = "(memory)" if info["mode"] == "buffering" else info.get("file_name") or "(real time)"
        click.echo(f"{info['logger_id']:>3}  {info['name']:<30} {info['state']:<9} {info['mode']:<15} {target}")
        click.echo(f"     {statistics_line(info)}")


# -- openetw providers -------------------------------------------------------------------------


def provider_listing(socket_path: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """What ``logman query providers`` shows: providers registered with the service (one row per
    registration, with its process and the sessions enabling it; ``"kind": "registered"``) and
    the providers of installed manifests (``"kind": "manifest"``, user store then system store).
    A registered provider whose GUID has an installed manifest names that store in
    ``"manifest"``. Returns the rows and notes on what could not be listed."""
    from openetw.controller import provider_security, registered_providers
    from openetw.guids import format_guid
    from openetw.manifest.store import ManifestRegistry

    notes: list[str] = []
    installed = []
    try:
        installed = ManifestRegistry().list()
    except (OpenEtwError, OSError) as exc:
        notes.append(f"installed manifests could not be listed: {exc}")
    stores: dict[str, str] = {}
    for entry in installed:
        stores.setdefault(format_guid(entry.guid), entry.store)
    secured: list[dict[str, Any]] = []
    try:
        registered = registered_providers(socket=socket_path)
        secured = provider_security(socket=socket_path)
    except ServiceError:
        registered = []
        notes.append("no trace service is running: no registered providers")
    rows = [{**item, "kind": "registered", "manifest": stores.get(item["guid"])} for item in registered]
    rows.extend({**item, "kind": "secured", "pid": None, "exe": None, "sessions": []} for item in secured)
    rows.extend(
        {
            "kind": "manifest", "guid": format_guid(entry.guid), "name": entry.name, "store": entry.store,
            "events": entry.events, "file": str(entry.file), "source": entry.source,
            "installed": datetime_iso(entry.installed, 0), "pid": None, "exe": None, "sessions": [],
        }
        for entry in installed
    )
    return rows, notes


@click.group("providers", invoke_without_command=True)
@_socket_option
@_json_option
@click.pass_context
def providers_command(ctx: click.Context, socket_path: str | None, as_json: bool) -> None:
    """Providers registered with the trace service (their processes and enabling sessions),
    providers of installed manifests and the providers secured (who may register them),
    marked which is which."""
    if ctx.invoked_subcommand is not None:
        return
    rows, notes = provider_listing(socket_path)
    for note in notes:
        click.echo(f"openetw: {note}", err=True)
    if as_json:
        _print_json(rows)
        return
    registered = sorted((r for r in rows if r["kind"] == "registered"), key=lambda r: (r.get("name") or r["guid"], r["pid"]))
    manifests = [r for r in rows if r["kind"] == "manifest"]
    click.echo(f"registered providers ({len(registered)}):")
    for item in registered:
        label = item.get("name") or ""
        sessions = ", ".join(item["sessions"]) or "-"
        manifest = f"  [manifest: {item['manifest']}]" if item.get("manifest") else ""
        click.echo(
            f"  {item['guid']}  {label:<32} pid {item['pid']:<7} {os.path.basename(item['exe'] or '?'):<12} sessions: {sessions}{manifest}"
        )
    click.echo(f"installed manifests ({len(manifests)}):")
    for item in manifests:
        click.echo(f"  {item['guid']}  {item['name']:<32} {item['store']:<6} {item['events']:>4} events  {item['source']}")
    secured = [r for r in rows if r["kind"] == "secured"]
    click.echo(f"secured providers ({len(secured)}):")
    for item in secured:
        click.echo(f"  {item['guid']}  {item.get('name') or '':<32} may register: {_owners_text(item['owners'])}")


def _owners_text(owners: list[dict[str, Any]]) -> str:
    import grp
    import pwd

    names = []
    for owner in owners:
        try:
            name = pwd.getpwuid(owner["id"]).pw_name if owner["kind"] == "user" else grp.getgrgid(owner["id"]).gr_name
        except KeyError:
            name = str(owner["id"])
        names.append(f"{owner['kind']} {name}")
    return ", ".join(names)


@providers_command.command("secure")
@click.argument("provider", metavar="GUID|NAME")
@click.option("--owner", "owners", multiple=True, required=True, metavar="USER|GROUP",
              help="A user or group (name or number) that may register the provider (repeatable; root always may).")  # fmt: skip
@_socket_option
@_json_option
def secure_command(provider: str, owners: tuple[str, ...], socket_path: str | None, as_json: bool) -> None:
    """Let only these users and groups (and root) register PROVIDER with the trace service
    (ETW's TRACELOG_REGISTER_GUIDS right). Root only. The service saves its table and reads it
    back when it starts again (the machine's in /var/lib/openetw/provider-security.json)."""
    from openetw.controller import secure_provider
    from openetw.provider_names import parse_provider_guid

    parse_provider_guid(provider)  # a malformed GUID is bad input before any service is asked
    table = secure_provider(provider, [_principal(owner) for owner in owners], socket=socket_path)
    if as_json:
        _print_json(table)
        return
    for item in table:
        click.echo(f"{item['guid']}  {item.get('name') or '':<32} may register: {_owners_text(item['owners'])}")


def _principal(text: str) -> dict[str, Any]:
    """A user (by name or uid) or else a group (by name or gid)."""
    import grp
    import pwd

    for kind, lookup in (("user", pwd.getpwnam), ("group", grp.getgrnam)):
        try:
            entry = lookup(text)
        except KeyError:
            continue
        return {"kind": kind, "id": entry[2]}
    if text.isdigit():
        return {"kind": "user", "id": int(text)}
    raise InvalidArgument(f"no user or group named {text!r}")


# -- openetw trace -----------------------------------------------------------------------------


@click.command("trace")
@click.option("--session", "session_name", default=None, help="Consume this running real-time session.")
@_providers_option
@click.option("--buffer-size", type=int, default=64, show_default=True, help="Buffer size in KB (with -p).")
@click.option("--flush-timer", type=int, default=1, show_default=True, help="Seconds between flushes (with -p).")
@click.option("--stream", "stream_servers", default=None, metavar="nats://HOST:PORT[,...]",
              help="View the fleet's stream instead: every host's streamed sessions (-p keeps some providers).")
@click.option("--host", "hosts", multiple=True, metavar="HOST", help="With --stream: only this host (repeatable).")
@click.option("--from", "start", type=click.Choice(["now", "start"]), default="now", show_default=True,
              help="With --stream: buffers published from now on, or everything the stream holds.")
@click.option("--creds", "creds_file", type=click.Path(dir_okay=False, path_type=str), default=None, help="With --stream: a NATS credentials file.")
@click.option("--stream-user", "stream_user", default=None, help="With --stream: the NATS user (with --password-file).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=str), default=None, help="With --stream: the user's password.")
@_socket_option
@_json_option
@click.option("--otlp", "otlp_url", metavar="URL", default=None,
              help="Send the events to this OTLP/HTTP receiver (log records; Start/Stop pairs as spans) instead of printing them.")  # fmt: skip
@filter_options
@streamed_no_index_option
def trace(session_name: str | None, provider_specs: tuple[str, ...], buffer_size: int, flush_timer: int,
          stream_servers: str | None, hosts: tuple[str, ...], start: str, creds_file: str | None, stream_user: str | None,
          password_file: str | None, socket_path: str | None, as_json: bool, otlp_url: str | None,
          enable: EnableOptions) -> None:  # fmt: skip
    """Print events as they arrive, decoded where possible; Ctrl-C stops.

    With -p a real-time session of its own is started for the providers and stopped at the end.
    With --otlp URL the events go to an OpenTelemetry collector as they arrive (batched, sent
    at least every second while events come) and the counts exported, refused and retried are
    printed at the end (pip install 'openetw[otlp]').
    With --stream the fleet's JetStream stream is viewed as a real-time session (UserTrace's
    streams): every host's events, or those of --host, of the -p providers when given.
    """
    from openetw.controller import RealtimeConsumer, Session
    from openetw.controller.live import LiveFormatter

    if stream_servers is not None:
        if otlp_url is not None or session_name is not None:
            raise InvalidArgument("--stream views the fleet's stream: without --session or --otlp")
        _trace_stream(stream_servers, hosts, start, provider_specs, creds_file, stream_user, password_file, as_json)
        return
    if hosts or creds_file or stream_user or password_file or start != "now":
        raise InvalidArgument("--host, --from, --creds, --stream-user and --password-file go with --stream")
    if (session_name is None) == (not provider_specs):
        raise InvalidArgument("give either --session NAME or at least one -p PROVIDER")
    specs = [parse_provider_spec(spec, enable) for spec in provider_specs]
    own: Session | None = None
    if session_name is None:
        session_name = f"openetw-trace-{os.getpid()}"
        own = Session.start(
            session_name, mode="realtime", buffer_size=buffer_size, flush_timer=flush_timer,
            providers=specs, socket=socket_path, end_with_connection=True,
        )  # fmt: skip
    formatter = LiveFormatter(as_json=as_json)
    consumer = RealtimeConsumer(session_name, socket=socket_path)
    shown = 0
    delivery = None
    signal.signal(signal.SIGTERM, _interrupt)  # a kill ends the view as Ctrl-C does: own session stopped
    try:
        if otlp_url is not None:
            delivery = _trace_to_otlp(consumer, otlp_url)
            shown = delivery.log_records + 2 * delivery.spans
        else:
            for record in consumer:
                click.echo(formatter.format(record))
                shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        final = own.stop() if own is not None else None
    tail = f"; {statistics_line(final)}" if final else ""
    click.echo(f"{shown} events{tail}", err=True)
    if delivery is not None:
        click.echo(f"exported {delivery.exported}, refused {delivery.refused}, retried {delivery.retried}", err=True)
        if delivery.refused:
            raise ReportedFailure(f"the receiver refused {delivery.refused} records", exit_code=1)


def _trace_to_otlp(records: Any, url: str) -> Any:
    """The live records as a timeline, sent to the OTLP receiver at ``url``."""
    from openetw.cli.etl_commands import load_registry
    from openetw.export.timeline.builder import timeline
    from openetw.export.timeline.otlp import send_otlp

    items = timeline(records, load_registry((), installed=True), messages=True)
    return send_otlp(items, url, flush_seconds=1.0)
