"""The manifest registry: installed instrumentation manifests, per user and for the whole system.

What ``wevtutil im/um/el/gp`` do on Windows. A store is a directory holding copies of installed
manifest files and ``index.json``, which maps each provider GUID to its name, its file, when it
was installed and from where::

    <store>/index.json       {"format": 1, "providers": [{"guid", "name", "file", "source", ...}]}
    <store>/files/<stem>-<sha256 prefix>.man
    <store>/.lock            fcntl lock held around every change

Locations (``ManifestRegistry``): the user store is ``$XDG_DATA_HOME/openetw/manifests``
(``~/.local/share/openetw/manifests``), the system store ``/var/lib/openetw/manifests``, which
only root may change and everyone may read. ``$OPENETW_DATA_DIR`` (or the ``data_dir`` argument)
moves both: ``<dir>/manifests`` and ``<dir>/system/manifests``. Lookups try the user store first.

Installing validates first (errors refuse the whole install, warnings are reported), copies the
exact bytes that were validated (never a symlink), then rewrites the index atomically. Stored
file names carry a content hash, so a file the index names never changes under a reader.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

from openetw.errors import AccessDenied, InvalidArgument, ManifestError, OpenEtwError
from openetw.guids import parse_guid
from openetw.manifest import Diagnostic, Manifest, parse_manifest, validate
from openetw.manifest.loader import expand_manifest_paths
from openetw.manifest.store.files import exclusive_lock, write_atomically
from openetw.manifest.store.merge import merge_guid
from openetw.manifest.store.reading import read_manifest, read_manifest_bytes
from openetw.manifest.xmlread import MAX_INPUT_BYTES
from openetw.safeio import read_regular_file

Scope = Literal["user", "system"]

DATA_DIR_ENV = "OPENETW_DATA_DIR"
SYSTEM_DATA_DIR = Path("/var/lib/openetw")
INDEX_FORMAT = 1
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_READ_RETRIES = 3  # times load_all re-reads an index that changed under it


class ManifestRejected(ManifestError):
    """A manifest that fails validation; ``diagnostics`` holds every error and warning found."""

    def __init__(self, path: str, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        errors = [item for item in diagnostics if item.is_error]
        first = errors[0] if errors else None
        count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}"
        super().__init__(
            f"{count}; not installed",
            path=path,
            line=first.line if first else None,
            element=first.element if first else None,
        )

    def __str__(self) -> str:
        errors = [item for item in self.diagnostics if item.is_error]
        return "".join([f"{self.path}: {self.message}"] + [f"\n  {item}" for item in errors])


@dataclass(frozen=True, slots=True)
class InstalledProvider:
    """One provider in a store. ``file`` is the stored copy; ``source`` where it was installed from.

    ``warnings`` are the installing validation's warnings (only on what ``install`` returns).
    """

    guid: uuid.UUID
    name: str
    file: Path
    source: str
    installed: datetime
    events: int
    store: Scope
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class _Staged:
    """A manifest read, parsed and validated, ready to be copied in."""

    source: Path
    data: bytes
    manifest: Manifest
    warnings: tuple[Diagnostic, ...]

    @property
    def stored_name(self) -> str:
        stem = _UNSAFE_NAME_CHARS.sub("_", self.source.stem).lstrip("._")[:80] or "manifest"
        suffix = self.source.suffix.lower() if self.source.suffix.lower() in (".xml", ".man") else ".man"
        return f"{stem}-{sha256(self.data).hexdigest()[:16]}{suffix}"


def _stage(path: Path) -> _Staged:
    """Read, parse and validate one manifest file; raises ``ManifestError`` when it cannot be installed."""
    name = str(path)
    data = read_manifest_bytes(path)
    result = parse_manifest(data, name)
    diagnostics = list(result.warnings) + validate(result.manifest)
    if any(item.is_error for item in diagnostics):
        raise ManifestRejected(name, diagnostics)
    if not result.manifest.providers:
        raise ManifestError("defines no provider; nothing to install", path=name)
    return _Staged(path, data, result.manifest, tuple(diagnostics))


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` already holds exactly ``data`` (a stored copy nobody tampered with)."""
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    files, errors = expand_manifest_paths(paths)
    if errors:
        raise errors[0]
    return files


class ManifestStore:
    """One store directory. Reading needs no lock; changes hold ``.lock`` and rewrite the index."""

    def __init__(self, directory: str | Path, scope: Scope = "user", *, root_only: bool = False, euid: int | None = None):
        self.directory = Path(directory)
        self.scope: Scope = scope
        self.root_only = root_only
        self._euid = euid
        self._parsed: dict[str, Manifest] = {}

    @property
    def index_path(self) -> Path:
        return self.directory / "index.json"

    @property
    def files_directory(self) -> Path:
        return self.directory / "files"

    def __repr__(self) -> str:
        return f"ManifestStore({str(self.directory)!r}, {self.scope!r})"

    # -- reading -------------------------------------------------------------------------------

    def entries(self) -> list[InstalledProvider]:
        """Every installed provider, in installation order."""
        return list(self._read_index().values())

    def find(self, key: str | uuid.UUID) -> InstalledProvider | None:
        """The provider with this GUID or (case-insensitive) name; ``InvalidArgument`` when a name is shared."""
        found = _select(self._read_index(), key)
        if len(found) > 1:
            raise _ambiguous(key, found)
        return found[0] if found else None

    def matching(self, key: str | uuid.UUID) -> list[InstalledProvider]:
        """Every provider with this GUID or (case-insensitive) name."""
        return _select(self._read_index(), key)

    def load_all(
        self, errors: list[ManifestError] | None = None, *, guids: Collection[uuid.UUID] | None = None
    ) -> list[Manifest]:
        """The installed manifests, each holding only the providers the index assigns to it.

        ``guids`` limits the result to those providers (only their files are read). A stored
        file that is missing or no longer parses raises ``ManifestError``, or is appended to
        ``errors`` and skipped when a list is given.
        """
        index = self._read_index(guids)
        for _ in range(_READ_RETRIES):
            problems: list[ManifestError] = []
            manifests, vanished = self._load_indexed(index, problems)
            if not vanished:
                break
            # An install or uninstall may have replaced the index since we read it.
            fresh = self._read_index(guids)
            if fresh == index:
                break
            index = fresh
        problems += [ManifestError("installed manifest is missing from the store", path=str(path)) for path in vanished]
        if problems and errors is None:
            raise problems[0]
        if errors is not None:
            errors.extend(problems)
        return manifests

    def _load_indexed(
        self, index: Mapping[uuid.UUID, InstalledProvider], problems: list[ManifestError]
    ) -> tuple[list[Manifest], list[Path]]:
        """(manifests loaded, stored files missing); files that fail to parse go to ``problems``."""
        by_file: dict[Path, set[uuid.UUID]] = {}
        for entry in index.values():
            by_file.setdefault(entry.file, set()).add(entry.guid)
        manifests = []
        vanished = []
        for path, guids in by_file.items():
            if path.name not in self._parsed and not path.exists():
                vanished.append(path)
                continue
            try:
                manifest = self._load_stored(path)
            except ManifestError as error:
                problems.append(error)
                continue
            kept = tuple(p for p in manifest.providers if merge_guid(p) in guids)
            manifests.append(manifest if len(kept) == len(manifest.providers) else replace(manifest, providers=kept))
        return manifests, vanished

    def _load_stored(self, path: Path) -> Manifest:
        cached = self._parsed.get(path.name)
        if cached is None:
            data = read_manifest_bytes(path, "installed manifest unreadable")
            cached = self._parsed[path.name] = parse_manifest(data, str(path)).manifest
        return cached

    # -- changing ------------------------------------------------------------------------------

    def install(self, paths: Iterable[str | Path]) -> list[InstalledProvider]:
        """Validate every file, then install all of them (or none): one entry per provider.

        Directories stand for the ``*.xml`` / ``*.man`` files in them. A provider already
        installed (same GUID) is replaced; when two given files define one provider, the later
        one wins.
        """
        self.check_writable()
        staged = [_stage(path) for path in _expand(paths)]
        if not staged:
            raise InvalidArgument("no manifest given")
        now = datetime.now(UTC).replace(microsecond=0)
        with self._changing():
            index = self._read_index()
            installed: dict[uuid.UUID, InstalledProvider] = {}
            for item in staged:
                target = self.files_directory / item.stored_name
                source = str(item.source.resolve())
                for provider in item.manifest.providers:
                    guid = merge_guid(provider)
                    entry = InstalledProvider(
                        guid, provider.name, target, source, now, len(provider.events), self.scope, item.warnings
                    )
                    index.pop(guid, None)  # a reinstalled provider moves to the end
                    index[guid] = installed[guid] = entry
            needed = {entry.file for entry in installed.values()}
            for item in staged:
                target = self.files_directory / item.stored_name
                if target in needed and not _holds(target, item.data):
                    write_atomically(target, item.data)
            self._write_index(index)
            self._remove_unreferenced(index)
        return list(installed.values())

    def uninstall(self, key: str | uuid.UUID) -> list[InstalledProvider]:
        """Remove the provider named by GUID, name or manifest file; returns what was removed.

        A file stands for every provider it defines (as ``wevtutil um`` does); a path that no
        longer exists matches the providers installed from it. Nothing matching is no error
        here: the result is empty.
        """
        self.check_writable()
        with self._changing():
            index = self._read_index()
            removed = _select(index, key)
            if len(removed) > 1:
                raise _ambiguous(key, removed)
            if not removed and isinstance(key, str):
                removed = self._select_by_file(index, key)
            for entry in removed:
                del index[entry.guid]
            if removed:
                self._write_index(index)
                self._remove_unreferenced(index)
        return removed

    def check_writable(self) -> None:
        """Raise ``AccessDenied`` when this process may not change the store."""
        euid = os.geteuid() if self._euid is None else self._euid
        if self.root_only and euid != 0:
            raise AccessDenied(
                f"the system manifest store ({self.directory}) can only be changed by root; "
                "run as root, or leave out --system to use your own store"
            )

    def _select_by_file(self, index: Mapping[uuid.UUID, InstalledProvider], text: str) -> list[InstalledProvider]:
        """The providers a manifest file defines, else those installed from that path."""
        path = Path(text)
        installed_from = [entry for entry in index.values() if entry.source == str(path.resolve())]
        if not path.is_file():
            return installed_from
        stored = self.files_directory / path.name
        if path.resolve() == stored.resolve():
            return [entry for entry in index.values() if entry.file == stored]
        try:
            guids = {merge_guid(p) for p in read_manifest(path).manifest.providers}
        except ManifestError:
            if installed_from:
                return installed_from
            raise
        return [entry for entry in index.values() if entry.guid in guids]

    def _changing(self) -> AbstractContextManager[None]:
        """Create the store when missing and hold its lock (``with self._changing(): ...``)."""
        self.files_directory.mkdir(parents=True, exist_ok=True)
        if self.scope == "system":
            for directory in (self.directory, self.files_directory):
                directory.chmod(0o755)
        return exclusive_lock(self.directory / ".lock")

    def _remove_unreferenced(self, index: Mapping[uuid.UUID, InstalledProvider]) -> None:
        referenced = {entry.file.name for entry in index.values()}
        for path in self.files_directory.iterdir():
            if path.name not in referenced and not path.name.startswith(".") and path.is_file():
                path.unlink()
                self._parsed.pop(path.name, None)

    # -- the index -----------------------------------------------------------------------------

    def _read_index(self, guids: Collection[uuid.UUID] | None = None) -> dict[uuid.UUID, InstalledProvider]:
        index = self._read_whole_index()
        return index if guids is None else {guid: entry for guid, entry in index.items() if guid in guids}

    def _read_whole_index(self) -> dict[uuid.UUID, InstalledProvider]:
        try:
            data = read_regular_file(self.index_path, MAX_INPUT_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as error:
            message = f"cannot read the store index: {error.strerror or error}"
            raise ManifestError(message, path=str(self.index_path)) from None
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or document.get("format") != INDEX_FORMAT:
                raise ValueError(f"unknown index format {document.get('format') if isinstance(document, dict) else None!r}")
            return {entry.guid: entry for entry in map(self._entry_from_json, document["providers"])}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ManifestError(f"store index is damaged: {error}", path=str(self.index_path)) from None

    def _entry_from_json(self, item: dict[str, Any]) -> InstalledProvider:
        name = item["file"]
        if not isinstance(name, str) or not name or Path(name).name != name or name.startswith(".") or "\0" in name:
            raise ValueError(f"file {name!r} is not a plain file name in the store")
        installed = datetime.fromisoformat(item["installed"])
        return InstalledProvider(
            guid=parse_guid(item["guid"]),
            name=str(item["name"]),
            file=self.files_directory / name,
            source=str(item["source"]),
            installed=installed,
            events=int(item["events"]),
            store=self.scope,
        )

    def _write_index(self, index: Mapping[uuid.UUID, InstalledProvider]) -> None:
        document = {
            "format": INDEX_FORMAT,
            "providers": [
                {
                    "guid": str(entry.guid),
                    "name": entry.name,
                    "file": entry.file.name,
                    "source": entry.source,
                    "installed": entry.installed.isoformat(),
                    "events": entry.events,
                }
                for entry in index.values()
            ],
        }
        write_atomically(self.index_path, (json.dumps(document, indent=2) + "\n").encode("utf-8"))


def _is_path(key: str | uuid.UUID) -> bool:
    return isinstance(key, str) and (os.sep in key or key.lower().endswith((".xml", ".man")))


def _select(index: Mapping[uuid.UUID, InstalledProvider], key: str | uuid.UUID) -> list[InstalledProvider]:
    try:
        guid = parse_guid(key)
    except ValueError:
        guid = None
    if guid is not None:
        return [index[guid]] if guid in index else []
    assert isinstance(key, str)
    wanted = key.strip().casefold()
    return [entry for entry in index.values() if entry.name.casefold() == wanted]


def _ambiguous(key: str | uuid.UUID, entries: list[InstalledProvider]) -> InvalidArgument:
    guids = ", ".join(f"{{{entry.guid}}}" for entry in entries)
    return InvalidArgument(f"provider name {str(key)!r} is installed under several GUIDs ({guids}); name one by GUID")


def default_data_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """(user data directory, system data directory) from the environment."""
    env = os.environ if environ is None else environ
    override = env.get(DATA_DIR_ENV)
    if override:
        return Path(override), Path(override) / "system"
    xdg = env.get("XDG_DATA_HOME", "")
    user_base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return user_base / "openetw", SYSTEM_DATA_DIR


class ManifestRegistry:
    """The user store and the system store, looked up in that order.

    ``data_dir`` moves both stores (``<dir>/manifests``, ``<dir>/system/manifests``), as
    ``$OPENETW_DATA_DIR`` does. Changing the system store needs root (``euid`` 0) wherever it is.
    """

    def __init__(self, data_dir: str | Path | None = None, *, euid: int | None = None) -> None:
        if data_dir is not None:
            user_dir, system_dir = Path(data_dir), Path(data_dir) / "system"
        else:
            user_dir, system_dir = default_data_dirs()
        self.user = ManifestStore(user_dir / "manifests", "user", euid=euid)
        self.system = ManifestStore(system_dir / "manifests", "system", root_only=True, euid=euid)

    @property
    def stores(self) -> tuple[ManifestStore, ManifestStore]:
        """The stores in lookup order."""
        return (self.user, self.system)

    def store(self, system: bool = False) -> ManifestStore:
        return self.system if system else self.user

    def install(self, paths: Iterable[str | Path], *, system: bool = False) -> list[InstalledProvider]:
        return self.store(system).install(paths)

    def uninstall(self, key: str | uuid.UUID, *, system: bool = False) -> list[InstalledProvider]:
        """Remove from one store; ``InvalidArgument`` when nothing there matches."""
        store = self.store(system)
        removed = store.uninstall(key)
        if not removed:
            other = self.store(not system)
            try:
                elsewhere = other.find(key) if not _is_path(key) else None
            except (InvalidArgument, ManifestError):
                elsewhere = None
            hint = ""
            if elsewhere is not None:
                hint = f"; it is in the {other.scope} store" + ("" if system else " (use --system)")
            raise InvalidArgument(f"{key!s} is not installed in the {store.scope} store{hint}")
        return removed

    def find(self, key: str | uuid.UUID) -> InstalledProvider | None:
        """The provider with this GUID or name, user store first."""
        for store in self.stores:
            found = store.find(key)
            if found is not None:
                return found
        return None

    def matching(self, key: str | uuid.UUID) -> list[InstalledProvider]:
        """Every installed provider with this GUID or name, user store first (no ambiguity check)."""
        return [entry for store in self.stores for entry in store.matching(key)]

    def load_all(
        self, errors: list[ManifestError] | None = None, *, guids: Collection[uuid.UUID] | None = None
    ) -> list[Manifest]:
        """Every installed manifest in lookup order (user store first); see ``ManifestStore.load_all``."""
        return [manifest for store in self.stores for manifest in store.load_all(errors, guids=guids)]

    def sources(
        self, errors: list[ManifestError] | None = None, *, guids: Collection[uuid.UUID] | None = None
    ) -> list[tuple[str, Manifest]]:
        """(stored file, manifest) pairs, lowest precedence first: the order ``merge_manifests`` takes."""
        ordered = [manifest for store in reversed(self.stores) for manifest in store.load_all(errors, guids=guids)]
        return [(manifest.path or "", manifest) for manifest in ordered]

    # Last in the class: below this point ``list`` would name the method, not the builtin.
    def list(self) -> list[InstalledProvider]:
        """Every installed provider: the user store's, then the system store's."""
        return [entry for store in self.stores for entry in store.entries()]


def installed_manifests(errors: list[ManifestError] | None = None) -> list[Manifest]:
    """The manifests of the installed-manifest store (the system's, then the user's: lowest
    precedence first, so the user's win), or ``[]`` when the store cannot be read (the reason
    joins ``errors``)."""
    try:
        return [manifest for _, manifest in ManifestRegistry().sources(errors)]
    except (OSError, OpenEtwError) as error:
        if errors is not None:
            errors.append(ManifestError(f"cannot read the installed manifests: {error}"))
        return []


__all__ = [
    "DATA_DIR_ENV",
    "InstalledProvider",
    "installed_manifests",
    "ManifestRegistry",
    "ManifestRejected",
    "ManifestStore",
    "Scope",
    "default_data_dirs",
]
