"""The table form of a trace: one pass over the merged records, written by a ``TableWriter``.

Each record becomes a row of ``events``; a record with a schema is also queued on its
schema's table, and queued records are decoded a batch at a time into typed columns (see
``openetw.export.tables``). Memory stays bounded: ``events`` is written every
``events_rows`` rows, and when ``pending_limit`` records wait in the per-schema queues the
fullest tables are written out. Names are the ones ``dump --json`` prints; process names come
from what the trace said before each record (one pass, as ``dump`` names them).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord
from openetw.events.decoded import decode_record
from openetw.export._deps import require
from openetw.export.events import EventColumns, events_schema
from openetw.export.evtx_tables import evtx_identity
from openetw.export.source import Selection
from openetw.export.tables import SchemaTable, TableCatalog
from openetw.guids import format_guid
from openetw.tdh.context import DecodeContext, process_name_from_image
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema

__all__ = ["ExportSummary", "Progress", "TableWriter", "export_tables"]

LAYOUT_VERSION = 1
Progress = Callable[[int, float], None]
"""Called now and then with the records read so far and the seconds since the start."""


class TableWriter(Protocol):
    """Where the tables go (one implementation per output format)."""

    suffix: str

    def write_events(self, table: Any) -> None: ...

    def write_table(self, info: SchemaTable, table: Any) -> None: ...

    def finish(self, layout: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class ExportSummary:
    """What an export read and wrote."""

    inputs: list[str]
    output: str
    format: str
    records: int = 0
    rows: int = 0
    decoded: int = 0
    undecodable: int = 0
    property_errors: int = 0
    untyped_values: int = 0
    tables: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "output": self.output,
            "format": self.format,
            "records_read": self.records,
            "rows": self.rows,
            "decoded": self.decoded,
            "undecodable": self.undecodable,
            "records_with_property_errors": self.property_errors,
            "untyped_values": self.untyped_values,
            "tables": self.tables,
            "seconds": round(self.seconds, 3),
            "errors": self.errors,
        }

    def lines(self) -> list[str]:
        rate = f", {self.records / self.seconds:,.0f} records/s" if self.seconds > 0 else ""
        tables = f" in {self.tables} event tables" if self.format != "jsonl" else ""
        out = [
            f"wrote {self.output} ({self.format}): {self.rows} events{tables}{rate}",
            f"  decoded {self.decoded}, undecodable {self.undecodable} (in events only)",
        ]
        if self.property_errors:
            out.append(f"  {self.property_errors} records with properties that did not decode (null in their tables)")
        if self.untyped_values:
            out.append(f"  {self.untyped_values} values that did not fit their column's type (null)")
        return out


def _as_decoded(values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The "decoder" of a record that carries its values (an Event Log record)."""
    return values, {}


class _Names:
    """The provider and event names ``dump --json`` prints, cached per schema and record identity."""

    def __init__(self, registry: SchemaRegistry, context: DecodeContext) -> None:
        self._registry = registry
        self._context = context
        self._by_schema: dict[int, tuple[Schema, str | None, str | None]] = {}
        self._by_key: dict[tuple[Any, ...], tuple[str | None, str | None]] = {}

    def _slow(self, record: EventRecord) -> tuple[str | None, str | None]:
        event = decode_record(record, self._registry, self._context) if record.kind != "unknown" else None
        if event is None:
            return None, None
        return event.provider_name, event.event_name

    def of(self, record: EventRecord, schema: Schema | None) -> tuple[str | None, str | None]:
        if schema is not None:
            found = self._by_schema.get(id(schema))
            if found is not None and found[0] is schema:
                return found[1], found[2]
            names = (schema.provider_name, schema.event_name)
            if names[0] is None or names[1] is None:
                names = self._slow(record)
            self._by_schema[id(schema)] = (schema, *names)
            return names
        if record.kind == "event" and record.flags & 1:
            return self._slow(record)
        key = (record.kind, record.provider_guid_bytes, record.hook_id, record.id, record.version, record.opcode)
        cached = self._by_key.get(key)
        if cached is None:
            cached = self._by_key[key] = self._slow(record)
        return cached


class _Identities:
    """Schema and names per record identity (kind, provider, hook, id, version, opcode), kept
    until the trace teaches the context new schemas (an EventSource manifest, TDH metadata).
    TraceLogging events and manifest chunks are looked up every time: their schema is in the
    record itself."""

    def __init__(self, registry: SchemaRegistry, context: DecodeContext) -> None:
        self._context = context
        self._names = _Names(registry, context)
        self._cache: dict[tuple[Any, ...], tuple[Schema | None, str | None, str | None]] = {}
        self._state = (context.manifests_learned, context.carried_schemas)

    def of(self, record: EventRecord) -> tuple[Schema | None, str | None, str | None]:
        context = self._context
        kind = record.kind
        if kind == "evtx":
            return None, getattr(record, "provider_name", None) or None, None
        if kind == "wpp" or (kind == "event" and (record.flags & 1 or record.id == 0xFFFE)):
            schema = context.schema_for(record)
            return (schema, *self._names.of(record, schema))
        state = (context.manifests_learned, context.carried_schemas)
        if state != self._state:
            self._cache.clear()
            self._state = state
        key = (kind, record.provider_guid_bytes, record.hook_id, record.id, record.version, record.opcode)
        found = self._cache.get(key)
        if found is None:
            schema = context.schema_for(record) if kind != "unknown" else None
            found = self._cache[key] = (schema, *self._names.of(record, schema))
        return found


def _process_names(context: DecodeContext) -> Callable[[int, int], str | None]:
    """``context.process_name``, with each image's short name worked out once."""
    process_at = context.process
    short: dict[str, str] = {}

    def process_name(pid: int, when: int) -> str | None:
        info = process_at(pid, when)
        image = None if info is None else info.image
        if not image:
            return None
        name = short.get(image)
        if name is None:
            if len(short) >= 4096:
                short.clear()
            name = short[image] = process_name_from_image(image)
        return name

    return process_name


def _provider_filter(selection: Selection) -> Callable[[EventRecord, str | None], bool] | None:
    if not selection.providers:
        return None
    guids, names = selection.provider_sets()

    def accept(record: EventRecord, provider: str | None) -> bool:
        if record.provider_guid_bytes is not None and format_guid(record.provider_id) in guids:
            return True
        return bool(provider) and provider.lower() in names  # type: ignore[union-attr]

    return accept


@contextmanager
def _young_collections() -> Iterator[None]:
    """The collector's automatic passes off (the loop makes millions of short-lived objects, and
    each full pass would walk every object kept); the loop collects the young generations itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def export_tables(
    readers: list[EtlReader],
    records: Iterable[EventRecord],
    registry: SchemaRegistry,
    writer: TableWriter,
    summary: ExportSummary,
    *,
    selection: Selection | None = None,
    progress: Progress | None = None,
    events_rows: int = 1 << 16,
    pending_limit: int = 1 << 17,
    flush_rows: int = 1 << 16,
) -> ExportSummary:
    """Writes the table form of ``records`` (read by ``readers``) through ``writer``."""
    with _young_collections():
        return _export_tables(
            readers, records, registry, writer, summary, selection=selection, progress=progress,
            events_rows=events_rows, pending_limit=pending_limit, flush_rows=flush_rows,
        )  # fmt: skip


def _export_tables(
    readers: list[EtlReader],
    records: Iterable[EventRecord],
    registry: SchemaRegistry,
    writer: TableWriter,
    summary: ExportSummary,
    *,
    selection: Selection | None,
    progress: Progress | None,
    events_rows: int,
    pending_limit: int,
    flush_rows: int,
) -> ExportSummary:
    pa = require("pyarrow", "exporting tables")
    selection = selection if selection is not None else Selection()
    started = time.perf_counter()
    context = DecodeContext(registry, learn_threads=False, learn_images=False)  # process names are all it asks for
    catalog = TableCatalog(pa, registry.source_of, writer.suffix)
    schema_of_events = events_schema(pa)
    events = EventColumns()
    groups: dict[tuple[int, int], tuple[Schema, SchemaTable, Any]] = {}
    evtx_tables: dict[tuple[Any, ...], SchemaTable] = {}
    accept_provider = _provider_filter(selection)
    windowed = selection.start is not None or selection.end is not None
    observe, identity_of, process_name = context.observe, _Identities(registry, context).of, _process_names(context)
    add_event = events.add
    pending = 0
    decoded = undecodable = 0
    position = -1

    def flush(table: SchemaTable) -> None:
        batch = table.decode(pa)
        writer.write_table(table, batch.table)

    start, end = selection.start, selection.end
    filetime: int | None
    process: str | None
    for position, record in enumerate(records):
        if record.kind != "unknown":
            observe(record)
            filetime = record.filetime
            if windowed and ((start is not None and filetime < start) or (end is not None and filetime > end)):
                continue
            process = process_name(record.pid, filetime)
        else:
            filetime, process = None, None
        schema, provider, event = identity_of(record)
        if accept_provider is not None and not accept_provider(record, provider):
            continue
        add_event(position, record, filetime, provider, event, process)
        if schema is not None:
            key = (id(schema), record.pointer_size)
            entry = groups.get(key)
            if entry is None or entry[0] is not schema:
                table = catalog.table_for(schema, provider, event)
                entry = groups[key] = (schema, table, registry.compiled(schema, record.pointer_size))
            queued, data, decoder = entry[1], record.user_data, entry[2]
        elif record.kind == "evtx":
            evtx_key, make_schema, values = evtx_identity(record)
            queued = evtx_tables.get(evtx_key)  # type: ignore[assignment]
            if queued is None:
                queued = evtx_tables[evtx_key] = catalog.table_for(make_schema(), provider, None)
            data, decoder = values, _as_decoded  # type: ignore[assignment]
        else:
            undecodable += 1
        if schema is not None or record.kind == "evtx":
            decoded += 1
            queued.pending.append((position, data, decoder))
            pending += 1
            if len(queued.pending) >= flush_rows:
                pending -= len(queued.pending)
                flush(queued)
            elif pending >= pending_limit:
                for table in sorted(catalog.tables, key=lambda item: len(item.pending), reverse=True):
                    if pending < pending_limit // 2:
                        break
                    pending -= len(table.pending)
                    flush(table)
        if len(events) >= events_rows:
            summary.rows += len(events)
            writer.write_events(events.table(pa, schema_of_events))
            gc.collect(1)
            if progress is not None:
                progress(position + 1, time.perf_counter() - started)
    for table in catalog.tables:
        if table.pending:
            flush(table)
    summary.rows += len(events)
    writer.write_events(events.table(pa, schema_of_events))
    summary.records += position + 1
    summary.decoded += decoded
    summary.undecodable += undecodable
    summary.property_errors += sum(table.property_errors for table in catalog.tables)
    summary.untyped_values += sum(table.untyped_values for table in catalog.tables)
    summary.tables += len(catalog.tables)
    summary.errors.extend(str(error) for reader in readers for error in reader.stats.errors)
    summary.errors.extend(str(error) for error in context.manifest_errors)
    summary.seconds += time.perf_counter() - started
    if progress is not None:
        progress(position + 1, summary.seconds)
    writer.finish(_layout(summary, catalog, events_schema=schema_of_events))
    return summary


def _layout(summary: ExportSummary, catalog: TableCatalog, *, events_schema: Any) -> dict[str, Any]:
    """The content of ``_schemas.json``: the layout, its tables and where their schemas came from."""
    return {
        "layout": "openetw-tables",
        "layout_version": LAYOUT_VERSION,
        "events": {
            "file": f"events{catalog.suffix}",
            "rows": summary.rows,
            "columns": [{"name": field.name, "type": str(field.type)} for field in events_schema],
        },
        "tables": [table.describe() for table in catalog.tables],
        "summary": summary.as_json(),
    }
