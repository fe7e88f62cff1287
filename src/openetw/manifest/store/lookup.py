"""Provider names against the installed manifests: the shell half of ``openetw.provider_names``."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from openetw.errors import OpenEtwError
from openetw.provider_names import ResolvedProvider, resolve_provider_name

__all__ = ["installed_provider_guid", "resolve_provider"]


def installed_provider_guid(name: str) -> uuid.UUID | None:
    """The GUID of the installed manifest provider called ``name`` (user store first), if any.

    A damaged or unreadable store answers ``None``: the name then resolves further down the order.
    """
    from openetw.manifest.store.manifests import ManifestRegistry

    try:
        found = ManifestRegistry().find(name)
    except (OpenEtwError, OSError):
        return None
    return None if found is None else found.guid


def resolve_provider(
    provider: str | uuid.UUID,
    *,
    installed: bool = True,
    manifests: Callable[[str], uuid.UUID | None] | None = None,
    registered: Callable[[str], uuid.UUID | None] | None = None,
) -> ResolvedProvider:
    """``resolve_provider_name`` with the installed manifests (``installed``) after ``manifests``
    (say, the providers of the manifests a command was given)."""

    def manifest_lookup(name: str) -> uuid.UUID | None:
        found = manifests(name) if manifests is not None else None
        if found is None and installed:
            found = installed_provider_guid(name)
        return found

    return resolve_provider_name(provider, manifests=manifest_lookup, registered=registered)
