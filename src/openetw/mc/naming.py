"""Python names for what a manifest defines: modules, classes, methods, parameters, constants.

Every name is ASCII and a valid identifier; ``Names`` hands out unique ones within one scope
(a module's constants, a class's methods, a method's parameters), adding a suffix on a clash.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Iterable

__all__ = ["Names", "class_name", "constant_name", "identifier", "module_name", "snake_case"]

# Word boundaries inside CamelCase: "EventA" -> "Event_A", "IRPStart" -> "IRP_Start".
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SNAKE = re.compile(r"[a-z][a-z0-9_]*")
_NOT_WORD = re.compile(r"[^0-9A-Za-z]+")
_NOT_MODULE_CHAR = re.compile(r"[^a-z0-9_]")


def module_name(provider_name: str) -> str:
    """The module of a provider: its name lower-cased, each character an identifier cannot hold
    replaced by ``_`` ("Sample Driver" -> ``sample_driver``); a leading digit gets a ``_`` before it."""
    name = _NOT_MODULE_CHAR.sub("_", provider_name.lower()) or "_"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = "_" + name
    return name


@functools.lru_cache(maxsize=65536)
def snake_case(text: str) -> str:
    """``SampleEventA`` -> ``sample_event_a``, ``IRPStart`` -> ``irp_start``; may be empty."""
    if _SNAKE.fullmatch(text) and "__" not in text and not text.endswith("_"):
        return text
    return _NOT_WORD.sub("_", _CAMEL_BOUNDARY.sub("_", text)).strip("_").lower()


def identifier(text: str, prefix: str) -> str:
    """snake_case of ``text``, with ``prefix_`` before it when that is empty or starts with a digit."""
    name = snake_case(text)
    return name if name and not name[0].isdigit() else f"{prefix}_{name}".rstrip("_")


def constant_name(text: str, prefix: str) -> str:
    """An UPPER_SNAKE constant; ``prefix`` is put before names that would not be identifiers."""
    name = snake_case(text).upper()
    if not name or name[0].isdigit():
        name = f"{prefix}_{name}" if name else prefix
    return name


def class_name(module: str) -> str:
    """``sample_driver`` -> ``SampleDriverProvider``."""
    words = [word for word in module.split("_") if word]
    name = "".join(word[:1].upper() + word[1:] for word in words)
    if not name or name[0].isdigit():
        name = "Manifest" + name
    return name + "Provider"


class Names:
    """Unique identifiers within one scope. ``reserved`` names are never handed out."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._taken = set(reserved)

    def take(self, wanted: str, *alternatives: str) -> str:
        """``wanted`` if free, else the first free alternative, else ``wanted_2``, ``wanted_3``...

        ``wanted`` must be an identifier (a keyword is fine: it gets a suffix).
        """
        if not wanted.isidentifier():
            raise ValueError(f"not an identifier: {wanted!r}")
        for candidate in (wanted, *alternatives):
            if self._is_free(candidate):
                self._taken.add(candidate)
                return candidate
        number = 2
        while not self._is_free(f"{wanted}_{number}"):
            number += 1
        chosen = f"{wanted}_{number}"
        self._taken.add(chosen)
        return chosen

    def _is_free(self, name: str) -> bool:
        return name.isidentifier() and not keyword.iskeyword(name) and name not in self._taken

    def __contains__(self, name: object) -> bool:
        return name in self._taken
