"""``openetw sql`` answers questions about a trace as Python loops over the same events do."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from openetw.cli.main import main
from openetw.cli.naming import RecordNamer
from openetw.etl.reader import EtlReader
from openetw.events.decoded import decode_records
from openetw.events.registry import build_registry
from openetw.tdh.context import DecodeContext
from tests.export.synthetic import kernel_trace

KERNEL = "Windows Kernel"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kernel_trace(tmp_path_factory.mktemp("sql") / "kernel.etl")


@pytest.fixture(scope="module")
def python_answers(trace: Path) -> dict[str, object]:
    """The questions answered by a loop over the decoded events, as a script would."""
    registry = build_registry((), installed=False)
    context = DecodeContext(registry)
    namer = RecordNamer(registry)
    per_provider: Counter[str | None] = Counter()
    switches: Counter[str | None] = Counter()
    disk: defaultdict[str | None, int] = defaultdict(int)
    starts: dict[int, int] = {}
    stops: dict[int, int] = {}
    with EtlReader(str(trace), strict=False) as reader:
        for event in decode_records(reader.records(time_order=True), registry, context):
            record = event.record
            provider = event.provider_name or namer.provider_name(record)
            name = event.event_name or namer.event_name(record)
            per_provider[provider] += 1
            if provider != KERNEL:
                continue
            if name == "Thread/CSwitch":
                switches[event.process_name] += 1
            elif name in ("DiskIO/Read", "DiskIO/Write"):
                disk[event.process_name] += event.properties["TransferSize"]
            elif name == "Process/Start":
                pid = event.properties["ProcessID"]
                starts[pid] = min(starts.get(pid, record.filetime), record.filetime)
            elif name == "Process/Stop":
                pid = event.properties["ProcessID"]
                stops[pid] = max(stops.get(pid, record.filetime), record.filetime)
    durations = [(stops[pid] - starts[pid]) * 100 for pid in stops if pid in starts]
    return {
        "per_provider": dict(per_provider),
        "switches": switches.most_common(),
        "disk": dict(disk),
        "p99": float(np.percentile(durations, 99)),
        "pairs": len(durations),
    }


def _sql(capsys: pytest.CaptureFixture[str], query: str, *paths: object) -> list[dict]:
    assert main(["sql", "--json", query, *map(str, paths), "--no-installed"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENETW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_events_per_provider(capsys, trace, python_answers, cache) -> None:  # type: ignore[no-untyped-def]
    rows = _sql(capsys, "SELECT provider_name, count(*) AS n FROM events GROUP BY 1", trace)
    assert {row["provider_name"]: row["n"] for row in rows} == python_answers["per_provider"]
    assert len(list(cache.iterdir())) == 1  # exported once into the cache...
    again = _sql(capsys, "SELECT count(*) AS n FROM events", trace)
    assert again == [{"n": sum(python_answers["per_provider"].values())}]
    assert len(list(cache.iterdir())) == 1  # ...and reused


def test_top_processes_by_context_switches(capsys, trace, python_answers, cache) -> None:  # type: ignore[no-untyped-def]
    rows = _sql(capsys, 'SELECT e.process_name, count(*) AS n FROM "Windows Kernel/Thread/CSwitch" c '
                        "JOIN events e USING (record) GROUP BY 1 ORDER BY n DESC, 1", trace)  # fmt: skip
    expected = sorted(python_answers["switches"], key=lambda item: (-item[1], item[0] or ""))
    assert [(row["process_name"], row["n"]) for row in rows] == expected
    assert rows[0]["n"] > rows[-1]["n"] > 0


def test_disk_bytes_per_process(capsys, trace, python_answers, cache) -> None:  # type: ignore[no-untyped-def]
    rows = _sql(capsys, "SELECT e.process_name, sum(d.TransferSize) AS bytes FROM ("
                        'SELECT record, TransferSize FROM "Windows Kernel/DiskIO/Read" UNION ALL '
                        'SELECT record, TransferSize FROM "Windows Kernel/DiskIO/Write") d '
                        "JOIN events e USING (record) GROUP BY 1", trace)  # fmt: skip
    assert {row["process_name"]: row["bytes"] for row in rows} == python_answers["disk"]
    assert len(rows) > 5


def test_p99_of_process_lifetimes(capsys, trace, python_answers, cache) -> None:  # type: ignore[no-untyped-def]
    rows = _sql(capsys, 'WITH s AS (SELECT p.ProcessID AS pid, min(e.time) AS t FROM "Windows Kernel/Process/Start" p '
                        "JOIN events e USING (record) GROUP BY 1), "
                        'x AS (SELECT p.ProcessID AS pid, max(e.time) AS t FROM "Windows Kernel/Process/Stop" p '
                        "JOIN events e USING (record) GROUP BY 1) "
                        "SELECT quantile_cont(epoch_ns(x.t) - epoch_ns(s.t), 0.99) AS p99, count(*) AS n FROM s JOIN x USING (pid)",
                trace)  # fmt: skip
    assert rows[0]["n"] == python_answers["pairs"] > 100
    assert rows[0]["p99"] == pytest.approx(python_answers["p99"], rel=1e-9)


def test_tables_lists_views_and_columns(capsys, trace, cache) -> None:  # type: ignore[no-untyped-def]
    assert main(["sql", "--tables", "--json", str(trace), "--no-installed"]) == 0
    tables = {table["table"]: table["columns"] for table in json.loads(capsys.readouterr().out)}
    assert next(iter(tables)) == "events"
    assert {"record", "kind", "provider_name", "event_name", "time", "activity_id", "related_activity_id"} <= {c["name"] for c in tables["events"]}
    switch = {column["name"]: column["type"] for column in tables["Windows Kernel/Thread/CSwitch"]}
    assert switch["record"] == "BIGINT" and switch["NewThreadID"] == "UINTEGER" and switch["NewThreadPriority"] == "TINYINT"
    assert main(["sql", "--tables", str(trace), "--no-installed"]) == 0
    assert '"Windows Kernel/Thread/CSwitch"\n    record  BIGINT' in capsys.readouterr().out


def test_table_and_csv_output(capsys, trace, cache) -> None:  # type: ignore[no-untyped-def]
    query = "SELECT kind, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"
    assert main(["sql", query, str(trace), "--no-installed"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["kind", "n"] and set(text[1]) <= {"-", " "} and text[-1] == f"({len(text) - 3} row{'s' if len(text) != 4 else ''})"
    assert main(["sql", "--csv", query, str(trace), "--no-installed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "kind,n" and lines[1:] == [",".join(line.split()) for line in text[2:-1]]


def test_exported_directory_and_bad_sql(capsys, exported, cache) -> None:  # type: ignore[no-untyped-def]
    directory, summary = exported("perfview/gcevents.etl")
    assert _sql(capsys, "SELECT count(*) AS n FROM events", directory) == [{"n": summary.rows}]
    assert not cache.exists()  # a layout is read in place
    assert main(["sql", "SELECT nope FROM events", str(directory)]) == 2
    assert "SQL:" in capsys.readouterr().err
    assert main(["sql", "SELECT 1"]) == 2
