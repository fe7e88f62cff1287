"""The one place the probe shell reads traces: files through ``UserTrace`` (the consumer API).

Everything the runner needs from a trace goes through here, so a change in how the consumer
indexes or streams files touches this module only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

from openetw.consumer import UserTrace
from openetw.errors import InvalidArgument
from openetw.events.sources import ETL, trace_format
from openetw.probe.lang.descriptions import EventIdentity
from openetw.probe.lang.schema_types import fields_of_properties, fields_of_values, merge_fields
from openetw.probe.lang.types import STRING
from openetw.probe.run.fields import ColumnsUnreadable, FieldReader, TextReader, field_reader, text_reader

__all__ = ["Catalog", "TraceFiles", "identity_of", "schema_registry"]

_HEADER_IDS = ("event", "evtx")  # kinds whose event id is the header's id (else the opcode)
_EXTENDED_INFO = 0x0001
_MANIFEST_DATA_ID = 0xFFFE
_METADATA_CLASS = "bbccf6c1-6cd1-48c4-80ff-839482e37671"  # classic events carrying TDH metadata
# What tells kinds of event apart in the index, header columns all (the catalog's key is made of
# these: one record speaks for each; the header type, a place column, is left out, so a block
# whose kinds were all met before is never read beyond these columns).
_KIND_FIELDS = ("kind", "provider", "id", "version", "level", "keyword", "opcode", "hook_id", "flags")


def identity_of(record: Any, context: Any) -> tuple[EventIdentity, Any]:
    """The ``EventIdentity`` of a record and its decoding schema (``None`` when unknown); an
    ``.evtx`` record names its provider itself and has no schema (its values come decoded)."""
    if record.kind == "evtx":
        guid = str(record.provider_id)
        return EventIdentity(guid, record.provider_name or None, record.level, record.keyword, record.id, None), None
    schema = context.tdh_schema_for(record)
    name = schema.provider_name if schema is not None and schema.provider_name else context.provider_name_of(record)
    guid = str(record.provider_id)
    event_id = record.id if record.kind in _HEADER_IDS else record.opcode
    identity = EventIdentity(guid, name, record.level, record.keyword, event_id, schema.event_name if schema is not None else None)
    return identity, schema


class TraceFiles:
    """``.etl`` files and ``.evtx`` logs merged in time order, delivered record by record with their
    context (``index=False``: streamed in one pass that writes nothing, and no header-column batches)."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], *, manifests: Any = None, index: bool = True, index_beside: bool | None = None) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.index = index
        self.index_beside = index_beside
        for path in self.paths:
            if not os.path.exists(path):
                raise InvalidArgument(f"{path}: no such file")
        self.evtx = [path for path in self.paths if trace_format(path) is not ETL]  # read record by record: no fixed places
        self.manifests = manifests
        self.trace: UserTrace | None = None
        self.errors: list[BaseException] = []
        self._maps: dict[str, Any] = {}

    def mapped(self, path: str) -> Any:
        """The file's bytes as a read-only numpy array (memory-mapped, kept while the run lasts)."""
        import numpy as np

        found = self._maps.get(path)
        if found is None:
            found = self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        return found

    def compressed(self) -> bool:
        """Whether some file keeps its events in compressed buffers (no places in the file to read payloads at)."""
        from openetw.etl import EtlReader

        for path in self.paths:
            if path in self.evtx:
                continue
            with EtlReader(path) as reader:
                if reader.header.compressed:
                    return True
        return False

    def run(self, callback: Callable[[Any, Any], None]) -> dict[str, Any]:
        """Deliver every record to ``callback(record, context)``; returns the trace's statistics."""
        trace = self.trace = UserTrace(files=self.paths, manifests=self.manifests, index=self.index, index_beside=self.index_beside)
        trace.set_default_event_callback(callback)
        trace.on_error(lambda error, record: self.errors.append(error))
        trace.start()
        return trace.query_stats()

    def stop(self) -> None:
        if self.trace is not None:
            self.trace.stop()

    def close(self) -> None:
        """Let go of every file the run opened (the trace's sources and indexes, the mappings)."""
        if self.trace is not None:
            self.trace.close()
        for mapped in self._maps.values():
            mapping = getattr(mapped, "_mmap", None)
            if mapping is not None:
                mapping.close()
        self._maps.clear()


class Catalog:
    """The kinds of events the files hold: identity, schema fields, how many of each."""

    def __init__(self) -> None:
        self.entries: dict[Any, list[Any]] = {}  # key -> [identity, fields or None, count]
        self.schemas: dict[tuple[str, int, int], tuple[Any, int]] = {}  # (guid, id, version) -> (schema, pointer size)

    def field_reader(self, guid: str, event_id: int, version: int, name: str) -> FieldReader | None:
        """How integer field ``name`` of this kind of event is read column-wise, else ``None``."""
        found = self.schemas.get((guid, event_id, version))
        if found is None:
            return None
        schema, pointer_size = found
        return field_reader(schema, pointer_size, name)

    def text_reader(self, guid: str, event_id: int, version: int, name: str) -> TextReader | None:
        """How string field ``name`` of this kind of event is read column-wise, else ``None``."""
        found = self.schemas.get((guid, event_id, version))
        return None if found is None else text_reader(found[0], found[1], name)

    @classmethod
    def scan(cls, files: TraceFiles) -> Catalog:
        """The catalog of ``files``: from their indexes and schema lookups when that gives the same
        answer (``from_index``), else from a pass over every record."""
        found = cls.from_index(files)
        return found if found is not None else cls.scan_records(files)

    @classmethod
    def from_index(cls, files: TraceFiles) -> Catalog | None:
        """The catalog from the files' index columns: the kinds of event counted column-wise, each
        kind's schema looked up once, with its first record, in the order a pass would. Records
        whose schema may be their own (events with extended data, such as TraceLogging's; WPP
        messages) are read one by one, and those that teach the decode context schemas (manifests
        and TDH metadata the trace carries) are shown to it in their place. ``None`` when the files
        are not indexed, or several files carry such records (their merged order decides): then
        only a pass gives the same answer."""
        if not files.index or files.evtx:
            return None
        trace = UserTrace(files=files.paths, manifests=files.manifests, index_beside=files.index_beside)
        try:
            indexes = trace.indexes()
            catalog = cls()
            met_at: dict[Any, int] = {}  # key -> filetime of its first record
            for index in indexes:
                if not catalog._add_index(index, trace.context, alone=len(indexes) == 1, met_at=met_at):
                    return None
            if len(indexes) > 1:  # in the order a pass meets them: files merged in time order
                order = sorted(catalog.entries, key=lambda key: met_at[key])
                catalog.entries = {key: catalog.entries[key] for key in order}
            return catalog
        finally:
            trace.close()

    def _add_index(self, index: Any, context: Any, *, alone: bool, met_at: dict[Any, int]) -> bool:
        """Count ``index``'s rows in, block by block, from its header columns. Records are read
        (through their blocks' place columns, ``EtlIndex.records_at``) only where a block has a
        kind of event not met before or records read one by one, together with the records
        that teach schemas met since the last such read (those after the last lookup change
        nothing: never read). ``False`` when only a pass gives the answer."""
        import numpy as np

        from openetw.consumer.index import KIND_CODES

        entries = self.entries
        met: dict[tuple[int, ...], list[Any]] = {}  # index identity -> its catalog entry
        metadata = index.provider_row(_METADATA_CLASS)
        event, wpp, unknown = KIND_CODES["event"], KIND_CODES["wpp"], KIND_CODES["unknown"]
        classic = [KIND_CODES["classic"], KIND_CODES["instance"]]
        total = singles = 0
        teachers_waiting: list[int] = []  # records that teach schemas, not read while no lookup follows them
        for first_row, columns in index.column_blocks(_KIND_FIELDS):
            kind = columns["kind"]
            is_event = kind == event
            own = (kind == wpp) | (is_event & ((columns["flags"] & _EXTENDED_INFO) != 0))
            teaching = is_event & (columns["id"] == _MANIFEST_DATA_ID)
            if metadata is not None:
                teaching |= np.isin(kind, classic) & (columns["provider"] == metadata)
            each = np.flatnonzero(own)
            teach = np.flatnonzero(teaching)
            total += len(kind)
            singles += len(each)
            if singles > total // 2 + 1000 or (not alone and (len(each) or len(teach))):
                return False  # most records read one by one (a pass is as cheap), or the files' merged order decides
            shared = np.flatnonzero(~own & (kind != unknown))
            firsts: dict[int, tuple[tuple[int, ...], int]] = {}  # local row -> (index identity, count here)
            if len(shared):
                kinds, first, number = _kinds_in(columns, shared)
                for kind_key, lead, size in zip(kinds, first.tolist(), number.tolist(), strict=True):
                    found = met.get(kind_key)
                    if found is not None:
                        found[2] += size
                    else:
                        firsts[int(shared[lead])] = (kind_key, size)
            if not firsts and not len(each):
                teachers_waiting.extend((teach + first_row).tolist())  # shown to the context when a later lookup needs it
                continue
            firsts = {row + first_row: found for row, found in firsts.items()}
            single = set((each + first_row).tolist())
            teachers = {*teachers_waiting, *(teach + first_row).tolist()}
            wanted = sorted({*firsts, *single, *teachers})
            teachers_waiting = []
            for row, record in zip(wanted, index.records_at(np.asarray(wanted, dtype=np.int64)), strict=True):
                if row in teachers:
                    context.decode_context.observe(record)
                raw = record.provider_guid_bytes
                if raw is None or (row not in single and row not in firsts):
                    continue
                size = 1 if row in single else firsts[row][1]
                carried = id(context.entry_of(record)[0]) if record.flags & _EXTENDED_INFO else 0
                key = (raw, record.id, record.version, record.level, record.keyword, record.opcode, carried)
                entry = entries.get(key)
                if entry is not None:
                    entry[2] += size
                    met_at[key] = min(met_at[key], int(record.filetime))
                else:
                    met_at[key] = int(record.filetime)
                    identity, schema = identity_of(record, context)
                    entry = entries[key] = [identity, fields_of_properties(schema.properties) if schema is not None else None, size]
                    if schema is not None and not carried:
                        self.schemas.setdefault((identity.guid, identity.id, record.version), (schema, record.pointer_size))
                if row not in single:
                    met[firsts[row][0]] = entry
        return True

    @classmethod
    def scan_records(cls, files: TraceFiles) -> Catalog:
        """The catalog from a pass over every record (what ``from_index`` must agree with)."""
        catalog = cls()
        entries = catalog.entries

        def see(record: Any, context: Any) -> None:
            raw = record.provider_guid_bytes
            if raw is None:
                return
            # Header fields name the kind of event; a TraceLogging event's schema is its metadata.
            carried = id(context.entry_of(record)[0]) if record.flags & _EXTENDED_INFO else 0
            key = (raw, record.id, record.version, record.level, record.keyword, record.opcode, carried)
            found = entries.get(key)
            if record.kind == "evtx":  # no schema: the fields are what its records carry, merged
                values = record.properties()
                seen = fields_of_values(values)
                absent = {name for name, value in values.items() if value is None}
                if found is not None:
                    found[1] = merge_fields(found[1], seen)
                    found[2] += 1
                    found[3] |= absent
                else:
                    entries[key] = [identity_of(record, context)[0], seen, 1, absent]
                return
            if found is not None:
                found[2] += 1
                return
            identity, schema = identity_of(record, context)
            fields = fields_of_properties(schema.properties) if schema is not None else None
            entries[key] = [identity, fields, 1]
            if schema is not None and not carried:
                catalog.schemas.setdefault((identity.guid, identity.id, record.version), (schema, record.pointer_size))

        TraceFiles(files.paths, manifests=files.manifests, index=files.index, index_beside=files.index_beside).run(see)
        return catalog

    @classmethod
    def from_manifests(cls, paths: Sequence[str | os.PathLike[str]] = (), *, installed: bool = True) -> Catalog:
        """The events manifests declare, for live probes (nothing is counted: ``count`` is 0):
        the installed manifests (``openetw manifest install``) and ``paths`` (files or
        directories), a later one winning for the same (provider, id, version)."""
        from openetw.events.registry import build_registry

        registry = build_registry([os.fspath(p) for p in paths], installed=installed)
        if paths and registry.errors:
            raise InvalidArgument(f"--manifest: {registry.errors[0]}")
        registry.load_everything()
        catalog = cls()
        for schema in registry.schemas():
            guid = str(schema.provider_id)
            identity = EventIdentity(guid, schema.provider_name, schema.level, schema.keyword, schema.event_id, schema.event_name)
            catalog.entries[(guid, schema.event_id, schema.version)] = [identity, fields_of_properties(schema.properties), 0]
            catalog.schemas[(guid, schema.event_id, schema.version)] = (schema, 8)
        return catalog

    def items(self) -> list[tuple[EventIdentity, dict[str, Any] | None, int]]:
        return [(e[0], _with_absent(e[1], e[3]) if len(e) > 3 else e[1], e[2]) for e in self.entries.values()]


def schema_registry(paths: Sequence[str]) -> Any:
    """What a trace decodes with when the user names manifests: the installed ones, then
    ``paths`` (which win); ``None`` when none are named (the consumer's default: the installed)."""
    if not paths:
        return None
    from openetw.events.registry import build_registry

    registry = build_registry(list(paths))
    if registry.errors:
        raise InvalidArgument(f"--manifest: {registry.errors[0]}")
    return registry


def _batches(trace: UserTrace, indexes: list[Any], wanted: list[str]) -> Any:
    """The trace's rows in batches: one file's straight from its index a block at a time (every
    row, in time order: nothing to merge or select), several files' through ``UserTrace.batches``."""
    if len(indexes) != 1:
        yield from trace.batches(columns=wanted, batch_size=1 << 20)
        return
    import numpy as np

    from openetw.consumer.batches import Batch

    for segment in indexes[0].segments():
        rows = segment.records
        if len(rows):
            yield Batch(rows, np.zeros(len(rows), dtype=np.int64), np.arange(segment.first_row, segment.first_row + len(rows)), indexes)


def _kinds_in(columns: Any, chosen: Any) -> tuple[list[tuple[int, ...]], Any, Any]:
    """The distinct kinds of event (``_KIND_FIELDS``) among rows ``chosen`` (ascending) of a
    block's ``columns``: (each kind, its first place in ``chosen``, how many). Each field's
    values are made digits (their offsets from the least, or numbered densely) mixed into one
    int64 per row (exact: the product of the digits' ranges is checked to fit), then sorted (a
    radix sort when the codes fit 16 bits)."""
    import numpy as np

    every = len(chosen) == len(columns["kind"])  # (chosen ascending and unique: every row, in order; no gathering then)
    code: Any = 0
    product = 1
    for name in _KIND_FIELDS:
        values = columns[name] if every else columns[name][chosen]
        low, high = int(values.min()), int(values.max())
        if low == high:
            continue  # one value: no digit
        if high - low < 256:  # the value's offset is its digit
            digits, span = _offsets(values, low), high - low + 1
        elif high - low < 1 << 16:  # the values numbered densely
            shifted = _offsets(values, low)
            present = np.bincount(shifted, minlength=high - low + 1) > 0
            digits, span = (np.cumsum(present) - 1)[shifted], int(present.sum())
        else:
            distinct, digits = np.unique(values, return_inverse=True)
            span = len(distinct)
        product *= span
        if product >= 1 << 62:  # (never for real traces: a few distinct values a field)
            return _kinds_sorted(columns, chosen)
        code = code * span + digits.reshape(-1)
    if isinstance(code, int):
        code = np.zeros(len(chosen), dtype=np.uint8)
    elif product <= 1 << 16:
        code = code.astype(np.uint16)  # (a stable sort of 16-bit values is a radix sort)
    _, first, number = np.unique(code, return_index=True, return_counts=True)
    lead = chosen[first]
    return list(zip(*(columns[name][lead].tolist() for name in _KIND_FIELDS), strict=True)), first, number


def _offsets(values: Any, low: int) -> Any:
    """``values - low`` as int64 (unsigned 64-bit values are not cast before the subtraction)."""
    import numpy as np

    return values.astype(np.int64) - low if values.dtype.kind == "i" else (values - values.dtype.type(low)).astype(np.int64)


def _kinds_sorted(columns: Any, chosen: Any) -> tuple[list[tuple[int, ...]], Any, Any]:
    """``_kinds_in`` by sorting the rows' fields as records (slower; for any values)."""
    import numpy as np

    keys = np.empty(len(chosen), dtype=[(name, columns[name].dtype) for name in _KIND_FIELDS])
    for name in _KIND_FIELDS:
        keys[name] = columns[name][chosen]
    unique, first, number = np.unique(keys, return_index=True, return_counts=True)
    return [tuple(key) for key in unique.tolist()], first, number


def _with_absent(fields: dict[str, Any], absent: set[str]) -> dict[str, Any]:
    """A log event's fields, with those its records never gave a value typed as strings (``""``)."""
    return {**{name: STRING for name in sorted(absent) if name not in fields}, **fields}


class HeaderColumns:
    """One batch of header columns: ``provider`` indexes ``guids`` (-1: none), ``id`` is the
    event id (a classic event's opcode), then ``level``, ``keyword``, ``pid``, ``tid``, ``cpu``."""

    __slots__ = ("guids", "provider", "id", "level", "keyword", "pid", "tid", "cpu", "version", "_batch", "_files", "_buffer_tables",
                 "_places")
    provider: Any

    def __init__(self, guids: list[str], columns: dict[str, Any], batch: Any = None, files: Any = None,
                 buffer_tables: list[Any] | None = None) -> None:  # fmt: skip
        self.guids = guids
        self._batch = batch
        self._files = files
        self._buffer_tables = buffer_tables or []
        self._places: tuple[Any, Any, Any] | None = None
        for name, value in columns.items():
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.provider)

    def field_values(self, rows: Any, reader: FieldReader | TextReader) -> Any:
        """The field ``reader`` reads, of each of ``rows`` (the plan's type; ``ColumnsUnreadable``
        when some row is in a compressed buffer or its payload does not give the value)."""
        import numpy as np

        starts_all, lengths_all, narrow_all = self._payload_places()
        if reader.pointer_dependent:
            narrow = narrow_all[rows]
            if bool(narrow.any()) if reader.pointer_size == 8 else not bool(narrow.all()):
                raise ColumnsUnreadable("events of one kind with pointers of both sizes")
        starts, lengths = starts_all[rows], lengths_all[rows]
        if len(starts) and int(starts.min()) < 0:
            raise ColumnsUnreadable("an event's payload is in a compressed buffer")
        batch = self._batch
        if len(self._buffer_tables) == 1:
            return reader.read(self._files.mapped(self._files.paths[0]), starts, lengths)
        files = batch.file[rows]
        out = np.empty(len(rows), dtype=reader.dtype)
        for number in np.unique(files).tolist():
            mine = files == number
            out[mine] = reader.read(self._files.mapped(batch.paths[number]), starts[mine], lengths[mine])
        return out

    def _payload_places(self) -> tuple[Any, Any, Any]:
        """Of every row: where its payload starts in its file (-1: in a compressed buffer), its
        length, and whether its header has 32-bit pointers; made once per batch."""
        import numpy as np

        if self._places is None:
            header = self._place_columns()
            tables = self._buffer_tables
            if len(tables) == 1:
                starts = tables[0][header["buffer"]]
            else:
                starts = np.empty(len(header), dtype=np.int64)
                files = self._batch.file
                for number, table in enumerate(tables):
                    mine = files == number
                    starts[mine] = table[header["buffer"][mine]]
            starts = np.where(starts >= 0, starts + header["offset"] + header["user_data_offset"], -1)
            self._places = (starts, header["user_data_length"].astype(np.int64), _NARROW_HEADERS()[header["header_type"]])
        return self._places

    def _place_columns(self) -> Any:
        """The columns that say where each row's record is (``buffer``, ``offset``, ...)."""
        return self._batch.rows


def _narrow_headers() -> Any:
    """A table by header type: whether its records have 32-bit pointers."""
    import numpy as np

    from openetw.etl import layouts as L

    table = np.zeros(256, dtype=bool)
    table[[L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_FULL_HEADER32, L.HEADER_TYPE_INSTANCE32, L.HEADER_TYPE_SYSTEM32,
           L.HEADER_TYPE_COMPACT32, L.HEADER_TYPE_PERFINFO32]] = True  # fmt: skip
    return table


_NARROW_HEADERS = functools.cache(_narrow_headers)


def _buffer_table(index: Any) -> Any:
    """The file offset of each buffer's data by buffer number; -1 for compressed buffers."""
    import numpy as np

    from openetw.etl import layouts as L

    buffers = index.buffers
    table = np.full(int(buffers["index"].max()) + 1 if len(buffers) else 0, -1, dtype=np.int64)
    plain = (buffers["flags"] & L.BUFFER_FLAG_COMPRESSED) == 0
    table[buffers["index"][plain]] = buffers["file_offset"][plain]
    return table


def header_batches(files: TraceFiles, *, header_only: bool = False) -> Any:
    """The files' header columns batch by batch, in time order (through ``UserTrace.batches``);
    the trace is left in ``files.trace`` for its statistics. ``header_only``: no event field will
    be read (``field_values``), so one file's columns come alone from its index's blocks."""
    import numpy as np

    from openetw.consumer.index import KIND_CODES

    trace = files.trace = UserTrace(files=files.paths, manifests=files.manifests, index_beside=files.index_beside)
    trace.on_error(lambda error, record: files.errors.append(error))
    if header_only and len(files.paths) == 1:
        yield from _header_columns_alone(trace.indexes(built=False)[0], files)
        return
    if len(files.paths) == 1 and not files.evtx:  # built first: the table of buffers payloads are found through is whole
        index = trace.indexes()[0]
        yield from _header_columns_alone(index, files, [_buffer_table(index)])
        return
    indexes = trace.indexes()
    guids: list[str] = []
    where: dict[Any, int] = {}
    maps = []
    for index in indexes:
        table = np.array([where.setdefault(guid, len(where)) for guid in index.providers] + [-1], dtype=np.int64)
        maps.append(table)
    guids = [str(guid) for guid in where]
    event, kernel = KIND_CODES["event"], [KIND_CODES[k] for k in ("system", "compact", "perfinfo")]
    wanted = ["provider", "id", "opcode", "level", "keyword", "pid", "tid", "cpu", "kind", "version", "buffer", "offset",
              "user_data_offset", "user_data_length", "header_type"]  # fmt: skip
    tables = [_buffer_table(index) for index in indexes]
    for batch in _batches(trace, indexes, wanted):
        rows = batch.rows
        provider = rows["provider"].astype(np.int64)
        if len(maps) == 1:
            provider = maps[0][provider]
        else:
            mapped = np.empty_like(provider)
            for number, table in enumerate(maps):
                mine = batch.file == number
                mapped[mine] = table[provider[mine]]
            provider = mapped
        kind = rows["kind"]
        provider[np.isin(kind, kernel)] = -1
        columns = {
            "provider": provider, "id": np.where(kind == event, rows["id"], rows["opcode"]).astype(np.int64),
            "level": rows["level"], "keyword": rows["keyword"], "pid": rows["pid"], "tid": rows["tid"], "cpu": rows["cpu"],
            "version": rows["version"],
        }  # fmt: skip
        yield HeaderColumns(guids, columns, batch, files, tables)


def _header_columns_alone(index: Any, files: TraceFiles, buffer_tables: list[Any] | None = None) -> Any:
    """One file's header columns a block at a time from its index (``EtlIndex.column_blocks``:
    only these columns are read; on the first pass, the rows as they are indexed). With
    ``buffer_tables`` (the index built), event fields may be read: the columns that say where
    each payload is are read, and checked, when the first field is."""
    import numpy as np

    from openetw.consumer.index import KIND_CODES

    event, kernel = KIND_CODES["event"], np.asarray([KIND_CODES[k] for k in ("system", "compact", "perfinfo")])
    guids: list[str] = []
    wanted = ["provider", "id", "opcode", "level", "keyword", "kind"] + (["version"] if buffer_tables else [])  # (fields: by version)
    for _first, columns in index.column_blocks(wanted):
        if len(guids) != len(index.providers):
            guids = [str(guid) for guid in index.providers]  # the table only grows: codes keep their meaning
        kind = columns["kind"]
        provider = columns["provider"].astype(np.int64)
        provider[np.isin(kind, kernel)] = -1
        named = {"provider": provider, "id": np.where(kind == event, columns["id"], columns["opcode"]).astype(np.int64),
                 "level": columns["level"], "keyword": columns["keyword"]}  # fmt: skip
        yield _LazyHeaderColumns(guids, named, columns, files, buffer_tables)


class _LazyHeaderColumns(HeaderColumns):
    """Header columns whose ``pid``, ``tid``, ``cpu`` and ``version`` are read from the index when
    first used (a count by probe names never reads them), as are the columns that say where the
    payloads are (``EtlIndex.column_blocks``: read with, and checked against, the others that
    ``index_trust.rows_problem`` needs) when a field is first read."""

    __slots__ = ()

    def _place_columns(self) -> Any:
        if not self._buffer_tables:
            raise ColumnsUnreadable("the index is still being built: no buffer table to find payloads through")
        return self._batch

    def __getattr__(self, name: str) -> Any:
        if name not in ("pid", "tid", "cpu", "version"):
            raise AttributeError(name)
        value = self._batch[name]
        setattr(self, name, value)
        return value
