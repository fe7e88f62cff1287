"""The schema-registry builder under its former name: it is ``openetw.events.registry`` now
(kept here for one release)."""

from __future__ import annotations

from openetw.events.registry import LazyManifestRegistry, build_registry, installed_manifests, manifest_paths

__all__ = ["LazyManifestRegistry", "build_registry", "installed_manifests", "manifest_paths"]
