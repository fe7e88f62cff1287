"""The full-text index over field values: kept as events are stored, rendered, overwritten and
cleared; made for a log written before it existed; its answers equal a plain filter."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from openetw.eventlog import LogConfig, LogStore, fieldtext
from tests.eventlog.events import made_events


def found(store: LogStore, log: str, word: str) -> list[int]:
    db = store.open(log)
    try:
        return sorted(fieldtext.matching(db, f'"{word}"*'))
    finally:
        db.close()


def having(store: LogStore, log: str, value: Any) -> list[int]:
    """Record ids whose fields hold ``value``: the plain filter the index must equal."""
    return [e.record_id for e in store.query(log) if value in (e.fields or {}).values()]


def test_field_values_are_found_as_events_are_stored_rendered_overwritten_and_cleared(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application", LogConfig())
    store.append("Application", made_events(60))
    pears = having(store, "Application", "pear")
    assert 0 < len(pears) < 60 and found(store, "Application", "pear") == pears
    assert found(store, "Application", "disks") == []  # a message word is not a field value
    assert found(store, "Application", "name") == []  # nor is a field's name
    assert found(store, "Application", "42") == [43]  # the 43rd event's index field
    # rendered later: indexed then
    unrendered = made_events(10, seed=3)
    for event in unrendered:
        event.fields, event.message, event.rendered = None, None, False
    store.append("Application", unrendered)
    assert found(store, "Application", "zucchini") == []
    store.render_pending("Application", lambda e: ({"vegetable": "zucchini", "n": e.record_id}, None))
    assert found(store, "Application", "zucchini") == list(range(61, 71))
    # overwritten by a circular log making room: no longer found
    store.create("Circular", LogConfig(retention="circular", max_size=1 << 20))
    overwritten = sum(store.append("Circular", made_events(1000, seed=seed)).overwritten for seed in range(8))
    oldest = store.info("Circular").oldest_record_id
    assert overwritten > 0 and oldest is not None and oldest > 1
    assert found(store, "Circular", "pear") == having(store, "Circular", "pear") != []
    store.clear("Application")
    assert found(store, "Application", "zucchini") == found(store, "Application", "pear") == []
    store.append("Application", made_events(5, seed=4))
    assert found(store, "Application", "plum") == having(store, "Application", "plum") != []


def test_a_log_written_before_the_index_gets_it_on_open_and_a_reader_that_may_not_write_goes_on(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Old", LogConfig())
    store.append("Old", made_events(40))
    path = store.path("Old")
    with closing(sqlite3.connect(path, isolation_level=None)) as db:  # the log as the store made it before the index existed
        db.execute(f"DROP TABLE {fieldtext.TABLE}")
        assert not fieldtext.present(db) and fieldtext.matching(db, '"pear"*') == []
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # a reader that may not write
    try:
        assert fieldtext.ensure(reader) is False and not fieldtext.present(reader)
    finally:
        reader.close()
    assert found(store, "Old", "apple") == having(store, "Old", "apple") != []  # opened by a writer: made and filled
    store.append("Old", made_events(3, seed=9))
    assert found(store, "Old", "apple") == having(store, "Old", "apple")
    # missing when a write transaction comes (its open found the log busy): that transaction makes it
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(f"DROP TABLE {fieldtext.TABLE}")
        db.execute("BEGIN IMMEDIATE")
        fieldtext.index_after(db, 10**9)
        db.execute("COMMIT")
        assert sorted(fieldtext.matching(db, '"plum"*')) == having(store, "Old", "plum") != []
