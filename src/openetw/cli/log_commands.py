"""``openetw log``: wevtutil's verbs over the Event Log (el, gl, gli, sl, qe, epl, cl, im).

Logs are read straight from their files when the caller may read them (so ``log query`` works
while the service is stopped); otherwise, and for every change, the service is asked, and it
decides with the caller's credentials. Files the user names (export, backup, import) are opened
here and handed to the service as descriptors.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from openetw.errors import EventLogError, InvalidArgument, ServiceError

__all__ = ["register"]

_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (see `openetw --help`).")
_logs_dir_option = click.option(
    "--logs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="The logs' directory (default: $OPENETW_LOGS_DIR, else the machine's for root, else yours).",
)
_scope_option = click.option("--system/--user", "system", default=None, help="The machine's logs or your own (default: root's are the machine's).")
_socket_option = click.option("--socket", "socket_path", type=click.Path(path_type=str), default=None, help="The service's control socket.")
FORMATS = ("text", "xml", "json", "rendered-xml")


def register(cli: click.Group) -> None:
    cli.add_command(log)


@click.group()
def log() -> None:
    """The Event Log: list, configure, query, export, clear and import logs (wevtutil's verbs).

    \b
    Examples:
      openetw log list
      openetw log get System --info --json
      openetw log set My-App/Analytic --enabled
      openetw log set Application --retention circular --max-size 20971520
      openetw log query System --query "*[System[Level<=2]]" --count 10 --reverse
      openetw log query System --format json --follow
      openetw log export System system.evtx --query "*[System[Provider[@Name='Sample Driver']]]"
      openetw log clear Application --backup application.evtx
      openetw log import old.evtx --log Imported
    """


def _stores(logs_dir: Path | None, system: bool | None) -> list[Any]:
    """The log directories to look in, in order: the one named, else the machine's and the
    user's (root: the machine's first)."""
    from openetw.eventlog import LogStore, default_logs_dir
    from openetw.eventlog.rendering import installed_renderer

    renderer = _lazy(installed_renderer)  # events the service stored but did not render yet
    if logs_dir is not None:
        return [LogStore(logs_dir, renderer=renderer)]
    if os.environ.get("OPENETW_LOGS_DIR"):
        return [LogStore(default_logs_dir(False), renderer=renderer)]
    if system is not None:
        return [LogStore(default_logs_dir(system), renderer=renderer)]
    order = (True, False) if os.geteuid() == 0 else (False, True)
    return [LogStore(default_logs_dir(scope), renderer=renderer) for scope in order]


def _lazy(make: Callable[[], Any]) -> Any:
    """A renderer built on its first use (reading the installed manifests costs)."""
    made: list[Any] = []

    def render(event: Any) -> Any:
        if not made:
            made.append(make())
        return made[0](event)

    return render


def _store(logs_dir: Path | None, system: bool | None, name: str | None = None) -> Any:
    """The directory that holds ``name`` (the first to look in when none does)."""
    stores = _stores(logs_dir, system)
    for store in stores:
        if name is not None and store.path(name).exists():
            return store
    return stores[0]


def _client(socket_path: str | None, *, autostart: bool = False) -> Any:
    from openetw.controller.client import ServiceClient

    return ServiceClient(socket_path, autostart=autostart)


def _readable(store: Any, name: str) -> bool:
    path = store.path(name)
    return bool(path.is_file() and os.access(path, os.R_OK) and os.access(path.parent, os.W_OK | os.X_OK))


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- el / gl / gli -------------------------------------------------------------------------------
@log.command("list")
@_logs_dir_option
@_scope_option
@_json_option
def list_command(logs_dir: Path | None, system: bool | None, as_json: bool) -> None:
    """The logs (wevtutil el). --json: one document, a list of {log, records, bytes, enabled}."""
    rows = []
    seen: set[str] = set()
    for store, name in [(where, name) for where in _stores(logs_dir, system) for name in where.names()]:
        if name in seen:
            continue
        seen.add(name)
        row: dict[str, Any] = {"log": name, "directory": str(store.directory)}
        if _readable(store, name):
            info, config = store.info(name), store.config(name)
            row.update(records=info.records, bytes=info.bytes, enabled=config.enabled, type=config.type)
        rows.append(row)
    if as_json:
        _print_json(rows)
        return
    for row in rows:
        click.echo(row["log"] if "records" not in row else f"{row['log']:<48} {row['records']:>9} events  {row['bytes']:>11} bytes"
                   f"  {'enabled' if row['enabled'] else 'disabled'}")  # fmt: skip


@log.command("get")
@click.argument("name", metavar="LOG")
@click.option("--info", "with_info", is_flag=True,
              help="The log's numbers too (gli): records, bytes, oldest_record_id, last_write, refused, lost, written, stored, writers.")
@_logs_dir_option
@_scope_option
@_socket_option
@_json_option
def get_command(name: str, with_info: bool, logs_dir: Path | None, system: bool | None, socket_path: str | None, as_json: bool) -> None:
    """A log's settings (wevtutil gl); with --info its numbers (gli). --json: one document."""
    store = _store(logs_dir, system, name)
    if _readable(store, name):
        config, info = store.config(name).to_json(), store.info(name).to_json()
    else:
        if not store.path(name).exists() and store.directory.is_dir() and os.access(store.directory, os.R_OK):
            raise EventLogError(f"no log {name!r} in {store.directory}")
        with _client(socket_path) as client:
            reply = client.call("log_info", log=name)
        config, info = reply["config"], reply["info"]
    document: dict[str, Any] = {"log": name, **config}
    if with_info:
        document.update({key: info[key] for key in ("records", "bytes", "oldest_record_id", "last_write", "refused", "lost", "written", "stored")})
        document["writers"] = info.get("writers", {})
    if as_json:
        _print_json(document)
        return
    for key, value in document.items():
        click.echo(f"{key}: {value}")


# -- sl ------------------------------------------------------------------------------------------
def _access(text: str) -> dict[str, int]:
    import grp
    import pwd

    parts = text.split(":")
    if len(parts) != 3:
        raise InvalidArgument(f"--access is OWNER:GROUP:MODE (say root:adm:640), not {text!r}")
    owner, group, mode = parts
    try:
        uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        bits = int(mode, 8)
    except (KeyError, ValueError):
        raise InvalidArgument(f"--access: unknown user or group, or a mode that is not octal, in {text!r}") from None
    return {"owner": uid, "group": gid, "mode": bits}


@log.command("set")
@click.argument("name", metavar="LOG")
@click.option("--enabled/--disabled", default=None, help="Listen on the log's channels or not (enabling an Analytic or Debug log clears it).")
@click.option("--retention", type=click.Choice(["circular", "retain", "autobackup"]), default=None, help="What a full log does.")
@click.option("--max-size", type=int, default=None, metavar="BYTES", help="The bound on all the log's files together.")
@click.option("--level", type=int, default=None, metavar="N", help="Store events of this level or more severe only.")
@click.option("--keywords", default=None, metavar="MASK", help="Store events with one of these keyword bits only (0x...).")
@click.option("--access", default=None, metavar="OWNER:GROUP:MODE", help="Who may read and write the log (say root:adm:640).")
@_logs_dir_option
@_scope_option
@_socket_option
@_json_option
def set_command(name: str, enabled: bool | None, retention: str | None, max_size: int | None, level: int | None, keywords: str | None,
                access: str | None, logs_dir: Path | None, system: bool | None, socket_path: str | None, as_json: bool) -> None:  # fmt: skip
    """Change a log's settings (wevtutil sl), through the service, which checks who asks. With no
    service running, the log's files are changed directly when you may write them."""
    settings: dict[str, Any] = {}
    if enabled is not None:
        settings["enabled"] = enabled
    if retention is not None:
        settings["retention"] = retention
    if max_size is not None:
        settings["max_size"] = max_size
    if level is not None:
        settings["level"] = level
    if keywords is not None:
        try:
            settings["keywords"] = int(keywords, 0)
        except ValueError:
            raise InvalidArgument(f"--keywords is a number (0x... for hex), not {keywords!r}") from None
    if access is not None:
        settings.update(_access(access))
    if not settings:
        raise InvalidArgument("nothing to set: give --enabled/--disabled, --retention, --max-size, --level, --keywords or --access")
    try:
        with _client(socket_path) as client:
            config = client.call("log_set", log=name, settings=settings)["config"]
    except ServiceError as exc:
        if "no trace service" not in str(exc):
            raise
        from dataclasses import replace

        from openetw.eventlog import LogConfig

        store = _store(logs_dir, system, name)
        if not _readable(store, name) or not os.access(store.path(name), os.W_OK):
            raise
        new = replace(store.config(name), **settings)
        config = store.set_config(name, LogConfig.from_json(new.to_json())).to_json()
    if as_json:
        _print_json({"log": name, **config})
    else:
        click.echo(f"{name}: " + ", ".join(f"{key} {value}" for key, value in settings.items()))


# -- qe ------------------------------------------------------------------------------------------
def _text_line(event: Any) -> str:
    from openetw.events.text import filetime_text

    when = filetime_text(event.time_created, 9, undated=str(event.time_created))
    message = event.message
    if message is None and event.fields:
        message = " ".join(f"{key}={value}" for key, value in event.fields.items())
    return f"{event.record_id:>8} {when} {event.provider} {event.event_id} level {event.level}: {message or ''}".rstrip()


def _emit(event: Any, fmt: str, log_id: str) -> None:
    from openetw.eventlog import event_xml

    if fmt == "json":
        from openetw.cli.json_time import filetime_iso

        document = event.to_json()
        document["time_created_filetime"] = event.time_created
        document["time_created"] = filetime_iso(event.time_created)
        document["cursor"] = f"{log_id}:{event.record_id}"
        click.echo(json.dumps(document, sort_keys=True, default=str))
    elif fmt == "xml":
        click.echo(event_xml(event))
    elif fmt == "rendered-xml":
        click.echo(event_xml(event, rendering=True))
    else:
        click.echo(_text_line(event))


def _query_text(query: str | None, query_file: Path | None) -> tuple[Any, str | None]:
    """The parsed query (a selector or a ``<QueryList>``) and its text, as the service takes it."""
    from openetw.eventlog import parse_filter

    if query is not None and query_file is not None:
        raise InvalidArgument("--query and --query-file exclude each other")
    if query_file is not None:
        try:
            query = query_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"cannot read {query_file}: {getattr(exc, 'strerror', None) or exc}") from None
    return (parse_filter(query), query) if query is not None else (None, None)


def _etl_events(path: str) -> Iterator[Any]:
    from openetw.etl import EtlReader
    from openetw.etl.relog import is_logfile_header_record
    from openetw.eventlog import StoredEvent, from_etw_record
    from openetw.events.decoded import decode_record
    from openetw.events.registry import build_registry

    registry = build_registry()
    with EtlReader(path) as reader:
        # An .etl record's EventRecordID is its position among the file's records (its header
        # record is the first), as the viewer numbers them, so one query selects the same events.
        for number, record in enumerate(reader.records(time_order=True), 1):
            if is_logfile_header_record(record) or record.kind == "unknown":
                continue
            decoded = decode_record(record, registry)
            new = from_etw_record(record, provider_name=decoded.provider_label, channel="",
                                  fields=decoded.text_properties() or None, message=decoded.message)  # fmt: skip
            yield StoredEvent(**vars(new), record_id=number, log=os.path.basename(path))


def _file_events(path: str, parsed: Any, count: int | None, reverse: bool, after: int | None) -> Iterator[Any]:
    from openetw.eventlog import event_node
    from openetw.eventlog.store import now_filetime

    if path.lower().endswith(".evtx"):
        from openetw.eventlog.files import EvtxQuery

        query = EvtxQuery(path)
        yield from query.events(xpath=parsed, count=count, reverse=reverse, after_record_id=after)
        for problem in query.notices + query.errors:
            click.echo(f"openetw: warning: {problem}", err=True)
        return
    if path.lower().endswith(".db"):
        from openetw.eventlog import LogStore

        store = LogStore(os.path.dirname(path) or ".")
        yield from store.query_file(path, xpath=parsed, count=count, reverse=reverse, after_record_id=after)
        if store.skipped:
            click.echo(f"warning: {store.skipped} rows of {path} hold no event (a damaged database): left out", err=True)
        return
    now = now_filetime()
    events = list(_etl_events(path))
    if reverse:
        events.reverse()
    taken = 0
    for event in events:
        if after is not None and (event.record_id <= after if not reverse else event.record_id >= after):
            continue
        if parsed is not None and not parsed.matches(event_node(event), now):
            continue
        yield event
        taken += 1
        if count is not None and taken >= count:
            return


def _cursor(text: str | None) -> tuple[str | None, int | None]:
    if text is None:
        return None, None
    log_id, _, record = text.rpartition(":")
    if not record.isdigit():
        raise InvalidArgument(f"a cursor is <log-id>:<EventRecordID>, not {text!r}")
    return log_id or None, int(record)


@log.command("query")
@click.argument("source", metavar="[LOG|FILE.evtx|FILE.etl]", required=False)
@click.option("--query", "-q", "query", default=None, metavar="XPATH", help="Select events with the Event Log's XPath subset.")
@click.option("--query-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A <QueryList> XML file (Event Viewer's filter, XML tab); with no LOG, the logs its Paths name, merged.")
@click.option("--count", "-c", type=click.IntRange(min=0), default=None, help="At most N events.")
@click.option("--reverse", "-r", is_flag=True, help="Newest first.")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="text", help="text (default), xml, json (one object per line) or rendered-xml.")
@click.option("--follow", is_flag=True, help="Keep printing new events as they are stored, with their cursors.")
@click.option("--after-cursor", default=None, metavar="CURSOR", help="Start after this <log-id>:<EventRecordID>.")
@click.option("--text", "text", default=None, help="Only events whose message matches this full-text query (logs only).")
@_logs_dir_option
@_scope_option
@_socket_option
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
def query_command(source: str | None, query: str | None, query_file: Path | None, count: int | None, reverse: bool, fmt: str, follow: bool,
                  after_cursor: str | None, text: str | None, logs_dir: Path | None, system: bool | None, socket_path: str | None,
                  as_json: bool) -> None:  # fmt: skip
    """Print a log's events (wevtutil qe), or a file's: .evtx and .etl files are read in place,
    a log's files directly when you may read them (the service need not run), else through the
    service. --format json prints one JSON object per event with its cursor; --follow keeps
    going and prints `-- cursor: <log-id>:<EventRecordID>` after each batch, as
    `journalctl --show-cursor` does. --query takes a selector or a whole <QueryList> (Event
    Viewer's filter XML, band() and timediff() included); given a <QueryList> and no LOG, the
    logs its Select elements name are read and merged in time order, as `wevtutil qe /sq` does."""
    from openetw.eventlog import QueryList

    if as_json:
        fmt = "json"
    parsed, query_text = _query_text(query, query_file)
    cursor_log, after = _cursor(after_cursor)
    if source is None:  # wevtutil qe /sq: the logs are the QueryList's Paths, merged in time order
        if not isinstance(parsed, QueryList) or not parsed.paths():
            raise InvalidArgument("name a log or a file, or give a <QueryList> whose Select elements name their logs (Path=)")
        if follow or after is not None:
            raise InvalidArgument("--follow and --after-cursor read one log: name it")
        merged = []
        for order, path in enumerate(parsed.paths()):
            log_id, fetch = _log_fetcher(path, parsed, query_text, reverse, text, logs_dir, system, socket_path)
            merged += [(event.time_created, order, event.record_id, log_id, event) for event in fetch(None, count)]
        merged.sort(key=lambda item: item[:3], reverse=reverse)
        for _, _, _, log_id, event in merged[:count]:
            _emit(event, fmt, log_id)
        return
    is_file = source.lower().endswith((".evtx", ".etl", ".db")) and os.path.isfile(source)
    if is_file:
        if follow:
            raise InvalidArgument("--follow reads a log, not a file")
        for event in _file_events(source, parsed, count, reverse, after):
            _emit(event, fmt, os.path.basename(source))
        return
    log_id, fetch = _log_fetcher(source, parsed, query_text, reverse and not follow, text, logs_dir, system, socket_path)
    if cursor_log is not None and log_id and cursor_log != log_id:
        raise InvalidArgument(f"the cursor is of another log ({cursor_log}, this one is {log_id})")
    events = fetch(after, count)
    log_id = log_id or getattr(fetch, "log_id", "")
    for event in events:
        _emit(event, fmt, log_id)
    if not follow:
        return
    last = events[-1].record_id if events else after
    if events:
        click.echo(f"-- cursor: {log_id}:{last}")
    try:
        while True:
            sys.stdout.flush()
            time.sleep(0.5)
            events = fetch(last, None)
            for event in events:
                _emit(event, fmt, log_id)
            if events:
                last = events[-1].record_id
                click.echo(f"-- cursor: {log_id}:{last}")
    except KeyboardInterrupt:
        return


def _log_fetcher(source: str, parsed: Any, query_text: str | None, reverse: bool, text: str | None, logs_dir: Path | None,
                 system: bool | None, socket_path: str | None) -> tuple[str, Callable[[int | None, int | None], list[Any]]]:  # fmt: skip
    """A log's id (empty until the service names it) and how to fetch its events after a record
    id: from its files when this user may read them, else through the service."""
    store = _store(logs_dir, system, source)
    if _readable(store, source):

        def read(after_id: int | None, limit: int | None) -> list[Any]:
            return list(store.query(source, xpath=parsed, count=limit, reverse=reverse, after_record_id=after_id, text=text))

        return store.info(source).log_id, read
    if not store.path(source).exists() and store.directory.is_dir() and os.access(store.directory, os.R_OK):
        raise EventLogError(f"no log {source!r} in {store.directory} (and no file by that name)")
    client = _client(socket_path)

    def ask(after_id: int | None, limit: int | None) -> list[Any]:
        from openetw.eventlog import StoredEvent

        reply = client.call("log_query", log=source, query=query_text, count=limit, reverse=reverse, after_record_id=after_id, text=text)
        ask.log_id = reply["log_id"]  # type: ignore[attr-defined]
        return [_from_json(StoredEvent, item) for item in reply["events"]]

    return "", ask


def _from_json(cls: Any, item: dict[str, Any]) -> Any:
    values = dict(item)
    values.pop("cursor", None)
    values["record"] = bytes.fromhex(values["record"])
    values["keywords"] = int(values["keywords"], 16)
    return cls(**values)


# -- epl / cl / im / flush ------------------------------------------------------------------------------
def _open_output(path: str, store: Any, name: str) -> int:
    """``path`` opened to take log ``name``'s events, with the log file's privacy at most (0600
    when this user cannot see the log's file)."""
    from openetw.safeio import create_output, mode_like

    try:
        return create_output(path, mode_like(store.path(name)), os.O_RDWR)
    except OSError as exc:
        raise InvalidArgument(f"cannot create {path}: {exc.strerror or exc}") from None


@log.command("export")
@click.argument("name", metavar="LOG")
@click.argument("output", metavar="FILE.evtx")
@click.option("--query", "-q", "query", default=None, metavar="XPATH", help="Export the events this selects only.")
@_logs_dir_option
@_scope_option
@_socket_option
@_json_option
def export_command(name: str, output: str, query: str | None, logs_dir: Path | None, system: bool | None, socket_path: str | None,
                   as_json: bool) -> None:  # fmt: skip
    """Write a log's events (or those a query selects) to an .evtx file (wevtutil epl)."""
    from openetw.eventlog.export import write_evtx

    parsed, _ = _query_text(query, None)
    store = _store(logs_dir, system, name)
    fd = _open_output(output, store, name)
    try:
        if _readable(store, name):
            with os.fdopen(os.dup(fd), "wb") as out:
                exported = write_evtx(store.query(name, xpath=parsed), out)
        else:
            with _client(socket_path) as client:
                exported = client.call("log_export", fds=(fd,), log=name, query=query)["exported"]
    finally:
        os.close(fd)
    if as_json:
        _print_json({"log": name, "file": output, "exported": exported})
    else:
        click.echo(f"exported {exported} events of {name} to {output}")


@log.command("clear")
@click.argument("name", metavar="LOG")
@click.option("--backup", default=None, metavar="FILE.evtx", help="Write the events to this .evtx file first.")
@_logs_dir_option
@_scope_option
@_socket_option
@_json_option
def clear_command(name: str, backup: str | None, logs_dir: Path | None, system: bool | None, socket_path: str | None, as_json: bool) -> None:
    """Remove every event of a log (wevtutil cl); record ids go on. Through the service when one
    runs (it checks who asks), else directly when you may write the log's files."""
    fd = _open_output(backup, _store(logs_dir, system, name), name) if backup is not None else -1
    try:
        try:
            with _client(socket_path) as client:
                reply = client.call("log_clear", fds=(fd,) if fd >= 0 else (), log=name, backup=fd >= 0)
        except ServiceError as exc:
            if "no trace service" not in str(exc):
                raise
            from openetw.eventlog.export import write_evtx

            store = _store(logs_dir, system, name)
            if not _readable(store, name) or not os.access(store.path(name), os.W_OK):
                raise
            written = None
            if fd >= 0:
                with os.fdopen(os.dup(fd), "wb") as out:
                    written = write_evtx(store.query(name), out)
            reply = {"log": name, "cleared": store.clear(name), "backup": written}
    finally:
        if fd >= 0:
            os.close(fd)
    if as_json:
        _print_json({"log": name, "cleared": reply["cleared"], "backup": backup, "backed_up": reply["backup"]})
    else:
        click.echo(f"cleared {reply['cleared']} events of {name}" + (f" (backed up to {backup})" if backup else ""))


@log.command("import")
@click.argument("source", metavar="FILE.evtx")
@click.option("--log", "name", required=True, metavar="LOG", help="The log to add the events to (made when it does not exist).")
@_logs_dir_option
@_scope_option
@_socket_option
@_json_option
def import_command(source: str, name: str, logs_dir: Path | None, system: bool | None, socket_path: str | None, as_json: bool) -> None:
    """Add the events of an .evtx file to a log, making the log if needed."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgument(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        try:
            with _client(socket_path) as client:
                imported = client.call("log_import", fds=(fd,), log=name)["imported"]
        except ServiceError as exc:
            if "no trace service" not in str(exc):
                raise
            from openetw.consumer.evtx_source import FileBytes
            from openetw.eventlog import LogConfig
            from openetw.eventlog.service import import_evtx

            store = _store(logs_dir, system, name)
            store.ensure(name, LogConfig(owner=os.geteuid(), group=os.getegid(), mode=0o640, isolation="Custom", type="Operational"))
            imported = import_evtx(store, name, FileBytes(fd))
    finally:
        os.close(fd)
    if as_json:
        _print_json({"log": name, "file": source, "imported": imported})
    else:
        click.echo(f"imported {imported} events from {source} into {name}")


@log.command("flush")
@_socket_option
@_json_option
def flush_command(socket_path: str | None, as_json: bool) -> None:
    """Store now every event the channel sessions hold in buffers."""
    from openetw.errors import AccessDenied

    with _client(socket_path) as client:
        reply = client.call("log_flush")
        for session in reply["sessions"]:  # producers hand over their partly filled buffers too
            try:
                client.call("flush", session=session)
            except AccessDenied:
                pass
    if as_json:
        _print_json({"sessions": reply["sessions"]})
    else:
        click.echo(f"flushed {', '.join(reply['sessions']) or 'no channel sessions'}")
