"""The session package is pure: no sockets, files, threads or clocks anywhere in it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import openetw.session
from openetw.session import Caller, SessionConfig, SessionTable

PACKAGE = Path(openetw.session.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
FORBIDDEN_MODULES = {
    "asyncio", "datetime", "io", "os", "pathlib", "select", "selectors", "shutil", "signal",
    "socket", "subprocess", "sys", "tempfile", "threading", "time", "multiprocessing",
}  # fmt: skip
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval"}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_does_no_io(module: Path) -> None:
    tree = ast.parse(module.read_text(), filename=str(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names = {(node.module or "").split(".")[0]}
        else:
            names = set()
        assert not names & FORBIDDEN_MODULES, f"{module.name}:{node.lineno} imports {names & FORBIDDEN_MODULES}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{module.name}:{node.lineno} calls {node.func.id}()"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_modules_stay_small(module: Path) -> None:
    assert len(module.read_text().splitlines()) <= 420


def test_public_names_exist() -> None:
    for name in openetw.session.__all__:
        assert hasattr(openetw.session, name), name
    assert sorted(openetw.session.__all__) == sorted(set(openetw.session.__all__))


def test_commands_return_actions_as_plain_data() -> None:
    table = SessionTable()
    table.create(SessionConfig("A"), Caller(1, 1))
    table.enable("A", "Some.Provider")
    table.register_provider(3, "Some.Provider", 5, "app")
    actions = table.start("A") + table.flush("A") + table.stop("A")
    assert actions and all(dataclasses.is_dataclass(a) and a.__dataclass_params__.frozen for a in actions)  # type: ignore[attr-defined]
