"""Log databases are trusted only as far as they should be: a planted database (a view over an
endless query, a trigger, another user's file) is refused by `log query FILE.db` at once, a
damaged one gives a project error with every good event kept, a damaged log is set aside by the
service; a bad --text query is a clear error. And a small fuzz of log databases."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogConfig, LogStore
from openetw.eventlog.store import _COLUMNS, SCHEMA
from openetw.testing.damage import damaged
from tests.eventlog.events import made_events

# every column of a log's events, from a query that never ends
ENDLESS = ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS record_id, "
           + ", ".join(f"{'x' if name != 'record' else 'zeroblob(8)'} AS {name}" for name in _COLUMNS) + " FROM n")
FUZZ_ROUNDS = 200


def query(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["log", "query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def a_log(directory: Path, count: int = 40) -> Path:
    store = LogStore(directory)
    store.create("App", LogConfig(max_size=4 << 20))
    store.append("App", made_events(count))
    store.close()
    return directory / "App.db"


def test_a_planted_view_or_trigger_database_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted = tmp_path / "planted.db"
    db = sqlite3.connect(planted)
    db.executescript(SCHEMA.replace("CREATE TABLE IF NOT EXISTS events(", "CREATE TABLE IF NOT EXISTS real_events(")
                     .replace("ON events(", "ON real_events(").replace("content='events'", "content='real_events'"))  # fmt: skip
    db.execute(f"CREATE VIEW events AS {ENDLESS}")
    db.commit()
    db.close()
    code, out, err = query(capsys, str(planted))
    assert code == 2 and out == "" and "not a log database" in err and "view" in err, err

    triggered = tmp_path / "triggered.db"
    shutil.copy(a_log(tmp_path / "logs"), triggered)
    db = sqlite3.connect(triggered)
    db.execute("CREATE TRIGGER t AFTER INSERT ON meta BEGIN SELECT 1; END")
    db.commit()
    db.close()
    code, _, err = query(capsys, str(triggered))
    assert code == 2 and "trigger" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "planted.db", "triggered.db"]  # the reads wrote nothing beside


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true", reason="needs root to give a file to nobody")
def test_a_database_of_another_user_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted = tmp_path / "other.db"
    shutil.copy(a_log(tmp_path / "logs"), planted)
    os.chown(planted, 65534, 65534)
    code, out, err = query(capsys, str(planted))
    assert code == 2 and out == "" and "belongs to uid 65534" in err, err


def test_a_damaged_log_is_an_error_with_its_good_events_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = a_log(tmp_path / "logs", count=400)
    data = bytearray(path.read_bytes())
    db = sqlite3.connect(path)  # the first leaf of the events table: its rows become garbage
    page = db.execute("SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1").fetchone()[0]
    db.close()
    size = 4096
    data[(page - 1) * size + 600 : page * size] = bytes(random.Random(3).randrange(256) for _ in range(size - 600))
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(bytes(data))
    code, _, err = query(capsys, str(damaged), "--format", "json")
    assert code in (0, 2) and "internal error" not in err, err

    half = tmp_path / "logs2"
    system = a_log(half)
    system.write_bytes(b"\xa5" * (system.stat().st_size // 2) + system.read_bytes()[system.stat().st_size // 2 :])
    code, _, err = query(capsys, "App", "--logs-dir", str(half))
    assert code == 2 and "internal error" not in err and "App" in err, err
    store = LogStore(half)
    problem = store.damage("App")
    assert problem is not None
    aside = store.set_aside("App")
    assert aside.name.startswith("App.db.damaged-") and aside.is_file() and not store.exists("App")
    assert store.ensure("App") and store.info("App").records == 0


def test_a_bad_text_query_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_log(tmp_path)
    code, out, _ = query(capsys, "App", "--logs-dir", str(tmp_path), "--text", "disks", "--format", "json")
    assert code == 0 and out.count("\n") > 0
    for text in ('"unclosed', "AND", "name:value", "(open"):
        code, out, err = query(capsys, "App", "--logs-dir", str(tmp_path), "--text", text)
        assert code != 0 and out == "" and "not a text query" in err and "fts5" not in err and "column" not in err, (text, err)


def test_fuzzed_log_databases_give_only_project_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = a_log(tmp_path / "logs", count=300).read_bytes()
    rng = random.Random(20261129)
    target = tmp_path / "fuzzed.db"
    outcomes = set()
    for _ in range(FUZZ_ROUNDS):
        target.write_bytes(damaged(original, rng)[1])
        code, _, err = query(capsys, str(target), "--format", "json", "--query", "*[System[Level<=4]]")
        assert "internal error" not in err and "Traceback" not in err, err
        outcomes.add(code)
    assert outcomes <= {0, 2, 3} and 0 in outcomes and len(outcomes) > 1, outcomes


def test_a_planted_log_in_a_logs_directory_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = sqlite3.connect(tmp_path / "App.db")
    db.executescript(SCHEMA.replace("CREATE TABLE IF NOT EXISTS events(", "CREATE TABLE IF NOT EXISTS real_events(")
                     .replace("ON events(", "ON real_events(").replace("content='events'", "content='real_events'"))  # fmt: skip
    db.execute(f"CREATE VIEW events AS {ENDLESS}")
    db.commit()
    db.close()
    for argv in (["query", "App"], ["get", "App", "--info"]):
        code = main(["log", *argv, "--logs-dir", str(tmp_path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and "not a log database" in err, err


def test_an_archive_is_read_with_its_text_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = a_log(tmp_path / "logs")
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    code, out, err = query(capsys, str(copy), "--format", "json")
    assert code == 0 and len(out.splitlines()) == 40, err
    found = list(LogStore(tmp_path).query_file(copy, text="disks"))
    assert found and all("disks" in (event.message or "") for event in found)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "logs"]
