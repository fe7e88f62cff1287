"""The table form written from columns against the record-by-record pipeline: every corpus trace,
the same tables, layout and counts, with and without a selection; the traces the columns leave to
the pipeline are the ones they should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from openetw.export.from_columns import export_from_columns
from openetw.export.parquet import ParquetWriter
from openetw.export.pipeline import ExportSummary, export_tables
from openetw.export.source import Selection, merged_records, open_inputs
from openetw.report.sources import build_registry
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path
from tests.export.conftest import ETL_FILES
from tests.native import cases


def registry() -> SchemaRegistry:
    """A fresh registry per export (a trace teaches its registry), with the manifest the corpus' HTTP
    traces need (the .NET one only serves net.4.5.2.x64.etl, which is left to the pipeline)."""
    return build_registry([str(corpus_path("etl", "manifests", "tx", "HTTP_Server.man"))], installed=False)


LEFT_TO_RECORDS: set[str] = set()


def _export(source: Path, output: Path, way: str, selection: Selection) -> tuple[ExportSummary, bool]:
    readers = open_inputs([str(source)])
    summary = ExportSummary(inputs=[str(source)], output=str(output), format="parquet")
    writer = ParquetWriter(str(output))
    try:
        if way == "records":
            export_tables(readers, merged_records(readers), registry(), writer, summary, selection=selection)
            return summary, True
        return summary, export_from_columns(readers[0], registry(), writer, summary, selection=selection)
    finally:
        for reader in readers:
            reader.close()


def _facts(summary: ExportSummary) -> dict[str, Any]:
    found = summary.as_json()
    del found["seconds"], found["output"]
    return found


def _same_layouts(records: Path, columns: Path) -> None:
    mine, theirs = (json.loads((root / "_schemas.json").read_text()) for root in (records, columns))
    del mine["summary"], theirs["summary"]
    assert mine == theirs
    files = sorted(path.relative_to(records) for path in records.rglob("*.parquet"))
    assert files == sorted(path.relative_to(columns) for path in columns.rglob("*.parquet"))
    for relative in files:
        expected, got = pq.read_table(records / relative), pq.read_table(columns / relative)
        assert got.schema == expected.schema, relative
        for name in expected.column_names:
            assert got[name].equals(expected[name]), (relative, name)


@pytest.mark.parametrize("name", ETL_FILES)
def test_each_corpus_trace_from_columns_gives_the_pipelines_tables(name: str, tmp_path: Path) -> None:
    source = corpus_path("etl", name)
    got, used = _export(source, tmp_path / "columns", "columns", Selection())
    assert used == (name not in LEFT_TO_RECORDS)
    if not used:
        assert got.rows == 0 and not list((tmp_path / "columns").iterdir())  # nothing written: the pipeline writes it
        return
    expected, _ = _export(source, tmp_path / "records", "records", Selection())
    assert _facts(got) == _facts(expected)
    _same_layouts(tmp_path / "records", tmp_path / "columns")


@pytest.mark.parametrize(
    "selection",
    [
        Selection(providers=("Windows Kernel",)),
        Selection(providers=("22FB2CD6-0E7B-422B-A0C7-2FAD1FD0E716",)),
        Selection(start=129_328_528_800_000_000, end=129_328_528_900_000_000),
    ],
    ids=["provider name", "provider guid", "time window"],
)
def test_a_selection_keeps_the_same_rows_both_ways(selection: Selection, tmp_path: Path) -> None:
    source = corpus_path("etl", "tx", "Process.etl")
    expected, _ = _export(source, tmp_path / "records", "records", selection)
    got, used = _export(source, tmp_path / "columns", "columns", selection)
    assert used and 0 < expected.rows < expected.records
    assert _facts(got) == _facts(expected)
    _same_layouts(tmp_path / "records", tmp_path / "columns")


@pytest.mark.parametrize("seed", range(6))
def test_damaged_traces_give_the_pipelines_tables_or_are_left_to_it(seed: int, tmp_path: Path) -> None:
    name = ("tx/HTTP_Server.etl", "tx/Process.etl")[seed % 2]
    source = tmp_path / "damaged.etl"
    source.write_bytes(cases.mutated(corpus_path("etl", name).read_bytes(), seed, flips=24, keep=0x2000))
    expected, _ = _export(source, tmp_path / "records", "records", Selection())
    got, used = _export(source, tmp_path / "columns", "columns", Selection())
    if used:
        assert _facts(got) == _facts(expected)
        _same_layouts(tmp_path / "records", tmp_path / "columns")
    else:
        assert got.rows == 0 and not list((tmp_path / "columns").iterdir())


@pytest.mark.parametrize(("name", "rows"), [("perfview/primitive-types.etl", 1), ("krabsetw/powershell.etl", 1), ("tx/Process.etl", 64)])
def test_small_windows_give_one_events_schema_and_the_same_tables(name: str, rows: int, tmp_path: Path) -> None:
    """Windows with and without EVENT_HEADER records (activity ids or none) write one ``events`` file."""
    source = corpus_path("etl", name)
    expected, _ = _export(source, tmp_path / "records", "records", Selection())
    readers = open_inputs([str(source)])
    got = ExportSummary(inputs=[str(source)], output=str(tmp_path / "columns"), format="parquet")
    try:
        assert export_from_columns(readers[0], registry(), ParquetWriter(str(tmp_path / "columns")), got, events_rows=rows)
    finally:
        readers[0].close()
    assert pq.ParquetFile(tmp_path / "columns" / "events.parquet").metadata.num_row_groups > 2
    assert _facts(got) == _facts(expected)
    _same_layouts(tmp_path / "records", tmp_path / "columns")
