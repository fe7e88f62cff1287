"""Per-event tables: the records of one schema gathered, then decoded into typed columns at once.

Every schema gets a ``SchemaTable``: its name (``"<Provider>/<Event>"``, the SQL table), its
file (``<Provider>/<Event>_v<version>.parquet`` in the layout), its column types and its
pending records. A batch of same-schema payloads is decoded together: by the compiled core from
the schema's column plan when it has one (``openetw.tdh.columns``: typed Arrow columns without a
Python object per value, payloads the plan cannot read decoded by the schema's decoder), else
column-wise with numpy when the schema has a fixed layout (``openetw.export.columnar``),
otherwise with the schema's compiled reader once per payload and then turned into columns, one
Arrow call per column.
Schemas that give the same table name, version and columns share one file; a schema of the
same name and version with other columns gets a file of its own (``..._v<version>-2``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument
from openetw.export.columnar import fixed_layout
from openetw.export.types import ColumnType, column_type
from openetw.tdh.columns import column_plan, core_columns, decode_columns, merge_rows, numeric_array, plan_type
from openetw.tdh.compiled import CompiledSchema
from openetw.tdh.schema import Schema

__all__ = ["DecodedBatch", "SchemaTable", "TableCatalog", "prepare_directory", "safe_part"]

_UNSAFE = re.compile(r'[\x00-\x1f\\:*?"<>|]')
Decoder = Callable[[bytes], "tuple[dict[str, Any], dict[str, Any]]"]


def safe_part(name: str) -> str:
    """A name usable as one path component: no separators, control or reserved characters."""
    text = _UNSAFE.sub("_", name.replace("/", "_")).strip(" .")
    return text or "_"


def _event_path(name: str) -> str:
    """An event name as a relative path: its ``/`` parts (Task/Opcode) become folders."""
    return "/".join(safe_part(part) for part in name.split("/"))


def _event_label(schema: Schema, fallback: str | None) -> str:
    if schema.event_name:
        return schema.event_name
    if fallback:
        return fallback
    return f"Event{schema.event_id}" if schema.source != "mof" else f"Opcode{schema.opcode}"


@dataclass(slots=True)
class DecodedBatch:
    """What one flush produced: an Arrow table and how many records had property errors."""

    table: Any
    property_errors: int
    untyped_values: int


@dataclass(slots=True)
class SchemaTable:
    """One per-event table (one file of the layout)."""

    name: str
    path: str
    schema: Schema
    provider_name: str
    event_name: str
    source: str | None
    columns: list[tuple[str, str, ColumnType]]  # column name, property name, type
    arrow_schema: Any
    rows: int = 0
    property_errors: int = 0
    untyped_values: int = 0
    pending: list[tuple[int, bytes, Decoder]] = field(default_factory=list)

    def add(self, position: int, user_data: bytes, decoder: Decoder) -> None:
        self.pending.append((position, user_data, decoder))

    def decode(self, pa: Any) -> DecodedBatch:
        """The pending records decoded into an Arrow table (pending is emptied)."""
        pending, self.pending = self.pending, []
        positions = [item[0] for item in pending]
        planned = self._decode_planned(pending, positions, pa)
        if planned is not None:
            self.rows += len(pending)
            self.property_errors += planned.property_errors
            self.untyped_values += planned.untyped_values
            return planned
        fast = self._decode_columns(pending, positions, pa)
        if fast is not None:
            self.rows += len(pending)
            return DecodedBatch(fast, 0, 0)
        results = [decoder(data) for _, data, decoder in pending]
        errors = sum(1 for _, problems in results if problems)
        arrays = [pa.array(positions, type=pa.int64())]
        untyped = 0
        props = [prop for _, prop, _ in self.columns]
        by_column = list(zip(*[tuple(map(found.get, props)) for found, _ in results], strict=True)) if props and results else [() for _ in props]
        for (_column, _prop, kind), values in zip(self.columns, by_column, strict=True):
            array, lost = _build(kind, values, pa)
            arrays.append(array)
            untyped += lost
        table = pa.Table.from_arrays(arrays, schema=self.arrow_schema)
        self.rows += len(pending)
        self.property_errors += errors
        self.untyped_values += untyped
        return DecodedBatch(table, errors, untyped)

    def decode_places(self, pa: Any, blob: Any, positions: np.ndarray, starts: np.ndarray, lengths: np.ndarray, decoder: Decoder) -> DecodedBatch:
        """Records of this table given as places of their payloads in ``blob`` decoded into an Arrow
        table (by the schema's column plan in the compiled core when it can, else as ``decode``)."""
        if self.pending:
            raise InvalidArgument("decode_places with records pending: decode them first")
        planned = self._decode_planned_places(pa, blob, positions, starts, lengths, decoder)
        if planned is not None:
            self.rows += len(positions)
            self.property_errors += planned.property_errors
            self.untyped_values += planned.untyped_values
            return planned
        view = memoryview(blob)
        self.pending = [(position, bytes(view[start : start + length]), decoder)
                        for position, start, length in zip(positions.tolist(), starts.tolist(), lengths.tolist(), strict=True)]  # fmt: skip
        return self.decode(pa)

    def _decode_planned(self, pending: list[tuple[int, bytes, Decoder]], positions: list[int], pa: Any) -> DecodedBatch | None:
        """The batch decoded by the compiled core from the schema's column plan (``openetw.tdh.columns``),
        payloads it hands back decoded by the schema's decoder (``None`` when there is no plan, the
        core is not running, or a column's type is not the plan's)."""
        if not pending or not core_columns():
            return None
        decoder = pending[0][2]
        if not isinstance(decoder, CompiledSchema) or column_plan(decoder.schema, decoder.pointer_size, decoder.ansi_encoding) is None:
            return None
        if any(item[2] is not decoder for item in pending):
            return None
        datas = [item[1] for item in pending]
        lengths = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        starts = np.zeros(len(datas), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return self._decode_planned_places(pa, b"".join(datas), np.asarray(positions, dtype=np.int64), starts, lengths, decoder)

    def _decode_planned_places(self, pa: Any, blob: Any, positions: np.ndarray, starts: np.ndarray, lengths: np.ndarray, decoder: Any) -> DecodedBatch | None:
        if not len(positions) or not core_columns():
            return None
        if not isinstance(decoder, CompiledSchema) or not decoder.fast:
            return None
        plan = column_plan(decoder.schema, decoder.pointer_size, decoder.ansi_encoding)
        if plan is None:
            return None
        where = {name: k for k, name in enumerate(plan.names)}
        if any(prop not in where or plan_type(plan.types[where[prop]], pa) != kind.arrow for _, prop, kind in self.columns):
            return None
        fields = decode_columns(decoder, blob, starts, lengths)
        core = fields.core_arrays(pa)
        if core is None:
            return None
        arrays = [numeric_array(pa, positions, pa.int64())]
        untyped = 0
        for _, prop, kind in self.columns:
            array = core[where[prop]]
            if len(fields.fallback):
                theirs, lost = _build(kind, [found.get(prop) for found in fields.values], pa)
                untyped += lost
                array = merge_rows(pa, array, theirs, fields.fallback)
            arrays.append(array)
        table = pa.Table.from_arrays(arrays, schema=self.arrow_schema)
        return DecodedBatch(table, fields.rows_with_errors, untyped)

    def _decode_columns(self, pending: list[tuple[int, bytes, Decoder]], positions: list[int], pa: Any) -> Any:
        """The batch read column-wise when its records share a fixed-layout schema (else ``None``)."""
        if not pending:
            return None
        decoder = pending[0][2]
        layout = fixed_layout(decoder)
        if layout is None or any(item[2] is not decoder for item in pending):
            return None
        strings = set(layout.strings)
        for _, prop, kind in self.columns:
            if (kind.arrow != pa.string()) if prop in strings else (kind.convert is not None or kind.timestamp):
                return None
        columns = layout.read([item[1] for item in pending])
        if columns is None or any(prop not in columns for _, prop, _ in self.columns):
            return None
        arrays = [pa.array(positions, type=pa.int64())]
        for _, prop, kind in self.columns:
            values = columns[prop]
            arrays.append(pa.array(values, type=kind.arrow) if prop in strings else layout.arrow(values, kind.arrow, pa))
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema)

    def describe(self) -> dict[str, Any]:
        """This table's entry in ``_schemas.json``."""
        schema = self.schema
        props = {prop.name: prop for prop in schema.properties}
        return {
            "table": self.name,
            "file": self.path,
            "provider_name": self.provider_name,
            "provider_id": str(schema.provider_id),
            "event_name": self.event_name,
            "event_id": schema.event_id,
            "version": schema.version,
            "opcode": schema.opcode,
            "task": schema.task,
            "schema_source": schema.source,
            "source": self.source,
            "rows": self.rows,
            "records_with_property_errors": self.property_errors,
            "columns": [
                {
                    "name": column,
                    "property": prop,
                    "type": str(kind.arrow),
                    "in_type": _type_name(props[prop].in_type),
                    "out_type": _type_name(props[prop].out_type),
                }
                for column, prop, kind in self.columns
            ],
        }


def _type_name(value: Any) -> str | None:
    if value is None:
        return None
    return getattr(value, "name", None) or str(value)


def _build(kind: ColumnType, values: Sequence[Any], pa: Any) -> tuple[Any, int]:
    """A column of ``values``; values that do not fit the type become null (and are counted)."""
    try:
        return kind.array(values, pa), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    kept: list[Any] = []
    lost = 0
    for value in values:
        try:
            kind.array([value], pa)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            kept.append(None)
            lost += 1
        else:
            kept.append(value)
    return kind.array(kept, pa), lost


class TableCatalog:
    """Finds (or makes) the ``SchemaTable`` of a schema."""

    def __init__(self, pa: Any, source_of: Callable[[Schema], str | None], suffix: str = ".parquet") -> None:
        self.pa = pa
        self.suffix = suffix
        self._source_of = source_of
        self.tables: list[SchemaTable] = []
        self._by_key: dict[tuple[Any, ...], SchemaTable] = {}
        self._used_paths: set[str] = set()

    def table_for(self, schema: Schema, provider: str | None, event: str | None) -> SchemaTable:
        pa = self.pa
        provider_label = schema.provider_name or provider or str(schema.provider_id)
        event_label = _event_label(schema, event)
        columns: list[tuple[str, str, ColumnType]] = []
        seen: set[str] = {"record"}
        for number, prop in enumerate(schema.properties):
            name = prop.name or f"property{number}"
            if prop.name in {item[1] for item in columns}:
                continue  # decoding keeps the first of duplicate names
            column = name if name not in seen else f"{name}_{number}"
            seen.add(column)
            columns.append((column, prop.name, column_type(prop, pa)))
        arrow_schema = pa.schema([pa.field("record", pa.int64(), nullable=False)] + [pa.field(c, k.arrow) for c, _, k in columns])
        table_name = f"{safe_part(provider_label)}/{_event_path(event_label)}"
        key = (table_name, schema.version, arrow_schema.to_string())
        found = self._by_key.get(key)
        if found is not None:
            return found
        base = f"{table_name}_v{schema.version}"
        path, number = f"{base}{self.suffix}", 1
        while path in self._used_paths:
            number += 1
            path = f"{base}-{number}{self.suffix}"
        self._used_paths.add(path)
        found = SchemaTable(
            name=table_name, path=path, schema=schema, provider_name=provider_label, event_name=event_label,
            source=self._source_of(schema), columns=columns, arrow_schema=arrow_schema,
        )
        self._by_key[key] = found
        self.tables.append(found)
        return found


def prepare_directory(directory: str, schemas_file: str = "_schemas.json") -> None:
    """Makes ``directory`` ready for a layout: created when missing; an earlier export's files
    (as its ``_schemas.json`` lists them) removed; any other content refused."""
    import json
    import os

    from openetw.errors import InvalidArgument

    if not os.path.exists(directory):
        os.makedirs(directory)
        return
    if not os.path.isdir(directory):
        raise InvalidArgument(f"{directory} exists and is not a directory")
    if not os.listdir(directory):
        return
    index = os.path.join(directory, schemas_file)
    if not os.path.isfile(index):
        raise InvalidArgument(f"{directory} is not empty and holds no earlier export: give a new or empty directory")
    try:
        with open(index, encoding="utf-8") as stream:
            layout = json.load(stream)
        files = [layout["events"]["file"], *(table["file"] for table in layout["tables"])]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InvalidArgument(f"{index} is not a layout this version can replace: {error}") from None
    root = os.path.realpath(directory)
    for relative in files:
        path = os.path.realpath(os.path.join(directory, relative))
        if not path.startswith(root + os.sep):
            continue  # never outside the layout
        if os.path.isfile(path):
            os.remove(path)
        parent = os.path.dirname(path)
        while parent != root and os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
            parent = os.path.dirname(parent)
    os.remove(index)
