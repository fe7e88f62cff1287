"""`openetw log` verbs on logs read directly (no service): list, get, set, query in every format,
cursors and --follow, export (read back by an independent reader), clear --backup, import."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogStore
from tests.conftest import corpus_path
from tests.eventlog.events import made_events, private_logs
from tests.evtx.readers import crate_records


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LogStore:
    return private_logs(tmp_path, monkeypatch, 30)


def run(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    got = main(list(argv))
    out, err = capsys.readouterr()
    assert got == code, err
    return out if code == 0 else err


def test_list_get_and_set(logs: LogStore, capsys: pytest.CaptureFixture[str]) -> None:
    listed = json.loads(run(capsys, "log", "list", "--json"))
    assert [(row["log"], row["records"]) for row in listed] == [("Application", 30)]
    info = json.loads(run(capsys, "log", "get", "Application", "--info", "--json"))
    assert {key: info[key] for key in ("records", "oldest_record_id", "refused", "lost")} == {
        "records": 30, "oldest_record_id": 1, "refused": 0, "lost": 0}  # fmt: skip
    assert info["last_write"] and info["bytes"] > 0 and info["retention"] == "circular"
    changed = json.loads(run(capsys, "log", "set", "Application", "--retention", "retain", "--max-size", "2097152", "--access", "0:0:600", "--json"))
    assert (changed["retention"], changed["max_size"], changed["mode"]) == ("retain", 2097152, "600")
    assert logs.config("Application").retention == "retain"
    assert "nothing to set" in run(capsys, "log", "set", "Application", code=2)
    assert "no log 'Nope'" in run(capsys, "log", "get", "Nope", code=2)


def test_query_formats_cursors_and_errors(logs: LogStore, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = run(capsys, "log", "query", "Application", "--query", "*[System[Level<=2]]", "--format", "json").splitlines()
    expected = [e.record_id for e in logs.query("Application") if e.level <= 2]
    rows = [json.loads(line) for line in lines]
    assert [row["record_id"] for row in rows] == expected
    log_id = logs.info("Application").log_id
    assert rows[0]["cursor"] == f"{log_id}:{expected[0]}"
    after = json.loads(run(capsys, "log", "query", "Application", "--json", "--count", "1", "--after-cursor", rows[0]["cursor"]))
    assert after["record_id"] == expected[0] + 1
    newest = run(capsys, "log", "query", "Application", "--reverse", "--count", "2")
    assert [int(line.split()[0]) for line in newest.splitlines()] == [30, 29]
    xml = run(capsys, "log", "query", "Application", "--count", "1", "--format", "xml")
    assert xml.startswith("<Event xmlns=") and "<EventRecordID>1</EventRecordID>" in xml and "RenderingInfo" not in xml
    rendered = run(capsys, "log", "query", "Application", "--count", "1", "--format", "rendered-xml")
    assert "<RenderingInfo Culture='en-US'><Message>Event number 0 about" in rendered
    query_list = tmp_path / "q.xml"
    query_list.write_text("<QueryList><Query><Select>*[System[Level=4]]</Select><Suppress>*[System[Provider[@Name='Beta']]]</Suppress></Query></QueryList>")
    listed = run(capsys, "log", "query", "Application", "--query-file", str(query_list), "--json").splitlines()
    assert [json.loads(line)["record_id"] for line in listed] == [e.record_id for e in logs.query("Application") if e.level == 4 and e.provider != "Beta"]
    assert "column 9: the descendant axis '//'" in run(capsys, "log", "query", "Application", "--query", "*[System//Level=2]", code=2)
    assert "another log" in run(capsys, "log", "query", "Application", "--after-cursor", "0123:4", code=2)


def read_line(stream: IO[bytes]) -> str:
    """One line of an unbuffered pipe (select then sees every byte not read yet)."""
    ready, _, _ = select.select([stream], [], [], 60)
    assert ready, "--follow printed nothing for a minute"
    return stream.readline().decode()


def test_follow_prints_new_events_and_their_cursors(logs: LogStore, tmp_path: Path) -> None:
    env = dict(os.environ)
    follower = subprocess.Popen([sys.executable, "-m", "openetw", "log", "query", "Application", "--follow", "--json", "--after-cursor",
                                 f"{logs.info('Application').log_id}:28"], stdout=subprocess.PIPE, bufsize=0, env=env)  # fmt: skip
    try:
        assert follower.stdout is not None
        first = [read_line(follower.stdout) for _ in range(3)]
        assert [json.loads(line)["record_id"] for line in first[:2]] == [29, 30]
        assert first[2].strip() == f"-- cursor: {logs.info('Application').log_id}:30"
        time.sleep(0.2)
        logs.append("Application", made_events(2))
        more = [read_line(follower.stdout) for _ in range(3)]
        assert [json.loads(line)["record_id"] for line in more[:2]] == [31, 32]
        assert more[2].startswith("-- cursor: ") and more[2].strip().endswith(":32")
    finally:
        follower.kill()
        follower.wait(timeout=10)


def test_export_clear_with_backup_and_import(logs: LogStore, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "level4.evtx"
    exported = json.loads(run(capsys, "log", "export", "Application", str(out), "--query", "*[System[Level=4]]", "--json"))
    wanted = [e for e in logs.query("Application") if e.level == 4]
    assert exported["exported"] == len(wanted)
    read_back = list(crate_records(out))  # an independent reader
    assert len(read_back) == len(wanted)
    assert all("<Level>4</Level>" in xml for _, xml in read_back)
    backup = tmp_path / "backup.evtx"
    cleared = json.loads(run(capsys, "log", "clear", "Application", "--backup", str(backup), "--json"))
    assert (cleared["cleared"], cleared["backed_up"]) == (30, 30)
    assert logs.info("Application").records == 0
    imported = json.loads(run(capsys, "log", "import", str(backup), "--log", "Restored", "--json"))
    assert imported["imported"] == 30
    restored = list(logs.query("Restored"))
    assert [e.fields["index"] for e in restored if e.fields] == list(range(30))
    assert all(e.format == "evtx" and e.xml for e in restored)
    corpus = corpus_path("evtx", "Security_short_selected.evtx")
    count = json.loads(run(capsys, "log", "import", str(corpus), "--log", "Security-Copy", "--json"))["imported"]
    direct = run(capsys, "log", "query", str(corpus), "--json").splitlines()
    assert count == len(direct) > 0
    copied = run(capsys, "log", "query", "Security-Copy", "--query", "*[System[EventID=4624]]", "--json").splitlines()
    assert len(copied) == len(run(capsys, "log", "query", str(corpus), "--query", "*[System[EventID=4624]]", "--json").splitlines())
