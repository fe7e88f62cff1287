"""``--to csv``: the table layout as CSV files, one per table, beside ``_schemas.json``.

``DIR/events.csv`` and ``DIR/<Provider>/<Event>_v<version>.csv``, with a header row. CSV has
no lists, structs or bytes: arrays and structs are written as JSON text, binary data as
lower-case hex; times are ISO 8601 in UTC (``2020-09-14 22:49:57.211809100Z``, written as quoted
text: Arrow's CSV writer formats a time zone's times value by value through its time-zone
database, about ten times slower than the text made by one cast, and readers that infer types --
DuckDB, Arrow -- read the quoted text as a time in UTC all the same).
"""

from __future__ import annotations

import json
import os
from typing import Any

from openetw.events.text import json_value
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
        writer = self._writers.get(relative)
        if writer is None:
            path = os.path.join(self.directory, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            writer = self._writers[relative] = self.csv.CSVWriter(path, flat.schema)
        writer.write_table(flat)

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
