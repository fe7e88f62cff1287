"""Traces in other forms: tables (Parquet, CSV), JSON lines, and SQL over the tables.

``export_files`` reads ``.etl`` inputs merged in time order and writes one output format;
each format is one module (``parquet``, ``csv_format``, ``jsonl``) registered in ``FORMATS``.
The table layout (``events`` plus one table per event schema, ``_schemas.json``) is described
in ``openetw.export.pipeline``, ``openetw.export.events`` and ``openetw.export.tables``;
``openetw.export.sql`` runs DuckDB over it. pyarrow and duckdb are optional
(``pip install 'openetw[export]'``): ``MissingDependency`` says so when they are needed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import IO

from openetw.etl.reader import EtlReader
from openetw.export._deps import MissingDependency
from openetw.export.pipeline import ExportSummary, Progress, TableWriter, export_tables
from openetw.export.source import Selection, merged_records, open_inputs
from openetw.tdh.registry import SchemaRegistry

__all__ = [
    "FORMATS",
    "ExportSummary",
    "MissingDependency",
    "Progress",
    "Selection",
    "TableWriter",
    "export_files",
]

FORMATS = ("parquet", "csv", "jsonl")
"""Output formats: ``parquet`` and ``csv`` write the table layout into a directory, ``jsonl`` one file."""


def _table_writer(fmt: str, output: str) -> TableWriter:
    if fmt == "parquet":
        from openetw.export.parquet import ParquetWriter

        return ParquetWriter(output)
    from openetw.export.csv_format import CsvWriter

    return CsvWriter(output)


def _has_pyarrow() -> bool:
    """Whether the optional table libraries are here (JSON lines are written without them, record by record)."""
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


@contextlib.contextmanager
def _text_output(path: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as stream:
        yield stream


def export_files(
    paths: Sequence[str],
    output: str,
    fmt: str = "parquet",
    *,
    registry: SchemaRegistry | None = None,
    selection: Selection | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Export ``paths`` (merged in time order) to ``output`` as ``fmt`` (one of ``FORMATS``)."""
    from openetw.errors import InvalidArgument

    if fmt not in FORMATS:
        raise InvalidArgument(f"unknown export format {fmt!r}; formats are {', '.join(FORMATS)}")
    if fmt != "jsonl":
        from openetw.export._deps import require

        require("pyarrow", f"exporting to {fmt}")
    selection = selection if selection is not None else Selection()
    readers = open_inputs(paths)
    registry = registry if registry is not None else SchemaRegistry()
    summary = ExportSummary(inputs=list(paths), output=output, format=fmt)
    try:
        records = merged_records(readers)
        if fmt == "jsonl":
            from openetw.export.jsonl import export_jsonl

            with _text_output(output) as out:
                if len(readers) == 1 and isinstance(readers[0], EtlReader) and _has_pyarrow():
                    from openetw.export.jsonl_columns import export_jsonl_from_columns

                    if export_jsonl_from_columns(readers[0], registry, out, summary, selection=selection, progress=progress):
                        return summary
                return export_jsonl(readers, records, registry, out, summary, selection=selection, progress=progress)
        writer = _table_writer(fmt, output)
        if len(readers) == 1 and isinstance(readers[0], EtlReader):
            from openetw.export.from_columns import export_from_columns

            if export_from_columns(readers[0], registry, writer, summary, selection=selection, progress=progress):
                return summary
        return export_tables(readers, records, registry, writer, summary, selection=selection, progress=progress)
    finally:
        for reader in readers:
            reader.close()
