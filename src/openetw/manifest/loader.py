"""Load many manifests at once, keeping going past the bad ones."""

from __future__ import annotations

from collections.abc import Iterable
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


def expand_manifest_paths(paths: Iterable[str | Path], *, empty_is_error: bool = True) -> tuple[list[Path], list[ManifestError]]:
    """The manifest files ``paths`` name: files as they are, directories as the ``*.xml`` /
    ``*.man`` files directly in them (sorted by name).

    Returns the files, and one ``ManifestError`` per path that yields none: a path that does not
    exist, a directory that cannot be listed or (with ``empty_is_error``) holds no manifest.
    This, with ``load_manifests``, is where the manifest layer touches the file system.
    """
    files: list[Path] = []
    errors: list[ManifestError] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            try:
                found = manifest_files(path)
            except OSError as error:
                errors.append(ManifestError(f"cannot list directory: {error.strerror or error}", path=str(path)))
                continue
            if not found and empty_is_error:
                errors.append(ManifestError("directory holds no *.xml or *.man file", path=str(path)))
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            errors.append(ManifestError("no such file or directory", path=str(path)))
    return files, errors


def load_manifests(paths: list[str | Path] | tuple[str | Path, ...]) -> tuple[list[Manifest], list[ManifestError]]:
    """Every manifest named by ``paths`` (files, or directories of ``*.xml`` / ``*.man`` files).

    Returns the manifests that loaded, in order, and one ``ManifestError`` per file that did not
    (or per path that does not exist). Parse warnings are dropped; use ``load_manifest`` for them.
    """
    manifests: list[Manifest] = []
    errors: list[ManifestError] = []
    for entry in paths:
        files, problems = expand_manifest_paths([entry])
        errors.extend(problems)
        for file in files:
            try:
                manifests.append(load_manifest(file).manifest)
            except ManifestError as error:
                errors.append(error)
    return manifests, errors
