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
}  # fmt: skip


class _LazyGroup(click.Group):
    """A group whose commands are registered by their module when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

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
