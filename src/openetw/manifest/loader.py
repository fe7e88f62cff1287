"""Load many manifests at once, keeping going past the bad ones."""

from __future__ import annotations

from pathlib import Path

from openetw.errors import ManifestError
from openetw.manifest.model import Manifest
from openetw.manifest.parser import load_manifest

MANIFEST_SUFFIXES = (".xml", ".man")


def manifest_files(directory: Path) -> list[Path]:
    """The ``*.xml`` / ``*.man`` files directly in ``directory``, sorted by name."""
    return sorted(
        path for path in directory.iterdir() if path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES
    )


def load_manifests(paths: list[str | Path] | tuple[str | Path, ...]) -> tuple[list[Manifest], list[ManifestError]]:
    """Every manifest named by ``paths`` (files, or directories of ``*.xml`` / ``*.man`` files).

    Returns the manifests that loaded, in order, and one ``ManifestError`` per file that did not
    (or per path that does not exist). Parse warnings are dropped; use ``load_manifest`` for them.
    """
    manifests: list[Manifest] = []
    errors: list[ManifestError] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            try:
                files = manifest_files(path)
            except OSError as error:
                errors.append(ManifestError(f"cannot list directory: {error.strerror or error}", path=str(path)))
                continue
            if not files:
                errors.append(ManifestError("directory holds no *.xml or *.man file", path=str(path)))
        elif path.exists():
            files = [path]
        else:
            errors.append(ManifestError("no such file or directory", path=str(path)))
            continue
        for file in files:
            try:
                manifests.append(load_manifest(file).manifest)
            except ManifestError as error:
                errors.append(error)
    return manifests, errors
