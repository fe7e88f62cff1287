"""``openetw export``: formats, selections, the summary and the errors a user meets."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from openetw.cli.main import main
from openetw.etl.reader import EtlReader
from openetw.export._deps import MissingDependency, require
from tests.conftest import corpus_path

HTTP = ("tx", "HTTP_Server.etl")


def _records(path: Path) -> list:
    with EtlReader(str(path), strict=False) as reader:
        return list(reader.records(time_order=True))


def test_parquet_summary_json_and_an_independent_reader(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = corpus_path("etl", *HTTP)
    out = tmp_path / "http"
    assert main(["export", str(source), "-o", str(out), "--json", "--no-installed",
                 "--manifest", str(corpus_path("etl", "manifests", "tx", "HTTP_Server.man"))]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == summary["records_read"] == len(_records(source))
    assert summary["decoded"] + summary["undecodable"] == summary["rows"] and summary["decoded"] > 2000
    layout = json.loads((out / "_schemas.json").read_text())
    assert layout["layout_version"] == 1 and layout["events"]["file"] == "events.parquet"
    entry = next(table for table in layout["tables"] if table["provider_name"] == "Microsoft-Windows-HttpService")
    assert entry["file"] == f"{entry['table']}_v{entry['version']}.parquet" and entry["source"].endswith("HTTP_Server.man")
    # DuckDB reads the files on its own: the related activity ids survive as text
    related = duckdb.connect().execute(f"SELECT count(*) FROM '{out}/events.parquet' WHERE related_activity_id IS NOT NULL").fetchone()
    assert related == (291,)
    metadata = pq.ParquetFile(out / "events.parquet").metadata
    assert metadata.num_rows == summary["rows"] and metadata.row_group(0).column(0).compression == "ZSTD"


def test_several_inputs_are_merged_in_time_order(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    first, second = corpus_path("etl", "perfview", "primitive-types.etl"), corpus_path("etl", *HTTP)
    out = tmp_path / "both"
    assert main(["export", str(first), str(second), "-o", str(out), "--no-installed"]) == 0
    assert "wrote" in capsys.readouterr().out
    table = pq.read_table(out / "events.parquet", columns=["record", "time"])
    assert table.num_rows == len(_records(first)) + len(_records(second))
    times = table.column("time").cast("int64").to_pylist()
    assert times == sorted(times)


def test_provider_and_time_window(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = corpus_path("etl", *HTTP)
    records = [r for r in _records(source) if r.kind == "event"]
    middle = sorted(r.filetime for r in records)[len(records) // 2]
    when = (datetime(1601, 1, 1, tzinfo=UTC) + timedelta(microseconds=middle // 10)).isoformat()
    out = tmp_path / "window"
    assert main(["export", str(source), "-o", str(out), "--no-installed", "--provider", "dd5ef90a-6398-47a4-ad34-4dcecdef795f",
                 "--start", when]) == 0  # fmt: skip
    capsys.readouterr()
    table = pq.read_table(out / "events.parquet", columns=["provider_id", "time"])
    expected = [r for r in records if str(r.provider_id) == "dd5ef90a-6398-47a4-ad34-4dcecdef795f" and r.filetime >= middle // 10 * 10]
    assert table.num_rows == len(expected) > 100
    assert set(table.column("provider_id").to_pylist()) == {"dd5ef90a-6398-47a4-ad34-4dcecdef795f"}


def test_seconds_from_the_trace_start(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = corpus_path("etl", *HTTP)
    with EtlReader(str(source), strict=False) as reader:
        start = reader.header.start_time
        records = list(reader.records(time_order=True))
    middle = sorted(r.filetime for r in records if r.kind != "unknown")[len(records) // 2]
    low = (middle - start) // 10_000_000  # whole seconds from the trace start, then one more
    inside = [r for r in records if r.kind == "unknown" or start + low * 10_000_000 <= r.filetime <= start + (low + 1) * 10_000_000]
    out = tmp_path / "seconds"
    assert main(["export", str(source), "-o", str(out), "--no-installed", "--start", str(low), "--end", str(low + 1), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == len(inside) > 0


def test_jsonl_and_csv(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = corpus_path("etl", "perfview", "primitive-types.etl")
    lines_path = tmp_path / "events.jsonl"
    assert main(["export", str(source), "--to", "jsonl", "-o", str(lines_path), "--no-installed"]) == 0
    rows = [json.loads(line) for line in lines_path.read_text().splitlines()]
    assert [row["record"] for row in rows] == list(range(len(_records(source))))
    assert rows[-1]["properties"]["string_type"] == "Jupiter"
    out = tmp_path / "csv"
    assert main(["export", str(source), "--to", "csv", "-o", str(out), "--no-installed"]) == 0
    with open(out / "solar_system" / "PrimitiveTypesTest_v0.csv", newline="") as stream:
        planets = list(csv.DictReader(stream))
    assert [row["string_type"] for row in planets] == ["Mercury", "Venus", "Earth", "Mars", "Jupiter"]
    assert planets[0]["guid_type"] == "0ad614c4-0ef4-4225-8013-f44f37cb0397"
    with open(out / "events.csv", newline="") as stream:
        assert len(list(csv.DictReader(stream))) == len(rows)


def test_bad_input_and_usage(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", str(tmp_path / "none.etl"), "-o", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    source = str(corpus_path("etl", "perfview", "primitive-types.etl"))
    assert main(["export", source, "-o", str(tmp_path / "o"), "--start", "yesterday"]) == 2
    assert "neither seconds from the trace start" in capsys.readouterr().err
    assert main(["export", source, "-o", str(tmp_path / "o"), "--to", "xml"]) == 2
    assert main(["export", source, "-o", str(tmp_path / "o"), "--start", "2030-01-01", "--end", "2020-01-01"]) == 2
    capsys.readouterr()


def test_missing_library_names_the_extra() -> None:
    with pytest.raises(MissingDependency, match=r"pip install 'openetw\[export\]'") as caught:
        require("openetw_missing_library", "exporting to Parquet")
    assert caught.value.exit_code == 2 and "exporting to Parquet needs" in str(caught.value)


def test_an_earlier_export_is_replaced_and_other_directories_refused(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    assert main(["export", str(corpus_path("etl", "perfview", "primitive-types.etl")), "-o", str(out), "--no-installed"]) == 0
    assert (out / "solar_system" / "PrimitiveTypesTest_v0.parquet").exists()
    assert main(["export", str(corpus_path("etl", "perfview", "gcrundownevents.etl")), "-o", str(out), "--no-installed"]) == 0
    assert not (out / "solar_system").exists() and (out / "events.parquet").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert main(["export", str(corpus_path("etl", "perfview", "primitive-types.etl")), "-o", str(other)]) == 2
    assert "not empty" in capsys.readouterr().err and (other / "keep.txt").read_text() == "mine"
