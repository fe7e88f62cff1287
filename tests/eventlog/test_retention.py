"""Retention with 100,000 events per mode: circular, retain, auto-backup (``wevtutil sl /rt /ab /ms``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from openetw.eventlog import LogConfig, LogStore
from openetw.eventlog.retention import GROWTH_STEP
from tests.eventlog.events import made_events

TOTAL = 100_000
BATCH = 1_000
BOUND = 2 << 20


def fill(store: LogStore, log: str) -> tuple[int, int, int]:
    stored = refused = archives = 0
    events = made_events(BATCH)
    for _ in range(TOTAL // BATCH):
        result = store.append(log, events)
        stored += result.stored
        refused += result.refused
        archives += len(result.archives)
        assert store.size(log) <= BOUND + GROWTH_STEP, store.size(log)
    return stored, refused, archives


def test_circular_keeps_the_newest_within_the_bound(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Circ", LogConfig(retention="circular", max_size=BOUND))
    stored, refused, _ = fill(store, "Circ")
    assert (stored, refused) == (TOTAL, 0)
    ids = [e.record_id for e in store.query("Circ")]
    assert ids[-1] == TOTAL and ids == list(range(ids[0], TOTAL + 1))
    assert 1_000 < len(ids) < TOTAL
    info = store.info("Circ")
    assert (info.records, info.oldest_record_id, info.written, info.stored, info.refused) == (len(ids), ids[0], TOTAL, TOTAL, 0)


def test_retain_refuses_and_counts_exactly(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Keep", LogConfig(retention="retain", max_size=BOUND))
    stored, refused, _ = fill(store, "Keep")
    assert stored + refused == TOTAL and 1_000 < stored < TOTAL
    info = store.info("Keep")
    assert (info.records, info.written, info.stored, info.refused, info.lost) == (stored, TOTAL, stored, refused, 0)
    assert [e.record_id for e in store.query("Keep", reverse=True, count=1)] == [stored]


def test_autobackup_archives_and_continues(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Auto", LogConfig(retention="autobackup", max_size=BOUND))
    stored, refused, archived = fill(store, "Auto")
    assert (stored, refused) == (TOTAL, 0)
    archives = store.archives("Auto")
    assert len(archives) == archived >= 2
    ids: list[int] = []
    for archive in archives:
        assert archive.name.startswith("Archive-Auto-20")
        assert archive.stat().st_size <= BOUND + GROWTH_STEP
        with sqlite3.connect(archive) as db:
            ids += [row[0] for row in db.execute("SELECT record_id FROM events ORDER BY record_id")]
        ids_in_file = [e.record_id for e in store.query_file(archive)]
        assert ids_in_file == sorted(ids_in_file) and ids_in_file
    ids += [e.record_id for e in store.query("Auto")]
    assert ids == list(range(1, TOTAL + 1))
    info = store.info("Auto")
    assert (info.written, info.refused, info.lost) == (TOTAL, 0, 0)
