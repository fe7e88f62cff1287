"""The compiled core: which engine runs the hot paths, decided once per process.

Each compiled module here (``_read``: inflation, framing, header-level walks) is the twin of
pure-Python code that stays the reference; every caller asks :func:`module` for the compiled
twin and falls back to the pure code when it gets ``None``. The engine is ``"native"`` when the
read side's module imported and ``OPENETW_PURE`` is not ``"1"``, else ``"python"``:
``openetw --version`` and ``openetw info --json`` show it.

A compiled module is one C source file here (``_read.c`` builds ``openetw._native._read``);
``setup.py`` builds every one it finds, and a compiler that is missing or fails leaves the
install on the pure path (see docs/architecture.md, "The compiled core").
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Literal

__all__ = ["ENGINE", "PURE_VARIABLE", "engine", "module", "reason"]

PURE_VARIABLE = "OPENETW_PURE"
"""Set to ``1`` to run the pure-Python reference even where the compiled core is built."""

Engine = Literal["native", "python"]

_loaded: dict[str, ModuleType | None] = {}
_why: dict[str, str] = {}


def _import(name: str) -> ModuleType | None:
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(f"{__name__}.{name}")
        except ImportError as exc:  # not built here (no compiler at install time) or built for another Python
            _loaded[name] = None
            _why[name] = str(exc)
    return _loaded[name]


def _decide() -> Engine:
    if os.environ.get(PURE_VARIABLE, "") == "1":
        return "python"
    return "native" if _import("_read") is not None else "python"


ENGINE: Engine = _decide()
"""``"native"`` or ``"python"``, for the whole process."""


def engine() -> Engine:
    """The engine this process runs: ``"native"`` (compiled core) or ``"python"`` (pure reference)."""
    return ENGINE


def module(name: str) -> ModuleType | None:
    """The compiled module ``openetw._native.<name>`` when the engine is native and it is built, else ``None``."""
    if ENGINE != "native":
        return None
    return _import(name)


def reason() -> str:
    """Why the engine is what it is, in a few words (for ``openetw --version``)."""
    if ENGINE == "native":
        return "compiled core"
    if os.environ.get(PURE_VARIABLE, "") == "1":
        return f"{PURE_VARIABLE}=1"
    return f"compiled core not built ({_why.get('_read', 'not found')})"
