"""Batches of columns: a trace read a run of buffers at a time, as header columns and, per schema,
the decoded fields as typed columns.

``column_batches(source, schema_of)`` reads the file's buffers in runs of about ``chunk_bytes``
(as the index pass does: laid end to end in one blob, records framed and their headers gathered
by the compiled core when it runs) and gives a ``ColumnBatch`` per run:

* ``header``: one row per record in file order, the index's columns (``filetime``, ``provider``
  -- an index into ``providers`` --, ``id``, ``version``, ``level``, ``opcode``, ``task``,
  ``keyword``, ``hook_id``, ``pid``, ``tid``, ``cpu``, ``flags``, ``kind``, sizes and places), and
  ``activity``: each record's 16 activity-id bytes (zeros where the header has none);
* ``schemas``: per schema (and pointer size) the rows of its records and their payloads decoded
  into columns by ``openetw.tdh.columns`` (in C where the schema has a column plan, by the Python
  decoder otherwise, with the same values);
* ``undecoded``: the rows ``schema_of`` found no schema for (and unknown records).

``schema_of(record)`` is asked once per record identity (kind, header type, provider, id, hook,
version, opcode, flags) with a record of that identity, and once per record for records whose
schema may be their own (WPP messages, events with extended data such as TraceLogging schemas,
EventSource manifest chunks). The read model above passes its registry's lookup.

This sits in the engine, beside the index, because it is the index pass's framing and header
gathering with the decoding added: the buffers are read once and nothing is built per record but
the few records ``schema_of`` is asked about.

``buffer_headers(buffers)`` is the header half alone for buffers held in memory (a real-time
consumer's deliveries, a producer's pool buffers): the same framing and header gathering, no
schema, each record's place in the blob and its provider GUID's two halves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from openetw.consumer._engine.index_build import KIND_CODES, file_order_rows, filetimes, provider_table
from openetw.consumer._engine.index_walk import CHUNK_BYTES, Buffers, memory_buffers, read_buffers, walk_chains
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock
from openetw.etl.reader import EtlReader
from openetw.etl.record import RECORD_CLASSES, EventRecord, MessageRecord, RecordContext
from openetw.tdh.columns import FieldColumns, decode_columns
from openetw.tdh.compiled import CompiledSchema
from openetw.tdh.schema import Schema

__all__ = ["BufferHeaders", "ColumnBatch", "SchemaColumns", "buffer_headers", "column_batches", "identity_keys"]

SchemaOf = Callable[[EventRecord], "Schema | None"]

_EVENT, _WPP, _UNKNOWN = KIND_CODES["event"], KIND_CODES["wpp"], KIND_CODES["unknown"]
_EXTENDED_INFO = 0x0001
_MANIFEST_DATA_ID = 0xFFFE
_ACTIVITY_AT = L.EVENT_HEADER.offset("ActivityId")


@dataclass(slots=True)
class SchemaColumns:
    """The records of one schema (at one pointer size) in a batch: their rows and field columns."""

    schema: Schema
    pointer_size: int
    rows: np.ndarray
    fields: FieldColumns


@dataclass(slots=True)
class ColumnBatch:
    """One run of buffers: header columns of every record (file order) and field columns per schema."""

    header: np.ndarray
    providers: list[uuid.UUID]
    activity: np.ndarray
    schemas: list[SchemaColumns]
    undecoded: np.ndarray

    def __len__(self) -> int:
        return len(self.header)


@dataclass(slots=True)
class BufferHeaders:
    """The header columns of in-memory buffers' records (buffer order, then record order):
    ``rows`` (the index's columns, ``provider`` left 0, ``filetime`` too without a clock), the provider GUID as two
    little-endian 64-bit halves (``guid_lo``, ``guid_hi``: the record's 16 GUID bytes), and
    where each record starts in ``blob`` (``at``)."""

    rows: np.ndarray
    guid_lo: np.ndarray
    guid_hi: np.ndarray
    at: np.ndarray
    blob: bytes | bytearray


def buffer_headers(buffers: list[bytes], clock: TraceClock | None = None) -> BufferHeaders:
    """Every record of ``buffers`` (uncompressed, each beginning with its WMI_BUFFER_HEADER) as
    header columns, framed as the index pass frames a file's buffers (see the module doc);
    ``clock``: their timestamps' clock, for the ``filetime`` column."""
    bufs = memory_buffers(list(enumerate(buffers)))
    chains = walk_chains(bufs)
    rows, lo, hi, _, _ = file_order_rows(bufs, chains)
    if clock is not None:
        rows["filetime"] = filetimes(rows["timestamp"], clock)
    at = bufs.bases[rows["buffer"]] + rows["offset"].astype(np.int64) if len(rows) else np.zeros(0, dtype=np.int64)
    return BufferHeaders(rows, lo, hi, at, bufs.blob)


def column_batches(source: Any, schema_of: SchemaOf, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[ColumnBatch]:
    """The batches of ``source`` (a path, or anything ``EtlReader`` takes): see the module doc."""
    decoders: dict[tuple[int, int], tuple[Schema, CompiledSchema]] = {}
    with EtlReader(source, strict=False) as reader:
        context = reader.context
        chunks, _ = read_buffers(reader, chunk_bytes)
        for bufs in chunks:
            yield _batch(bufs, context, schema_of, decoders)


def _batch(
    bufs: Buffers,
    context: RecordContext,
    schema_of: SchemaOf,
    decoders: dict[tuple[int, int], tuple[Schema, CompiledSchema]],
) -> ColumnBatch:
    chains = walk_chains(bufs)
    rows, lo, hi, has, _ = file_order_rows(bufs, chains)
    rows["provider"], providers = provider_table(lo, hi, has)
    rows["filetime"] = filetimes(rows["timestamp"], context.clock)
    base_of = {info.index: int(base) for info, base in zip(bufs.infos, bufs.bases.tolist(), strict=True)}
    lookup = np.zeros(max(base_of) + 1 if base_of else 0, dtype=np.int64)
    for index, base in base_of.items():
        lookup[index] = base
    at = lookup[rows["buffer"]] + rows["offset"].astype(np.int64) if len(rows) else np.zeros(0, dtype=np.int64)
    blob = bufs.blob
    data: list[bytes] = []  # the blob as bytes for the records schema_of is asked about, made once when needed

    def record_at(row: int) -> EventRecord:
        if not data:
            data.append(blob if isinstance(blob, bytes) else bytes(blob))
        return _record(data[0], rows[row], int(at[row]), context)

    activity = _activity(blob, rows, at)
    schema_rows: dict[tuple[int, int], list[np.ndarray]] = {}
    found: dict[tuple[int, int], tuple[Schema, int]] = {}
    undecoded: list[np.ndarray] = []

    def place(schema: Schema | None, pointer_size: int, members: np.ndarray) -> None:
        if schema is None:
            undecoded.append(members)
            return
        key = (id(schema), pointer_size)
        found[key] = (schema, pointer_size)
        schema_rows.setdefault(key, []).append(members)

    kinds, flags, ids = rows["kind"], rows["flags"], rows["id"]
    own = (kinds == _WPP) | ((kinds == _EVENT) & (((flags & _EXTENDED_INFO) != 0) | (ids == _MANIFEST_DATA_ID)))
    known = kinds != _UNKNOWN
    undecoded.append(np.flatnonzero(~known))
    for row in np.flatnonzero(own & known).tolist():
        record = record_at(row)
        place(schema_of(record), record.pointer_size, np.asarray([row], dtype=np.int64))
    shared = np.flatnonzero(~own & known)
    if len(shared):
        first, inverse = _identities(rows, shared)
        groups = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[groups], np.arange(len(first) + 1))
        for group, lead in enumerate(first.tolist()):
            row = int(shared[lead])
            record = record_at(row)
            place(schema_of(record), record.pointer_size, shared[groups[bounds[group] : bounds[group + 1]]])
    starts = at + rows["user_data_offset"]
    lengths = rows["user_data_length"].astype(np.int64)
    schemas = []
    for key, parts in schema_rows.items():
        schema, pointer_size = found[key]
        members = np.sort(np.concatenate(parts))
        entry = decoders.get(key)
        if entry is None or entry[0] is not schema:
            entry = decoders[key] = (schema, CompiledSchema(schema, pointer_size))
        schemas.append(
            SchemaColumns(
                schema, pointer_size, members, decode_columns(entry[1], blob, starts[members], lengths[members])
            )
        )
    schemas.sort(key=lambda item: int(item.rows[0]))
    return ColumnBatch(rows, providers, activity, schemas, np.sort(np.concatenate(undecoded)))


def identity_keys(
    rows: np.ndarray | Mapping[str, np.ndarray], chosen: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's identity (kind, header type, provider, flags, id, hook id, version, opcode) as
    two 64-bit words, and the two mixed into one to sort on (of ``rows[chosen]`` when given; ``rows``
    structured, or its columns by name)."""

    def column(name: str) -> np.ndarray:
        values: np.ndarray = (rows[name] if chosen is None else rows[name][chosen]).astype(np.uint64)
        return values

    provider = (column("provider").astype(np.int64) + 1).astype(np.uint64)  # -1 (none) is 0
    high = (
        column("kind") << np.uint64(56)
        | column("header_type") << np.uint64(48)
        | provider << np.uint64(16)
        | column("flags")
    )
    low = (
        column("id") << np.uint64(40)
        | column("hook_id") << np.uint64(24)
        | column("version") << np.uint64(8)
        | column("opcode")
    )
    return high, low, high ^ (low * np.uint64(0x9E3779B97F4A7C15))


def _identities(rows: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(identity of rows[chosen], return_index, return_inverse)[1:]`` (identities in
    some order): two 64-bit words per identity, mixed into one to sort, checked exactly."""
    high, low, mixed = identity_keys(rows, chosen)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    if np.array_equal(high, high[first][inverse]) and np.array_equal(low, low[first][inverse]):
        return first, inverse
    keys = np.zeros(len(chosen), dtype=[("high", np.uint64), ("low", np.uint64)])  # two identities mixed to one word
    keys["high"], keys["low"] = high, low
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse


def _activity(blob: bytes | bytearray, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each row's activity id bytes (EVENT_HEADER records; zeros for the others)."""
    out = np.zeros((len(rows), 16), dtype=np.uint8)
    events = np.flatnonzero(rows["kind"] == _EVENT)
    if len(events):
        u8 = np.frombuffer(blob, dtype=np.uint8)
        out[events] = u8[(at[events] + _ACTIVITY_AT)[:, None] + np.arange(16)]
    return out


def _record(data: bytes, row: np.void, at: int, context: RecordContext) -> EventRecord:
    """The record a reader would give for index row ``row`` at offset ``at`` of the blob."""
    kind, header_type, size, cpu, buffer = (
        int(row["kind"]),
        int(row["header_type"]),
        int(row["size"]),
        int(row["cpu"]),
        int(row["buffer"]),
    )
    if kind == _WPP:
        return MessageRecord(L.MESSAGE_TRACE_HEADER.unpack_from(data, at), data, at, size, cpu, context, buffer)
    cls = RECORD_CLASSES[header_type]
    return cls(cls.layout.unpack_from(data, at), data, at, size, cpu, context, buffer)  # type: ignore[union-attr]
