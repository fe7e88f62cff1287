"""The ``openetw`` command. The one place where exceptions become messages and exit codes."""

from __future__ import annotations

import sys

import click

from openetw import __version__
from openetw.cli.failure import ReportedFailure
from openetw.errors import OpenEtwError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="openetw")
def cli() -> None:
    """Event Tracing for Windows on Linux: read, decode and write .etl files, manifests and sessions."""


def _register() -> None:
    from openetw.cli import etl_commands, kernel_commands, manifest_commands, mc_commands, session_commands

    etl_commands.register(cli)
    kernel_commands.register(cli)
    manifest_commands.register(cli)
    mc_commands.register(cli)
    session_commands.register(cli)
    from openetw.cli import probe_commands

    probe_commands.register(cli)
    try:
        from openetw.cli import decode_commands
    except ImportError:  # pragma: no cover - while a layer is being built
        return
    decode_commands.register(cli)


_register()


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the command, maps errors to one line on stderr and an exit code."""
    try:
        cli.main(args=argv, prog_name="openetw", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("openetw: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except ReportedFailure as exc:
        if str(exc):  # an empty message: the command said everything already (a probe's exit(n))
            click.echo(f"openetw: error: {exc}", err=True)
        return exc.exit_code
    except OpenEtwError as exc:
        click.echo(f"openetw: error: {exc}", err=True)
        return exc.exit_code
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


def console_main() -> None:
    sys.exit(main())
