"""Manifest reading for the store and the commands: the manifest package's own safe loaders."""

from __future__ import annotations

from pathlib import Path

from openetw.errors import ManifestError
from openetw.manifest import load_manifest as read_manifest
from openetw.manifest import load_manifests as read_manifests
from openetw.manifest.xmlread import MAX_INPUT_BYTES
from openetw.safeio import read_regular_file


def read_manifest_bytes(path: str | Path, what: str = "cannot read manifest") -> bytes:
    """The bytes of a regular file of at most ``MAX_INPUT_BYTES``; ``ManifestError`` otherwise."""
    try:
        return read_regular_file(Path(path), MAX_INPUT_BYTES)
    except OSError as error:
        raise ManifestError(f"{what}: {error.strerror or error}", path=str(path)) from None


__all__ = ["read_manifest", "read_manifest_bytes", "read_manifests"]
