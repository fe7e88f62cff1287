"""The ``openetw`` command. The one place where exceptions become messages and exit codes."""

from __future__ import annotations

import sys

import click

from openetw import __version__
from openetw.cli.failure import ReportedFailure
from openetw.errors import OpenEtwError

# Each subcommand's module, imported only when that command runs (or when --help lists them all),
# so a command pays for its own imports only.
COMMAND_MODULES: dict[str, str] = {
    "dump": "etl_commands", "info": "etl_commands", "relog": "etl_commands",
    "kernel": "kernel_commands",
    "manifest": "manifest_commands",
    "mc": "mc_commands",
    "providers": "session_commands", "service": "session_commands", "session": "session_commands", "trace": "session_commands",
    "report": "decode_commands",
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


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="openetw")
def cli() -> None:
    """Event Tracing for Windows on Linux: read, decode and write .etl files, manifests and sessions."""


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
