"""``EtlIndex``: the records of an ETL file as numpy columns, kept in blocks in the user's cache.

The first pass over a file builds the index (``_engine.streaming``) while it hands out its rows:
a trace consuming a file for the first time gets its events as the index is written, with no
separate pass before the first callback. The index is written in blocks of ``BLOCK_ROWS`` rows (``$OPENETW_INDEX_BLOCK_ROWS``)
(``_engine.blocks``: packed columns, a summary per block) into the user's cache, or beside
the file when asked to (``beside=True``, ``$OPENETW_INDEX_BESIDE``; ``_engine.location``: where,
the cache's size cap, which stored indexes may be trusted). A stored index that is damaged is
never trusted: it is built again. Later opens read the footer only; blocks are read
as they are used, and time windows and provider filters skip the blocks their summaries rule
out. Memory follows the working set (``$OPENETW_INDEX_CHUNK_MB``, default 4 MiB of buffers at a
time, rows that must wait beyond that spilled to a temporary file, and one block of rows), never
the trace's size. The index remembers the file's size,
modification time and a digest of its header buffer; if any differs, or the index is of
another format (an older one), it is built again.

Rows are in the order ``EtlReader.records(time_order=True)`` gives (see ``RECORD_DTYPE`` for the
columns); ``segments()`` gives them a block at a time, ``column_blocks()`` chosen header columns
a block at a time (only those read from a stored index); ``select`` and ``count_by`` filter and
count on the columns without reading the file; ``loader()`` builds the ``EventRecord``s of
chosen rows. ``records`` is the whole row table at once (small files, tests).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from openetw.consumer._engine.blocks import FORMAT, BlockWriter, StoredIndex, block_rows_setting, read_stored
from openetw.consumer._engine.index_build import (
    BUFFER_DTYPE,
    KIND_CODES,
    KIND_NAMES,
    RECORD_COLUMNS,
    RECORD_DTYPE,
    RECORD_FIELDS,
    BuiltIndex,
    build_index_data,
    concat,
    filetimes,
)
from openetw.consumer._engine.loader import RecordLoader
from openetw.consumer._engine.location import (
    BESIDE_ENV,
    CACHE_FILE_MODE,
    INDEX_DIR_ENV,
    INDEX_SUFFIX,
    beside_setting,
    default_cache_dir,
    evict,
    index_locations,
    make_private_dirs,
    mark_used,
    may_trust,
    writable_directory,
)
from openetw.consumer._engine.segments import FileBuffers, Segment
from openetw.consumer._engine.streaming import StreamingBuild
from openetw.consumer.index_trust import (
    HEADER_COLUMNS,
    PLACE_CHECKED,
    PLACE_COLUMNS,
    buffer_positions,
    columns_problem,
    index_problem,
    may_keep_index_in,
    rows_problem,
)
from openetw.consumer.window import to_filetime
from openetw.errors import EtlFormatError, InvalidArgument
from openetw.etl.logfile import LogfileHeader
from openetw.etl.reader import EtlReader
from openetw.etl.record import RecordContext

__all__ = [
    "BESIDE_ENV", "INDEX_DIR_ENV", "INDEX_FORMAT", "INDEX_SUFFIX", "KIND_CODES", "KIND_NAMES", "BuiltIndex", "EtlIndex",
    "build_index_data", "default_cache_dir", "index_locations",
]  # fmt: skip

INDEX_FORMAT = FORMAT
_DIGEST_LIMIT = 1 << 20


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


def where_to_keep(source: str, cache_dir: str | os.PathLike[str] | None = None, *, beside: bool | None = None) -> tuple[list[Path], Path]:
    """(stored indexes that may be used, in turn; where a new one is written): in the cache,
    or beside the file when ``beside`` (default: ``$OPENETW_INDEX_BESIDE``) asks for it, its
    directory is writable and no untrusted index sits there."""
    next_to, cached = index_locations(source, cache_dir)
    usable = [location for location in (next_to, cached) if location.exists() and may_trust(location)]
    wanted = beside_setting() if beside is None else beside
    untrusted_beside = next_to.exists() and not may_trust(next_to)
    keep_beside = wanted and writable_directory(next_to.parent) and may_keep_index_in(next_to.parent) and not untrusted_beside
    return usable, next_to if keep_beside else cached


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
    from openetw.manifest.store.lookup import resolve_provider

    resolved = resolve_provider(name)
    resolved.warn(stacklevel=5)
    return resolved.guid


class EtlIndex:
    """The index of one ETL file (see the module doc)."""

    def __init__(self, path: str, header: LogfileHeader, context: RecordContext, meta: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self.context = context
        self.meta = meta
        self.providers: list[uuid.UUID] = []
        self._index_path: Path | None = None
        self._placement: tuple[Any, bool | None] = (None, None)  # open()'s cache_dir and beside
        self.built = False  # built by this open (not loaded)
        self.file_buffers = FileBuffers(path)
        self._stored: StoredIndex | None = None
        self._pending: StreamingBuild | None = None
        self._target: Path | None = None
        self._building = False
        self._reasons_by_block: list[dict[int, str]] = []
        self._decoded: tuple[int, np.ndarray] | None = None
        self._buffer_table = np.zeros(0, dtype=BUFFER_DTYPE)
        self._positions: tuple[np.ndarray, np.ndarray] | None = None  # (buffer table, buffer_positions of it)

    # -- making and keeping ---------------------------------------------------------------------
    @classmethod
    def _pending_build(cls, source: str, target: Path | None, chunk_bytes: int | None = None) -> EtlIndex:
        build = StreamingBuild(source, chunk_bytes)
        meta = {"format": INDEX_FORMAT, "source": os.path.abspath(source), **_identity(source)}
        index = cls(source, build.header, build.context, meta)
        index.providers = build.providers
        index._pending, index._target, index.built = build, target, True
        return index

    @classmethod
    def build(cls, path: str | os.PathLike[str], *, chunk_bytes: int | None = None) -> EtlIndex:
        """Index ``path`` now (its blocks go to an unnamed temporary file: nothing is kept)."""
        source = os.fspath(path)
        if not os.path.isfile(source):
            raise EtlFormatError("no such file", path=source)
        index = cls._pending_build(source, None, chunk_bytes)
        index.ensure_built()
        return index

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None, rebuild: bool = False, save: bool = True,
        beside: bool | None = None,
    ) -> EtlIndex:  # fmt: skip
        """The index of ``path``: loaded when a fresh, trusted one exists; else one that is built
        on its first pass (``segments()``, or any question that needs every row) and saved in
        the user's cache, or beside the file with ``beside=True`` (default:
        ``$OPENETW_INDEX_BESIDE``); ``save=False`` keeps it nowhere."""
        source = os.fspath(path)
        if not os.path.isfile(source):
            raise EtlFormatError("no such file", path=source)
        usable, target = where_to_keep(source, cache_dir, beside=beside)
        if not rebuild:
            identity = _identity(source)
            for location in usable:
                loaded = cls.load(location, source, identity)
                if loaded is not None:
                    if location != index_locations(source, cache_dir)[0]:
                        mark_used(location)
                    loaded._placement = (cache_dir, beside)
                    return loaded
        index = cls._pending_build(source, target if save else None)
        index._placement = (cache_dir, beside)
        return index

    @classmethod
    def load(cls, location: str | os.PathLike[str], path: str, identity: dict[str, Any] | None = None) -> EtlIndex | None:
        """The index stored at ``location`` if it is a fresh index of ``path`` in this format that
        this user may believe and whose tables hold together (``index_trust``), else ``None``."""
        if not may_trust(location):
            return None
        stored = read_stored(location)
        if stored is None:
            return None
        footer = stored.footer
        identity = identity or _identity(path)
        if any(footer.get(key) != value for key, value in identity.items()) or _footer_problem(stored, identity["size"]) is not None:
            stored.close()
            return None
        with EtlReader(path, strict=False) as reader:
            header, context = reader.header, reader.context
        index = cls(path, header, context, _meta_of(footer))
        try:
            index._adopt(stored)
        except (ValueError, TypeError, KeyError, AttributeError):
            stored.close()
            return None
        index._index_path = Path(location)
        return index

    def _adopt(self, stored: StoredIndex) -> None:
        self._stored = stored
        footer = stored.footer
        self.meta = _meta_of(footer)
        self.providers[:] = [uuid.UUID(hex=text) for text in footer.get("providers", [])]
        self._buffer_table = stored.buffers()
        self.file_buffers.add(self._buffer_table)
        reasons = self.meta["unknown_reasons"]
        self._reasons_by_block = []
        for entry in stored.blocks:
            first, count = int(entry["first_row"]), int(entry["rows"])
            self._reasons_by_block.append({row - first: reason for row, reason in reasons.items() if first <= row < first + count})

    def save(self, location: str | os.PathLike[str] | None = None) -> Path:
        """Write the index (atomically) to ``location`` (default: beside the file), created with
        the file's mode bits, at most 0644."""
        self.ensure_built()
        assert self._stored is not None
        target = Path(location) if location is not None else index_locations(self.path)[0]
        if self._index_path is not None and target == self._index_path:
            return target
        fd, temp = _create_part(target, _mode_beside(self.path))
        try:
            size = os.fstat(self._stored.fd).st_size
            at = 0
            while at < size:
                chunk = os.pread(self._stored.fd, min(1 << 20, size - at), at)
                os.write(fd, chunk)
                at += len(chunk)
            os.close(fd)
            os.replace(temp, target)
        except BaseException:
            os.close(fd) if _is_open(fd) else None
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        self._index_path = target
        return target

    @property
    def index_path(self) -> Path | None:
        """Where the index is stored (``None``: kept nowhere); finishes the first pass."""
        self.ensure_built()
        return self._index_path

    # -- the first pass ---------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return self._stored is not None

    def ensure_built(self) -> None:
        """Finish the first pass (without handing out rows) if it is not done yet."""
        if self._stored is None:
            for _ in self.segments():
                pass

    def _produce(self) -> Iterator[Segment]:
        build = self._pending
        assert build is not None
        target = self._target
        if target is not None:
            try:
                fd, temp = _create_part(target, self._mode_at(target))
                out = os.fdopen(fd, "w+b")
            except OSError:
                target = None
        if target is None:
            out, temp = tempfile.TemporaryFile(prefix="openetw-index-"), ""  # noqa: SIM115 - closed below
        block_rows = block_rows_setting()
        try:
            writer = BlockWriter(out)
            waiting: list[np.ndarray] = []
            waiting_reasons: list[dict[int, str]] = []
            held = 0
            first_row = 0
            all_reasons: dict[int, str] = {}
            tables = 0
            for rows, reasons in build.pieces():
                while len(build._tables) > tables:
                    self.file_buffers.add(build._tables[tables])
                    tables += 1
                if not len(rows):
                    continue
                waiting.append(rows)
                waiting_reasons.append(reasons)
                held += len(rows)
                while held >= block_rows:
                    block, block_reasons, waiting, waiting_reasons, held = _cut(waiting, waiting_reasons, block_rows)
                    yield self._written(writer, block, block_reasons, first_row, all_reasons)
                    first_row += len(block)
            while len(build._tables) > tables:
                self.file_buffers.add(build._tables[tables])
                tables += 1
            if held:
                block, block_reasons, _, _, _ = _cut(waiting, waiting_reasons, held)
                yield self._written(writer, block, block_reasons, first_row, all_reasons)
            meta = dict(
                self.meta, errors=build.errors, unknown_reasons={str(row): reason for row, reason in all_reasons.items()},
                read_stats=build.read_stats, exact_time_order=build.exact_time_order,
            )  # fmt: skip
            writer.finish(meta, build.buffers(), [guid.bytes for guid in build.providers])
            out.flush()
            if target is not None:
                os.replace(temp, target)
                self._index_path = target
                beside = index_locations(self.path)[0]
                if target != beside:
                    evict(target.parent, keep=target)
            stored = read_stored(target) if target is not None else None
            if stored is None:
                stored = StoredIndex(os.dup(out.fileno()), writer.footer)
            self._adopt(stored)
            self._pending = None
        finally:
            out.close()
            if temp and os.path.exists(temp):
                os.unlink(temp)

    def _mode_at(self, target: Path) -> int:
        """A new index's mode: the trace's privacy beside it, the cache's (0600) elsewhere."""
        return _mode_beside(self.path) if target == index_locations(self.path)[0] else CACHE_FILE_MODE

    def _written(self, writer: BlockWriter, block: np.ndarray, reasons: dict[int, str], first_row: int, every: dict[int, str]) -> Segment:
        summary = writer.add(block, first_row)
        every.update({first_row + row: reason for row, reason in reasons.items()})
        return Segment(block, first_row, len(block), self.providers, reasons, self.context, self.file_buffers, summary)

    def segments(self, *, start: datetime | int | None = None, end: datetime | int | None = None, provider: Any = None) -> Iterator[Segment]:
        """The rows a block at a time, in time order. ``start``/``end``/``provider`` skip the
        blocks whose summaries rule them out (the rows of the others are not filtered). During
        the first pass every block is given (it is being made)."""
        if self._stored is None:
            if self._building:
                raise InvalidArgument("this index is being built by another reader of it")
            self._building = True
            produced = self._produce()
            try:
                for segment in produced:  # noqa: UP028 - ``yield from`` would close ``produced`` when this is closed
                    yield segment
            finally:
                for _ in produced:  # a reader that stops early still leaves a whole index
                    pass
                self._building = False
            return
        wanted = self._block_filter(start, end, provider)
        stored = self._stored
        for number, entry in enumerate(stored.blocks):
            if wanted is not None and not wanted(entry):
                continue
            try:
                rows = self._block_rows(number)()
            except EtlFormatError:
                # A damaged block of an index this user may believe: index the file again and go
                # on from the first row not given out yet (the rows come in the same order).
                yield from self._rebuilt_from(int(entry["first_row"]))
                return
            yield Segment(rows, int(entry["first_row"]), int(entry["rows"]), self.providers,
                          self._reasons_by_block[number], self.context, self.file_buffers, entry)  # fmt: skip

    def column_blocks(self, names: Iterable[str]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Columns ``names`` of every row, a block at a time in time order: (first row, columns).
        Header columns (``index_trust.HEADER_COLUMNS``) of a stored index are read alone, the
        other columns of each block never unpacked (another header column asked of ``columns``
        is read then: ``EtlFormatError`` if that part is damaged); during the first pass they are the rows
        being indexed (one pass: the file is read once). The columns that say where a record is
        (``index_trust.PLACE_COLUMNS``) may be asked too, now or of ``columns`` later: they are read
        with the others ``rows_problem`` checks them against, and checked, as whole blocks are. ``provider`` codes index ``providers``
        as it stands when the block is given (the table only grows)."""
        wanted = list(dict.fromkeys(names))
        if self._stored is None or not set(wanted) <= _READ_ALONE:
            for segment in self.segments():
                yield segment.first_row, _BlockColumns.of_rows(segment.records, wanted)
            return
        stored = self._stored
        for number, entry in enumerate(stored.blocks):
            first = int(entry["first_row"])
            try:
                columns = _BlockColumns(self, number, self._block_columns(number, wanted), first=first)
            except EtlFormatError:
                for segment in self._rebuilt_from(first):
                    yield segment.first_row, _BlockColumns.of_rows(segment.records, wanted)
                return
            yield first, columns

    def _block_columns(self, number: int, names: list[str], held: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Columns ``names`` of stored block ``number``, checked (``held``: columns of the block
        read and checked before, not read again)."""
        assert self._stored is not None
        held = held or {}
        stored_names = [name for name in names if name != "filetime"]
        if "filetime" in names and "timestamp" not in stored_names:
            stored_names.append("timestamp")
        places = not PLACE_COLUMNS.isdisjoint(names)
        if places:  # where records are: read with what they are checked against
            stored_names = list(dict.fromkeys([*stored_names, *PLACE_CHECKED]))
        try:
            columns = self._stored.columns(number, [name for name in stored_names if name not in held])
            columns.update((name, held[name]) for name in stored_names if name in held)
        except (ValueError, KeyError, TypeError, OSError) as error:
            raise EtlFormatError(f"the index {self._index_path} is damaged (block {number}: {error})", path=self.path) from None
        problem = columns_problem(columns, len(self.providers))
        if problem is None and any(len(values) != int(self._stored.blocks[number]["rows"]) for values in columns.values()):
            problem = "a block's columns differ from its row count"
        if problem is None and places and len(columns["provider"]):
            positions = self._positions
            if positions is None or positions[0] is not self.buffers:
                positions = self._positions = (self.buffers, buffer_positions(self.buffers))
            problem = rows_problem(columns, self.buffers, len(self.providers), positions[1])
        if problem is not None:
            raise EtlFormatError(f"the index {self._index_path} is damaged ({problem}): delete it to index the file again", path=self.path)
        if "filetime" in names:
            columns["filetime"] = filetimes(columns["timestamp"], self.context.clock)
        return {name: columns[name] for name in (names if not places else dict.fromkeys([*names, *PLACE_CHECKED]))}

    def _column_again(self, first_row: int, count: int, name: str) -> np.ndarray:
        """Column ``name`` of rows ``first_row`` on (``count`` of them) after a damaged part of
        the index was found: the file is indexed again (the same rows), then read from that."""
        self._rebuild_now()
        return self._column_range(first_row, count, name)

    def _column_range(self, first_row: int, count: int, name: str) -> np.ndarray:
        """Column ``name`` of rows ``first_row`` on (``count`` of them), from the stored blocks that hold them."""
        assert self._stored is not None
        parts = []
        for number, entry in enumerate(self._stored.blocks):
            start, rows = int(entry["first_row"]), int(entry["rows"])
            if start + rows <= first_row or start >= first_row + count:
                continue
            values = self._block_columns(number, [name])[name]
            parts.append(values[max(0, first_row - start) : first_row + count - start])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=RECORD_DTYPE[name])

    def segment_at(self, number: int) -> Segment:
        """Block ``number``'s rows as a ``Segment`` (only that block is read)."""
        self.ensure_built()
        assert self._stored is not None
        try:
            rows = self._block_rows(number)()
        except EtlFormatError:
            self._rebuild_now()  # a damaged block: the index is built again, the same rows
            assert self._stored is not None
            rows = self._block_rows(number)()
        entry = self._stored.blocks[number]
        return Segment(rows, int(entry["first_row"]), int(entry["rows"]), self.providers,
                       self._reasons_by_block[number], self.context, self.file_buffers, entry)  # fmt: skip

    def _rebuild_now(self) -> None:
        for _ in self._rebuilt_from(len(self)):
            pass

    def _rebuilt_from(self, first_row: int) -> Iterator[Segment]:
        assert self._stored is not None
        self._stored.close()
        self._stored, self._decoded = None, None
        build = StreamingBuild(self.path)
        self.providers[:] = []
        build.providers = self.providers
        self.file_buffers = FileBuffers(self.path)
        self._pending, self._target, self.built = build, self._rebuild_target(), True
        for segment in self.segments():
            end = segment.first_row + len(segment)
            if end <= first_row:
                continue
            yield segment if segment.first_row >= first_row else segment.part(first_row - segment.first_row, len(segment))

    def _rebuild_target(self) -> Path | None:
        """Where an index rebuilt over a damaged one goes: where a new one would (never beside
        the file unless asked for); nowhere if the damaged one was kept nowhere."""
        if self._index_path is None:
            return None
        cache_dir, beside = self._placement
        return where_to_keep(self.path, cache_dir, beside=beside)[1]

    def _block_rows(self, number: int) -> Callable[[], np.ndarray]:
        def rows() -> np.ndarray:
            decoded = self._decoded
            if decoded is not None and decoded[0] == number:
                return decoded[1]
            assert self._stored is not None
            try:
                block = self._stored.block(number)
            except (ValueError, KeyError, TypeError, OSError) as error:
                raise EtlFormatError(f"the index {self._index_path} is damaged (block {number}: {error})", path=self.path) from None
            problem = index_problem(block, self.buffers, self._provider_table(), self.meta, int(self.meta.get("size", 0)))
            if problem is not None:
                raise EtlFormatError(f"the index {self._index_path} is damaged ({problem}): delete it to index the file again", path=self.path)
            block["filetime"] = filetimes(block["timestamp"], self.context.clock)
            self._decoded = (number, block)
            return block

        return rows

    def _provider_table(self) -> np.ndarray:
        return np.frombuffer(b"".join(guid.bytes_le for guid in self.providers), dtype=np.uint8).reshape(-1, 16)

    def _block_filter(self, start: Any, end: Any, provider: Any) -> Callable[[dict[str, Any]], bool] | None:
        low, high = to_filetime(start, "start"), to_filetime(end, "end")
        codes: set[int] | None = None
        if provider is not None:
            values = provider if isinstance(provider, (list, tuple, set, frozenset)) else [provider]
            codes = {row for row in (self.provider_row(v) for v in values) if row is not None}
        if low is None and high is None and codes is None:
            return None

        def wanted(entry: dict[str, Any]) -> bool:
            first, last = entry["filetime"]
            if low is not None and last < low:
                return False
            if high is not None and first > high:
                return False
            return codes is None or not codes.isdisjoint(entry["providers"])

        return wanted

    # -- facts ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        self.ensure_built()
        return int(self.meta.get("read_stats", {}).get("records", 0))

    @property
    def records(self) -> np.ndarray:
        """Every row at once (memory in proportion to the file: prefer ``segments()``)."""
        parts = [segment.records for segment in self.segments()]
        if self._stored is not None and not parts and len(self._stored.blocks):
            parts = [segment.records for segment in self.segments()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=RECORD_DTYPE)

    def columns(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Columns ``names`` of every row as whole arrays (``records``' fields without the
        rest): from a stored index only those are unpacked, with the columns that say where a
        row lies checked as ``records`` checks them (the place columns are read with the set they are
        checked with, block by block: ``_block_columns``); a damaged index is read as ``records``."""
        wanted = list(dict.fromkeys(names))
        self.ensure_built()
        stored = self._stored
        if stored is not None:
            asked = list(dict.fromkeys([*wanted, *PLACE_CHECKED]))
            parts: list[dict[str, np.ndarray]] = []
            try:
                for number in range(len(stored.blocks)):
                    parts.append(self._block_columns(number, asked))
            except EtlFormatError:
                parts = []
            if parts or not len(stored.blocks):
                return {name: np.concatenate([part[name] for part in parts]) if parts else np.zeros(0, dtype=RECORD_DTYPE[name])
                        for name in wanted}  # fmt: skip
        rows = self.records
        return {name: np.ascontiguousarray(rows[name]) for name in wanted}

    @property
    def buffers(self) -> np.ndarray:
        self.ensure_built()
        return self._buffer_table

    @property
    def blocks(self) -> list[dict[str, Any]]:
        """Each block's summary: ``rows``, ``first_row``, ``filetime`` [first, last], ``providers``
        (codes), ``ids`` (``None``: too many to list), and where it is in the index file."""
        self.ensure_built()
        assert self._stored is not None
        return list(self._stored.blocks)

    @property
    def errors(self) -> list[str]:
        """What was wrong with the file (each damaged part was skipped and counted), as text."""
        return [str(error) for error in self.format_errors()]

    def format_errors(self) -> list[EtlFormatError]:
        """What was wrong with the file, whole: each problem's file offset, buffer and structure,
        as ``EtlReader`` reports them."""
        self.ensure_built()
        return [EtlFormatError(**fields, path=self.path) for fields in self.meta.get("errors", ())]

    @property
    def unknown_reasons(self) -> dict[int, str]:
        self.ensure_built()
        reasons: dict[int, str] = self.meta.get("unknown_reasons", {})
        return reasons

    @property
    def read_stats(self) -> dict[str, int]:
        self.ensure_built()
        return dict(self.meta.get("read_stats", {}))

    @property
    def compressed(self) -> bool:
        return self.header.compressed

    def provider_row(self, provider: Any) -> int | None:
        """Where a provider (GUID, GUID text or ``Provider``) is in the provider table."""
        try:
            return self.providers.index(_as_guid(provider))
        except ValueError:
            return None

    def loader(self, **options: Any) -> _IndexLoader:
        """Builds the records of rows given by number (any order)."""
        self.ensure_built()
        return _IndexLoader(self)

    def records_at(self, rows: np.ndarray) -> Iterator[Any]:
        """The records of ``rows`` (row numbers, ascending), in that order, each block's place
        columns read (and checked, ``column_blocks``) for them, never its whole rows: for a few
        rows in many blocks, as a catalog of the kinds of event reads them."""
        self.ensure_built()
        assert self._stored is not None
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return
        firsts = np.asarray([int(entry["first_row"]) for entry in self._stored.blocks], dtype=np.int64)
        blocks = np.searchsorted(firsts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(blocks)) + 1
        for start, stop in zip([0, *bounds.tolist()], [*bounds.tolist(), len(rows)], strict=True):
            number = int(blocks[start])
            stored = self._stored
            try:
                table = self._block_columns(number, [*_LOADER_COLUMNS])
                loader = RecordLoader.over(table, self._reasons_by_block[number], self.context, self.file_buffers)  # type: ignore[arg-type]
            except EtlFormatError:  # a damaged part: read as segments are (the file indexed again)
                loader = self.segment_at(number).loader()
            if self._stored is not stored:  # indexed again since: blocks may be cut elsewhere
                yield from self.loader().records(rows[start:])
                return
            yield from loader.records(rows[start:stop] - int(firsts[number]))

    def close(self) -> None:
        if self._stored is not None:
            self._stored.close()
        self.file_buffers.close()

    # -- selecting and counting -------------------------------------------------------------------
    def mask(self, **conditions: Any) -> np.ndarray:
        """Rows matching every condition (see ``select``), as a boolean array."""
        parts = [self._block_mask(segment.records, dict(conditions)) for segment in self.segments()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def _block_mask(self, rows: np.ndarray, conditions: dict[str, Any]) -> np.ndarray:
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
        column by name (``id=5``, ``pid=[4, 8]``, ``opcode=1``). Blocks whose summaries rule the
        conditions out are not read.
        """
        conditions = dict(columns)
        if provider is not None:
            conditions["provider"] = provider
        if start is not None:
            conditions["start"] = start
        if end is not None:
            conditions["end"] = end
        self.ensure_built()
        ids = columns.get("id")
        wanted_ids = None if ids is None else set(ids) if isinstance(ids, Iterable) and not isinstance(ids, (str, bytes)) else {ids}
        found = []
        for segment in self.segments(start=start, end=end, provider=provider):
            listed = segment.summary.get("ids") if segment.summary is not None else None
            if wanted_ids is not None and listed is not None and wanted_ids.isdisjoint(listed):
                continue
            found.append(np.flatnonzero(self._block_mask(segment.records, dict(conditions))) + segment.first_row)
        return np.concatenate(found).astype(np.int64) if found else np.zeros(0, dtype=np.int64)

    def count_by(self, *fields: str, rows: np.ndarray | None = None) -> dict[Any, int]:
        """Counts of each value (or tuple of values) of ``fields`` over ``rows`` (default: all).

        ``provider`` counts by GUID (``None`` for records without one), ``kind`` by name.
        """
        if not fields:
            raise InvalidArgument("count_by needs at least one column")
        for name in fields:
            if name not in RECORD_COLUMNS:
                raise InvalidArgument(f"no column {name!r}; columns are {list(RECORD_COLUMNS)}")
        out: dict[Any, int] = {}
        for segment in self.segments():
            table = segment.records
            if rows is not None:
                local = rows[(rows >= segment.first_row) & (rows < segment.first_row + len(segment))] - segment.first_row
                table = table[local]
            if not len(table):
                continue
            keys = np.empty(len(table), dtype=[(name, RECORD_FIELDS[name]) for name in fields])
            for name in fields:
                keys[name] = table[name]
            values, counts = np.unique(keys, return_counts=True)
            for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                named = tuple(self._named(name, part) for name, part in zip(fields, value, strict=True))
                key = named[0] if len(fields) == 1 else named
                out[key] = out.get(key, 0) + int(count)
        return out

    def _named(self, field: str, value: Any) -> Any:
        if field == "provider":
            return self.providers[value] if value >= 0 else None
        if field == "kind":
            return KIND_NAMES[value]
        return value

    def __repr__(self) -> str:
        state = f"{len(self)} records" if self._stored is not None else "not indexed yet"
        return f"<EtlIndex {self.path}: {state}, {len(self.providers)} providers>"


class _IndexLoader:
    """``RecordLoader`` over an index's rows by number: each row is read from its block."""

    def __init__(self, index: EtlIndex) -> None:
        self.index = index
        self.context = index.context
        self._cache = index.file_buffers._cache
        self._firsts = np.asarray([int(entry["first_row"]) for entry in index.blocks], dtype=np.int64)

    def __enter__(self) -> _IndexLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def buffer_data(self, buffer_index: int) -> bytes:
        return self.index.file_buffers.buffer_data(buffer_index)

    def _runs(self, rows: np.ndarray) -> Iterator[tuple[RecordLoader, np.ndarray]]:
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return
        blocks = np.searchsorted(self._firsts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(blocks)) + 1
        starts, stops = np.concatenate(([0], bounds)), np.concatenate((bounds, [len(rows)]))
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            number = int(blocks[start])
            segment = self.index.segment_at(number)
            yield segment.loader(), rows[start:stop] - segment.first_row

    def records(self, rows: np.ndarray) -> Iterator[Any]:
        for loader, local in self._runs(rows):
            yield from loader.records(local)

    def record(self, row: int) -> Any:
        return next(self.records(np.asarray([row])))

    def user_data(self, row: int) -> bytes:
        for loader, local in self._runs(np.asarray([row])):
            return loader.user_data(int(local[0]))
        raise InvalidArgument(f"no row {row}")


def _footer_problem(stored: StoredIndex, file_size: int) -> str | None:
    """What is wrong with a stored index's buffer table, provider table and facts (its blocks'
    rows are checked as they are read)."""
    try:
        providers = np.frombuffer(b"".join(bytes.fromhex(text) for text in stored.footer.get("providers", [])), dtype=np.uint8).reshape(-1, 16)
        meta = _meta_of(stored.footer)
        return index_problem(np.zeros(0, dtype=RECORD_DTYPE), stored.buffers(), providers, meta, file_size)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return f"the footer does not hold together: {error}"


def _meta_of(footer: dict[str, Any]) -> dict[str, Any]:
    meta = {key: value for key, value in footer.items() if key not in ("blocks", "providers", "buffer_table")}
    meta["unknown_reasons"] = {int(row): reason for row, reason in footer.get("unknown_reasons", {}).items()}
    return meta


def _cut(
    waiting: list[np.ndarray], reasons: list[dict[int, str]], count: int,
) -> tuple[np.ndarray, dict[int, str], list[np.ndarray], list[dict[int, str]], int]:  # fmt: skip
    """The first ``count`` waiting rows as one block, and what is left."""
    rows = concat(waiting)
    merged: dict[int, str] = {}
    at = 0
    for part, part_reasons in zip(waiting, reasons, strict=True):
        merged.update({at + row: reason for row, reason in part_reasons.items()})
        at += len(part)
    block, rest = rows[:count], rows[count:]
    left = {row - count: reason for row, reason in merged.items() if row >= count}
    return block, {row: reason for row, reason in merged.items() if row < count}, ([rest] if len(rest) else []), ([left] if len(rest) else []), len(rest)


def _mode_beside(source: str) -> int:
    """The trace's mode bits, at most 0644 (an index others may write would not be believed)."""
    try:
        return os.stat(source).st_mode & 0o644
    except OSError:
        return CACHE_FILE_MODE


def _create_part(target: Path, mode: int) -> tuple[int, str]:
    """A new file to write ``target``'s index into, created with ``mode`` (masked by the umask)
    from its first moment; missing folders on the way are made 0700."""
    make_private_dirs(target.parent)
    while True:
        temp = target.parent / f".openetw-{secrets.token_hex(8)}.idx-part"
        try:
            return os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode), str(temp)
        except FileExistsError:
            continue


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


_READ_ALONE = HEADER_COLUMNS | PLACE_COLUMNS
_LOADER_COLUMNS = ("header_type", "kind", "buffer", "offset", "size", "cpu")  # what a RecordLoader reads of its rows


class _BlockColumns(dict):  # type: ignore[type-arg]
    """A block's columns; a header column not read yet is read when first asked for (from the
    stored block, or from the block's rows in memory)."""

    def __init__(self, index: EtlIndex | None, number: int, columns: dict[str, np.ndarray], rows: np.ndarray | None = None,
                 first: int = 0) -> None:  # fmt: skip
        super().__init__(columns)
        self._index = index
        self._number = number
        self._rows = rows
        self._first = first
        self._stored = index._stored if index is not None else None  # the index its block number is of
        self._count = len(next(iter(columns.values()))) if columns else len(rows) if rows is not None else 0

    @classmethod
    def of_rows(cls, rows: np.ndarray, names: list[str]) -> _BlockColumns:
        return cls(None, 0, {name: rows[name] for name in names}, rows)

    def __missing__(self, name: str) -> np.ndarray:
        if self._rows is not None:
            value: np.ndarray = self._rows[name]
        elif name in _READ_ALONE and self._index is not None and self._index._stored is not None:
            try:
                if self._index._stored is self._stored:
                    read = self._index._block_columns(self._number, [name], held=self)
                    for other, values in read.items():
                        self.setdefault(other, values)  # (the checked place columns come together)
                    value = read[name]
                else:  # indexed again since (its blocks may be cut elsewhere): the same rows
                    value = self._index._column_range(self._first, self._count, name)
            except EtlFormatError:  # a damaged column: the file is indexed again, the same rows
                value = self._index._column_again(self._first, self._count, name)
        else:
            raise KeyError(name)
        self[name] = value
        return value
