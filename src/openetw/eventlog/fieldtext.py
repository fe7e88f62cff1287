"""The full-text index over a log's decoded field values (FTS5, beside the one over messages).

``field_text`` is a contentless FTS5 table keyed by ``record_id``: each event's field values
(the top-level values of its ``fields`` JSON, joined by spaces: no names, no JSON) are indexed
as the event is stored rendered or rendered later, and taken out as it is dropped. The text is
made by SQLite from the stored column itself (``json_each``), so what is taken out is exactly
what went in. A database made before the index existed gets it on open by a connection that may
write (``ensure``: made and filled from the events in one transaction), and at the latest in the
first write transaction that touches it (every writing function here makes it first when it is
missing); a reader that may not write finds it missing (``present``) and searches the messages
alone.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

__all__ = [
    "TABLE", "create", "drop_all", "drop_ids", "drop_upto", "ensure", "index_after", "index_ids", "index_rendered", "matching", "optimize",
    "present", "text_of",
]

TABLE = "field_text"
_CREATE = f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(text, content='')"
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 5, 6, 8
# the field values of ``events.fields`` as one text (NULL when it holds none)
_TEXT = "(SELECT group_concat(value, ' ') FROM json_each(CASE WHEN json_valid(events.fields) THEN events.fields ELSE '[]' END))"


def present(db: sqlite3.Connection) -> bool:
    """Whether the log's database has the field index."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None


def ensure(db: sqlite3.Connection) -> bool:
    """Make and fill the index when the database has events but no index (an older log);
    returns whether the index is there now. A connection that may not write leaves it missing."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE name IN ('events', ?)", (TABLE,))}
    if TABLE in tables or "events" not in tables:
        return TABLE in tables
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            _made(db)  # another connection may have made it meanwhile
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", 0) & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY):
            return False  # a reader, or busy: the first write transaction makes it
        raise
    return True


def _made(db: sqlite3.Connection) -> bool:
    """In a write transaction: make and fill the index when it is missing; returns whether it was
    (then every event's fields are indexed already)."""
    if present(db):
        return False
    db.execute(_CREATE)
    db.execute(f"INSERT INTO {TABLE}(rowid, text) SELECT record_id, {_TEXT} FROM events WHERE fields IS NOT NULL")
    return True


def create(db: sqlite3.Connection) -> None:
    """The (empty) index of a new log's database."""
    db.execute(_CREATE)


def index_after(db: sqlite3.Connection, record_id: int) -> None:
    """Index the fields of the events after ``record_id`` (just stored)."""
    if _made(db):
        return
    db.execute(f"INSERT INTO {TABLE}(rowid, text) SELECT record_id, {_TEXT} FROM events WHERE record_id > ? AND fields IS NOT NULL",
               (record_id,))  # fmt: skip


def text_of(fields: Any) -> tuple[bool, str | None]:
    """(known, text): the text SQLite makes of these fields once stored as JSON (``_TEXT``), made
    here when it surely is the same: a dict of strings without NUL that UTF-8 can encode,
    joined by spaces (``None`` for no fields, as ``group_concat`` of nothing). Otherwise
    ``(False, None)``: SQLite makes it from the stored column."""
    if not isinstance(fields, dict):
        return False, None
    values = list(fields.values())
    if not all(type(value) is str for value in values):
        return False, None
    if not values:
        return True, None
    text = " ".join(values)
    if "\0" in text:
        return False, None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON escapes it, SQLite reads it otherwise
        return False, None
    return True, text


def index_rendered(db: sqlite3.Connection, items: list[tuple[int, tuple[bool, str | None]]]) -> None:
    """Index the fields of these events (just rendered): (record id, ``text_of`` their fields)
    each; the text given where it is known, made by SQLite from the stored column elsewhere."""
    if _made(db) or not items:
        return
    db.executemany(f"INSERT INTO {TABLE}(rowid, text) VALUES (?, ?)", [(record_id, text) for record_id, (known, text) in items if known])
    index_ids(db, [record_id for record_id, (known, _) in items if not known])


def index_ids(db: sqlite3.Connection, record_ids: list[int]) -> None:
    """Index the fields of these events (just rendered)."""
    if _made(db) or not record_ids:
        return
    db.execute(f"INSERT INTO {TABLE}(rowid, text) SELECT record_id, {_TEXT} FROM events"
               " WHERE record_id IN (SELECT value FROM json_each(?)) AND fields IS NOT NULL", (json.dumps(record_ids),))  # fmt: skip


def drop_upto(db: sqlite3.Connection, record_id: int) -> None:
    """Take out the fields of the events up to ``record_id`` (before they are deleted)."""
    _made(db)
    db.execute(f"INSERT INTO {TABLE}({TABLE}, rowid, text) SELECT 'delete', record_id, {_TEXT} FROM events"
               " WHERE record_id <= ? AND fields IS NOT NULL", (record_id,))  # fmt: skip


def optimize(db: sqlite3.Connection) -> None:
    """Merge the index into one segment, so that what was taken out stops taking room."""
    if present(db):
        db.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('optimize')")


def drop_ids(db: sqlite3.Connection, record_ids: list[int]) -> None:
    """Take out the fields of these events (before they are deleted)."""
    _made(db)
    db.execute(f"INSERT INTO {TABLE}({TABLE}, rowid, text) SELECT 'delete', record_id, {_TEXT} FROM events"
               " WHERE record_id IN (SELECT value FROM json_each(?)) AND fields IS NOT NULL", (json.dumps(record_ids),))  # fmt: skip


def drop_all(db: sqlite3.Connection) -> None:
    """Empty the index (the log is cleared)."""
    if _made(db):
        return
    db.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('delete-all')")


def matching(db: sqlite3.Connection, match: str) -> list[int]:
    """Record ids whose field values match the FTS5 query ``match`` (none when the index is missing)."""
    if not present(db):
        return []
    return [row[0] for row in db.execute(f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH ?", (match,))]
