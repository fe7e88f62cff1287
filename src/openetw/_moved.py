"""Module paths kept importable for one release after their modules moved.

``keep_old_paths("openetw.probe", "openetw.probe.lang", {"lexer", ...})``, run by the old
package, makes ``import openetw.probe.lexer`` give ``openetw.probe.lang.lexer`` itself (the same
module object, loaded on first use), so code written against the old paths runs unchanged while
no file stands at the old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType

__all__ = ["keep_old_paths"]


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``old.NAME`` for each moved NAME and loads it as ``new.NAME``."""

    def __init__(self, old: str, targets: Mapping[str, str]) -> None:
        self.old, self.targets = old, dict(targets)  # old NAME -> the dotted path of its module now
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != self.old or name not in self.targets:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.targets[spec.name.rpartition(".")[2]])
        self._specs[spec.name] = module.__spec__  # the import system sets the old path's spec on it
        return module

    def exec_module(self, module: ModuleType) -> None:
        # It ran at its new path already. The spec the import system just set is the old path's:
        # the module keeps its own.
        old_spec = module.__spec__
        assert old_spec is not None
        module.__spec__ = self._specs.pop(old_spec.name)


def keep_old_paths(old: str, new: str, names: Iterable[str] | Mapping[str, str]) -> None:
    """Make ``old.NAME`` import ``new.NAME`` for every NAME of ``names`` (once per ``old``); a
    mapping names, for each old NAME, the module it became (``{"stream": "openetw.fleet.publisher"}``:
    a module that moved to another package under another name; ``new`` is then unused)."""
    targets = dict(names) if isinstance(names, Mapping) else {name: f"{new}.{name}" for name in names}
    if not any(isinstance(finder, _MovedModules) and finder.old == old for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules(old, targets))
