"""A log's bound holds on disk (database, -wal and -shm together, within 10%): at the bound of a
retain log, after a circular log's bound is lowered, and while events stored unrendered are
rendered; and each writer other than root and the owner holds at most its share of a log."""

from __future__ import annotations

import os
from pathlib import Path

from openetw.eventlog import LogConfig, LogStore
from openetw.eventlog.retention import writer_share
from openetw.eventlog.store import VARYING_COLUMNS, RecordSource
from tests.eventlog.events import made_events

BOUND = 256 << 10
NOBODY = 65534


def on_disk(directory: Path, log: str) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.name.startswith(log + ".db"))


def unrendered(count: int, payload: int = 300) -> list:  # type: ignore[type-arg]
    events = made_events(count, payload=payload)
    for event in events:
        event.fields, event.message, event.rendered = None, None, False
    return events


def render(event: object) -> tuple[dict[str, object], str]:
    return {"text": "x" * 200, "number": 7}, "a message of some length " * 8


def test_a_retain_log_at_its_bound_stays_within_it_while_it_renders(tmp_path: Path) -> None:
    store = LogStore(tmp_path, keep_open=True)
    store.create("Keep", LogConfig(retention="retain", max_size=BOUND))
    written = 0
    for _ in range(6):
        result = store.append("Keep", unrendered(200))
        written += 200
        assert on_disk(tmp_path, "Keep") <= BOUND * 1.1
    while store.render_pending("Keep", render, limit=300):
        assert on_disk(tmp_path, "Keep") <= BOUND * 1.1
    info = store.info("Keep")
    assert info.refused > 0 and info.written == written and info.stored + info.refused == written and info.stored == info.records
    assert on_disk(tmp_path, "Keep") <= BOUND * 1.1
    assert result.refused == 200
    reader = LogStore(tmp_path, renderer=render)  # what did not fit rendered is rendered as it is read
    assert all(event.message for event in reader.query("Keep"))


def test_a_circular_log_shrinks_to_a_lowered_bound_and_keeps_the_newest(tmp_path: Path) -> None:
    store = LogStore(tmp_path, keep_open=True)
    store.create("Circ", LogConfig(retention="circular", max_size=4 << 20))
    events = made_events(500, payload=600)
    for _ in range(12):
        store.append("Circ", events)
    assert on_disk(tmp_path, "Circ") > 3 * BOUND * 4
    store.set_config("Circ", LogConfig(retention="circular", max_size=BOUND))
    store.append("Circ", events[:10])
    assert on_disk(tmp_path, "Circ") <= BOUND * 1.1
    ids = [event.record_id for event in store.query("Circ")]
    assert ids[-1] == 6010 and ids == list(range(ids[0], 6011)) and len(ids) > 100  # the newest kept, not only the last append
    while store.render_pending("Circ", render):  # nothing unrendered: no growth
        pass
    assert on_disk(tmp_path, "Circ") <= BOUND * 1.1


def varying(count: int, size: int = 200) -> list[tuple[object, ...]]:
    rows = []
    for index in range(count):
        values = {"time_created": 1 + index, "event_id": 1, "version": 0, "level": 4, "task": 0, "opcode": 0, "keywords": 0,
                  "pid": 1, "tid": 1, "activity_id": None, "record": os.urandom(size)}  # fmt: skip
        rows.append(tuple(values[c] for c in VARYING_COLUMNS))
    return rows


def test_a_flood_by_one_writer_keeps_the_others_events(tmp_path: Path) -> None:
    bound = 1 << 20
    for retention in ("circular", "retain"):
        store = LogStore(tmp_path / retention, keep_open=True)
        store.create("Application", LogConfig(retention=retention, max_size=bound, mode=0o662))
        root = RecordSource("Root-Provider", None, "Application", "host", 0)
        nobody = RecordSource("Flood", None, "Application", "host", NOBODY)
        store.append_records("Application", [(root, varying(50))])
        for _ in range(30):
            store.append_records("Application", [(nobody, varying(2000))])
        uids = [event.uid for event in store.query("Application")]
        assert uids.count(0) == 50, retention
        info = store.info("Application")
        share = info.writers[str(NOBODY)]
        assert 0 < share["bytes"] <= writer_share(bound)
        assert info.written == 60_050 and info.records == 50 + uids.count(NOBODY)
        if retention == "circular":  # its own oldest made room for its newest
            assert (share["refused"], info.refused) == (0, 0) and share["overwritten"] == 60_000 - uids.count(NOBODY)
            assert [e.time_created for e in store.query("Application", reverse=True, count=1)] == [2000]
        else:
            assert share["refused"] == info.refused == 60_000 - uids.count(NOBODY) and share["overwritten"] == 0
            assert info.stored == info.records
        assert on_disk(tmp_path / retention, "Application") <= bound * 1.1
