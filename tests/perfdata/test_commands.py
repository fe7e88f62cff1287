"""perf.data in every command that reads traces: info, dump, report, export, sql, probe, relog,
and ``UserTrace(files=...)``; a relogged ``.etl`` that dissect.etl reads and that dumps the
same EventHeader events as the perf.data it came from."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.consumer import Provider, UserTrace
from openetw.consumer.formats import PERFDATA, trace_format
from openetw.guids import provider_guid_from_name
from tests.conftest import corpus_path


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def perf_data() -> Path:
    return corpus_path("perfdata", "perf.data")


def dumped(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, Any]]:
    code, out, err = run(capsys, "dump", "--json", "--time-order", path)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_the_table_tells_perf_data_by_its_magic(tmp_path: Path) -> None:
    assert trace_format(perf_data()) is PERFDATA
    pipe = tmp_path / "pipe.bin"
    pipe.write_bytes(b"PERFILE2" + (16).to_bytes(8, "little"))
    assert trace_format(pipe) is PERFDATA
    assert trace_format(tmp_path / "missing.data") is PERFDATA


def test_info_names_the_providers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "info", "--json", perf_data())
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 539 and summary["clock"] == "QPC" and summary["number_of_processors"] == 24
    names = {p.get("name"): p["records"] for p in summary["providers"]}
    assert names["sched"] == 285 and names["TestProviderC"] == 113 and names["TestProviderCpp"] == 140


def test_dump_gives_tracelogging_events_in_time_order(capsys: pytest.CaptureFixture[str]) -> None:
    events = dumped(capsys, perf_data())
    assert len(events) == 539
    times = [event["timestamp"] for event in events]
    assert times == sorted(times)
    scalars = next(
        event
        for event in events
        if event.get("event_name") == "CScalars3" and event["provider_name"] == "TestProviderC"
    )
    assert scalars["provider_id"] == str(provider_guid_from_name("TestProviderC"))
    assert (scalars["id"], scalars["version"], scalars["level"], scalars["opcode"], scalars["keyword"]) == (
        1000,
        11,
        4,
        3,
        0x85,
    )
    assert scalars["properties"] == {"Struct20": {"hi": "hi", "ch10": ["H", "o", "w"]}}


def test_report_and_sql(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("duckdb")
    code, out, err = run(capsys, "report", perf_data())
    assert code == 0, err
    assert "decoded 539 (100.0%)" in out
    code, out, err = run(capsys, "sql", "--json", 'SELECT "i32" FROM "TestProviderC/i32"', perf_data())
    assert code == 0, err
    assert "2000000000" in out


def test_export_jsonl(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "export", "--to", "jsonl", "-o", tmp_path / "out.jsonl", perf_data())
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 539
    assert any(line.get("properties", {}).get("guid") == "01020304-0506-0708-0102-030405060708" for line in lines)


def test_probe_matches_eventheader_events_by_provider_name(capsys: pytest.CaptureFixture[str]) -> None:
    program = 'etw:TestProviderCpp::generic_event { @n = count(); } etw:TestProviderC::i32 { printf("i32=%d\\n", args->i32); }'
    code, out, err = run(capsys, "probe", "--file", perf_data(), "-q", "-n", program)
    assert code == 0, err
    assert "i32=2000000000" in out and "140" in out


def test_user_trace_reads_perf_data() -> None:
    seen: list[str] = []
    trace = UserTrace(files=[perf_data()], manifests=[])
    provider = Provider("TestProviderC")
    provider.add_on_event_callback(lambda record, context: seen.append(record.opcode))
    trace.enable(provider)
    trace.start()
    assert len(seen) == 113


def test_relog_to_etl_reads_in_dissect_and_dumps_the_same_events(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    output = tmp_path / "relogged.etl"
    code, _out, err = run(capsys, "relog", "-o", output, perf_data())
    assert code == 0, err
    dissect_etl = pytest.importorskip("dissect.etl")
    theirs = list(dissect_etl.ETL(io.BytesIO(output.read_bytes())))
    assert len(theirs) == 540  # the logfile header record and every event
    providers = {bytes(event.header.header.ProviderId) for event in theirs[1:]}
    assert provider_guid_from_name("TestProviderCpp").bytes_le in providers
    ours, again = dumped(capsys, perf_data()), dumped(capsys, output)

    def ordered(events: list[dict[str, Any]]) -> list[str]:  # equal timestamps may come in either order
        return sorted(json.dumps(event, sort_keys=True) for event in events if event["kind"] == "event")

    assert len(ours) == 539 and ordered(again) == ordered(ours)


def test_the_viewer_opens_perf_data() -> None:
    from openetw.report.sources import build_registry
    from openetw.viewer.sources import open_file

    source = open_file("perf", str(perf_data()), build_registry((), installed=False))
    assert source.ready.wait(60)
    assert source.error is None
    assert source.kind == "perfdata"
    events = list(source.events(range(539)))
    assert len(events) == 539 and {event.provider_name for event in events} >= {
        "sched",
        "TestProviderC",
        "TestProviderCpp",
    }


@pytest.mark.parametrize("to", ["parquet", "csv", "perfetto", "chrome"])
def test_export_to_every_file_format(to: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if to in ("parquet", "csv"):
        pytest.importorskip("pyarrow")
    output = tmp_path / "out"
    code, out, err = run(capsys, "export", "--to", to, "-o", output, perf_data())
    assert code == 0, err
    if to in ("parquet", "csv"):
        assert "539 events" in out and "undecodable 0" in out
        assert (output / "TestProviderC").is_dir()
    else:
        assert output.stat().st_size > 10_000 and "539 instants" in out + err


def test_time_order_holds_a_bounded_number_of_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.consumer import perfdata_source
    from openetw.consumer.perfdata_source import PerfDataSource

    monkeypatch.setattr(perfdata_source, "MAX_HELD", 16)
    source = PerfDataSource(perf_data())
    source.open()
    try:
        assert sum(1 for _ in source.records()) == 539
        assert source.held_past_limit > 0 and any("more than 16 held" in str(notice) for notice in source.notices())
    finally:
        source.close()
