"""``--to csv``: the table layout as CSV files, one per table, beside ``_schemas.json``.

``DIR/events.csv`` and ``DIR/<Provider>/<Event>_v<version>.csv``, with a header row. CSV has
no lists, structs or bytes: arrays and structs are written as JSON text, binary data as
lower-case hex; times are ISO 8601 in UTC (``2020-09-14 22:49:57.211809100Z``, written as quoted
text: Arrow's CSV writer formats a time zone's times value by value through its time-zone
database, about ten times slower than the text made by one cast, and readers that infer types --
DuckDB, Arrow -- read the quoted text as a time in UTC all the same).

The rows are Arrow's CSV writer's bytes: text quoted (a quote doubled), numbers and booleans as they
are, a null empty. Tables whose columns are all integers, booleans or text (plain or dictionary) are
written by the compiled core's row writer (``row_text``), several times faster than Arrow's writer
(which formats cell by cell); any other table, by Arrow's writer.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from openetw.events.text import json_value
from openetw.export import row_text as T
from openetw.export._deps import require
from openetw.export.tables import SchemaTable, prepare_directory

__all__ = ["CsvWriter"]


def _utc_text(pa: Any, pc: Any, column: Any, unit: str) -> Any:
    """A UTC time column as the text Arrow's CSV writer gives it (``... 22:49:57.211809100Z``)."""
    text = column.cast(pa.timestamp(unit)).cast(pa.string())
    return pc.binary_join_element_wise(text, "Z", "")


class CsvWriter:
    """Writes the layout as CSV under ``directory``."""

    suffix = ".csv"

    def __init__(self, directory: str) -> None:
        self.pa = require("pyarrow", "exporting to CSV")
        self.csv = require("pyarrow.csv", "exporting to CSV")
        self.pc = require("pyarrow.compute", "exporting to CSV")
        self.directory = directory
        self._writers: dict[str, Any] = {}
        prepare_directory(directory)

    def _flat(self, table: Any) -> Any:
        pa = self.pa
        columns, fields = [], []
        for field, column in zip(table.schema, table.columns, strict=True):
            kind = field.type
            if pa.types.is_nested(kind):
                values = [None if value is None else json.dumps(json_value(value)) for value in column.to_pylist()]
                column, kind = pa.array(values, type=pa.string()), pa.string()
            elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
                values = [None if value is None else value.hex() for value in column.to_pylist()]
                column, kind = pa.array(values, type=pa.string()), pa.string()
            elif pa.types.is_timestamp(kind) and kind.tz == "UTC":
                column, kind = _utc_text(pa, self.pc, column, kind.unit), pa.string()
            columns.append(column)
            fields.append(pa.field(field.name, kind))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))

    def _write(self, relative: str, table: Any) -> None:
        flat = self._flat(table)
        out = self._writers.get(relative)
        if out is None:
            path = os.path.join(self.directory, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            out = self._writers[relative] = open(path, "wb")  # noqa: SIM115 - closed by finish()
            out.write(b",".join(_quoted(name) for name in flat.schema.names) + b"\n")
        text = csv_rows(self.pa, flat)
        if text is not None:
            out.write(text)
        else:
            self.csv.write_csv(flat, out, write_options=self.csv.WriteOptions(include_header=False))

    def write_events(self, table: Any) -> None:
        self._write("events.csv", table)

    def write_table(self, info: SchemaTable, table: Any) -> None:
        self._write(info.path, table)

    def finish(self, layout: dict[str, Any]) -> None:
        for writer in self._writers.values():
            writer.close()
        with open(os.path.join(self.directory, "_schemas.json"), "w", encoding="utf-8") as out:
            json.dump(layout, out, indent=1)
            out.write("\n")


def _pc() -> Any:
    return require("pyarrow.compute", "exporting to CSV")


def _quoted(text: str) -> bytes:
    return b'"' + text.replace('"', '""').encode("utf-8") + b'"'


def csv_rows(pa: Any, table: Any) -> bytes | None:
    """``table``'s rows as Arrow's CSV writer writes them (no header), or ``None`` when a column is of a
    type left to Arrow's writer (not an integer, a boolean or text)."""
    n = table.num_rows
    pieces: list[T.Piece] = []
    for k, (field, column) in enumerate(zip(table.schema, table.columns, strict=True)):
        piece = _piece(pa, field.type, column.combine_chunks(), b"," if k else b"")
        if piece is None:
            return None
        pieces.append(piece)
    if not pieces:
        return None
    return T.rows(n, pieces, b"\n")


def _piece(pa: Any, kind: Any, array: Any, separator: bytes) -> T.Piece | None:
    valid = None if array.null_count == 0 else array.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(kind):
        return T.integers(array.fill_null(0).to_numpy(zero_copy_only=False), separator, b"", valid, separator)
    if pa.types.is_boolean(kind):
        numbers = array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)
        return T.codes(numbers, [b"false", b"true"], separator, b"", valid, separator)
    if pa.types.is_dictionary(kind) and pa.types.is_string(kind.value_type):
        entries = [b"" if text is None else _quoted(text) for text in array.dictionary.to_pylist()]
        numbers = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return T.codes(numbers, entries or [b""], separator, b"", valid, separator)
    if pa.types.is_string(kind):
        if not len(array):
            return T.constant(b"")
        _, offsets_buffer, data = array.buffers()
        if data is not None and np.any(np.frombuffer(data, dtype=np.uint8) == ord('"')):
            array = _pc().replace_substring(array, '"', '""')
            _, offsets_buffer, data = array.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[array.offset : array.offset + len(array) + 1]
        return T.texts(offsets[:-1], offsets[1:], b"" if data is None else data, separator + b'"', b'"', valid, separator)
    return None
