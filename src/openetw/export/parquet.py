"""``--to parquet``: the table layout as Parquet files (the layout others read).

``DIR/events.parquet``, ``DIR/<Provider>/<Event>_v<version>.parquet`` per schema and
``DIR/_schemas.json``. Row groups are written as the pipeline hands batches over (up to 64k
rows each, for ``events`` and for an event table), zstd-compressed: sized for scanning, and memory
stays flat whatever the trace's size. Text columns are dictionary-encoded (names repeat); numbers
are not (a dictionary of record numbers or clock values is as large as the column, and building it
is a third of the writing time); the columns that grow row by row (``record``, ``timestamp``,
``time``) are delta-encoded. Statistics are written for the columns that are not text. A table whose
text columns are Arrow dictionaries (``events`` from columns) is written as they are, without the
stored Arrow schema: read back, its columns are text, as the layout says.
"""

from __future__ import annotations

import json
import os
from typing import Any

from openetw.export._deps import require
from openetw.export.tables import SchemaTable, prepare_directory

__all__ = ["ParquetWriter"]

SCHEMAS_FILE = "_schemas.json"


class ParquetWriter:
    """Writes the layout under ``directory`` (created; files already there are replaced)."""

    suffix = ".parquet"

    def __init__(self, directory: str, *, compression: str = "zstd") -> None:
        self.pa = require("pyarrow", "exporting to Parquet")
        self.pq = require("pyarrow.parquet", "exporting to Parquet")
        self.directory = directory
        self.compression = compression
        self._events: Any = None
        self._tables: dict[str, Any] = {}
        prepare_directory(directory)

    def _open(self, relative: str, schema: Any) -> Any:
        path = os.path.join(self.directory, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # a table of dictionary columns is stored without its Arrow schema: read back, they are text
        # (the layout's types) -- Parquet's own schema says text, its pages are dictionaries either way
        coded = any(self.pa.types.is_dictionary(field.type) for field in schema)
        return self.pq.ParquetWriter(path, schema, compression=self.compression, store_schema=not coded, **_encodings(schema))

    def write_events(self, table: Any) -> None:
        if self._events is None:
            self._events = self._open("events.parquet", table.schema)
        if table.num_rows:
            self._events.write_table(table, row_group_size=max(table.num_rows, 1))

    def write_table(self, info: SchemaTable, table: Any) -> None:
        writer = self._tables.get(info.path)
        if writer is None:
            writer = self._tables[info.path] = self._open(info.path, table.schema)
        writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def finish(self, layout: dict[str, Any]) -> None:
        for writer in [self._events, *self._tables.values()]:
            if writer is not None:
                writer.close()
        with open(os.path.join(self.directory, SCHEMAS_FILE), "w", encoding="utf-8") as out:
            json.dump(layout, out, indent=1)
            out.write("\n")


_DELTA = "DELTA_BINARY_PACKED"
_GROWING = ("record", "timestamp", "time")  # in row order these grow: small deltas


def _encodings(schema: Any) -> dict[str, Any]:
    """``ParquetWriter`` options: a dictionary for text columns (and lists of text), deltas for
    the 64-bit columns that grow row by row, the default for the rest; statistics (each row group's
    minimum, maximum and nulls, which let readers skip row groups) for the columns that are not text:
    for text they were a third of the writing time."""
    pa = require("pyarrow", "exporting to Parquet")

    def text(kind: Any) -> bool:
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            kind = kind.value_type
        return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind))

    dictionary = [field.name for field in schema if text(field.type)]
    delta = {
        field.name: _DELTA for field in schema
        if field.name in _GROWING and (pa.types.is_int64(field.type) or pa.types.is_timestamp(field.type))
    }  # fmt: skip
    statistics = [field.name for field in schema if field.name not in dictionary]
    return {"use_dictionary": dictionary or False, "column_encoding": delta or None, "write_statistics": statistics or False}
