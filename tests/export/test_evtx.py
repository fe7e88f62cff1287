"""``.evtx`` logs as export inputs: their records in ``events``, their values in typed per-event tables."""

from __future__ import annotations

import heapq
import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from openetw.cli.main import main
from openetw.consumer.evtx_source import EvtxFileSource
from openetw.events.text import json_value
from openetw.export import export_files
from tests.conftest import corpus_path
from tests.export.compare import expected, same

LOGS = ("security.evtx", "system.evtx")


def _log_records(path: str) -> list:
    source = EvtxFileSource(path)
    source.open()
    try:
        return list(source.records())
    finally:
        source.close()


@pytest.mark.parametrize("name", LOGS[:1])
def test_evtx_log_exports_with_typed_values(tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    path = str(corpus_path("evtx", name))
    records = _log_records(path)
    out = tmp_path / "log"
    summary = export_files([path], str(out), "parquet")
    events = pq.read_table(out / "events.parquet", columns=["record", "kind", "provider_name", "id", "pid", "tid"])
    assert events.num_rows == summary.rows == len(records) and summary.undecodable == 0
    assert set(events.column("kind").to_pylist()) == {"evtx"}
    assert events.column("provider_name").to_pylist() == [record.provider_name for record in records]
    assert events.column("id").to_pylist() == [record.id for record in records]
    layout = json.loads((out / "_schemas.json").read_text())
    sample = sorted(random.Random(name).sample(range(len(records)), min(1000, len(records))))
    seen = 0
    for entry in layout["tables"]:
        table = pq.read_table(out / entry["file"])
        picked = table.filter(pc.is_in(table.column("record"), pa.array(sample))).to_pylist()
        for row in picked:
            record = records[row["record"]]
            assert entry["table"] == f"{record.provider_name}/Event{record.id}"
            props = record.properties()
            assert set(row) - {"record"} == set(props)
            for field in table.schema:
                if field.name == "record":
                    continue
                want = props[field.name]
                if isinstance(want, dict):
                    assert json.loads(row[field.name]) == json.loads(json.dumps(json_value(want)))
                else:
                    assert same(row[field.name], expected(want, field.type)), (name, row["record"], field.name)
            seen += 1
    assert seen == len(sample)
    assert main(["sql", "--json", "SELECT count(*) AS n FROM events WHERE kind = 'evtx'", str(out)]) == 0


def test_evtx_logs_merge_with_each_other_in_time_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    paths = [str(corpus_path("evtx", name)) for name in LOGS]
    summary = export_files(paths, str(tmp_path / "both"), "parquet")
    each = [[(record.filetime - 116_444_736_000_000_000) * 100 for record in _log_records(path)] for path in paths]
    assert summary.rows == sum(map(len, each))
    times = pq.read_table(tmp_path / "both" / "events.parquet", columns=["time"]).column("time").cast(pa.int64()).to_pylist()
    assert times == list(heapq.merge(*each))  # each log in its own (record id) order, interleaved by time


def test_evtx_logs_merge_with_etl_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = str(corpus_path("evtx", "system.evtx"))
    etl = str(corpus_path("etl", "etl-parser", "lxcore_kernel.etl"))
    alone = export_files([etl], str(tmp_path / "etl"), "parquet").rows
    summary = export_files([log, etl], str(tmp_path / "mixed"), "parquet")
    assert summary.rows == alone + len(_log_records(log))
    kinds = pq.read_table(tmp_path / "mixed" / "events.parquet", columns=["kind"]).column("kind").to_pylist()
    assert kinds.count("evtx") == len(_log_records(log)) and len(set(kinds)) > 1
