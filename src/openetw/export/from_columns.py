"""The table form of one ``.etl`` written from columns: the same tables as ``pipeline``, without a
Python object per event.

The file's index (``build_index_data``: every record's header columns, in the time order
``EtlReader.records(time_order=True)`` gives) is taken a window of ``events_rows`` rows at a time.
The ``events`` table is built from the header columns; names (provider, event) and schemas are
looked up once per record identity, process names once per process and stretch of time, and only
these records are built as ``EventRecord``s:

* the records that teach the decode context something (kernel process events, EventSource
  manifest chunks, TDH metadata, the Kernel-Process provider's start and stop), observed in
  order, so that every record is named with what the trace said before it, as ``pipeline`` does;
* one record per identity (kind, header type, provider, id, hook, version, opcode, flags), and
  the records whose schema or columns are their own (events with extended data: TraceLogging
  schemas, related activity ids; EventSource manifest chunks).

Each schema's payloads go to its table as places in the mapped file and are decoded by the
compiled core from the schema's column plan (``SchemaTable.decode_places``).

The index's rows are split into contiguous columns once (``split_columns``); distinct identities,
processes and tables are found by hashing (``first_seen``), not sorting; the ``events`` table's text
columns are Arrow dictionaries over the few texts they take (``coded_text``).

The values are the ones ``pipeline`` writes, row for row (a test exports every corpus trace both
ways). ``export_from_columns`` gives ``False`` without writing anything for the traces it leaves to
``pipeline``: damage (unknown records, problems found reading), WPP messages, files over
``COLUMNS_MAX_BYTES``. Compressed buffers are inflated into memory first (the mapped file holds
no payload in place).

A writer with ``write_window(table, filetimes)`` and ``decoded(info, batch, decoder, blob, starts,
lengths)`` is handed each window's ``events`` rows with their FILETIMEs, and each decoded batch
with its decoder and payloads, instead of ``write_events`` and ``write_table``
(``jsonl_columns``: the JSON lines).
"""

from __future__ import annotations

import itertools
import mmap
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from openetw.consumer.columns import identity_keys
from openetw.consumer.index import KIND_CODES, KIND_NAMES, BuiltIndex, build_index_data
from openetw.errors import OpenEtwError
from openetw.etl import layouts as L
from openetw.etl.reader import EtlReader
from openetw.etl.record import RECORD_CLASSES, EventRecord
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.export._deps import require
from openetw.export.events import events_schema
from openetw.export.pipeline import ExportSummary, Progress, TableWriter, _Identities, _layout, _young_collections
from openetw.export.source import Selection
from openetw.export.tables import SchemaTable, TableCatalog
from openetw.guids import format_guid
from openetw.tdh.columns import numeric_array
from openetw.tdh.context import DecodeContext, process_name_from_image
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema

__all__ = ["COLUMNS_MAX_BYTES", "export_from_columns"]

COLUMNS_MAX_BYTES = 512 << 20
"""Files up to this size are written from columns: the whole file's header columns are held at once
(about 100 bytes a record while the index is built), where the pipeline's memory stays flat."""

_SYSTEM, _COMPACT, _PERFINFO, _CLASSIC, _INSTANCE, _EVENT, _WPP, _UNKNOWN = (KIND_CODES[name] for name in KIND_NAMES)
_PROCESS_GROUP, _IMAGE_LOAD = 3, 10
_EXTENDED_INFO = 0x0001
_MANIFEST_DATA_ID, _MANIFEST_OPCODE = 0xFFFE, 254
_KERNEL_PROCESS_PROVIDER = "22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716"
_METADATA_CLASS = "bbccf6c1-6cd1-48c4-80ff-839482e37671"
_ACTIVITY_AT = L.EVENT_HEADER.offset("ActivityId")
_FILETIME_UNIX_TICKS = UNIX_EPOCH_FILETIME
_MIN_TICKS = _FILETIME_UNIX_TICKS - (1 << 63) // 100 + 1
_MAX_TICKS = _FILETIME_UNIX_TICKS + ((1 << 63) - 1) // 100
_ZERO_GUID = "00000000-0000-0000-0000-000000000000"
_HASH_FROM = 4096  # first_seen hashes runs this long or longer (Arrow's call costs more than sorting fewer)
_ROW_BY_ROW = 96  # runs between teaching records this short are named row by row (cheaper than a pass of numpy)


Columns = dict[str, np.ndarray]
"""The index's header columns by name (each contiguous, or a slice of one)."""

_SPLIT_ROWS = 8192  # rows split at a time: the slice stays in the cache while each column is copied out


def split_columns(rows: np.ndarray) -> Columns:
    """The columns of the structured ``rows``, each contiguous. Every later pass over a column then
    reads 1 to 8 bytes a row, not a row's whole stride (75 bytes); split a cache-sized slice at a time,
    it costs about what one strided pass over five columns does."""
    names = rows.dtype.names or ()
    columns = {name: np.empty(len(rows), dtype=rows.dtype[name]) for name in names}
    for start in range(0, len(rows), _SPLIT_ROWS):
        part = rows[start : start + _SPLIT_ROWS]
        for name in names:
            columns[name][start : start + _SPLIT_ROWS] = part[name]
    return columns


class _Picked:
    """Chosen rows of columns, each column taken when it is asked for."""

    __slots__ = ("columns", "chosen")

    def __init__(self, columns: Columns, chosen: np.ndarray) -> None:
        self.columns, self.chosen = columns, chosen

    def __getitem__(self, name: str) -> np.ndarray:
        picked: np.ndarray = self.columns[name][self.chosen]
        return picked


class _Trace:
    """The index of one file and its buffers' bytes (the file mapped, or the buffers inflated into
    memory when they are compressed): records built on demand."""

    def __init__(self, reader: EtlReader, path: str, built: BuiltIndex | None = None) -> None:
        self.built = built = built if built is not None else build_index_data(path)
        self.rows = built.records
        self.columns = split_columns(built.records)
        self.context = built.context
        buffers = built.buffers
        count = int(buffers["index"].max()) + 1 if len(buffers) else 0
        self.buffer_at = np.full(count, -1, dtype=np.int64)
        self.buffer_length = np.zeros(count, dtype=np.int64)
        self._file = None
        self.map: Any = b""
        if reader.header.compressed:
            parts: list[bytes] = []
            total = 0
            with EtlReader(path, strict=False) as again:
                for info, data in again.buffers():
                    if info.index < count:
                        self.buffer_at[info.index], self.buffer_length[info.index] = total, len(data)
                    parts.append(data)
                    total += len(data)
            self.map = b"".join(parts)
        elif len(buffers):
            self.buffer_at[buffers["index"]] = buffers["file_offset"]
            self.buffer_length[buffers["index"]] = buffers["buffer_size"]
            self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
            self.map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._buffers: dict[
            int, bytes
        ] = {}  # the last few buffers records were built from (time order interleaves processors)
        columns = self.columns
        self.at = (
            self.buffer_at[columns["buffer"]] + columns["offset"].astype(np.int64)
            if len(self.rows)
            else np.zeros(0, dtype=np.int64)
        )

    def usable(self) -> bool:
        built, columns = self.built, self.columns
        return (
            not built.errors and not built.unknown_reasons and int(built.read_stats.get("skipped_bytes", 0)) == 0
            and not bool(np.any(columns["kind"] >= _WPP))
            and not bool(np.any(self.buffer_at[columns["buffer"]] < 0))
        )  # fmt: skip

    def record(self, row: int) -> EventRecord:
        entry = self.rows[row]
        buffer = int(entry["buffer"])
        data = self._buffers.get(buffer)
        if data is None:
            if len(self._buffers) >= 64:
                self._buffers.clear()
            start = int(self.buffer_at[buffer])
            data = self._buffers[buffer] = bytes(self.map[start : start + int(self.buffer_length[buffer])])
        cls = RECORD_CLASSES[int(entry["header_type"])]
        offset = int(entry["offset"])
        header = cls.layout.unpack_from(data, offset)  # type: ignore[union-attr]
        return cls(header, data, offset, int(entry["size"]), int(entry["cpu"]), self.context, buffer)

    def close(self) -> None:
        if isinstance(self.map, mmap.mmap):
            self.map.close()
        if self._file is not None:
            self._file.close()


def export_from_columns(
    reader: EtlReader, registry: SchemaRegistry, writer: TableWriter, summary: ExportSummary, *, selection: Selection | None = None,
    progress: Progress | None = None, events_rows: int = 1 << 16, pending_limit: int = 1 << 17, flush_rows: int = 1 << 16,
) -> bool:  # fmt: skip
    """Writes the table form of ``reader``'s file through ``writer`` from its columns; ``False``
    (nothing written) when the file is one to read record by record (see the module doc)."""
    if reader.path is None or os.path.getsize(reader.path) > COLUMNS_MAX_BYTES:
        return False
    try:
        trace = _Trace(reader, reader.path)
    except OpenEtwError:
        return False  # damage the index pass stops at: the pipeline reads what it can, record by record
    try:
        if not trace.usable():
            return False
        with _young_collections():
            chosen = selection if selection is not None else Selection()
            _export(trace, reader, registry, writer, summary, chosen, progress, events_rows, pending_limit, flush_rows)
        return True
    finally:
        trace.close()


class _Names:
    """Short process names (``svchost``) per image, made once."""

    def __init__(self) -> None:
        self.short: dict[str, str] = {}

    def of(self, image: str | None) -> str | None:
        if not image:
            return None
        name = self.short.get(image)
        if name is None:
            name = self.short[image] = process_name_from_image(image)
        return name


class _Labels:
    """Strings numbered once (process names), the row columns hold their numbers."""

    def __init__(self) -> None:
        self.texts: list[str | None] = [None]
        self._codes: dict[str | None, int] = {None: 0}

    def code(self, text: str | None) -> int:
        found = self._codes.get(text)
        if found is None:
            found = self._codes[text] = len(self.texts)
            self.texts.append(text)
        return found


def _process_codes(
    context: DecodeContext, names: _Names, labels: _Labels, pids: np.ndarray, when: np.ndarray
) -> np.ndarray:
    """The number of ``process_name(pid, when)`` of each row, with the context as it is now."""
    if not len(pids):
        return np.zeros(0, dtype=np.int64)
    unique, _, inverse = first_seen(pids)
    earliest, latest = int(when.min()), int(when.max())
    codes = np.zeros(len(unique), dtype=np.int64)
    varying: list[tuple[int, list[Any]]] = []
    for k, pid in enumerate(unique.tolist()):
        spans = context.lifetimes(pid)
        holding = [span for span in spans if span.start <= latest and earliest <= span.end]
        if not holding:
            continue
        if len(holding) == 1 and holding[0].start <= earliest and latest <= holding[0].end:
            codes[k] = labels.code(names.of(holding[0].image))
        else:
            varying.append((k, spans))
    out: np.ndarray = codes[inverse]
    for k, spans in varying:  # a lifetime begins or ends inside the run: row by row
        mine = np.flatnonzero(inverse == k)
        times = when[mine]
        chosen = np.full(len(mine), -1, dtype=np.int64)
        for number, span in enumerate(spans):  # the latest lifetime holding the time wins, as process() picks
            chosen[(times >= span.start) & (times <= span.end)] = number
        texts = np.asarray([labels.code(names.of(span.image)) for span in spans] + [0], dtype=np.int64)
        out[mine] = texts[chosen]
    return out


class _IdentityTable:
    """(schema, provider name, event name, pointer size) numbered once; rows hold the numbers."""

    def __init__(self) -> None:
        self.items: list[tuple[Schema | None, str | None, str | None, int]] = []
        self._codes: dict[tuple[int, str | None, str | None, int], int] = {}

    def code(self, schema: Schema | None, provider: str | None, event: str | None, pointer_size: int) -> int:
        key = (id(schema), provider, event, pointer_size)
        found = self._codes.get(key)
        if found is None:
            found = self._codes[key] = len(self.items)
            self.items.append((schema, provider, event, pointer_size))  # (keeps the schema, so its id stays its own)
        return found


def _teaching(rows: Columns, providers: list[str]) -> np.ndarray:
    """Rows ``DecodeContext.observe`` learns from (a superset: the others teach it nothing)."""
    kind, hook, provider = rows["kind"], rows["hook_id"], rows["provider"]

    def provider_is(text: str) -> np.ndarray:
        result: np.ndarray = provider == providers.index(text) if text in providers else np.zeros(len(kind), dtype=bool)
        return result

    kernel = (kind == _SYSTEM) | (kind == _COMPACT) | (kind == _PERFINFO)
    process = kernel & ((hook >> 8) == _PROCESS_GROUP) & ((hook & 0xFF) != _IMAGE_LOAD)
    manifest = (kind == _EVENT) & (
        ((rows["id"] == _MANIFEST_DATA_ID) & (rows["opcode"] == _MANIFEST_OPCODE))
        | provider_is(_KERNEL_PROCESS_PROVIDER)
    )
    metadata = ((kind == _CLASSIC) | (kind == _INSTANCE)) & provider_is(_METADATA_CLASS)
    teaching: np.ndarray = process | manifest | metadata
    return teaching


def first_seen(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``values`` in order of first appearance, the index of each one's first row, and each
    row's number among them (``values == distinct[numbers]``): ``np.unique`` hashed rather than sorted,
    in one pass."""
    if len(values) < _HASH_FROM:  # a short run: a sort costs less than a call into Arrow
        sorted_values, firsts, inverse = np.unique(values, return_index=True, return_inverse=True)
        order = np.argsort(firsts, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return sorted_values[order], firsts[order], rank[inverse.ravel()]
    pa = require("pyarrow", "exporting tables")
    pc = require("pyarrow.compute", "exporting tables")
    encoded = pc.dictionary_encode(pa.array(np.ascontiguousarray(values)))
    numbers: np.ndarray = encoded.indices.to_numpy()
    distinct: np.ndarray = encoded.dictionary.to_numpy()
    running = np.maximum.accumulate(numbers)  # numbered in order of appearance: rises by one at each new value
    first = np.flatnonzero(np.concatenate(([True], running[1:] != running[:-1])))
    return distinct, first, numbers


def _identity_numbers(columns: Columns) -> np.ndarray:
    """Each row's identity (``identity_keys``) as a number: equal numbers, equal identities (exactly:
    the two words are hashed together)."""
    high, low, _ = identity_keys(columns)
    if not len(high):
        return np.zeros(0, dtype=np.int64)
    pairs = np.empty((len(high), 2), dtype=np.uint64)
    pairs[:, 0], pairs[:, 1] = high, low
    pa = require("pyarrow", "exporting tables")
    words = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(high), [None, pa.py_buffer(pairs)])
    found: np.ndarray = require("pyarrow.compute", "exporting tables").dictionary_encode(words).indices.to_numpy()
    return found.astype(np.int64)


def _unique_identities(
    keys: tuple[np.ndarray, np.ndarray, np.ndarray], chosen: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct identity of rows ``chosen`` (in order of appearance), and the
    number of each row's identity (an index into those)."""
    high, low, mixed = (part[chosen] for part in keys)
    _, first, inverse = first_seen(mixed)
    if np.array_equal(high, high[first][inverse]) and np.array_equal(low, low[first][inverse]):
        return first, inverse
    pairs = np.zeros(len(chosen), dtype=[("high", np.uint64), ("low", np.uint64)])  # two identities mixed to one word
    pairs["high"], pairs["low"] = high, low
    _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
    return first, inverse


def _export(
    trace: _Trace, reader: EtlReader, registry: SchemaRegistry, writer: TableWriter, summary: ExportSummary, selection: Selection, progress: Progress | None,
    events_rows: int, pending_limit: int, flush_rows: int,
) -> None:  # fmt: skip
    pa = require("pyarrow", "exporting tables")
    started = time.perf_counter()
    context = DecodeContext(registry, learn_threads=False, learn_images=False)
    catalog = TableCatalog(pa, registry.source_of, writer.suffix)
    schema_of_events = events_schema(pa)
    identities = _Identities(registry, context)
    names = _Names()
    rows, built = trace.columns, trace.built
    providers = [format_guid(guid) for guid in built.providers]
    teaching = _teaching(rows, providers)
    own = (rows["kind"] == _EVENT) & (((rows["flags"] & _EXTENDED_INFO) != 0) | (rows["id"] == _MANIFEST_DATA_ID))
    accept = _provider_filter(selection, providers)
    queues: dict[int, _Queue] = {}
    groups: dict[tuple[int, int], tuple[Schema, SchemaTable, Any]] = {}
    groups_seen: dict[tuple[int, int], int] = {}
    pending = decoded = undecodable = 0
    n = len(trace.rows)
    table_of = _IdentityTable()
    write_window = getattr(writer, "write_window", None)  # a writer of rows (JSON lines) takes their FILETIMEs too
    labels = _Labels()
    numbers = _identity_numbers(rows)
    known: dict[tuple[int, int, int], int] = {}  # (the context's state, identity number): the identity's code
    for first in range(0, n, events_rows):
        last = min(n, first + events_rows)
        window = {name: column[first:last] for name, column in rows.items()}
        size = last - first
        ident = np.zeros(size, dtype=np.int64)
        process = np.zeros(size, dtype=np.int64)
        extras: dict[int, tuple[str | None, list[str] | None]] = {}  # related activity id and extended item names
        keys = identity_keys(window)
        listed: tuple[list[int], list[int], list[int]] | None = None  # pid, FILETIME, identity number: for rows named one by one
        mine = own[first:last]
        cuts = np.flatnonzero(teaching[first:last]).tolist()
        bounds = [0, *cuts, size] if not cuts or cuts[0] != 0 else [*cuts, size]
        for a, b in itertools.pairwise(bounds):
            if b <= a:
                continue
            if b - a <= _ROW_BY_ROW or teaching[first + a]:
                # the teaching record first (observed, then named with what it taught), then the
                # rows up to the next one, a short run row by row
                stop = b if b - a <= _ROW_BY_ROW else a + 1
                if listed is None:
                    listed = (window["pid"].tolist(), window["filetime"].tolist(), numbers[first:last].tolist())
                for i in range(a, stop):
                    row = first + i
                    if teaching[row] or own[row]:
                        record = trace.record(row)
                        if teaching[row]:
                            context.observe(record)
                        pid, when = record.pid, record.filetime
                        code = _one(record, identities, table_of, i, extras)
                    else:  # its identity as named before in this state of the context: no record built
                        pid, when = listed[0][i], listed[1][i]
                        known_key = (context.manifests_learned, context.carried_schemas, listed[2][i])
                        found = known.get(known_key)
                        if found is None:
                            if len(known) >= 1 << 16:
                                known.clear()
                            found = known[known_key] = _one(trace.record(row), identities, table_of, i, extras)
                        code = found
                    info = context.process(pid, when)
                    process[i] = labels.code(names.of(None if info is None else info.image))
                    ident[i] = code
                a = stop
            if b > a:
                process[a:b] = _process_codes(context, names, labels, window["pid"][a:b], window["filetime"][a:b])
                _identify(trace, identities, table_of, keys, mine, a, b, first, ident, extras)
        items = table_of.items
        provider_texts = [item[1] or None for item in items]
        kept = np.ones(size, dtype=bool)
        if selection.start is not None:
            kept &= window["filetime"] >= selection.start
        if selection.end is not None:
            kept &= window["filetime"] <= selection.end
        if accept is not None:
            kept &= accept(window["provider"], provider_texts, ident)
        chosen = np.flatnonzero(kept)
        if not len(chosen):
            continue
        positions = np.arange(first, last, dtype=np.int64)
        event_texts = [item[2] or None for item in items]
        sizes = np.asarray([item[3] for item in items], dtype=np.uint8)
        table = _events_table(pa, schema_of_events, trace, window, positions, chosen, providers, provider_texts, event_texts, ident,
                              labels.texts, process, sizes, extras)  # fmt: skip
        summary.rows += table.num_rows
        if write_window is not None:
            write_window(table, window["filetime"][chosen])
        else:
            writer.write_events(table)
        # each schema's rows, tables made in order of first appearance
        group_of = np.asarray(
            [
                -1 if item[0] is None else groups_seen.setdefault((id(item[0]), item[3]), len(groups_seen))
                for item in items
            ],
            dtype=np.int64,
        )
        row_groups = group_of[ident[chosen]]
        undecodable += int(np.count_nonzero(row_groups < 0))
        with_schema = chosen[row_groups >= 0]
        if not len(with_schema):
            continue
        codes, firsts, inverse = first_seen(group_of[ident[with_schema]])
        order = np.argsort(inverse.astype(np.int16) if len(codes) < 1 << 15 else inverse, kind="stable")  # int16: a radix sort
        bounds_of = np.searchsorted(inverse[order], np.arange(len(codes) + 1))
        # a table's records in record order, whatever schema objects (at whatever pointer size) lead to it
        per_table: dict[int, tuple[_Queue, list[tuple[np.ndarray, Any]]]] = {}
        for g in np.argsort(firsts, kind="stable").tolist():
            picked = with_schema[order[bounds_of[g] : bounds_of[g + 1]]]
            schema, provider_name, event_name, pointer_size = items[int(ident[picked[0]])]
            assert schema is not None
            key = (id(schema), pointer_size)
            entry = groups.get(key)
            if entry is None or entry[0] is not schema:
                made = catalog.table_for(schema, provider_name, event_name)
                entry = groups[key] = (schema, made, registry.compiled(schema, pointer_size))
            decoded += len(picked)
            queue = queues.get(id(entry[1]))
            if queue is None or queue.table is not entry[1]:
                queue = queues[id(entry[1])] = _Queue(entry[1])
            per_table.setdefault(id(queue), (queue, []))[1].append((picked, entry[2]))
        for queue, parts in per_table.values():
            for picked, decoder in _in_record_order(parts):
                queue.add(
                    positions[picked],
                    trace.at[first + picked] + window["user_data_offset"][picked],
                    window["user_data_length"][picked],
                    decoder,
                )
                pending += len(picked)
            if len(queue) >= flush_rows:
                pending -= len(queue)
                queue.flush(pa, trace.map, writer)
            elif pending >= pending_limit:
                for other in sorted(queues.values(), key=len, reverse=True):
                    if pending < pending_limit // 2:
                        break
                    pending -= len(other)
                    other.flush(pa, trace.map, writer)
        if progress is not None:
            progress(last, time.perf_counter() - started)
    for queue in queues.values():
        queue.flush(pa, trace.map, writer)
    if summary.rows == 0:
        writer.write_events(
            pa.Table.from_arrays([pa.array([], type=field.type) for field in schema_of_events], schema=schema_of_events)
        )
    summary.records += n
    summary.decoded += decoded
    summary.undecodable += undecodable
    summary.property_errors += sum(table.property_errors for table in catalog.tables)
    summary.untyped_values += sum(table.untyped_values for table in catalog.tables)
    summary.tables += len(catalog.tables)
    summary.errors.extend(str(error) for error in reader.stats.errors)  # as the pipeline lists them: the reader's first
    summary.errors.extend(str(error) for error in context.manifest_errors)
    summary.seconds += time.perf_counter() - started
    if progress is not None:
        progress(n, summary.seconds)
    writer.finish(_layout(summary, catalog, events_schema=schema_of_events))


def _in_record_order(parts: list[tuple[np.ndarray, Any]]) -> list[tuple[np.ndarray, Any]]:
    """Rows of one table from several decoders, as runs of one decoder in row order."""
    if len(parts) == 1:
        return parts
    rows = np.concatenate([picked for picked, _ in parts])
    which = np.concatenate([np.full(len(picked), k, dtype=np.int64) for k, (picked, _) in enumerate(parts)])
    order = np.argsort(rows, kind="stable")
    rows, which = rows[order], which[order]
    cuts = np.flatnonzero(which[1:] != which[:-1]) + 1
    return [
        (run, parts[int(kinds[0])][1]) for run, kinds in zip(np.split(rows, cuts), np.split(which, cuts), strict=True)
    ]


class _Queue:
    """A table's records waiting to be decoded: positions and places of their payloads."""

    __slots__ = ("table", "parts", "count")

    def __init__(self, table: SchemaTable) -> None:
        self.table = table
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, Any]] = []
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, positions: np.ndarray, starts: np.ndarray, lengths: np.ndarray, decoder: Any) -> None:
        self.parts.append((positions, starts, lengths, decoder))
        self.count += len(positions)

    def flush(self, pa: Any, blob: Any, writer: TableWriter) -> None:
        parts, self.parts, self.count = self.parts, [], 0
        if not parts:
            return
        start = 0
        while start < len(parts):  # one decode per run of parts with the same decoder (a schema at one pointer size)
            stop = start + 1
            while stop < len(parts) and parts[stop][3] is parts[start][3]:
                stop += 1
            run = parts[start:stop]
            starts = np.concatenate([p[1] for p in run]).astype(np.int64)
            lengths = np.concatenate([p[2] for p in run]).astype(np.int64)
            batch = self.table.decode_places(pa, blob, np.concatenate([p[0] for p in run]), starts, lengths, run[0][3])
            decoded = getattr(writer, "decoded", None)  # a writer of rows takes the decoder and payloads too
            if decoded is not None:
                decoded(self.table, batch, run[0][3], blob, starts, lengths)
            else:
                writer.write_table(self.table, batch.table)
            start = stop


def _one(
    record: EventRecord,
    identities: _Identities,
    table_of: _IdentityTable,
    i: int,
    extras: dict[int, tuple[str | None, list[str] | None]],
) -> int:
    """The identity number of row ``i`` from its record (and its extended columns into ``extras``)."""
    if record.kind == "event" and record.flags & _EXTENDED_INFO:
        other = record.related_activity_id
        items = record.extended
        extras[i] = (
            None if other is None else format_guid(other),
            [item.type_name for item in items] if items else None,
        )
    return table_of.code(*identities.of(record), record.pointer_size)


def _identify(
    trace: _Trace, identities: _Identities, table_of: _IdentityTable, keys: tuple[np.ndarray, np.ndarray, np.ndarray], own: np.ndarray,
    a: int, b: int, first: int, ident: np.ndarray, extras: dict[int, tuple[str | None, list[str] | None]],
) -> None:  # fmt: skip
    """Identity numbers of rows ``a:b`` of the window (with the context as it is now)."""
    mine = own[a:b]
    for i in (a + np.flatnonzero(mine)).tolist():
        ident[i] = _one(trace.record(first + i), identities, table_of, i, extras)
    shared = a + np.flatnonzero(~mine)
    if not len(shared):
        return
    lead, inverse = _unique_identities(keys, shared)
    codes = np.asarray(
        [_one(trace.record(first + row), identities, table_of, row, extras) for row in shared[lead].tolist()],
        dtype=np.int64,
    )
    ident[shared] = codes[inverse]


def _provider_filter(
    selection: Selection, providers: list[str]
) -> Callable[[np.ndarray, list[str | None], np.ndarray], np.ndarray] | None:
    """Which rows a provider selection keeps (by GUID, or by the provider name they were given)."""
    if not selection.providers:
        return None
    guids, wanted = selection.provider_sets()
    by_guid = np.asarray([text in guids for text in providers] + [False], dtype=bool)

    def accept(provider: np.ndarray, names: list[str | None], ident: np.ndarray) -> np.ndarray:
        by_name = np.asarray([name is not None and name.lower() in wanted for name in names] + [False], dtype=np.bool_)
        result: np.ndarray = by_guid[provider] | by_name[ident]
        return result

    return accept


def _events_table(
    pa: Any, schema: Any, trace: _Trace, window: Columns, positions: np.ndarray, chosen: np.ndarray, providers: list[str],
    provider_texts: list[str | None], event_texts: list[str | None], ident: np.ndarray, process_texts: list[str | None], process: np.ndarray,
    sizes: np.ndarray, extras: dict[int, tuple[str | None, list[str] | None]],
) -> Any:  # fmt: skip
    """The window's ``events`` rows; its text columns are dictionary arrays over the few texts they
    take (``schema``'s types but for that: a writer stores them as text, ``plain_text`` makes them so)."""
    whole = len(chosen) == len(window["kind"])
    rows = window if whole else _Picked(window, chosen)
    kind = rows["kind"]
    is_event = kind == _EVENT
    kernel = (kind == _SYSTEM) | (kind == _COMPACT) | (kind == _PERFINFO)
    provider = rows["provider"].astype(np.int64)
    provider = np.where(kernel | (provider < 0), len(providers), provider)  # kernel records carry no provider GUID
    filetime = rows["filetime"]
    in_range = (filetime >= _MIN_TICKS) & (filetime <= _MAX_TICKS)
    nanos = np.where(in_range, (filetime - _FILETIME_UNIX_TICKS) * 100, 0)
    mine = ident[chosen]
    if extras:
        related: list[str | None] = [None] * len(chosen)
        extended: list[list[str] | None] = [None] * len(chosen)
        for k, i in enumerate(chosen.tolist()):
            found = extras.get(i)
            if found is not None:
                related[k], extended[k] = found
        related_column = pa.array(related, type=pa.string())
        extended_column = pa.array(extended, type=pa.list_(pa.string()))
    else:
        related_column = pa.nulls(len(chosen), type=pa.string())
        extended_column = pa.nulls(len(chosen), type=pa.list_(pa.string()))
    columns: dict[str, Any] = {
        "record": numeric_array(pa, positions[chosen], pa.int64()),
        "kind": coded_text(pa, list(KIND_NAMES), kind),
        "provider_id": coded_text(pa, [*providers, None], provider),
        "provider_name": coded_text(pa, provider_texts, mine),
        "event_name": coded_text(pa, event_texts, mine),
        "id": numeric_array(pa, rows["id"], pa.uint16()),
        "version": numeric_array(pa, rows["version"], pa.uint16()),
        "channel": numeric_array(pa, rows["channel"], pa.uint8()),
        "level": numeric_array(pa, rows["level"], pa.uint8()),
        "opcode": numeric_array(pa, rows["opcode"], pa.uint8()),
        "task": numeric_array(pa, rows["task"], pa.uint16()),
        "keyword": numeric_array(pa, rows["keyword"], pa.uint64()),
        "hook_id": numeric_array(pa, rows["hook_id"], pa.uint16(), kernel),
        "pid": numeric_array(pa, rows["pid"], pa.uint32()),
        "tid": numeric_array(pa, rows["tid"], pa.uint32()),
        "cpu": numeric_array(pa, rows["cpu"], pa.uint32()),
        "timestamp": numeric_array(pa, rows["timestamp"], pa.int64()),
        "time": numeric_array(pa, nanos, pa.timestamp("ns", tz="UTC"), in_range),
        "size": numeric_array(pa, rows["size"], pa.uint32()),
        "activity_id": _activities(pa, trace, positions[chosen], is_event),
        "related_activity_id": related_column,
        "extended": extended_column,
        "pointer_size": numeric_array(pa, sizes[mine], pa.uint8()),
        "user_data_length": numeric_array(pa, rows["user_data_length"], pa.uint32()),
        "process_name": coded_text(pa, process_texts, process[chosen]),
        "reason": pa.nulls(len(chosen), type=pa.string()),
    }
    arrays = [columns[field.name] for field in schema]
    fields = [field.with_type(array.type) for field, array in zip(schema, arrays, strict=True)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def coded_text(pa: Any, texts: list[str | None], codes: np.ndarray) -> Any:
    """``texts[codes]`` as an Arrow dictionary array (each distinct text once in its dictionary; a
    ``None`` text is a null row, as a dictionary may hold no null)."""
    unique: dict[str, int] = {}
    number = np.asarray([-1 if text is None else unique.setdefault(text, len(unique)) for text in texts], dtype=np.int32)
    indices = number[codes] if len(number) else np.zeros(len(codes), dtype=np.int32)
    valid = None
    if np.any(number < 0):
        valid = indices >= 0
        indices = np.where(valid, indices, 0)
    return pa.DictionaryArray.from_arrays(numeric_array(pa, indices, pa.int32(), valid), pa.array(list(unique), type=pa.string()))


def plain_text(pa: Any, table: Any) -> Any:
    """``table`` with its dictionary columns as plain text."""
    if not any(pa.types.is_dictionary(field.type) for field in table.schema):
        return table
    arrays, fields = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type):
            column, field = column.cast(field.type.value_type), field.with_type(field.type.value_type)
        arrays.append(column)
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _activities(pa: Any, trace: _Trace, rows: np.ndarray, is_event: np.ndarray) -> Any:
    """The activity id text of each of ``rows`` (EVENT_HEADER records; null for the others), each
    distinct id made into text once."""
    events = np.flatnonzero(is_event)
    if not len(events):
        return coded_text(pa, [None], np.zeros(len(rows), dtype=np.int64))  # a dictionary still: one type in every window
    at = trace.at[rows[events]] + _ACTIVITY_AT
    u8 = np.frombuffer(trace.map, dtype=np.uint8)
    raw = np.ascontiguousarray(u8[at[:, None] + np.arange(16)])
    ids = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(events), [None, pa.py_buffer(raw)])
    encoded = require("pyarrow.compute", "exporting tables").dictionary_encode(ids)  # hashed, in order of appearance
    unique = encoded.dictionary.to_pylist()
    index = np.full(len(rows), len(unique), dtype=np.int64)
    index[events] = encoded.indices.to_numpy()
    return coded_text(pa, [_guid_text(item) for item in unique] + [None], index)


def _guid_text(raw: bytes) -> str:
    value = uuid.UUID(bytes_le=raw)
    return _ZERO_GUID if value.int == 0 else format_guid(value)
