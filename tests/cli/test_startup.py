"""What the ``openetw`` command loads to start: ``--help`` loads no command, ``info`` reads without
the consumer, numpy, the probe compiler or the decoders, a writing program loads no reader,
no socket code before a service is there, and no pool or encoder before a session enables it.

Each check runs in a fresh interpreter and counts the modules it loaded (counted, never timed):
a budget of modules in all, and the layers that must stay out.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from openetw.cli.main import COMMAND_MODULES, COMMAND_SUMMARIES, cli
from tests.conftest import corpus_path

# Modules of the standard library, click and openetw that ``python -c pass`` does not load either.
HELP_BUDGET = 150
INFO_BUDGET = 260
WRITE_BUDGET = 98  # 94 with the json this check prints with


def loaded_by(code: str) -> list[str]:
    """Every module in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    # Nothing of the caller's: no service on this socket, no data or manifest directories.
    env = {"OPENETW_SOCKET": "/nonexistent/openetw-test.sock", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_loads(*args: str) -> list[str]:
    code = (
        "import contextlib, io\nfrom openetw.cli.main import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({list(args)!r}) == 0\n"
    )
    return loaded_by(code)


def found(modules: list[str], *prefixes: str) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_loads_no_command_module() -> None:
    modules = command_loads("--help")
    assert not found(modules, "numpy", "openetw.consumer", "openetw.probe", "openetw.tdh", "openetw.etl", "openetw.report")
    assert [m for m in modules if m.startswith("openetw.cli.")] == ["openetw.cli.failure", "openetw.cli.main"]
    assert len(modules) <= HELP_BUDGET, f"openetw --help loaded {len(modules)} modules"


def test_info_reads_without_the_consumer_numpy_the_probes_or_the_decoders() -> None:
    path = corpus_path("etl", "perfview", "primitive-types.etl")
    modules = command_loads("info", "--json", "--no-installed", str(path))
    assert "openetw.etl.reader" in modules  # it did read the file
    assert not found(modules, "numpy", "openetw.probe", "openetw.report.perfview", "openetw.tdh.format", "openetw.export")
    assert found(modules, "openetw.consumer") == ["openetw.consumer", "openetw.consumer.evtx_files", "openetw.consumer.formats"]
    assert len(modules) <= INFO_BUDGET, f"openetw info loaded {len(modules)} modules"


def test_a_writing_program_stays_within_its_budget() -> None:
    code = (
        "import openetw\n"
        'provider = openetw.TraceLoggingProvider("Demo.Startup")\n'
        'provider.write("Started", port=80, host="example")\n'
    )
    modules = loaded_by(code)
    assert "openetw.provider.runtime" in modules
    assert not found(modules, "numpy", "click", "openetw.consumer", "openetw.tdh", "openetw.report", "openetw.manifest")
    assert "openetw.etl.reader" not in modules  # a writer reads no .etl
    # Loaded only once a service's socket is there or a session hands over a pool (none here).
    assert not found(modules, "openetw.ipc.protocol", "openetw.ipc.paths", "openetw.ipc.pool", "socket", "select", "mmap", "pathlib")
    # Neither hashing the name nor a write that no session takes needs these.
    assert not found(modules, "hashlib", "ipaddress", "numbers", "datetime", "openetw.etl.framing", "openetw.session.config", "openetw.provider_names")
    # No service and no session: no enable state, encoder or the dataclasses (and inspect, ast) they need.
    assert not found(modules, "openetw.session.enable", "openetw.ipc.wire", "dataclasses", "inspect", "ast")
    assert not found(modules, "openetw.provider.encode", "openetw.etl.payload", "openetw.etl.schema", "openetw.etl.tracelogging", "openetw.etl.extended")
    assert len(modules) <= WRITE_BUDGET, f"a writing program loaded {len(modules)} modules"


@pytest.mark.parametrize("name", sorted(COMMAND_MODULES))
def test_the_help_listing_is_each_commands_own_summary(name: str) -> None:
    """``COMMAND_SUMMARIES`` says what the command's docstring says, so the lazy listing is the one
    click would print after loading every command."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert name in COMMAND_SUMMARIES, f"add {name!r} to COMMAND_SUMMARIES"
    summary = click.Command(name, help=COMMAND_SUMMARIES[name])
    for limit in (45, 80, 400):
        assert summary.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_every_summary_names_a_command() -> None:
    assert set(COMMAND_SUMMARIES) == set(COMMAND_MODULES)
