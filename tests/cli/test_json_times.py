"""Times in ``--json`` output take one form across commands: ISO 8601 UTC ending in ``Z``, with the
precision the source has (FILETIME: 7 digits; the service's POSIX times: 6; whole seconds: none),
and the FILETIME under its own key where Windows keeps one (docs/cli.md, "Output")."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.json_time import datetime_iso, filetime_iso, posix_time_iso, with_iso_times
from openetw.cli.main import main
from openetw.eventlog import LogStore
from tests.conftest import corpus_path
from tests.eventlog.events import private_logs

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
FILETIME_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$")
POSIX_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
SECONDS_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# Every key that holds a time in some command's --json output.
TIME_KEYS = {
    "time", "start_time", "end_time", "first_time", "last_time", "created_at", "started_at", "stopped_at",
    "last_write", "installed", "time_created",
}  # fmt: skip
MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml"


def json_of(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def times_in(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TIME_KEYS:
                yield key, item
            yield from times_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from times_in(item)


def assert_one_form(document: Any) -> dict[str, Any]:
    """Every time in ``document`` is ISO text (or null); the times by key."""
    found = dict(times_in(document))
    for key, value in found.items():
        assert value is None or (isinstance(value, str) and ISO.match(value)), (key, value)
    return found


def test_the_conversions() -> None:
    assert filetime_iso(132404800306912345) == "2020-07-29T07:07:10.6912345Z"
    assert filetime_iso(2**63 + 5) == f"FILETIME({2**63 + 5})"
    assert posix_time_iso(1_600_000_000.25) == "2020-09-13T12:26:40.250000Z"
    assert datetime_iso(datetime(2024, 5, 1, 12, 0, 3, 500000, tzinfo=UTC), 0) == "2024-05-01T12:00:03Z"
    nested = with_iso_times({"sessions": [{"created_at": 0.0, "started_at": None, "events_lost": 3, "flag": True}]})
    assert nested == {"sessions": [{"created_at": "1970-01-01T00:00:00.000000Z", "started_at": None, "events_lost": 3, "flag": True}]}


def test_info_of_etl_and_evtx_files(capsys: pytest.CaptureFixture[str]) -> None:
    etl = json_of(capsys, "info", "--json", "--no-installed", str(corpus_path("etl", "perfview", "primitive-types.etl")))
    assert FILETIME_ISO.match(etl["start_time"]) and FILETIME_ISO.match(etl["end_time"])
    evtx = json_of(capsys, "info", "--json", str(corpus_path("evtx", "Application_no_crc32.evtx")))
    times = assert_one_form(evtx)
    assert FILETIME_ISO.match(times["first_time"]) and FILETIME_ISO.match(times["last_time"]), times


def test_dump_and_report(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(corpus_path("etl", "perfview", "primitive-types.etl"))
    assert main(["dump", "--json", "--no-installed", path]) == 0
    for line in capsys.readouterr().out.splitlines():
        assert FILETIME_ISO.match(json.loads(line)["time"])
    summary = json_of(capsys, "report", "--json", "--no-installed", path)
    times = assert_one_form(summary)
    assert times and all(FILETIME_ISO.match(value) for value in times.values() if value)


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LogStore:
    return private_logs(tmp_path, monkeypatch, 3)


def test_log_query_and_get(logs: LogStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "query", "Application", "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    stored = [event.time_created for event in logs.query("Application")]
    assert [row["time_created_filetime"] for row in rows] == stored  # Windows' FILETIME, under its own key
    assert [row["time_created"] for row in rows] == [filetime_iso(value) for value in stored]
    assert all(FILETIME_ISO.match(row["time_created"]) for row in rows)
    info = json_of(capsys, "log", "get", "Application", "--info", "--json")
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", assert_one_form(info)["last_write"])


def test_sessions_and_the_service(service: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = json_of(capsys, "session", "start", "Times", "-p", "Demo.Times", "-o", str(tmp_path / "t.etl"), "--json")
    queried = json_of(capsys, "session", "query", "Times", "--json")
    listed = json_of(capsys, "session", "list", "--json")
    status = json_of(capsys, "service", "status", "--json")
    stopped = json_of(capsys, "session", "stop", "Times", "--json")
    for document in (started, queried, listed, status, stopped):
        assert_one_form(document)
    assert POSIX_ISO.match(queried["created_at"]) and POSIX_ISO.match(queried["started_at"])
    assert POSIX_ISO.match(listed[0]["created_at"])
    assert POSIX_ISO.match(status["started_at"])
    assert POSIX_ISO.match(stopped["stopped_at"])


def test_installed_manifests(service: Any, capsys: pytest.CaptureFixture[str]) -> None:
    json_of(capsys, "manifest", "install", str(MANIFEST), "--json")
    listed = json_of(capsys, "manifest", "list", "--json")
    times = [row["installed"] for row in listed if row.get("installed")]
    assert times and all(SECONDS_ISO.match(value) for value in times), listed
    providers = json_of(capsys, "providers", "--json")
    assert_one_form(providers)
