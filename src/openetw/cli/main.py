"""The ``openetw`` command. The one place where exceptions become messages and exit codes."""

from __future__ import annotations

import errno
import os
import sys
import warnings

import click

from openetw import __version__
from openetw.cli.failure import ReportedFailure
from openetw.errors import OpenEtwError
from openetw.provider_names import ProviderNameWarning

# Each subcommand's module, imported only when that command runs (or when --help lists them all),
# so a command pays for its own imports only.
COMMAND_MODULES: dict[str, str] = {
    "dump": "etl_commands", "info": "etl_commands", "relog": "etl_commands",
    "kernel": "kernel_commands",
    "manifest": "manifest_commands",
    "mc": "mc_commands",
    "providers": "session_commands", "service": "session_commands", "session": "session_commands", "trace": "session_commands",
    "report": "decode_commands",
    "export": "export_commands", "sql": "export_commands",
    "probe": "probe_commands",
    "viewer": "viewer_commands",
    "collect": "fleet_commands", "fleet": "fleet_commands",
    "log": "log_commands",
    "stacks": "stacks_commands",
}  # fmt: skip


# What ``openetw --help`` lists for each command: the first paragraph of its docstring, kept here
# so that the listing imports no command module (tests/cli/test_startup.py holds it to the docstrings).
COMMAND_SUMMARIES: dict[str, str] = {
    "collect": "Write every streamed session of the fleet to DIR, per host and session, until SIGTERM or Ctrl-C.",
    "dump": "One line per record of each FILE: time, provider, event, pid/tid, cpu, size, payload, then the decoded "
    "fields ({name=value; ...}) and the event's message.",
    "export": "Write the records of FILES (merged in time order) as tables, JSON lines or a timeline.",
    "fleet": "The fleet's streamed sessions.",
    "info": "Logfile header facts and record counts of each FILE.",
    "kernel": "Kernel trace sessions: Linux tracepoints recorded as NT Kernel Logger events (root only).",
    "log": "The Event Log: list, configure, query, export, clear and import logs (wevtutil's verbs).",
    "manifest": "Install, inspect and check instrumentation manifests (what wevtutil im/um/el/gp do).",
    "mc": "Generate a Python module for each provider of each MANIFEST (or *.xml / *.man file in DIR).",
    "probe": "Run a D program over trace files (clauses fire on the files' events in time order), or live without "
    "--file: etw probes over running providers, kernel probes (root) over the kernel trace.",
    "providers": "Providers registered with the trace service (their processes and enabling sessions), providers of "
    "installed manifests and the providers secured (who may register them), marked which is which.",
    "relog": "Merge FILES in time order and rewrite them as one uncompressed .etl file.",
    "report": "Decode every event of each FILE (merged in time order) and write a report.",
    "service": "Run, inspect and stop the trace service (the part of ETW that lives in the NT kernel).",
    "session": "Start, steer, query and stop trace sessions (logman / tracelog / xperf).",
    "sql": "Run a SQL QUERY (DuckDB) over traces or exported layouts.",
    "stacks": "PerfView's CPU Stacks of FILES: functions by exclusive and inclusive samples (By Name).",
    "trace": "Print events as they arrive, decoded where possible; Ctrl-C stops.",
    "viewer": "Serve the Event Viewer on this machine and print its URL.",
}


class _LazyGroup(click.Group):
    """A group whose commands are registered by their module when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command listing of ``--help``, from ``COMMAND_SUMMARIES``: listing loads no command."""
        names = [name for name in self.list_commands(ctx) if name in COMMAND_SUMMARIES or name in self.commands]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMAND_SUMMARIES:
                rows.append((name, click.Command(name, help=COMMAND_SUMMARIES[name]).get_short_help_str(limit)))
            else:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            import importlib

            importlib.import_module(f"openetw.cli.{COMMAND_MODULES[cmd_name]}").register(self)
        return self.commands.get(cmd_name)


def _print_version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from openetw._native import engine, reason

    click.echo(f"openetw, version {__version__} (engine: {engine()}, {reason()})")
    ctx.exit()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda ctx, _, value: _print_version(ctx, value),
              help="Show the version and which engine reads (native: the compiled core; python: the pure path), then exit.")  # fmt: skip
def cli() -> None:
    """Event Tracing for Windows on Linux: read, decode and write .etl files, manifests and sessions.

    \b
    Examples:
      openetw manifest install evntdrv.xml                 install a provider's manifest
      openetw session start Drv -p "Sample Driver" -o drv.etl
      openetw session start Web -p MyCompany.Web::info --event-ids 1,2 --pids 4242
      openetw trace -p "*MyCompany.Web"                    print events live (* = name hash)
      openetw session stop Drv
      openetw dump drv.etl --start 2.5 --end 10            records 2.5 s to 10 s into the trace
      openetw report --format csv drv.etl -o drv.csv
      openetw info --json drv.etl

    \b
    Provider names resolve in one order: a GUID; *Name (the name hash, on purpose); an installed
    manifest's provider; a provider registered by that name; else the name hash, announced on
    stderr and enabled by name as soon as a provider of that name registers.

    \b
    --json: what streams (records, per-file results) is JSON lines; a listing or a single
    result (session list/query, providers, info, manifest list) is one JSON document.

    \b
    Exit codes:
      0    success
      1    a runtime or state failure (no such session, the service refused, access denied)
      2    bad usage or bad input (unknown option, malformed spec or GUID, missing or
           unreadable input, an output that cannot be created, malformed data)
      130  interrupted
      n    openetw probe: the value its program gave exit(n)
    """


EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# Errors of the machine rather than of what the user gave: a full disk, an I/O error.
_RUNTIME_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.ENOMEM, errno.EAGAIN})


def _fail(message: str, code: int) -> int:
    click.echo(f"openetw: error: {' '.join(str(message).split())}", err=True)
    return code


def _code(value: int) -> int:
    """Every exit status is one of the table's: 0, 1, 2 or 130."""
    return value if value in (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED) else EXIT_FAILURE


def _show_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    click.echo(f"openetw: warning: {message}", err=True)


def _os_error(exc: OSError) -> int:
    where = f"{exc.filename}: " if exc.filename else ""
    code = EXIT_FAILURE if exc.errno in _RUNTIME_ERRNOS else EXIT_USAGE
    return _fail(f"{where}{exc.strerror or exc}", code)


def _silence_stdout() -> None:
    """After a failed write to stdout, the interpreter's last flush must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the command, maps errors to one line on stderr and an exit code (the
    table in ``openetw --help``). Library warnings become ``openetw: warning:`` lines."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", ProviderNameWarning)
        warnings.showwarning = _show_warning
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="openetw", standalone_mode=False)
        sys.stdout.flush()
    except click.exceptions.Abort:
        click.echo("openetw: aborted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        return _code(exc.exit_code)
    except click.FileError as exc:
        return _fail(exc.format_message(), EXIT_USAGE)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "openetw"
        return _fail(f"{exc.format_message()} (see '{where} --help')", EXIT_USAGE)
    except click.ClickException as exc:
        exc.show()
        return _code(exc.exit_code)
    except ReportedFailure as exc:
        if not str(exc):  # the command said everything already: a probe program's exit(n) is its status
            return exc.exit_code & 0xFF
        return _fail(str(exc), _code(exc.exit_code))
    except OpenEtwError as exc:
        return _fail(str(exc), _code(exc.exit_code))
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError as exc:
        _silence_stdout()
        return _os_error(exc)
    except RecursionError:
        return _fail("the input nests too deeply to process", EXIT_USAGE)
    except (UnicodeError, ValueError) as exc:  # malformed data a parser did not wrap
        return _fail(f"malformed input: {exc}", EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - the one place where any failure becomes a message
        return _fail(f"internal error ({type(exc).__name__}): {exc}", EXIT_FAILURE)
    return EXIT_OK


def console_main() -> None:
    sys.exit(main())
