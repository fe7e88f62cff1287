"""``openetw viewer``: the local web Event Viewer."""

from __future__ import annotations

import json
import sys

import click

from openetw.cli.index_options import index_beside_option
from openetw.errors import InvalidArgument


def register(cli: click.Group) -> None:
    cli.add_command(viewer)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=str))
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0, show_default="a free port", help="The port to listen on.")
@click.option("--bind", default="127.0.0.1", show_default=True, metavar="ADDRESS", help="The address to listen on (the token is still needed).")
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a web browser.")
@click.option("--session", "sessions", multiple=True, metavar="NAME", help="Show this live session from the start (repeatable).")
@click.option("--log", "logs", multiple=True, metavar="NAME", help="Show this Event Log log from the start, e.g. System (repeatable).")
@click.option("--json", "as_json", is_flag=True, help='Print {"url": ...} as one JSON line instead of the text.')
@click.option("--no-index", "no_index", is_flag=True, help="Index .etl files into unnamed temporary files: nothing kept, in the cache or beside them.")
@index_beside_option
def viewer(
    files: tuple[str, ...], port: int, bind: str, no_browser: bool, sessions: tuple[str, ...], logs: tuple[str, ...], as_json: bool,
    no_index: bool, index_beside: bool | None,
) -> None:  # fmt: skip
    """Serve the Event Viewer on this machine and print its URL.

    The page shows the Event Log's logs (Windows Logs, Applications and Services Logs), the
    FILEs given (.etl and .evtx; more can be opened from the page by path), the live sessions
    of the trace service, an event table that scrolls over millions of
    events, facets with counts, full-text search, a timeline and a detail pane with the
    event's XML. The URL carries a secret token for this run, good for one browser session:
    anyone without it gets 403. The browser is started with a private (0600) file that leads
    it to the URL, so the token never appears on a command line.
    Needs the 'viewer' extra (pip install 'openetw[viewer]'). Ctrl-C stops it.

    \b
    Examples:
      openetw viewer trace.etl System.evtx
      openetw viewer --session Drv --no-browser
      openetw viewer --log System
      openetw viewer --bind 0.0.0.0 --port 8765 trace.etl
    """
    if no_index and index_beside:
        raise click.UsageError("--no-index and --index-beside exclude each other")
    try:
        from openetw.viewer.app import Viewer
        from openetw.viewer.server import ViewerServer
    except ImportError as error:
        raise InvalidArgument(str(error)) from None
    state = Viewer(keep_index=not no_index, index_beside=index_beside)
    for path in files:
        state.open(path)
    for name in sessions:
        state.attach(name)
    for name in logs:
        state.open_log(name)
    server = ViewerServer(state, host=bind, port=port)
    if as_json:
        click.echo(json.dumps({"url": server.url, "port": server.port}))
    else:
        click.echo(f"openetw viewer: {server.url}")
    sys.stdout.flush()
    import signal

    # SIGTERM ends the run as Ctrl-C does: sources closed, the launch file removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if not no_browser:
            import pathlib
            import webbrowser

            # The browser gets a 0600 file's path, never the token on its command line.
            webbrowser.open(pathlib.Path(server.launch_file()).as_uri())
        server.run()
    finally:
        state.launched()
