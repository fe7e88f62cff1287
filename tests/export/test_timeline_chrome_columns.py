"""Chrome JSON from columns (``chrome_columns``): the same bytes as the record-by-record export,
on every corpus trace and on traces made here with the shapes that cut a run of plain events
(Start/Stop slices open over them, counters, processes and threads named mid-run, records
without a thread in their header, text to escape, integers beyond a double's, floats, GUIDs,
FILETIMEs, events of no schema)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.export import timeline as timeline_export
from openetw.export.timeline import chrome_columns, export_timeline
from openetw.export.timeline.builder import Naming, TimelineStats
from openetw.export.timeline.chrome_columns import write_chrome_from_columns
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path
from tests.export.conftest import ETL_FILES, registry
from tests.export.timeline_shapes import shape_schemas, shapes_registry, write_shapes_trace
from tests.native import cases


def _columns(source: Path, target: Path, made: SchemaRegistry, stats: TimelineStats) -> bytes | None:
    """The column export's bytes, or None when the file was left to the records."""

    def output():  # type: ignore[no-untyped-def]
        return open(target, "w", encoding="utf-8")

    written = write_chrome_from_columns(str(source), made, output, stats, Naming())
    return target.read_bytes() if written is not None else None


def _both(source: Path, target: Path, made: SchemaRegistry, monkeypatch: pytest.MonkeyPatch) -> tuple[
    bytes, bytes | None, TimelineStats, TimelineStats, int
]:  # fmt: skip
    """(record-by-record bytes, column bytes or None, both stats, rows written from columns)."""
    by_records = export_timeline([str(source)], str(target), "chrome", registry=made, columns=False)
    written = [0]
    write = chrome_columns._Pass._write

    def counted(self, a, b, *rest):  # type: ignore[no-untyped-def]
        written[0] += max(0, b - a)
        write(self, a, b, *rest)

    monkeypatch.setattr(chrome_columns._Pass, "_write", counted)
    stats = TimelineStats()
    columns = _columns(source, target.with_suffix(".columns.json"), made, stats)
    return target.read_bytes(), columns, by_records.stats, stats, written[0]


@pytest.mark.parametrize("name", ETL_FILES)
def test_each_corpus_trace_gives_the_record_writers_bytes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = corpus_path("etl", *name.split("/"))
    if name.endswith("net.4.5.2.x64.etl"):  # CPU samples: their frames are named by a first pass, record by record
        assert _columns(source, tmp_path / "out.json", registry(), TimelineStats()) is None
        return
    monkeypatch.setattr(
        chrome_columns, "_mostly_kernel", lambda rows: False
    )  # the kernel traces too: the pass's records
    expected, columns, by_records, by_columns, _ = _both(source, tmp_path / "out.json", registry(), monkeypatch)
    assert columns is not None
    assert columns == expected
    by_records.errors, by_columns.errors = [], []
    assert by_columns == by_records


@pytest.mark.parametrize("seed", [1, 2])
def test_made_traces_give_the_record_writers_bytes(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = shape_schemas()
    made = shapes_registry(schemas)
    source = tmp_path / "shapes.etl"
    write_shapes_trace(source, schemas, seed)
    expected, columns, by_records, by_columns, from_columns = _both(source, tmp_path / "out.json", made, monkeypatch)
    assert columns is not None and columns == expected
    assert by_columns == by_records
    assert by_records.slices and by_records.counters and by_records.undecodable  # the shapes are there
    assert 0 < from_columns < by_records.records  # runs written from columns, other records stepped


@pytest.mark.parametrize("seed", range(2))
def test_damaged_traces_give_the_same_bytes_or_are_left_to_the_records(seed: int, tmp_path: Path) -> None:
    name = ("tx/HTTP_Server.etl", "perfview/gcevents.etl")[seed % 2]
    source = tmp_path / "damaged.etl"
    source.write_bytes(cases.mutated(corpus_path("etl", *name.split("/")).read_bytes(), seed, flips=24, keep=0x2000))
    target = tmp_path / "columns.json"
    columns = _columns(source, target, registry(), TimelineStats())
    if columns is None:
        assert not target.exists()  # nothing opened: the record-by-record export writes it
        return
    export_timeline([str(source)], str(tmp_path / "records.json"), "chrome", registry=registry(), columns=False)
    assert columns == (tmp_path / "records.json").read_bytes()


def test_kernel_traces_are_left_to_the_records(tmp_path: Path) -> None:
    source = corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.kernel.1.etl")
    assert _columns(source, tmp_path / "out.json", registry(), TimelineStats()) is None
    assert not (tmp_path / "out.json").exists()


def test_a_look_at_the_first_records_leaves_sampled_and_kernel_traces_to_the_records() -> None:
    perfview = ("perfview",)
    assert timeline_export._mostly_plain(
        str(corpus_path("etl", *perfview, "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl"))
    )
    assert not timeline_export._mostly_plain(str(corpus_path("etl", *perfview, "net.4.5.2.x64.etl")))  # CPU samples
    assert not timeline_export._mostly_plain(
        str(corpus_path("etl", "etl-parser", "ShutdownPerfDiagLogger.etl"))
    )  # kernel records
