"""Installed instrumentation manifests (the registry ``wevtutil im/um`` keeps on Windows).

``ManifestRegistry`` is the user store and the system store on disk (an I/O shell);
``merge_manifests`` (pure) combines several manifests that describe one provider, the later
source and the newer event version winning; ``provider_view`` turns the result into plain data.
"""

from __future__ import annotations

from openetw.manifest.store.describe import event_view, provider_view
from openetw.manifest.store.manifests import (
    DATA_DIR_ENV,
    InstalledProvider,
    ManifestRegistry,
    ManifestRejected,
    ManifestStore,
    Scope,
    default_data_dirs,
)
from openetw.manifest.store.merge import EventKey, MergedProvider, Override, SourcedEvent, find_merged, merge_manifests
from openetw.manifest.store.reading import read_manifest, read_manifests

__all__ = [
    "DATA_DIR_ENV",
    "EventKey",
    "InstalledProvider",
    "ManifestRegistry",
    "ManifestRejected",
    "ManifestStore",
    "MergedProvider",
    "Override",
    "Scope",
    "SourcedEvent",
    "default_data_dirs",
    "event_view",
    "find_merged",
    "merge_manifests",
    "provider_view",
    "read_manifest",
    "read_manifests",
]
