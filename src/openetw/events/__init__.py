"""The read model: what every application needs from a trace, between the engine and them.

One schema-registry builder (``registry``), the decoded event and its text (``decoded``,
``text``), one way to open any source as records under one damage policy (``sources``) and one
Event Log XPath with back ends for SQL, columns and records (``xpath``). It imports the engine
(``etl``, ``tdh``, ``evtx``, ``consumer``, ``store``, ``manifest``), never an application or
``cli``. Each name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.events.registry import LazyManifestRegistry, build_registry

__all__ = ["LazyManifestRegistry", "build_registry"]

_LAZY: dict[str, str] = {
    "LazyManifestRegistry": "openetw.events.registry",
    "build_registry": "openetw.events.registry",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
