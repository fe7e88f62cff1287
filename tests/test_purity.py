"""The pure layers do no I/O behind the caller's back.

``etl/``, ``manifest/``, ``tdh/``, ``session/``, ``evtx/``, ``symbols/``, ``probe/lang/``,
``nettrace/``, ``perfdata/`` and the read model's XPath (``events/xpath/``; the rest of
``events/`` opens sources and manifests for applications) (and every pure layer added later:
list it in ``PURE_LAYERS``) take bytes and objects and give bytes and objects. None of their modules imports what does I/O or concurrency
(sockets, processes, threads, signals, memory maps, locks on files),
and only the functions listed in ``EDGES`` touch the file system: each takes a path from its
caller, says so in its name or signature, and is where a program that holds a path meets the
layer. Adding one is a decision: add it here with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import openetw

SRC = Path(openetw.__file__).parent
PURE_LAYERS = ("etl", "manifest", "tdh", "session", "evtx", "symbols", "probe/lang", "nettrace", "perfdata", "events/xpath")
# Shells that live in a pure layer's package, beside its pure modules: the stores of installed
# manifests (files, locks) are the manifest package's I/O half.
SHELLS_WITHIN = ("manifest/store/",)

FORBIDDEN_MODULES = frozenset({
    "asyncio", "ctypes", "fcntl", "http", "mmap", "multiprocessing", "select", "selectors", "shutil",
    "signal", "socket", "subprocess", "tempfile", "threading", "urllib",
})  # fmt: skip
# Calls that reach the file system (by name or method name; ``read_regular_file`` is openetw.safeio's).
FILE_CALLS = frozenset({
    "open", "read_bytes", "read_text", "write_bytes", "write_text", "iterdir", "listdir", "scandir",
    "exists", "is_dir", "is_file", "stat", "glob", "rglob", "mkdir", "unlink", "read_regular_file",
})  # fmt: skip

EDGES = {
    ("etl/reader.py", "_open"): "EtlReader and read_records given a path open it (a file object or bytes open nothing)",
    ("etl/writer.py", "EtlWriter.__init__"): "EtlWriter given a path creates the file (a file object is written as given)",
    ("manifest/builtin/__init__.py", "builtin_providers"): "scans the layouts openetw ships (its own package data, never a caller's path)",
    ("manifest/builtin/generate.py", "main"): "the generator, run by hand: reads the runtime's manifest, writes the shipped layouts",
    ("manifest/loader.py", "manifest_files"): "lists the manifests of a directory the caller named",
    ("manifest/loader.py", "expand_manifest_paths"): "the files a list of manifest paths names",
    ("manifest/parser.py", "load_manifest"): "reads the manifest file the caller named",
    ("tdh/wpp.py", "read_tmf_path"): "reads the TMF file or directory the caller named",
    ("tdh/mof_file.py", "schemas_from_mof_file"): "reads the MOF file the caller named",
    ("tdh/from_files.py", "LazyManifestRegistry.add_files"): "reads the manifest files the caller named (scanned for their providers)",
}


def _layer_modules() -> list[str]:
    modules = (path.relative_to(SRC).as_posix() for layer in PURE_LAYERS if (SRC / layer).is_dir() for path in (SRC / layer).rglob("*.py"))
    return sorted(module for module in modules if not module.startswith(SHELLS_WITHIN))


class _Finder(ast.NodeVisitor):
    """Forbidden imports anywhere, and file-system calls with the function they are made in."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.imports: list[tuple[int, str]] = []
        self.calls: list[tuple[int, str, str]] = []

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

    def visit_Import(self, node: ast.Import) -> None:
        self.imports += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] in FORBIDDEN_MODULES]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            self.imports.append((node.lineno, node.module or ""))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in FILE_CALLS:
            self.calls.append((node.lineno, name, ".".join(self.scope)))
        self.generic_visit(node)


def _find(module: str) -> _Finder:
    finder = _Finder()
    finder.visit(ast.parse((SRC / module).read_text(), filename=module))
    return finder


@pytest.mark.parametrize("module", _layer_modules())
def test_pure_modules_import_nothing_that_does_io(module: str) -> None:
    found = _find(module).imports
    assert not found, f"{module} imports {[name for _, name in found]} (lines {[line for line, _ in found]})"


@pytest.mark.parametrize("module", _layer_modules())
def test_only_the_listed_edges_touch_files(module: str) -> None:
    stray = [(line, name, where) for line, name, where in _find(module).calls if (module, where) not in EDGES]
    assert not stray, "\n".join(f"{module}:{line}: {name}() in {where or 'module level'} (not an edge listed in EDGES)" for line, name, where in stray)


def test_every_edge_exists_and_touches_files() -> None:
    for (module, where), reason in EDGES.items():
        assert reason
        calls = _find(module).calls
        assert any(scope == where for _, _, scope in calls), f"{module}: {where} is listed as an edge but touches no file"


def test_the_finder_sees_a_hidden_open() -> None:
    finder = _Finder()
    finder.visit(ast.parse("import socket\ndef decode(data):\n    return open('/tmp/x').read()\n"))
    assert finder.imports == [(1, "socket")]
    assert finder.calls == [(3, "open", "decode")]
