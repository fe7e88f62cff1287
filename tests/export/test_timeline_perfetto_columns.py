"""A Perfetto trace from columns (``perfetto_columns``): the same bytes as the record-by-record
export (so the same packet values), on every corpus trace and on the made traces of the Chrome
column tests (slices open over runs, counters, processes and threads named mid-run, records
without a thread in their header, events of no schema), with the compiled and the pure-Python
annotation writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.export.timeline import export_timeline, perfetto, perfetto_columns
from openetw.export.timeline.builder import Naming, TimelineStats
from openetw.export.timeline.perfetto_columns import write_perfetto_from_columns
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path
from tests.export.conftest import ETL_FILES, registry
from tests.export.timeline_shapes import shape_schemas, shapes_registry, write_shapes_trace
from tests.native import cases


def _columns(source: Path, target: Path, made: SchemaRegistry, stats: TimelineStats) -> bytes | None:
    """The column export's bytes, or None when the file was left to the records."""

    def output():  # type: ignore[no-untyped-def]
        return open(target, "wb")

    written = write_perfetto_from_columns(str(source), made, output, stats, Naming())
    return target.read_bytes() if written is not None else None


def _both(source: Path, target: Path, made: SchemaRegistry, monkeypatch: pytest.MonkeyPatch) -> tuple[
    bytes, bytes | None, TimelineStats, TimelineStats, int
]:  # fmt: skip
    """(record-by-record bytes, column bytes or None, both stats, rows stepped by the pass)."""
    by_records = export_timeline([str(source)], str(target), "perfetto", registry=made, columns=False)
    stepped = [0]
    step = perfetto_columns._PerfettoPass._step

    def counted(self, a, b):  # type: ignore[no-untyped-def]
        stepped[0] += max(0, b - a)
        step(self, a, b)

    monkeypatch.setattr(perfetto_columns._PerfettoPass, "_step", counted)
    stats = TimelineStats()
    columns = _columns(source, target.with_suffix(".columns.pftrace"), made, stats)
    return target.read_bytes(), columns, by_records.stats, stats, stepped[0]


_KERNEL = ("ShutdownPerfDiagLogger.etl", "diaghub.kernel.1.etl")


@pytest.mark.parametrize("name", [name for name in ETL_FILES if not name.endswith(("net.4.5.2.x64.etl", *_KERNEL))])
def test_each_corpus_trace_gives_the_record_writers_bytes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = corpus_path("etl", *name.split("/"))
    expected, columns, by_records, by_columns, _ = _both(source, tmp_path / "out.pftrace", registry(), monkeypatch)
    assert columns is not None
    assert columns == expected
    by_records.errors, by_columns.errors = [], []
    assert by_columns == by_records


@pytest.mark.parametrize(
    "name", ["perfview/net.4.5.2.x64.etl", *(name for name in ETL_FILES if name.endswith(_KERNEL))]
)
def test_sampled_and_kernel_traces_are_left_to_the_records(name: str, tmp_path: Path) -> None:
    source = corpus_path("etl", *name.split("/"))
    assert _columns(source, tmp_path / "out.pftrace", registry(), TimelineStats()) is None
    assert not (tmp_path / "out.pftrace").exists()


@pytest.mark.parametrize("native", [True, False])
def test_made_traces_give_the_record_writers_bytes(
    native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        monkeypatch.setattr(perfetto, "_NATIVE", None)
    elif perfetto._NATIVE is None:
        pytest.skip("the compiled core is not built")
    schemas = shape_schemas()
    made = shapes_registry(schemas)
    source = tmp_path / "shapes.etl"
    write_shapes_trace(source, schemas, 1)
    expected, columns, by_records, by_columns, stepped = _both(source, tmp_path / "out.pftrace", made, monkeypatch)
    assert columns is not None and columns == expected
    assert by_columns == by_records
    assert by_records.slices and by_records.counters and by_records.undecodable  # the shapes are there
    assert 0 < stepped < by_records.records  # runs made from columns, other records stepped


@pytest.mark.parametrize("seed", range(2))
def test_damaged_traces_give_the_same_bytes_or_are_left_to_the_records(seed: int, tmp_path: Path) -> None:
    name = ("tx/HTTP_Server.etl", "perfview/gcevents.etl")[seed % 2]
    source = tmp_path / "damaged.etl"
    source.write_bytes(cases.mutated(corpus_path("etl", *name.split("/")).read_bytes(), seed, flips=24, keep=0x2000))
    target = tmp_path / "columns.pftrace"
    columns = _columns(source, target, registry(), TimelineStats())
    if columns is None:
        assert not target.exists()  # nothing opened: the record-by-record export writes it
        return
    export_timeline([str(source)], str(tmp_path / "records.pftrace"), "perfetto", registry=registry(), columns=False)
    assert columns == (tmp_path / "records.pftrace").read_bytes()


def test_the_export_takes_the_column_path_for_a_plain_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    write = perfetto_columns.write_perfetto_from_columns

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        written = write(*args, **kwargs)
        taken.append(written is not None)
        return written

    monkeypatch.setattr(perfetto_columns, "write_perfetto_from_columns", spy)
    source = corpus_path("etl", "perfview", "gcevents.etl")
    summary = export_timeline([str(source)], str(tmp_path / "out.pftrace"), "perfetto", registry=registry())
    assert taken == [True]
    expected = export_timeline(
        [str(source)], str(tmp_path / "records.pftrace"), "perfetto", registry=registry(), columns=False
    )
    assert summary.written == expected.written and summary.bytes == expected.bytes
    assert (tmp_path / "out.pftrace").read_bytes() == (tmp_path / "records.pftrace").read_bytes()
