"""The read model sits between the engine and the applications: ``events/`` imports the engine
(and pure layers), never an application or ``cli/``; the engine and the pure layers never import
``events/``. Imports inside functions count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import openetw

SRC = Path(openetw.__file__).parent
APPLICATIONS = ("cli", "eventlog", "export", "fleet", "probing", "report", "service", "stream", "viewer")
BELOW = ("consumer", "controller", "etl", "evtx", "ipc", "kernel", "manifest", "mc", "provider", "session", "store", "tdh")


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name.split(".")[1] for name in found if name.startswith("openetw.") and name.count(".") >= 1}


@pytest.mark.parametrize("module", sorted(p.relative_to(SRC).as_posix() for p in (SRC / "events").rglob("*.py")))
def test_the_read_model_imports_no_application(module: str) -> None:
    wrong = sorted(_imported(SRC / module) & set(APPLICATIONS))
    assert not wrong, f"{module} imports {wrong}"


@pytest.mark.parametrize("package", BELOW)
def test_nothing_below_imports_the_read_model(package: str) -> None:
    wrong = sorted(p.relative_to(SRC).as_posix() for p in (SRC / package).rglob("*.py") if "events" in _imported(p))
    assert not wrong, f"{wrong} import openetw.events"


def test_the_finder_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from openetw.viewer.xpath import xpath_rows\n")
    assert _imported(path) == {"viewer"}
