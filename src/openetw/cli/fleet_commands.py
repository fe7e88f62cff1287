"""``openetw collect`` and ``openetw fleet status``: the fleet's sessions, gathered and watched."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import click

from openetw.errors import InvalidArgument


def register(cli: click.Group) -> None:
    cli.add_command(collect)
    cli.add_command(fleet)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def _options(servers: str, stream: str, creds: str | None, user: str | None, password_file: str | None) -> Any:
    from openetw.fleet.connect import StreamOptions

    return StreamOptions.build(servers, stream=stream, creds_file=creds, user=user, password_file=password_file)


_credential_options = [
    click.option("--stream", "stream_name", default="ETW", show_default=True, help="The JetStream stream."),
    click.option("--creds", type=click.Path(dir_okay=False, path_type=str), default=None, help="A NATS credentials file."),
    click.option("--user", default=None, help="The NATS user (with --password-file)."),
    click.option("--password-file", type=click.Path(dir_okay=False, path_type=str), default=None, help="The user's password."),
]


def _with_credentials(function: Any) -> Any:
    for option in reversed(_credential_options):
        function = option(function)
    return function


@click.command()
@click.argument("servers", metavar="nats://HOST:PORT[,...]")
@click.option("-o", "--output", "directory", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Where the files and the books go.")  # fmt: skip
@click.option("--to", "outputs", default="etl", show_default=True, metavar="etl[,parquet][,log]",
              help="What to write: etl files (always), the Parquet table layout of each finished file, the Event Log"
                   " (DIR/logs, log ForwardedEvents).")
@click.option("--rotate-mb", type=float, default=64.0, show_default=True, help="Start a session's next .etl file past this size.")
@click.option("--durable", default="openetw-collector", show_default=True, help="The durable consumer's name (one per collector).")
@click.option("--exit-when-idle", type=float, default=None, metavar="SECONDS",
              help="Exit once every session seen has ended and nothing came for this long.")
@_with_credentials
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON document when it exits.")
def collect(servers: str, directory: str, outputs: str, rotate_mb: float, durable: str, exit_when_idle: float | None,
            stream_name: str, creds: str | None, user: str | None, password_file: str | None, as_json: bool) -> None:  # fmt: skip
    """Write every streamed session of the fleet to DIR, per host and session, until SIGTERM or Ctrl-C.

    A durable pull consumer on the stream (waiting for it when it does not exist yet): each
    batch is written and fsynced before it is acknowledged, duplicates are dropped by (host,
    session, start, sequence), and a restarted collector goes on where the last one stopped.
    Sequence numbers that never arrived are gaps; the losses the hosts counted come with the
    buffers. The report (per host: buffers, events, gaps, duplicates, losses) is printed at exit;
    `openetw fleet status DIR` shows it while it runs.

    \b
    DIR/<host>/<session>/<start>-<n>.etl                        the buffers, rotating by size
    DIR/parquet/host=<host>/date=<day>/<session>-<start>-<n>/   with --to parquet: openetw sql DIR/parquet
    DIR/logs/                                                   with --to log: openetw log query --logs-dir DIR/logs ForwardedEvents
    """
    from openetw.fleet.collector import collect as run_collect
    from openetw.fleet.store import FleetStore

    wanted = frozenset(item.strip() for item in outputs.split(",") if item.strip()) | {"etl"}
    if rotate_mb <= 0:
        raise InvalidArgument("--rotate-mb must be positive")
    options = _options(servers, stream_name, creds, user, password_file)
    store = FleetStore(directory, outputs=wanted, rotate_bytes=int(rotate_mb * (1 << 20)))
    stopping = False

    def request_stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        report = asyncio.run(run_collect(options, store, durable=durable, stop=lambda: stopping, idle_exit=exit_when_idle))
    finally:
        store.close()
    if as_json:
        _print_json(report)
        return
    for host, item in sorted(report["hosts"].items()):
        click.echo(f"{host}: {item['sessions']} sessions, {item['buffers']} buffers, {item['events']} events, {item['gaps']} gaps,"
                   f" {item['events_lost']} events lost at the host, {item['duplicates']} duplicates dropped")  # fmt: skip


@click.group()
def fleet() -> None:
    """The fleet's streamed sessions."""


@fleet.command("status")
@click.argument("source", metavar="nats://HOST:PORT[,...]|DIR")
@_with_credentials
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def fleet_status(source: str, stream_name: str, creds: str | None, user: str | None, password_file: str | None, as_json: bool) -> None:
    """Hosts, sessions, rates, lag and losses: from the stream (nats://...) or a collector's DIR."""
    from openetw.fleet import status

    if "://" not in source and os.path.isdir(source):
        report = status.status_of_directory(source)
    elif "://" in source:
        report = asyncio.run(status.status_of_stream(_options(source, stream_name, creds, user, password_file)))
    else:
        raise InvalidArgument(f"{source}: neither nats://HOST:PORT nor a directory")
    if as_json:
        _print_json(report)
        return
    if "stream" in report:
        click.echo(f"stream {report['stream']} on {report['source']}: {report['messages']} messages, {report['bytes']} bytes,"
                   f" replicas {report['replicas']}, leader {report['leader']}")  # fmt: skip
        for host, item in sorted(report["hosts"].items()):
            click.echo(f"  {host}: {item['subjects']} sessions, {item['messages']} messages")
        for consumer in report["consumers"]:
            click.echo(f"  consumer {consumer['name']}: lag {consumer['pending']} messages, {consumer['unacknowledged']} unacknowledged")
        return
    click.echo(f"collected in {report['source']}:")
    for host, item in sorted(report["hosts"].items()):
        click.echo(f"  {host}: {item['sessions']} sessions ({item['running']} running), {item['events']} events, {item['gaps']} gaps,"
                   f" {item['events_lost']} events lost, {item['rejected']} messages refused, last data {item['seconds_since_last']} s ago")  # fmt: skip
    for session in report["sessions"]:
        click.echo(f"    {session['host']}/{session['session']}: {session['events']} events, {session['events_per_second']} events/s,"
                   f" {session['gaps']} gaps, {session['events_lost']} lost{'' if session['ended'] else ', running'}")  # fmt: skip
