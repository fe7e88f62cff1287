"""Module paths kept for one release after their modules moved (``openetw.probe.<module>``,
``openetw.probing.<module>``, ``openetw.store.<module>``, ``openetw.kernel.probe``, the service's
Event Log and stream modules, ``openetw.consumer.stream_source``): each old
path imports the moved module itself (one module object, its own spec), and nothing stands at
the old path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import openetw

SRC = Path(openetw.__file__).parent
MOVED = {
    **{f"openetw.probe.{name}": f"openetw.probe.lang.{name}" for name in (
        "aggregate", "ast", "checker", "columnar", "compiler", "descriptions", "errors", "etw_types", "formatting",
        "lexer", "output", "parser", "program", "schema_types", "types",
    )},
    **{f"openetw.probing.{name}": f"openetw.probe.run.{name}" for name in (
        "adapter", "etw_writer", "kernel_columns", "kernel_probes", "kernel_symbols", "live", "providers", "runner",
    )},
    **{f"openetw.store.{name}": f"openetw.manifest.store.{name}" for name in (
        "describe", "files", "lookup", "manifests", "merge", "reading",
    )},
    "openetw.kernel.probe": "openetw.kernel.capabilities",
    # the Event Log's and the fleet's parts of the trace service, and the stream's live view
    "openetw.service.eventlog": "openetw.eventlog.service",
    "openetw.service.eventlog_writer": "openetw.eventlog.writer",
    "openetw.service.stream": "openetw.fleet.publisher",
    "openetw.consumer.stream_source": "openetw.fleet.source",
}  # fmt: skip


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_the_old_path_is_the_moved_module(old: str, new: str) -> None:
    moved = importlib.import_module(new)
    assert importlib.import_module(old) is moved
    assert moved.__spec__ is not None and moved.__spec__.name == new
    assert not (SRC / (old.removeprefix("openetw.").replace(".", "/") + ".py")).exists()


def test_an_old_path_first_imported_in_a_fresh_process_loads_the_module_once() -> None:
    code = (
        "import sys\nfrom openetw.probe.lexer import Lexer\nfrom openetw.probing.runner import ProbeRun\n"
        "import openetw.probe.lang.lexer as lexer, openetw.probe.run.runner as runner\n"
        "assert Lexer is lexer.Lexer and ProbeRun is runner.ProbeRun\n"
        "print(sorted(m for m in sys.modules if m.endswith(('.lexer', '.runner'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # both names of each module are in sys.modules, for one object (asserted in the child)
    assert done.stdout.strip() == str(sorted(["openetw.probe.lang.lexer", "openetw.probe.lexer", "openetw.probe.run.runner", "openetw.probing.runner"]))


def test_an_unknown_name_under_an_old_path_is_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("openetw.probe.no_such_module")
