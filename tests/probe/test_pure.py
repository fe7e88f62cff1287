"""The language package is pure: no files, sockets, threads or clocks, and no shell imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import openetw.probe.lang

PACKAGE = Path(openetw.probe.lang.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
FORBIDDEN_MODULES = {
    "asyncio", "io", "os", "pathlib", "select", "selectors", "shutil", "signal", "socket", "subprocess", "sys",
    "tempfile", "threading", "time", "multiprocessing", "numpy",
}  # fmt: skip
FORBIDDEN_PACKAGES = ("openetw.probe.run", "openetw.consumer", "openetw.cli", "openetw.service", "openetw.controller")
FORBIDDEN_CALLS = {"open", "print", "input", "eval"}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_does_no_io(module: Path) -> None:
    tree = ast.parse(module.read_text(), filename=str(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names = {node.module or ""}
        else:
            names = set()
        roots = {name.split(".")[0] for name in names}
        assert not roots & FORBIDDEN_MODULES, f"{module.name}:{node.lineno} imports {roots & FORBIDDEN_MODULES}"
        assert not any(name.startswith(FORBIDDEN_PACKAGES) for name in names), f"{module.name}:{node.lineno} imports a shell"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{module.name}:{node.lineno} calls {node.func.id}()"
