"""The one schema-registry builder, as the applications use it.

``build_registry`` makes a ``SchemaRegistry`` from the installed manifests, manifests already
loaded, manifest files and directories, MOF and TMF files (manifests parsed when a record of
their provider is first looked up: ``LazyManifestRegistry``). Its one implementation lives in
the engine (``openetw.store.schemas``), because ``UserTrace`` and the Event Log's channel
sessions build their registries with it too and the engine may not import the read model; this
module is where everything above the engine takes it from.
"""

from __future__ import annotations

from openetw.store.schemas import LazyManifestRegistry, build_registry, installed_manifests, manifest_paths

__all__ = ["LazyManifestRegistry", "build_registry", "installed_manifests", "manifest_paths"]
