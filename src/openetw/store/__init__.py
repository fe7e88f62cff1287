"""Moved to ``openetw.manifest.store`` (installed instrumentation manifests): this package and its
module paths (``openetw.store.lookup``, ...) are kept for one release."""

from __future__ import annotations

from openetw._moved import keep_old_paths
from openetw.manifest.store import (
    DATA_DIR_ENV,
    EventKey,
    InstalledProvider,
    ManifestRegistry,
    ManifestRejected,
    ManifestStore,
    MergedProvider,
    Override,
    Scope,
    SourcedEvent,
    default_data_dirs,
    event_view,
    find_merged,
    merge_manifests,
    provider_view,
    read_manifest,
    read_manifests,
)

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

keep_old_paths(__name__, "openetw.manifest.store", ("describe", "files", "lookup", "manifests", "merge", "reading"))
