"""The one schema-registry builder, as the applications use it.

``build_registry`` makes a ``SchemaRegistry`` from the installed manifests, manifests already
loaded, manifest files and directories, MOF and TMF files (manifests parsed when a record of
their provider is first looked up: ``LazyManifestRegistry``). The building itself is the
engine's (``openetw.tdh.from_files.build_registry``), because ``UserTrace``, the Event Log's
channel sessions and the live formatter build their registries with it too and the engine may
not import the read model; the installed manifests are the manifest store's
(``openetw.manifest.store.manifests.installed_manifests``). This module is where everything above
the engine takes them from.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from openetw.errors import ManifestError
from openetw.manifest.model import Manifest
from openetw.manifest.store.manifests import installed_manifests
from openetw.tdh.from_files import LazyManifestRegistry, manifest_paths
from openetw.tdh.from_files import build_registry as _build

__all__ = ["LazyManifestRegistry", "build_registry", "installed_manifests", "manifest_paths"]


def build_registry(
    paths: Iterable[str | Path] = (),
    *,
    installed: bool = True,
    manifests: Iterable[Manifest] = (),
    mof: Iterable[str | Path] = (),
    tmf: Iterable[str | Path] = (),
    empty_is_error: bool = False,
) -> LazyManifestRegistry:
    """The installed manifests (when ``installed``: the system's, then the user's), then
    ``manifests``, then the manifests ``paths`` name, then the ``mof`` and ``tmf`` files, each
    source winning over those before it (``tdh.from_files.build_registry``). Problems, the
    store's first, are in ``registry.errors``."""
    errors: list[ManifestError] = []
    stored = installed_manifests(errors) if installed else []
    registry = _build(paths, manifests=[*stored, *manifests], mof=mof, tmf=tmf, empty_is_error=empty_is_error)
    registry.errors[:0] = errors
    return registry
