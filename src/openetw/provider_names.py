"""One way to turn what a user types for a provider into a provider GUID.

Every caller resolves a provider through :func:`resolve_provider_name`: ``-p NAME`` of the
session commands, ``trace`` and ``probe``, ``Session.enable``, the consumer's ``Provider(name)``,
``EtlIndex.select`` and ``dump --provider``. The order is fixed and documented:

1. **A GUID**: 8-4-4-4-12 hex digits, braces optional. Anything in braces, or of a GUID's shape
   (five dash-separated groups of 8, 4, 4, 4 and 12 characters), that is not a valid GUID is an
   error, never a name.
2. **``*Name``**: the TraceLogging name hash of ``Name``, on purpose (the convention of xperf,
   WPR and PerfView). Nothing is announced.
3. **An installed manifest's provider** of that name (case-insensitive).
4. **A provider registered with the trace service** by that name (a registration carries the
   provider's name, so manifest providers are found by name too).
5. Only then **the TraceLogging name hash**, announced: the result says ``source == "hash"`` and
   :meth:`ResolvedProvider.announcement` is the sentence to show (the CLI prints it on stderr,
   the library raises it as a :class:`ProviderNameWarning`). A session enable by such a name stays
   *pending by name*: when a manifest or TraceLogging provider of that name registers later, it is
   the one enabled.

The lookups of steps 3 and 4 are passed in, so this module does no I/O.
"""

from __future__ import annotations

import re
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from openetw.errors import InvalidArgument
from openetw.guids import provider_guid_from_name

__all__ = [
    "EXPLICIT_HASH_PREFIX",
    "ProviderNameWarning",
    "ResolvedProvider",
    "parse_provider_guid",
    "resolve_provider_name",
]

EXPLICIT_HASH_PREFIX = "*"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_GUID_SHAPE = re.compile(r"[^\s-]{8}-[^\s-]{4}-[^\s-]{4}-[^\s-]{4}-[^\s-]{12}")

Lookup = Callable[[str], "uuid.UUID | None"]

SOURCES = ("guid", "explicit-hash", "manifest", "registered", "hash")


class ProviderNameWarning(UserWarning):
    """A provider name that nothing knows was taken as its TraceLogging name hash."""


@dataclass(frozen=True)
class ResolvedProvider:
    """What a provider reference turned into. ``source`` is one of ``guid``, ``explicit-hash``,
    ``manifest``, ``registered`` or ``hash`` (the announced fallback)."""

    guid: uuid.UUID
    name: str | None
    source: str

    @property
    def hashed(self) -> bool:
        """True when the name was hashed because no provider of that name is known."""
        return self.source == "hash"

    def announcement(self, *, pending: bool = False) -> str:
        """The sentence that tells a user the name was hashed, and how to say so on purpose."""
        tail = (
            "; the session enables it by name when a provider of that name registers" if pending else ""
        )
        return (
            f"no installed manifest or registered provider is named {self.name!r}: using its"
            f" TraceLogging name hash {self.guid}{tail} (write '{EXPLICIT_HASH_PREFIX}{self.name}'"
            " to mean the hash, or check the spelling)"
        )

    def warn(self, *, pending: bool = False, stacklevel: int = 3) -> None:
        """Raise the announcement as a :class:`ProviderNameWarning` when the name was hashed."""
        if self.hashed:
            warnings.warn(self.announcement(pending=pending), ProviderNameWarning, stacklevel=stacklevel)


def parse_provider_guid(text: str | uuid.UUID) -> uuid.UUID | None:
    """The GUID ``text`` spells, ``None`` when it is a name; ``InvalidArgument`` for a malformed
    GUID (anything in braces, or of a GUID's shape, that is not one)."""
    if isinstance(text, uuid.UUID):
        return text
    stripped = text.strip()
    opened, closed = stripped.startswith("{"), stripped.endswith("}")
    core = stripped.removeprefix("{").removesuffix("}")
    if _GUID.fullmatch(core) and opened == closed:
        return uuid.UUID(core)
    if opened or _GUID_SHAPE.fullmatch(core):
        raise InvalidArgument(
            f"{text!r} is not a valid GUID (8-4-4-4-12 hex digits, braces optional); a provider name is never written so"
        )
    return None


def resolve_provider_name(
    provider: str | uuid.UUID,
    *,
    manifests: Lookup | None = None,
    registered: Lookup | None = None,
) -> ResolvedProvider:
    """Resolve ``provider`` in the documented order (see the module doc).

    ``manifests(name)`` and ``registered(name)`` return the GUID of an installed manifest's
    provider, or of a provider registered by that name, or ``None``.
    """
    if isinstance(provider, uuid.UUID):
        return ResolvedProvider(provider, None, "guid")
    value: object = provider  # callers of an untyped API may pass anything
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument("a provider is a GUID or a name")
    text = value.strip()
    guid = parse_provider_guid(text)
    if guid is not None:
        return ResolvedProvider(guid, None, "guid")
    if text.startswith(EXPLICIT_HASH_PREFIX):
        name = text[len(EXPLICIT_HASH_PREFIX) :].strip()
        if not name:
            raise InvalidArgument(f"{text!r}: '{EXPLICIT_HASH_PREFIX}' needs a provider name after it")
        return ResolvedProvider(provider_guid_from_name(name), name, "explicit-hash")
    for source, lookup in (("manifest", manifests), ("registered", registered)):
        if lookup is not None:
            found = lookup(text)
            if found is not None:
                return ResolvedProvider(found, text, source)
    return ResolvedProvider(provider_guid_from_name(text), text, "hash")
