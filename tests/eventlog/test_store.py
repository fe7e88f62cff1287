"""LogStore: append, query, info, counters, settings, clear, and reopening from another process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from openetw.errors import EventLogError, InvalidArgument
from openetw.eventlog import LogConfig, LogStore, event_xml
from tests.eventlog.events import made_events


def test_append_then_query_in_order_with_every_fact_kept(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application", LogConfig())
    events = made_events(50)
    result = store.append("Application", events)
    assert (result.stored, result.refused) == (50, 0)
    read = list(store.query("Application"))
    assert [e.record_id for e in read] == list(range(1, 51))
    for stored, new in zip(read, events, strict=True):
        assert stored.record == new.record and stored.fields == new.fields and stored.message == new.message
        assert (stored.keywords, stored.level, stored.provider, stored.time_created) == (new.keywords, new.level, new.provider, new.time_created)
    newest = list(store.query("Application", reverse=True, count=3))
    assert [e.record_id for e in newest] == [50, 49, 48]
    after = list(store.query("Application", after_record_id=47))
    assert [e.record_id for e in after] == [48, 49, 50]
    assert [e.record_id for e in store.query("Application", reverse=True, after_record_id=3)] == [2, 1]
    info = store.info("Application")
    assert (info.records, info.oldest_record_id, info.written, info.stored, info.refused, info.lost) == (50, 1, 50, 50, 0, 0)
    assert info.bytes > 0 and info.last_write is not None and info.last_write.endswith("Z")
    assert "<EventRecordID>50</EventRecordID>" in event_xml(newest[0])


def test_message_search_and_own_events(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application")
    events = made_events(200)
    store.append("Application", events)
    found = [e.record_id for e in store.query("Application", text="printers")]
    assert found == [i + 1 for i, e in enumerate(events) if "printers" in (e.message or "")]
    mine = [e.record_id for e in store.query("Application", own_uid=1000)]
    assert mine == [i + 1 for i, e in enumerate(events) if e.uid == 1000]


def test_counters_clear_and_record_ids_go_on(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application")
    store.append("Application", made_events(10))
    store.note_lost("Application", 3)
    store.note_refused("Application", 2)
    assert store.clear("Application") == 10
    store.append("Application", made_events(2))
    info = store.info("Application")
    assert [e.record_id for e in store.query("Application")] == [11, 12]
    assert (info.records, info.written, info.stored, info.lost, info.refused) == (2, 17, 12, 3, 2)
    assert info.written == info.stored + info.refused + info.lost


def test_settings_are_kept_and_checked(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("My/Operational", LogConfig(retention="retain", max_size=1 << 20, mode=0o600))
    assert store.names() == ["My/Operational"]
    assert (tmp_path / "My%4Operational.db").is_file()
    assert store.config("My/Operational").retention == "retain"
    with pytest.raises(InvalidArgument, match="retention is one of"):
        LogConfig(retention="forever")  # type: ignore[arg-type]
    with pytest.raises(EventLogError, match="no log 'Nope'"):
        store.info("Nope")


def test_another_process_reads_what_was_appended(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application")
    store.append("Application", made_events(5))
    program = (
        "import sys; from openetw.eventlog import LogStore;"
        "print([e.record_id for e in LogStore(sys.argv[1]).query('Application', xpath='*[System[Level>=1]]')])"
    )
    out = subprocess.run([sys.executable, "-c", program, str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[1, 2, 3, 4, 5]"


def test_records_stored_as_tuples_read_back_as_events_and_render_once(tmp_path: Path) -> None:
    from openetw.eventlog.store import RECORD_COLUMNS, row_of

    store = LogStore(tmp_path)
    store.create("Application", LogConfig())
    events = made_events(30)
    for event in events:
        event.fields, event.message, event.rendered = None, None, False
    store.append("Application", events[:10])  # as objects, then as tuples of RECORD_COLUMNS
    store.clear("Application")  # record ids go on after a clear: the first tuple takes 11
    columns = [dict(zip(("time_created", "provider", "provider_guid", "event_id", "version", "level", "task", "opcode", "keywords",
                         "channel", "computer", "pid", "tid", "user_sid", "uid", "activity_id", "format", "record"), row_of(e)[:18], strict=True))
               for e in events[10:]]  # fmt: skip
    result = store.append_rows("Application", [tuple(c[name] for name in RECORD_COLUMNS) for c in columns], records=True)
    assert result.stored == 20 and store.pending("Application") == 20
    read = list(store.query("Application"))
    assert [e.record_id for e in read] == list(range(11, 31))
    for stored, new in zip(read, events[10:], strict=True):
        assert (stored.record, stored.provider, stored.level, stored.keywords, stored.uid, stored.format, stored.rendered) == (
            new.record, new.provider, new.level, new.keywords, new.uid, "etw", False)
    assert store.render_pending("Application", lambda e: ({"n": e.record_id}, f"message {e.record_id}"), 15) == 15
    assert store.pending("Application") == 5
    assert store.render_pending("Application", lambda e: (None, f"message {e.record_id}")) == 5
    assert store.pending("Application") == 0 and store.render_pending("Application", lambda e: (None, None)) == 0
    assert [e.record_id for e in store.query("Application", text="message")] == list(range(11, 31))
    info = store.info("Application")
    assert (info.written, info.stored, info.records) == (30, 30, 20)


def test_an_append_keeps_its_refused_events_and_the_pools_mark_in_its_transaction(tmp_path: Path) -> None:
    import sqlite3

    from openetw.eventlog.store import row_of

    store = LogStore(tmp_path)
    store.create("System")
    rows = [row_of(event) for event in made_events(10)]
    result = store.append_rows("System", rows[:6], refused=2, mark=("42-00ff", 7))
    assert (result.stored, result.refused) == (6, 2)
    store.append_rows("System", rows[6:], mark=("42-00ff", 9))
    store.append_rows("System", [], refused=1, mark=("43-0001", 3))
    store.append_rows("System", [], mark=("42-00ff", 8))  # a mark never goes back
    assert store.marks("System") == {"42-00ff": 9, "43-0001": 3}
    info = store.info("System")
    assert (info.written, info.stored, info.refused, info.lost) == (13, 10, 3, 0)
    with pytest.raises(InvalidArgument):
        store.append_rows("System", [], refused=-1)

    store.note_lost("System", 4, loss_mark=("42-00ff", 4))  # the pool's losses counted, with the count
    store.note_lost("System", 2, loss_mark=("44-0000", 2))
    assert store.mark("System", "42-00ff") == (9, 4) and store.mark("System", "44-0000") == (-1, 2)
    assert store.mark("System", "none") == (-1, 0)
    assert store.info("System").lost == 6
    assert store.forget_marks("System", ["43-0001", "44-0000"]) == 2
    assert store.marks("System") == {"42-00ff": 9}
    for n in range(5):
        store.append_rows("System", [], mark=(f"pool-{n}", n))
    assert store.forget_marks("System", keep=2) == 4  # 42-00ff and pool-0..2
    assert set(store.marks("System")) == {"pool-3", "pool-4"}

    # a log made before marks were kept: none, and the first marked append makes the table
    with sqlite3.connect(store.path("System")) as db:
        db.execute("DROP TABLE stored_buffers")
    assert store.marks("System") == {} and store.mark("System", "44-0002") == (-1, 0)
    store.append_rows("System", rows[:1], mark=("44-0002", 1))
    assert store.marks("System") == {"44-0002": 1}


def test_records_stored_in_runs_of_one_source_read_back_with_every_column(tmp_path: Path) -> None:
    from openetw.eventlog.store import RecordSource

    store = LogStore(tmp_path)
    store.create("System")
    quoted = RecordSource("It's-Mine", None, "System", "host'1", None)
    plain = RecordSource("Plain", "6c1f0d2e-5b7a-4e43-9d1c-2f8e4a7b9c01", "System", "host", 1000)
    row = (132_000_000_000_000_000, 7, 1, 4, 2, 1, -(1 << 63), 42, 43, None, b"\x01\x02")
    result = store.append_records("System", [(plain, [row, row]), (quoted, [row]), (plain, [row])], refused=1, mark=("p", 1))
    assert (result.stored, result.refused) == (4, 1)
    events = list(store.query("System"))
    assert [(e.provider, e.provider_guid, e.computer, e.uid) for e in events] == [
        ("Plain", plain.provider_guid, "host", 1000), ("Plain", plain.provider_guid, "host", 1000), ("It's-Mine", None, "host'1", None),
        ("Plain", plain.provider_guid, "host", 1000),
    ]  # fmt: skip
    first = events[0]
    assert (first.time_created, first.event_id, first.version, first.level, first.task, first.opcode, first.keywords) == (
        132_000_000_000_000_000, 7, 1, 4, 2, 1, 1 << 63)  # fmt: skip
    assert (first.pid, first.tid, first.activity_id, first.record, first.channel, first.format, first.rendered) == (
        42, 43, None, b"\x01\x02", "System", "etw", False)  # fmt: skip
    assert [e.record_id for e in events] == [1, 2, 3, 4]
    with pytest.raises(InvalidArgument):
        store.append_records("System", [(RecordSource("Bad\0", None, "System", "h", 0), [row])])


def test_many_records_at_once_keep_their_order_and_ids_after_a_clear(tmp_path: Path) -> None:
    from openetw.eventlog.store import RecordSource

    store = LogStore(tmp_path)
    store.create("System")
    source = RecordSource("Many", None, "System", "host", 7)
    rows = [(n, n % 1000, 0, 4, 0, 0, n, 1, 2, None, n.to_bytes(4, "little")) for n in range(1000)]
    assert store.append_records("System", [(source, rows[:700])]).stored == 700
    assert store.clear("System") == 700
    assert store.append_records("System", [(source, rows[700:]), (source, rows[:300])]).stored == 600  # ids go on from 701
    # the same as whole RECORD_COLUMNS rows
    records = [(t, "Wide", None, i, v, lv, tk, op, kw, "System", "host", pid, tid, 8, act, raw) for t, i, v, lv, tk, op, kw, pid, tid, act, raw in rows[:513]]
    assert store.append_rows("System", records, records=True).stored == 513
    events = list(store.query("System"))
    assert [e.record_id for e in events] == list(range(701, 1814))
    assert [int.from_bytes(e.record, "little") for e in events] == [*range(700, 1000), *range(300), *range(513)]
    assert [(e.provider, e.uid) for e in events] == [("Many", 7)] * 600 + [("Wide", 8)] * 513
    assert [e.event_id for e in events[600:]] == list(range(513)) and events[-1].keywords == 512


def test_rendered_fields_are_stored_as_json_dumps_writes_them(tmp_path: Path) -> None:
    """The render path's JSON (one C encoder made once) is ``json.dumps(fields, default=str)``."""
    import json
    import sqlite3
    import uuid

    store = LogStore(tmp_path)
    store.create("Application")
    rows = [(e.time_created, e.provider, None, e.event_id, 0, 4, 0, 0, 0, "Application", "host", 1, 1, None, None, e.record) for e in made_events(6)]
    store.append_rows("Application", rows, records=True)  # RECORD_COLUMNS, stored unrendered
    shapes: list[dict[str, object]] = [
        {"a": "b", "n": 1, "f": 1.5, "none": None, "list": [1, "é", {"z": float("nan")}], "id": uuid.UUID(int=7), "t": True},
        {}, {"k\u2028": "\x00\ud800", "big": 1 << 70, "inf": float("-inf")}, {"nested": {"deep": [[], {}]}}, {"é": "\U0001f600"}, {"x": b"\x01"},
    ]  # fmt: skip
    assert store.render_pending("Application", lambda e: (shapes[e.record_id - 1], None)) == 6
    db = sqlite3.connect(store.path("Application"))
    try:
        stored = [row[0] for row in db.execute("SELECT fields FROM events ORDER BY record_id")]
    finally:
        db.close()
    assert stored == [json.dumps(shape, default=str) for shape in shapes]
