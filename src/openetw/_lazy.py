"""Names a package loads on first use (PEP 562 ``__getattr__``), so importing it stays cheap.

A package keeps a table, name → the module that defines it, and delegates to :func:`load`,
importing this module inside its ``__getattr__`` so that importing the package loads nothing more::

    def __getattr__(name: str) -> object:
        from openetw._lazy import load

        return load(__name__, _LAZY, globals(), name)

A name whose module is the package's submodule of that name is the submodule itself.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

__all__ = ["load"]


def load(package: str, table: Mapping[str, str], namespace: MutableMapping[str, object] | None, name: str) -> object:
    """``name`` of ``package`` from the module ``table`` names, kept in ``namespace`` (the
    package's globals; ``None``: looked up each time); ``AttributeError`` for a name not in it."""
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    import importlib  # not loaded at interpreter start: only when a name is first used

    loaded = importlib.import_module(module)
    value = loaded if module == f"{package}.{name}" else getattr(loaded, name)
    if namespace is not None:
        namespace[name] = value
    return value
