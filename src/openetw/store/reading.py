"""Reading manifest files from paths people give: regular files only, size-capped.

``openetw.manifest.load_manifest`` reads whatever the path names; a command given
``/dev/zero`` or a FIFO must not hang or fill memory, so everything the store and the manifest
commands read goes through here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from openetw.errors import ManifestError
from openetw.manifest import Manifest, ParseResult, parse_manifest
from openetw.manifest.loader import manifest_files
from openetw.manifest.xmlread import MAX_INPUT_BYTES
from openetw.store.files import read_regular_file


def read_manifest_bytes(path: str | Path, what: str = "cannot read manifest") -> bytes:
    """The bytes of a regular file of at most ``MAX_INPUT_BYTES``; ``ManifestError`` otherwise."""
    try:
        return read_regular_file(Path(path), MAX_INPUT_BYTES)
    except OSError as error:
        raise ManifestError(f"{what}: {error.strerror or error}", path=str(path)) from None


def read_manifest(path: str | Path) -> ParseResult:
    """Read and parse one manifest file."""
    return parse_manifest(read_manifest_bytes(path), str(path))


def read_manifests(paths: Iterable[str | Path]) -> tuple[list[Manifest], list[ManifestError]]:
    """Every manifest named by ``paths`` (files, or directories of ``*.xml`` / ``*.man`` files).

    The manifests that loaded, in order, and one ``ManifestError`` per file or path that did not.
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
        else:
            files = [path]
        for file in files:
            try:
                manifests.append(read_manifest(file).manifest)
            except ManifestError as error:
                errors.append(error)
    return manifests, errors


__all__ = ["read_manifest", "read_manifest_bytes", "read_manifests"]
