"""Every command that reads an ``.etl`` reads an EventPipe trace: info, dump, report, export, sql,
probe, relog (to ``.etl`` read back by dissect.etl, and to ``.evtx``), ``UserTrace(files=...)``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from openetw.cli.main import main
from openetw.consumer import Provider, Schema, UserTrace
from openetw.consumer.nettrace_source import NettraceFileSource
from openetw.export import export_files
from openetw.export.trace_check import check_file
from openetw.report.values import json_value
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from tests.export.compare import expected, same

TRACELOGGING = "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf"
ARRAYS = "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace"
SAMPLES = "only_managed_samples.nettrace"


def _records(path: Path) -> list:
    source = NettraceFileSource(path)
    source.open()
    try:
        return list(source.records())
    finally:
        source.close()


def test_info_and_dump(trace_file, capsys) -> None:  # type: ignore[no-untyped-def]
    path = str(trace_file(ARRAYS))
    assert main(["info", "--json", "--no-installed", path]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 1970 and info["pointer_size"] == 8 and info["clock"] == "QPC" and info["errors"] == []
    assert info["start_time"].startswith("2020-05-19T") and info["kinds"] == {"event": 1970}
    names = {entry.get("name") for entry in info["providers"]}
    assert {"Microsoft-Windows-DotNETRuntimeRundown", "TestEventSource0", "Microsoft-DotNETCore-EventPipe"} <= names
    assert main(["dump", "--json", "--no-installed", str(trace_file(TRACELOGGING))]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 12 and lines[0]["properties"] == {"i": 1, "s": "Hello World!"}


def test_relog_to_etl_reads_back_in_dissect_etl_and_openetw(trace_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dissect_etl = pytest.importorskip("dissect.etl")
    path = trace_file(ARRAYS)
    out = tmp_path / "relogged.etl"
    assert main(["relog", str(path), "-o", str(out)]) == 0
    with out.open("rb") as handle:
        theirs = sum(1 for _ in dissect_etl.ETL(handle))
    assert theirs == 1970 + 1  # the events and the logfile header
    registry = SchemaRegistry()
    context = DecodeContext(registry)
    from openetw.etl.reader import EtlReader

    with EtlReader(str(out)) as reader:
        relogged = [record for record in reader.records() if record.kind == "event"]
    original = _records(path)
    assert [r.raw for r in relogged] == [r.raw for r in original]
    assert [r.filetime for r in relogged] == [r.filetime for r in original]
    decoded = [context.schema_for(record) for record in relogged]
    assert all(schema is not None for schema in decoded)


def test_relog_to_evtx(trace_file, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "log.evtx"
    assert main(["relog", str(trace_file(TRACELOGGING)), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["dump", "--json", str(out)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 12 and lines[0]["properties"] == {"i": 1, "s": "Hello World!"}


def test_perfetto_export_passes_the_check(trace_file, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "samples.perfetto-trace"
    assert main(["export", "--to", "perfetto", "-o", str(out), "--no-installed", str(trace_file(SAMPLES))]) == 0
    result = check_file(str(out))
    assert result.ok, result.problems
    assert main(["export", "--check", str(out)]) == 0


def test_parquet_export_holds_every_event_with_typed_values(trace_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(trace_file(ARRAYS))
    records = _records(Path(path))
    registry = SchemaRegistry()
    context = DecodeContext(registry)
    out = tmp_path / "arrays"
    summary = export_files([path], str(out), "parquet")
    assert summary.rows == len(records) == 1970 and summary.undecodable == 0
    events = pq.read_table(out / "events.parquet", columns=["record", "kind", "id", "pid", "tid"])
    assert events.column("id").to_pylist() == [record.id for record in records]
    assert events.column("tid").to_pylist() == [record.tid for record in records]
    layout = json.loads((out / "_schemas.json").read_text())
    sample = set(random.Random(5).sample(range(len(records)), 300)) | {i for i, r in enumerate(records) if r.id in (1, 2, 3) and r.pid}
    seen = 0
    for entry in layout["tables"]:
        table = pq.read_table(out / entry["file"])
        for row in table.filter(pc.is_in(table.column("record"), pa.array(sorted(sample)))).to_pylist():
            record = records[row["record"]]
            schema = context.schema_for(record)
            props = dict(registry.decode(schema, record.user_data, record.pointer_size).items())
            for field in table.schema:
                if field.name == "record" or field.name not in props:
                    continue
                want = props[field.name]
                if isinstance(want, (dict, list)) and not isinstance(row[field.name], list):
                    assert json.loads(row[field.name]) == json.loads(json.dumps(json_value(want)))
                elif not isinstance(want, (dict, list)):
                    assert same(row[field.name], expected(want, field.type)), (row["record"], field.name)
            seen += 1
    assert seen >= 300


def test_report_and_sql_and_probe(trace_file, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = str(trace_file(TRACELOGGING))
    assert main(["report", "--format", "csv", "--no-installed", path]) == 0
    assert "TestEventMethod" in capsys.readouterr().out
    assert main(["report", "--format", "perfview", "--no-installed", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("EVENT 1,340.672: MySource/TestEventMethod PID=12365;") and "COUNT MySource/TestEvent1:3" in lines
    for fmt, name in (("jsonl", "out.jsonl"), ("chrome", "out.json"), ("csv", "csv")):
        assert main(["export", "--to", fmt, "-o", str(tmp_path / name), "--no-installed", path]) == 0, fmt
    capsys.readouterr()
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 12
    assert main(["export", "--check", str(tmp_path / "out.json")]) == 0
    capsys.readouterr()
    assert main(["sql", "--json", "--cache-dir", str(tmp_path / "cache"), "SELECT count(*) AS n FROM events", path]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": 12}]
    assert main(["probe", "--file", path, "-q", "-n", "etw:::generic_event { @n = count(); }"]) == 0
    assert "12" in capsys.readouterr().out


def test_user_trace_reads_an_eventpipe_file(trace_file) -> None:  # type: ignore[no-untyped-def]
    seen: list[str] = []

    def on_event(record, context) -> None:  # type: ignore[no-untyped-def]
        schema = Schema(record, context)
        seen.append(schema.event_name if schema.found else "?")

    trace = UserTrace(files=[trace_file(TRACELOGGING)], manifests=[])
    provider = Provider("*MySource")  # EventSource names hash to their ETW GUID
    provider.add_on_event_callback(on_event)
    trace.enable(provider)
    trace.start()
    assert len(seen) == 12 and "TestEventMethod" in seen


def test_the_viewer_opens_an_eventpipe_trace_and_exports_it_as_etl(trace_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from openetw.etl.reader import EtlReader
    from openetw.report.sources import build_registry
    from openetw.viewer.export import export
    from openetw.viewer.sources import open_file

    source = open_file("f1", str(trace_file(TRACELOGGING)), build_registry((), installed=False))
    assert source.ready.wait(60) and source.error is None
    rows = np.arange(len(source.columns()))
    assert len(rows) == 12
    out = tmp_path / "selected.etl"
    out.write_bytes(export(source, rows, "etl"))
    with EtlReader(str(out)) as reader:
        assert sum(1 for record in reader.records() if record.kind == "event") == 12
