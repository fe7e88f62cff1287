"""The packages keep their order: arrows point down, nothing imports ``cli/``, no package reaches into
another's private names, and the package graph has no cycle.

Every module under ``src/openetw`` is parsed (never imported); every import counts, at module level,
inside functions and under ``TYPE_CHECKING`` alike, and so do the module paths of a package's lazy-name
table (``_LAZY``, see ``openetw._lazy``), which are imports that run on first use. A module belongs to
its top-level folder under ``openetw/``, or is a package of its own when it is a top-level module.
``python tests/test_order.py`` prints every edge that breaks a rule.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "openetw"

# The layers, lowest first. A package may import packages of its own rank or below, never above.
# The engine holds the pure layers and the shells that are ETW itself (DESIGN.md, "Layers"); the
# read model is the one seam every application builds on; applications sit on the engine and the
# read model. Programs put applications together: ``daemon`` is the trace service with the sinks
# that plug into it (the Event Log's channels, the fleet's stream), and the viewer a web shell
# over the read model and the Event Log. ``testing`` is the kit tests build events with: it may use
# any layer but the command, and nothing in the product imports it. ``cli`` is the top, and
# ``__main__`` its entry point (``python -m openetw``).
ENGINE, READ_MODEL, APPLICATION, PROGRAM, TESTING, CLI = 1, 2, 3, 4, 5, 6
# ``_native``'s header generators (``python -m openetw._native.gen``) are a build step: they read the
# one definition of each constant (etl, ipc, kernel) to render the C headers, and nothing that runs
# imports them. They are a node of their own, above the engine, so that the compiled core's loader
# (which imports nothing of openetw) is not tied into a cycle with the layers it serves.
BUILD_TOOLS = "openetw._native.gen"
RANKS: dict[str, int] = {
    # pure layers and the engine
    "etl": ENGINE, "manifest": ENGINE, "tdh": ENGINE, "evtx": ENGINE, "session": ENGINE,
    "symbols": ENGINE, "nettrace": ENGINE, "perfdata": ENGINE,
    "ipc": ENGINE, "service": ENGINE, "provider": ENGINE, "consumer": ENGINE, "kernel": ENGINE,
    "controller": ENGINE, "mc": ENGINE, "_native": ENGINE,
    "store": ENGINE,  # the old path of manifest/store/, kept for one release
    # the top-level modules
    "__init__": ENGINE, "_lazy": ENGINE, "_moved": ENGINE, "errors": ENGINE, "guids": ENGINE, "hostinfo": ENGINE,
    "provider_names": ENGINE, "safeio": ENGINE,
    # the read model
    "events": READ_MODEL,
    # applications
    "eventlog": APPLICATION, "export": APPLICATION, "report": APPLICATION, "probe": APPLICATION,
    "fleet": APPLICATION,
    "probing": APPLICATION,  # the old path of probe/run/, kept for one release
    # programs
    "daemon": PROGRAM, "viewer": PROGRAM,
    "testing": TESTING, "_native.gen": TESTING,
    "cli": CLI, "__main__": CLI,
}  # fmt: skip
CLI_ENTRY = "__main__"  # ``python -m openetw``: the one module that may import cli

# Private (``_``-named) modules every package may import: they are shared infrastructure, not one
# package's internals. ``_native`` is the compiled core's loader (``module``, ``engine``), ``_lazy``
# the lazy-name helper every package's ``__getattr__`` delegates to, and ``_moved`` what keeps a
# moved module's old path importable.
SHARED_PRIVATE = frozenset({"_native", "_lazy", "_moved"})

# Edges that break a rule today and are being removed by work under way elsewhere, each with the
# reason. Keep this short: a new edge that breaks a rule is fixed, not listed.
KNOWN: dict[tuple[str, str], str] = {
    ("upward", "consumer -> fleet"): "UserTrace(streams=['nats://...']), a documented form, opens the fleet's stream"
    " by its address (consumer.trace._stream_at, on first use only; a Source object, StreamSource included, needs no"
    " import). It goes once the read model opens any source by its address, streams included",
}
# Packages that may import other packages' private modules, with the reason.
PRIVATE_ACCESS: dict[str, str] = {
    "testing": "the tests' kit: like the tests, it switches the compiled core off (pure_engine) and"
    " builds indexes with the consumer's own builder to compare the two",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    line: int
    target: str  # the imported module, dotted
    name: str | None = None  # the name imported from it (``from target import name``)

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"


def module_names() -> Iterator[tuple[str, Path]]:
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


MODULES = dict(module_names())


def package_of(dotted: str) -> str:
    """The package a dotted ``openetw`` name belongs to (``openetw`` itself is ``__init__``)."""
    if dotted.startswith(BUILD_TOOLS):
        return "_native.gen"
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path) -> Iterator[Import]:
    return _imports_in(module, path, path.read_text())


def _imports_in(module: str, path: Path, source: str) -> Iterator[Import]:
    tree = ast.parse(source, filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "openetw":
                    yield Import(module, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, path, node)
            if target.split(".")[0] != "openetw":
                continue
            for alias in node.names:
                # ``from openetw.pkg import mod`` imports the module ``openetw.pkg.mod``
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:
                    yield Import(module, node.lineno, submodule)
                else:
                    yield Import(module, node.lineno, target, alias.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _names_lazy_table(node):
            yield from _lazy_table(module, node.value)


def _names_lazy_table(node: ast.Assign | ast.AnnAssign) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return any(isinstance(target, ast.Name) and target.id == "_LAZY" for target in targets)


def _lazy_table(module: str, value: ast.expr) -> Iterator[Import]:
    if isinstance(value, ast.Dict):
        for key, target in zip(value.keys, value.values, strict=True):
            if isinstance(target, ast.Constant) and isinstance(target.value, str) and isinstance(key, ast.Constant):
                yield Import(module, target.lineno, target.value, str(key.value))


def all_imports() -> list[Import]:
    return [found for module, path in MODULES.items() for found in imports_of(module, path)]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(imports: list[Import]) -> list[tuple[str, str, str]]:
    """(rule, edge ``from -> to``, where) for every import that breaks a rule, cycles aside."""
    found = []
    for imp in imports:
        source, target = package_of(imp.module), package_of(imp.target)
        if source == target:
            continue
        edge = f"{source} -> {target}"
        if target == "cli" and source != CLI_ENTRY:
            found.append(("nothing imports cli", edge, imp.where))
        elif target != "cli" and RANKS[source] < RANKS[target]:
            found.append(("upward", edge, imp.where))
        segments = imp.target.split(".")[1:] + ([imp.name] if imp.name else [])
        private = [s for s in segments if _is_private(s) and s not in SHARED_PRIVATE]
        if private and source not in PRIVATE_ACCESS:
            found.append(("private", edge, f"{imp.where} ({'.'.join(segments)})"))
    return found


def package_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Package -> the packages it imports (the edges ``KNOWN`` lists left out)."""
    known = {where for rule, edge, where in violations(imports) if (rule, edge) in KNOWN}
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        if imp.where in known:
            continue
        source, target = package_of(imp.module), package_of(imp.target)
        if source != target:
            graph[source].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _report(imports: list[Import]) -> str:
    by_edge: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rule, edge, where in violations(imports):
        by_edge[(rule, edge)].append(where)
    lines = [
        f"{'known ' if (rule, edge) in KNOWN else ''}{rule}: {edge} ({len(wheres)}) e.g. {', '.join(wheres[:3])}"
        for (rule, edge), wheres in sorted(by_edge.items())
    ]
    graph = package_graph(imports)
    for component in cycles(graph):
        members = set(component)
        inner = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in members)
        lines.append(f"cycle: {component} through {inner}")
    return "\n".join(lines)


IMPORTS = all_imports()


def test_every_package_has_a_rank() -> None:
    unranked = sorted({package_of(name) for name in MODULES} - set(RANKS))
    assert not unranked, f"packages with no rank in RANKS: {unranked} (place each in its layer)"


def test_arrows_point_down_and_nothing_imports_cli_or_private_names() -> None:
    found = [(rule, edge, where) for rule, edge, where in violations(IMPORTS) if (rule, edge) not in KNOWN]
    assert not found, "\n".join(f"{rule}: {edge} at {where}" for rule, edge, where in found)


def test_the_known_exceptions_still_exist() -> None:
    present = {(rule, edge) for rule, edge, _ in violations(IMPORTS)}
    stale = sorted(set(KNOWN) - present)
    assert not stale, f"remove these from KNOWN, they no longer occur: {stale}"


def test_the_packages_form_no_cycle() -> None:
    graph = package_graph(IMPORTS)
    assert not cycles(graph), _report(IMPORTS)


def test_the_finder_sees_imports_inside_functions_and_lazy_tables() -> None:
    source = "def f():\n    from openetw.cli.main import main\n_LAZY = {'X': 'openetw.report.events'}\n"
    path = SRC / "consumer" / "example.py"
    found = list(_imports_in("openetw.consumer.example", path, source))
    assert {(imp.target, imp.name) for imp in found} == {("openetw.cli.main", "main"), ("openetw.report.events", "X")}
    rules = {rule for rule, _, _ in violations(found)}
    assert rules == {"nothing imports cli", "upward"}


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    print(_report(all_imports()) or "no violations")
