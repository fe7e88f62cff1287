"""Schema registries from what is stored on disk: manifests already loaded (the installed ones
among them: ``manifest.store.installed_manifests``), manifest files and directories named by the
caller, MOF and TMF files. :func:`build_registry` is the one way a schema registry is built from
them: the read model (``openetw.events.registry``) adds the installed manifests for the
applications, and the engine's own users (``UserTrace``, the Event Log's channel sessions, the
live formatter) call it here, since they may not import the read model.

Pure but for the caller-named files it reads (``LazyManifestRegistry.add_files``, the manifest,
MOF and TMF loaders).

Parsing hundreds of manifests takes seconds, so files are only scanned for the provider GUIDs
they declare; a file is parsed the first time a record of one of its providers is looked up.
Precedence stays what eager loading gives: for each provider, later sources win (installed
manifests first, then the ``--manifest`` paths in the order given).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from openetw.errors import ManifestError
from openetw.manifest.loader import expand_manifest_paths
from openetw.manifest.model import Manifest
from openetw.manifest.parser import load_manifest
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema

__all__ = ["LazyManifestRegistry", "build_registry", "manifest_paths"]

_PROVIDER_TAG = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?provider\b")
_PROVIDER_GUID = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?provider\b[^>]*?\bguid\s*=\s*[\"']\s*\{?([0-9A-Fa-f-]{36})\}?\s*[\"']", re.S)


def manifest_paths(paths: Iterable[str | Path]) -> tuple[list[Path], list[ManifestError]]:
    """The manifest files named by ``paths`` (files, or directories of ``*.xml`` / ``*.man``);
    a directory with none is no error here."""
    return expand_manifest_paths(paths, empty_is_error=False)


def _declared_guids(data: bytes) -> list[uuid.UUID] | None:
    """The provider GUIDs a manifest declares, or ``None`` when a quick scan cannot tell them all."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            data = data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            return None
    found = _PROVIDER_GUID.findall(data)
    if not found or len(found) != len(_PROVIDER_TAG.findall(data)):
        return None
    try:
        return [uuid.UUID(text.decode("ascii")) for text in found]
    except ValueError:
        return None


class LazyManifestRegistry(SchemaRegistry):
    """A ``SchemaRegistry`` that parses a provider's manifest files when a record of that
    provider is first looked up. ``errors`` collects the files that did not load."""

    def __init__(self, manifests: Iterable[Manifest] = (), *, kernel: bool = True) -> None:
        super().__init__(manifests, kernel=kernel)
        self.errors: list[ManifestError] = []
        self._pending: dict[uuid.UUID, list[Path]] = {}
        self._parsed: dict[Path, Manifest | None] = {}
        # Provider GUIDs (as stored in records) whose pending files were loaded: checked once.
        self._ensured: set[bytes] = set()

    def add_files(self, files: Sequence[Path]) -> None:
        """Make ``files`` known (later files win); those a scan cannot index are parsed now."""
        self._ensured.clear()
        for path in files:
            try:
                data = path.read_bytes()
            except OSError as error:
                self.errors.append(ManifestError(f"cannot read manifest: {error.strerror or error}", path=str(path)))
                continue
            guids = _declared_guids(data)
            if guids is None:
                manifest = self._parse(path)
                if manifest is not None:
                    self.add_manifest(manifest, source=str(path))
                continue
            for guid in dict.fromkeys(guids):
                self._pending.setdefault(guid, []).append(path)

    def _parse(self, path: Path) -> Manifest | None:
        if path not in self._parsed:
            try:
                self._parsed[path] = load_manifest(path).manifest
            except ManifestError as error:
                self.errors.append(error)
                self._parsed[path] = None
        return self._parsed[path]

    def _load_provider(self, guid: uuid.UUID) -> None:
        paths = self._pending.pop(guid, None)
        if not paths:
            return
        for path in paths:
            manifest = self._parse(path)
            if manifest is None:
                continue
            own = tuple(provider for provider in manifest.providers if provider.guid == guid)
            if own:
                self.add_manifest(dataclasses.replace(manifest, providers=own), source=str(path))

    def _ensure(self, record: Any) -> None:
        guid = record.provider_guid_bytes
        if guid is not None and guid not in self._ensured and self._pending:
            self._ensured.add(guid)
            self._load_provider(record.provider_id)

    def provider_guids_by_name(self) -> dict[str, uuid.UUID]:
        """Every provider name this registry knows (lower-cased) -> its GUID, all files parsed; a
        later source wins for a name, as for schemas."""
        self.load_everything()
        names: dict[str, uuid.UUID] = {}
        for guid, name in self.known_provider_names().items():
            names[name.lower()] = guid
        return names

    @property
    def parsed_files(self) -> int:
        """How many manifest files were parsed so far."""
        return len(self._parsed)

    def load_everything(self) -> None:
        """Parse every pending file now (for lookups by anything but a record)."""
        for guid in list(self._pending):
            self._load_provider(guid)

    def schema_for(self, record: Any) -> Schema | None:
        self._ensure(record)
        return super().schema_for(record)

    def provider_name(self, record: Any) -> str | None:
        self._ensure(record)
        return super().provider_name(record)

    def event_name(self, record: Any) -> str | None:
        self._ensure(record)
        return super().event_name(record)


def build_registry(
    paths: Iterable[str | Path] = (),
    *,
    manifests: Iterable[Manifest] = (),
    mof: Iterable[str | Path] = (),
    tmf: Iterable[str | Path] = (),
    empty_is_error: bool = False,
) -> LazyManifestRegistry:
    """The one way a schema registry is built from what is stored on disk: ``manifests``
    (already loaded: the installed ones, ...), then the manifests ``paths`` name (files or
    directories), then the classic event classes of the ``mof`` files and the WPP messages of
    the ``tmf`` files or directories, each source winning over those before it.

    Manifest files are parsed when a record of one of their providers is first looked up (see
    :class:`LazyManifestRegistry`); MOF and TMF files are read now. Problems (a missing path, a
    file that does not parse; a directory with no manifest when ``empty_is_error``) end up in
    ``registry.errors``; what did load is used.
    """
    registry = LazyManifestRegistry(manifests)
    files, path_errors = expand_manifest_paths(paths, empty_is_error=empty_is_error)
    registry.errors.extend(path_errors)
    registry.add_files(files)
    mof, tmf = tuple(mof), tuple(tmf)
    if mof:
        from openetw.tdh.mof_file import schemas_from_mof_file
    if tmf:
        from openetw.tdh.wpp import read_tmf_path
    for path in mof:
        try:
            for schema in schemas_from_mof_file(path):
                registry.add_schema(schema, source=str(path))
        except ManifestError as error:
            registry.errors.append(error)
    for path in tmf:
        messages, tmf_errors = read_tmf_path(path)
        registry.add_tmf(messages)
        registry.errors.extend(tmf_errors)
    return registry
