"""``EtlIndex``: the records of an ETL file as numpy columns, kept beside the file.

The first pass over a file (``EtlIndex.open``) builds the index (``index_build``) and writes it
as ``FILE.etl.idx``, or into a cache directory when the file's directory is not writable (or
not the reader's: see ``index_trust``, which also decides whether a stored index is believed)
(``$OPENETW_INDEX_DIR``, else ``$XDG_CACHE_HOME/openetw/etl-index``, else
``~/.cache/openetw/etl-index``). Later opens load it at memory speed. The index remembers the
file's size, modification time and a digest of its header buffer; if any differs the index is
stale and is built again.

Rows are in the order ``EtlReader.records(time_order=True)`` gives (see ``RECORD_DTYPE`` for the
columns); ``select`` and ``count_by`` filter and count on the columns without reading the file;
``loader()`` builds the ``EventRecord``s of chosen rows.
"""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from openetw.consumer.index_build import BUFFER_DTYPE, KIND_CODES, KIND_NAMES, RECORD_COLUMNS, RECORD_DTYPE, build_index_data
from openetw.consumer.index_file import FORMAT, read_index_file, write_index_file
from openetw.consumer.index_trust import index_problem, may_keep_index_in, untrusted_reason
from openetw.consumer.loader import RecordLoader
from openetw.consumer.window import to_filetime
from openetw.errors import EtlFormatError, InvalidArgument
from openetw.etl.logfile import LogfileHeader
from openetw.etl.reader import EtlReader
from openetw.etl.record import RecordContext

__all__ = ["INDEX_DIR_ENV", "INDEX_FORMAT", "INDEX_SUFFIX", "EtlIndex", "default_cache_dir", "index_locations"]

INDEX_FORMAT = FORMAT
INDEX_SUFFIX = ".idx"
INDEX_DIR_ENV = "OPENETW_INDEX_DIR"
_DIGEST_LIMIT = 1 << 20


def default_cache_dir() -> Path:
    explicit = os.environ.get(INDEX_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openetw" / "etl-index"


def index_locations(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(beside the file, in the cache directory): where an index of ``path`` may live."""
    source = Path(os.path.abspath(path))
    key = hashlib.sha256(str(source).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return source.with_name(source.name + INDEX_SUFFIX), cache / f"{key}-{source.name}{INDEX_SUFFIX}"


def header_digest(path: str | os.PathLike[str]) -> str:
    """A digest of the file's header buffer (its first ``BufferSize`` bytes, at most 1 MiB)."""
    with open(path, "rb") as f:
        head = f.read(4)
        size = struct.unpack("<I", head)[0] if len(head) == 4 else 0
        rest = f.read(max(0, min(size, _DIGEST_LIMIT) - len(head)))
    return hashlib.blake2b(head + rest, digest_size=16).hexdigest()


def _identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "header_digest": header_digest(path)}


def _writable_directory(directory: Path) -> bool:
    """Writable, and meant to be: a directory without any write bit is left alone even by root."""
    try:
        return bool(directory.stat().st_mode & 0o222) and os.access(directory, os.W_OK)
    except OSError:
        return False


def _as_guid(value: Any) -> uuid.UUID:
    """A provider as a GUID, resolved as ``openetw.provider_names`` says: a GUID, ``*Name``, an
    installed manifest's provider, else the name hash (announced with a ``ProviderNameWarning``)."""
    if isinstance(value, uuid.UUID):
        return value
    guid = getattr(value, "guid", None)
    if isinstance(guid, uuid.UUID):
        return guid
    name = getattr(value, "name", value)
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"not a provider: {value!r}")
    from openetw.store.lookup import resolve_provider

    resolved = resolve_provider(name)
    resolved.warn(stacklevel=5)
    return resolved.guid


class EtlIndex:
    """The index of one ETL file (see the module doc). ``records`` is the row table."""

    def __init__(
        self, path: str, records: np.ndarray, providers: list[uuid.UUID], buffers: np.ndarray, meta: dict[str, Any],
        header: LogfileHeader, context: RecordContext,
    ) -> None:  # fmt: skip
        self.path = path
        self.records = records
        self.providers = providers
        self.buffers = buffers
        self.meta = meta
        self.header = header
        self.context = context
        self.index_path: Path | None = None
        self.built = False  # built by this open (not loaded)
        self._provider_rows = {guid: row for row, guid in enumerate(providers)}

    # -- making and keeping ---------------------------------------------------------------------
    @classmethod
    def build(cls, path: str | os.PathLike[str]) -> EtlIndex:
        """Index ``path`` now (nothing is written)."""
        source = os.fspath(path)
        identity = _identity(source)
        built = build_index_data(source)
        meta = {
            "format": INDEX_FORMAT,
            "source": os.path.abspath(source),
            **identity,
            "errors": built.errors,
            "unknown_reasons": {str(row): reason for row, reason in built.unknown_reasons.items()},
            "read_stats": built.read_stats,
            "exact_time_order": built.exact_time_order,
        }
        index = cls(source, built.records, built.providers, built.buffers, meta, built.header, built.context)
        index.built = True
        return index

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None, rebuild: bool = False, save: bool = True,
    ) -> EtlIndex:  # fmt: skip
        """The index of ``path``: loaded when a fresh one exists, else built (and saved)."""
        source = os.fspath(path)
        if not os.path.isfile(source):
            raise EtlFormatError("no such file", path=source)
        locations = index_locations(source, cache_dir)
        if not rebuild:
            identity = _identity(source)
            for location in locations:
                loaded = cls.load(location, source, identity)
                if loaded is not None:
                    return loaded
        index = cls.build(source)
        if save:
            for location in locations:
                if location == locations[0] and not (_writable_directory(location.parent) and may_keep_index_in(location.parent)):
                    continue
                try:
                    index.save(location)
                    break
                except OSError:
                    continue
        return index

    @classmethod
    def load(cls, location: str | os.PathLike[str], path: str, identity: dict[str, Any] | None = None) -> EtlIndex | None:
        """The index stored at ``location`` if it is a fresh index of ``path`` that this user
        may believe and whose structure holds (``index_trust``), else ``None``."""
        if untrusted_reason(location) is not None:
            return None
        stored = read_index_file(location)
        if stored is None or not isinstance(stored[0], dict):
            return None
        meta, arrays = stored
        identity = identity or _identity(path)
        if meta.get("format") != INDEX_FORMAT or any(meta.get(key) != value for key, value in identity.items()):
            return None
        records, buffers, providers = arrays.get("records"), arrays.get("buffers"), arrays.get("providers")
        if records is None or buffers is None or providers is None or records.dtype != RECORD_DTYPE or buffers.dtype != BUFFER_DTYPE:
            return None
        if index_problem(records, buffers, providers, meta, identity["size"]) is not None:
            return None
        with EtlReader(path, strict=False) as reader:
            header, context = reader.header, reader.context
        meta["unknown_reasons"] = {int(row): reason for row, reason in meta.get("unknown_reasons", {}).items()}
        table = [uuid.UUID(bytes_le=bytes(row)) for row in providers]
        index = cls(path, records, table, buffers, meta, header, context)
        index.index_path = Path(location)
        return index

    def save(self, location: str | os.PathLike[str] | None = None) -> Path:
        """Write the index (atomically) to ``location`` (default: beside the file)."""
        target = Path(location) if location is not None else index_locations(self.path)[0]
        meta = dict(self.meta, unknown_reasons={str(row): reason for row, reason in self.unknown_reasons.items()})
        providers = np.frombuffer(b"".join(guid.bytes_le for guid in self.providers), dtype=np.uint8).reshape(-1, 16)
        write_index_file(target, meta, {"records": self.records, "buffers": self.buffers, "providers": providers})
        self.index_path = target
        return target

    # -- facts ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    @property
    def errors(self) -> list[str]:
        """What was wrong with the file (each damaged part was skipped and counted)."""
        return list(self.meta.get("errors", ()))

    @property
    def unknown_reasons(self) -> dict[int, str]:
        return self.meta.get("unknown_reasons", {})  # type: ignore[no-any-return]

    @property
    def read_stats(self) -> dict[str, int]:
        return dict(self.meta.get("read_stats", {}))

    @property
    def compressed(self) -> bool:
        return self.header.compressed

    def provider_row(self, provider: Any) -> int | None:
        """Where a provider (GUID, GUID text or ``Provider``) is in the provider table."""
        return self._provider_rows.get(_as_guid(provider))

    def loader(self, **options: Any) -> RecordLoader:
        return RecordLoader(self, **options)

    # -- selecting and counting -------------------------------------------------------------------
    def mask(self, **conditions: Any) -> np.ndarray:
        """Rows matching every condition (see ``select``), as a boolean array."""
        rows = self.records
        mask = np.ones(len(rows), dtype=bool)
        start = to_filetime(conditions.pop("start", None), "start")
        end = to_filetime(conditions.pop("end", None), "end")
        if start is not None:
            mask &= rows["filetime"] >= start
        if end is not None:
            mask &= rows["filetime"] <= end
        if "provider" in conditions:
            wanted = conditions.pop("provider")
            values = wanted if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
            table_rows = [row for row in (self.provider_row(v) for v in values) if row is not None]
            mask &= np.isin(rows["provider"], table_rows)
        if "kind" in conditions:
            kinds = conditions.pop("kind")
            names = [kinds] if isinstance(kinds, str) else list(kinds)
            unknown = [name for name in names if name not in KIND_CODES]
            if unknown:
                raise InvalidArgument(f"unknown record kind(s) {unknown}; kinds are {list(KIND_NAMES)}")
            mask &= np.isin(rows["kind"], [KIND_CODES[name] for name in names])
        for column, wanted in conditions.items():
            if column not in RECORD_COLUMNS:
                raise InvalidArgument(f"no column {column!r}; columns are {list(RECORD_COLUMNS)}")
            if isinstance(wanted, Iterable) and not isinstance(wanted, (str, bytes)):
                mask &= np.isin(rows[column], list(wanted))
            else:
                mask &= rows[column] == wanted
        return mask

    def select(
        self, *, provider: Any = None, start: datetime | int | None = None, end: datetime | int | None = None, **columns: Any,
    ) -> np.ndarray:  # fmt: skip
        """Row numbers matching every condition, in time order.

        ``provider`` (a GUID, GUID text, ``Provider`` or a list of them), ``start``/``end``
        (datetime or FILETIME, inclusive), ``kind`` (``"event"``, ``"classic"``, ...), and any
        column by name (``id=5``, ``pid=[4, 8]``, ``opcode=1``).
        """
        conditions = dict(columns)
        if provider is not None:
            conditions["provider"] = provider
        if start is not None:
            conditions["start"] = start
        if end is not None:
            conditions["end"] = end
        return np.flatnonzero(self.mask(**conditions))

    def count_by(self, *fields: str, rows: np.ndarray | None = None) -> dict[Any, int]:
        """Counts of each value (or tuple of values) of ``fields`` over ``rows`` (default: all).

        ``provider`` counts by GUID (``None`` for records without one), ``kind`` by name.
        """
        if not fields:
            raise InvalidArgument("count_by needs at least one column")
        for name in fields:
            if name not in RECORD_COLUMNS:
                raise InvalidArgument(f"no column {name!r}; columns are {list(RECORD_COLUMNS)}")
        columns = [self.records[name] if rows is None else self.records[name][rows] for name in fields]
        keys = np.empty(len(columns[0]), dtype=[(name, RECORD_DTYPE[name]) for name in fields])
        for name, column in zip(fields, columns, strict=True):
            keys[name] = column
        values, counts = np.unique(keys, return_counts=True)
        out: dict[Any, int] = {}
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            named = tuple(self._named(name, part) for name, part in zip(fields, value, strict=True))
            out[named[0] if len(fields) == 1 else named] = int(count)
        return out

    def _named(self, field: str, value: Any) -> Any:
        if field == "provider":
            return self.providers[value] if value >= 0 else None
        if field == "kind":
            return KIND_NAMES[value]
        return value

    def __repr__(self) -> str:
        return f"<EtlIndex {self.path}: {len(self.records)} records, {len(self.providers)} providers>"
