"""The one place the probe shell reads traces: files through ``UserTrace`` (the consumer API).

Everything the runner needs from a trace goes through here, so a change in how the consumer
indexes or streams files touches this module only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from openetw.consumer import UserTrace
from openetw.errors import InvalidArgument
from openetw.events.sources import ETL, trace_format
from openetw.probe.lang.descriptions import EventIdentity
from openetw.probe.lang.schema_types import fields_of_properties, fields_of_values, merge_fields
from openetw.probe.lang.types import STRING

__all__ = ["Catalog", "TraceFiles", "identity_of", "schema_registry"]

_HEADER_IDS = ("event", "evtx")  # kinds whose event id is the header's id (else the opcode)
_EXTENDED_INFO = 0x0001


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
        """Whether some file keeps its events in compressed buffers (no fixed places to read)."""
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

    def field_place(self, guid: str, event_id: int, version: int, name: str) -> tuple[int, int] | None:
        """(offset, size) of a field every event of this kind has at a fixed place, else ``None``."""
        from openetw.consumer.parser import fixed_offset_plan

        found = self.schemas.get((guid, event_id, version))
        if found is None:
            return None
        schema, pointer_size = found
        plan = fixed_offset_plan(schema, pointer_size)
        if name not in plan:
            return None
        end = plan[name][0]
        offset = 0
        for prop in schema.properties:
            if prop.name == name:
                return offset, end - offset
            size = plan.get(prop.name, (None,))[0]
            if size is None:
                return None
            offset = size
        return None

    @classmethod
    def scan(cls, files: TraceFiles) -> Catalog:
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


def _with_absent(fields: dict[str, Any], absent: set[str]) -> dict[str, Any]:
    """A log event's fields, with those its records never gave a value typed as strings (``""``)."""
    return {**{name: STRING for name in sorted(absent) if name not in fields}, **fields}


class HeaderColumns:
    """One batch of header columns: ``provider`` indexes ``guids`` (-1: none), ``id`` is the
    event id (a classic event's opcode), then ``level``, ``keyword``, ``pid``, ``tid``, ``cpu``."""

    __slots__ = ("guids", "provider", "id", "level", "keyword", "pid", "tid", "cpu", "version", "_batch", "_files")
    provider: Any

    def __init__(self, guids: list[str], columns: dict[str, Any], batch: Any = None, files: Any = None) -> None:
        self.guids = guids
        self._batch = batch
        self._files = files
        for name, value in columns.items():
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.provider)

    def field_values(self, rows: Any, offset: int, size: int, signed: bool) -> Any:
        """The integer at ``offset`` in the user data of each of ``rows`` (``None`` when some row
        cannot be read so: a compressed buffer or user data shorter than the field)."""
        import numpy as np

        batch = self._batch
        starts = batch.data_offset[rows]
        if (starts < 0).any() or (batch.data_length[rows] < offset + size).any():
            return None
        out = np.empty(len(rows), dtype=np.dtype(f"<{'i' if signed else 'u'}{size}"))
        files = batch.file[rows]
        for number in np.unique(files).tolist():
            mine = files == number
            data = self._files.mapped(batch.paths[number])
            places = starts[mine] + offset
            gathered = data[places[:, None] + np.arange(size)]
            out[mine] = gathered.reshape(-1).view(out.dtype)
        return out.astype(np.int64) if not (size == 8 and not signed) else out


def header_batches(files: TraceFiles) -> Any:
    """The files' header columns batch by batch, in time order (through ``UserTrace.batches``);
    the trace is left in ``files.trace`` for its statistics."""
    import numpy as np

    from openetw.consumer.index import KIND_CODES

    trace = files.trace = UserTrace(files=files.paths, manifests=files.manifests, index_beside=files.index_beside)
    trace.on_error(lambda error, record: files.errors.append(error))
    indexes = trace.indexes()
    guids: list[str] = []
    where: dict[Any, int] = {}
    maps = []
    for index in indexes:
        table = np.array([where.setdefault(guid, len(where)) for guid in index.providers] + [-1], dtype=np.int64)
        maps.append(table)
    guids = [str(guid) for guid in where]
    event, kernel = KIND_CODES["event"], [KIND_CODES[k] for k in ("system", "compact", "perfinfo")]
    wanted = ["provider", "id", "opcode", "level", "keyword", "pid", "tid", "cpu", "kind", "version"]
    for batch in trace.batches(columns=wanted, batch_size=1 << 20):
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
        yield HeaderColumns(guids, columns, batch, files)
