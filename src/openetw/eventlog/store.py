"""Durable logs: one SQLite database (WAL mode, FTS5 over messages and field values) per log in one directory.

The shell over ``model``, ``retention`` and ``xpath``; the public API the service, ``openetw
log``, the web viewer and the fleet collector use::

    store = LogStore("/var/lib/openetw/logs")
    store.create("System", LogConfig(...))          # or ensure(); settings kept in the log
    store.append("System", [NewEvent(...), ...])     # -> AppendResult(stored, refused, ...)
    for event in store.query("System", xpath="*[System[Level<=2]]", count=10, reverse=True):
        event.record_id, event.record, event.fields, event.message, event_xml(event)
    store.info("System")                             # -> LogInfo(records, bytes, ...)
    store.logs()                                     # -> [(name, LogInfo), ...]

Files: ``<directory>/<log>.db`` (``/`` in a name written ``%4``) with its ``-wal`` and ``-shm``;
an auto-backup log's full database is renamed ``Archive-<log>-<timestamp>.db`` beside it.
Readers need no service: every method opens the database itself, so ``log query`` works while
the service is stopped, and a second process appending is serialized by SQLite's lock.

Durability: each ``append`` is one transaction, committed before it returns (``synchronous =
NORMAL``): a killed process loses nothing it appended; a power cut may lose the last commits.
Each log keeps ``written = stored + refused + lost`` in its ``meta`` table.

A writer storing the buffers of producers' pools (the service's channel sessions) names, with
each append, the pool and the last buffer's SequenceNumber (``mark``): the log keeps it in its
``stored_buffers`` table in the same transaction as the rows, so that whoever takes the pool
over after a crash between the commit and the buffers' release skips what is stored already
(``marks``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from openetw.errors import EventLogError, EventLogWriteError, InvalidArgument
from openetw.eventlog import fieldtext
from openetw.eventlog.channels import log_file_name, log_name_from_file
from openetw.eventlog.model import AppendResult, LogConfig, LogInfo, NewEvent, StoredEvent
from openetw.eventlog.render import event_node
from openetw.eventlog.rendering import Renderer
from openetw.eventlog.retention import ROW_OVERHEAD, Decision, budget, decide, event_cost, wal_pages, writer_share
from openetw.eventlog.rows import ColumnRows
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.events.xpath import Query, QueryList, condition_sql, parse_filter

__all__ = ["FILE_MODE", "RECORD_COLUMNS", "SCHEMA", "SOURCE_COLUMNS", "VARYING_COLUMNS", "LogStore", "RecordSource", "Row", "now_filetime", "row_of"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    record_id INTEGER PRIMARY KEY,
    time_created INTEGER NOT NULL,
    provider TEXT NOT NULL,
    provider_guid TEXT,
    event_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    level INTEGER NOT NULL,
    task INTEGER NOT NULL,
    opcode INTEGER NOT NULL,
    keywords INTEGER NOT NULL,
    channel TEXT NOT NULL,
    computer TEXT NOT NULL,
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    user_sid TEXT,
    uid INTEGER,
    activity_id TEXT,
    format TEXT NOT NULL,
    record BLOB NOT NULL,
    fields TEXT,
    message TEXT,
    xml TEXT,
    rendered INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS events_level_provider ON events(level, provider);
CREATE INDEX IF NOT EXISTS events_provider_id ON events(provider, event_id);
CREATE INDEX IF NOT EXISTS events_time ON events(time_created);
CREATE VIRTUAL TABLE IF NOT EXISTS messages USING fts5(message, content='events', content_rowid='record_id');
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stored_buffers(pool TEXT PRIMARY KEY, sequence INTEGER NOT NULL, losses INTEGER NOT NULL DEFAULT 0, at REAL NOT NULL);
DROP INDEX IF EXISTS events_unrendered;
"""
_COLUMNS = (
    "time_created", "provider", "provider_guid", "event_id", "version", "level", "task", "opcode", "keywords",
    "channel", "computer", "pid", "tid", "user_sid", "uid", "activity_id", "format", "record", "fields", "message", "xml", "rendered",
)  # fmt: skip
_INSERT = f"INSERT INTO events(record_id, {', '.join(_COLUMNS)}) VALUES (?, {', '.join('?' * len(_COLUMNS))})"
_INSERT_NEXT = f"INSERT INTO events({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"  # record_id: max + 1
# An ETW record stored first and rendered later: fewer values to bind per event (SQLite's binding
# costs per value), the constant columns written in the statement.
RECORD_COLUMNS = (
    "time_created", "provider", "provider_guid", "event_id", "version", "level", "task", "opcode", "keywords",
    "channel", "computer", "pid", "tid", "uid", "activity_id", "record",
)  # fmt: skip
_RECORD_VALUES = ", ".join("?" if c in RECORD_COLUMNS else {"format": "'etw'", "rendered": "0"}.get(c, "NULL") for c in _COLUMNS)
_INSERT_RECORD = f"INSERT INTO events(record_id, {', '.join(_COLUMNS)}) VALUES (?, {_RECORD_VALUES})"
_INSERT_RECORD_NEXT = f"INSERT INTO events({', '.join(_COLUMNS)}) VALUES ({_RECORD_VALUES})"
# RECORD_COLUMNS split: what one source (a provider's channel, from one writer) gives every row
# of its run, written in the statement, and what each event binds (``append_records``).
SOURCE_COLUMNS = ("provider", "provider_guid", "channel", "computer", "uid")
VARYING_COLUMNS = tuple(c for c in RECORD_COLUMNS if c not in SOURCE_COLUMNS)
_INSERT_TEXT = "INSERT INTO messages(rowid, message) SELECT record_id, message FROM events WHERE record_id > ? AND message IS NOT NULL"
_CHUNK = 4096
# Rows per multi-row insert: 256 of 16 values stay below SQLite's 32766 bound variables (999
# before 3.32).
_MULTI_ROWS = 256 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999 // len(RECORD_COLUMNS)
# Logs made before the table was: it is made on first use.
_MARKS_TABLE = ("CREATE TABLE IF NOT EXISTS stored_buffers(pool TEXT PRIMARY KEY, sequence INTEGER NOT NULL,"
                " losses INTEGER NOT NULL DEFAULT 0, at REAL NOT NULL)")  # fmt: skip
_MARK = ("INSERT INTO stored_buffers(pool, sequence, at) VALUES (?, ?, ?)"
         " ON CONFLICT(pool) DO UPDATE SET sequence = max(sequence, excluded.sequence), at = excluded.at")  # fmt: skip
_LOSS_MARK = ("INSERT INTO stored_buffers(pool, sequence, losses, at) VALUES (?, -1, ?, ?)"
              " ON CONFLICT(pool) DO UPDATE SET losses = max(losses, excluded.losses), at = excluded.at")  # fmt: skip
_WRITERS_TABLE = ("CREATE TABLE IF NOT EXISTS writers(uid INTEGER PRIMARY KEY, bytes INTEGER NOT NULL DEFAULT 0,"
                  " refused INTEGER NOT NULL DEFAULT 0, overwritten INTEGER NOT NULL DEFAULT 0)")  # fmt: skip
_WRITER_ADD = ("INSERT INTO writers(uid, bytes, refused, overwritten) VALUES (?, ?, ?, ?) ON CONFLICT(uid) DO UPDATE SET"
               " bytes = max(0, bytes + excluded.bytes), refused = refused + excluded.refused, overwritten = overwritten + excluded.overwritten")  # fmt: skip
_RECORD_AT = VARYING_COLUMNS.index("record")
_SQLITE_FULL = 13
_MESSAGE = _COLUMNS.index("message")
_FIELDS = _COLUMNS.index("fields")
_COUNTERS = ("written", "refused", "lost")
_INTEGER_COLUMNS = ("record_id", "time_created", "event_id", "version", "level", "task", "opcode", "keywords", "pid", "tid")
QUICK_CHECK_MAX = 64 << 20  # ``damage`` reads a database whole up to this size
RESERVE_BYTES = 256 << 10  # room kept to write the books on a full disk (``keep_reserve``)
FILE_MODE = 0o600  # a log's database (SQLite gives its -wal and -shm the same mode)
DIRECTORY_MODE = 0o700  # a logs directory the store makes (the machine service opens its own to 0755)
# SQLite's primary result codes of a file that is not (or no longer) a database
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
# What a log database may hold: tables and indexes (no views, no triggers: a file from elsewhere
# runs nothing when it is read); ``events`` with these columns.
_EVENT_COLUMNS = frozenset(("record_id", *_COLUMNS))


def is_damaged(error: sqlite3.Error) -> bool:
    """Whether SQLite says the file is damaged or not a database (rather than busy or denied)."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _file_sizes(path: Path) -> tuple[int, int, int]:
    """Bytes of the database, its -wal and its -shm (0 for a file that is not there)."""
    sizes = []
    for name in (str(path), str(path) + "-wal", str(path) + "-shm"):
        try:
            sizes.append(os.path.getsize(name))
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1], sizes[2]


def _is_text_error(error: sqlite3.OperationalError) -> bool:
    """Whether FTS5 refused the text of a MATCH (its syntax; ``word:`` read as a column name)."""
    message = str(error)
    return message.startswith(("fts5:", "no such column", "unknown special query", "unterminated string"))


def _create_private(path: Path) -> None:
    """Make an empty database file with ``FILE_MODE`` from the moment it exists (SQLite would
    make it 0644 less the umask, and its -wal and -shm with it)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE))
    except FileExistsError:
        pass
    except OSError as exc:
        raise EventLogError(f"cannot make the log database {path}: {exc.strerror or exc}") from None


def check_schema(db: sqlite3.Connection, path: str | os.PathLike[str]) -> None:
    """Refuse a database that is not a log's: views or triggers, ``events`` missing or not a
    table, or not with a log's columns. Reads ``sqlite_master`` only, which runs nothing."""
    try:
        objects = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        kinds = {str(name): str(kind) for kind, name, _ in objects}
        if kinds.get("events") != "table":
            raise EventLogError(f"{path} is not a log database (no table 'events')")
        for kind, name, sql in objects:
            if kind not in ("table", "index"):
                raise EventLogError(f"{path} is not a log database: it holds a {kind} ({name!r}), which a log never does")
            if kind == "table" and isinstance(sql, str) and sql.upper().startswith("CREATE VIRTUAL") and "USING FTS5" not in sql.upper():
                raise EventLogError(f"{path} is not a log database: the virtual table {name!r} is not a full-text index")
        columns = {str(row[1]) for row in db.execute("SELECT * FROM pragma_table_info('events')")}
    except sqlite3.Error as exc:
        raise EventLogError(f"cannot read the log database {path}: {exc}") from None
    missing = _EVENT_COLUMNS - columns
    if missing:
        raise EventLogError(f"{path} is not a log database: 'events' lacks {', '.join(sorted(missing))}")


class RecordSource(NamedTuple):
    """The constant columns (``SOURCE_COLUMNS``) of a run of ETW records ``append_records`` stores."""

    provider: str
    provider_guid: str | None
    channel: str
    computer: str
    uid: int | None


class _Statements(NamedTuple):
    """How a run of rows is inserted: with its first record id, with SQLite's next; its
    messages indexed (full rows) or not (records stored unrendered); ``multi_next``: ``_MULTI_ROWS``
    rows at once (one step of SQLite per so many rows, not per row: the interpreter's lock is
    taken back once per step, which costs a thread storing beside busy ones dearly)."""

    insert: str
    insert_next: str
    index_text: bool
    multi_next: str = ""
    # for runs of ``VARYING_COLUMNS`` rows none of which has an activity id: the same inserts
    # with ``activity_id`` NULL in the statement, the rows bound without that column
    # (``_without_activity``). Python's sqlite3 binds None (like bytes) only after a failed
    # adapter lookup that formats and drops an exception, about 0.3 us a value.
    no_activity: _Statements | None = None


def _multi(insert_next: str) -> str:
    values = "(" + insert_next.split(" VALUES (", 1)[1]
    return insert_next + ("," + values) * (_MULTI_ROWS - 1)


_ACTIVITY_AT = VARYING_COLUMNS.index("activity_id")


def _without_activity(rows: Sequence[Row], statements: _Statements) -> tuple[Sequence[Row], _Statements]:
    """``rows`` without their ``activity_id`` and the statements that take them so, when none
    has an activity id (rows held as columns: one C-speed count); else as they are."""
    quiet = statements.no_activity
    if quiet is None or not isinstance(rows, ColumnRows) or not rows.columns:
        return rows, statements
    activity = rows.columns[_ACTIVITY_AT]
    if activity.count(None) != len(activity):
        return rows, statements
    return ColumnRows(rows.columns[:_ACTIVITY_AT] + rows.columns[_ACTIVITY_AT + 1 :]), quiet


_FULL = _Statements(_INSERT, _INSERT_NEXT, True)
_RECORDS = _Statements(_INSERT_RECORD, _INSERT_RECORD_NEXT, False, _multi(_INSERT_RECORD_NEXT))


def _literal(value: str | int | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(int(value))
    if "\0" in value:
        raise InvalidArgument(f"a NUL character in {value!r}")
    return "'" + value.replace("'", "''") + "'"


def _source_statements(source: RecordSource, *, activity: bool = True) -> _Statements:
    constants = dict(zip(SOURCE_COLUMNS, (_literal(v) for v in source), strict=True))
    if not activity:
        constants["activity_id"] = "NULL"
    values = ", ".join(
        constants.get(c) or ("?" if c in RECORD_COLUMNS else {"format": "'etw'", "rendered": "0"}.get(c, "NULL")) for c in _COLUMNS
    )  # fmt: skip
    insert_next = f"INSERT INTO events({', '.join(_COLUMNS)}) VALUES ({values})"
    return _Statements(f"INSERT INTO events(record_id, {', '.join(_COLUMNS)}) VALUES (?, {values})", insert_next, False, _multi(insert_next),
                       _source_statements(source, activity=False) if activity else None)  # fmt: skip


def _json_encoder() -> Callable[[Any], str]:
    """What ``json.dumps(value, default=str)`` gives, by one C encoder made once when there is one
    (``JSONEncoder.encode`` makes a new one per call: half its cost for a small dict). Circular
    containers are not looked for: rendered fields are trees."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(default=str).encode
    encode = make(None, str, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    return lambda value: "".join(encode(value, 0))


_json = _json_encoder()
_Rendered = tuple[str | None, str | None, int, tuple[bool, str | None]]  # (fields JSON, message, record id, fieldtext.text_of)


def _rendered_row(record_id: int, fields: dict[str, Any] | None, message: str | None) -> _Rendered:
    if fields is None:
        return (None, message, record_id, (False, None))
    return (_json(fields), message, record_id, fieldtext.text_of(fields))


def now_filetime() -> int:
    return int(time.time() * 10_000_000) + UNIX_EPOCH_FILETIME


def _signed(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


Row = tuple[Any, ...]  # one event as the values of ``_COLUMNS``, in order (``row_of``)


def row_of(event: NewEvent) -> Row:
    """``event`` as the row ``append_rows`` takes."""
    return _row(event)


def _row(event: NewEvent) -> Row:
    return (
        event.time_created, event.provider, event.provider_guid, event.event_id, event.version, event.level, event.task,
        event.opcode, _signed(event.keywords), event.channel, event.computer, event.pid, event.tid, event.user_sid,
        event.uid, event.activity_id, event.format, event.record,
        json.dumps(event.fields, default=str) if event.fields is not None else None, event.message, event.xml, int(event.rendered),
    )  # fmt: skip


def _stored(row: sqlite3.Row, log: str) -> StoredEvent:
    """The event of a row; ``ValueError`` (or ``TypeError``) when the row is not an event's (a
    damaged or made-up database)."""
    fields = row["fields"]
    record = row["record"]
    if not isinstance(record, bytes):
        raise ValueError(f"record {row['record_id']!r} holds no record bytes")
    if not all(isinstance(row[name], int) for name in _INTEGER_COLUMNS):
        raise ValueError(f"record {row['record_id']!r} has a System fact that is not a number")
    return StoredEvent(
        time_created=row["time_created"], provider=row["provider"], event_id=row["event_id"], record=record,
        format=row["format"], provider_guid=row["provider_guid"], version=row["version"], level=row["level"],
        task=row["task"], opcode=row["opcode"], keywords=row["keywords"] & 0xFFFFFFFFFFFFFFFF, channel=row["channel"],
        computer=row["computer"], pid=row["pid"], tid=row["tid"], user_sid=row["user_sid"], uid=row["uid"],
        activity_id=row["activity_id"], fields=json.loads(fields) if fields is not None else None,
        message=row["message"], xml=row["xml"], rendered=bool(row["rendered"]), record_id=row["record_id"], log=log,
    )  # fmt: skip


class LogStore:
    """The logs in one directory (see the module's docstring)."""

    def __init__(self, directory: str | os.PathLike[str], *, renderer: Renderer | None = None, keep_open: bool = False) -> None:
        """``renderer`` fills in ``fields`` and ``message`` of events stored unrendered as they
        are read (``rendering.installed_renderer()`` renders with the installed manifests).
        ``keep_open``: keep one connection per log between calls (a writer appending often:
        the last connection to close folds the write-ahead file into the database, a cost per
        call otherwise); ``close()`` ends them. One thread per store then."""
        self.directory = Path(directory)
        self.renderer = renderer
        self.keep_open = keep_open
        self._open: dict[Path, sqlite3.Connection] = {}
        self._identities: dict[Path, tuple[int, int] | None] = {}  # (device, inode) of each kept connection's file
        self._source_cache: dict[RecordSource, _Statements] = {}
        self.skipped = 0  # rows read that held no event (a damaged database): left out, counted
        # log -> [written, refused, lost] of appends that failed and whose books could not be
        # written either (a full disk): added to the log's books at its next write, and to ``info``
        self.unsaved: dict[str, list[int]] = {}
        self.reserve: Path | None = None
        self._reserve_size = RESERVE_BYTES

    # -- files ---------------------------------------------------------------------------------
    def path(self, log: str) -> Path:
        if not log or log.startswith(".") or "\0" in log:
            raise InvalidArgument(f"not a log name: {log!r}")
        return self.directory / log_file_name(log)

    def exists(self, log: str) -> bool:
        return self.path(log).is_file()

    def names(self) -> list[str]:
        """Every log, by name (archives left out)."""
        if not self.directory.is_dir():
            return []
        return sorted(
            log_name_from_file(entry.name)
            for entry in self.directory.iterdir()
            if entry.name.endswith(".db") and not entry.name.startswith("Archive-")
        )

    def logs(self) -> list[tuple[str, LogInfo]]:
        return [(name, self.info(name)) for name in self.names()]

    def close(self) -> None:
        """Close the connections ``keep_open`` kept."""
        for db in self._open.values():
            db.close()
        self._open.clear()

    def _release(self, db: sqlite3.Connection) -> None:
        if db not in self._open.values():
            db.close()

    def _forget(self, path: Path) -> None:
        db = self._open.pop(path, None)
        if db is not None:
            db.close()

    def _connect(self, path: Path, *, create: bool = False) -> sqlite3.Connection:
        kept = self._open.get(path)
        if kept is not None:
            if _identity(path) == self._identities.get(path):  # not replaced (an auto-backup by another store)
                if kept.in_transaction:
                    kept.execute("ROLLBACK")
                return kept
            self._forget(path)
        db = self._connect_new(path, create=create)
        if self.keep_open:
            self._open[path] = db
            self._identities[path] = _identity(path)
        return db

    def _connect_new(self, path: Path, *, create: bool = False) -> sqlite3.Connection:
        if not create and not path.is_file():
            raise EventLogError(f"no log {log_name_from_file(path.name)!r} in {self.directory}")
        if create:
            _create_private(path)
        try:
            db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot open the log database {path}: {exc}") from None
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA trusted_schema=OFF")  # a directory's log may be anyone's file: its schema runs nothing
            if not create:
                check_schema(db, path)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA cache_size=-8192")  # 8 MiB: more of a large log's indexes stay in memory
            fieldtext.ensure(db)  # a log made before the field index gets it
        except sqlite3.Error as exc:
            db.close()
            raise EventLogError(f"cannot open the log database {path}: {exc}") from None
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def open_foreign(path: str | os.PathLike[str]) -> sqlite3.Connection:
        """A read-only connection to a log database named by path (an archive, a copy, another
        directory's log), trusted only as far as it should be: a regular file owned by root or
        the caller, opened read-only with ``trusted_schema`` off, its schema a log's (no views or
        triggers to run). A file without a write-ahead file is opened immutable, so the read
        writes nothing beside it."""
        target = os.path.abspath(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise EventLogError(f"cannot open the log database {path}: {exc.strerror or exc}") from None
        try:
            status = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(status.st_mode):
            raise EventLogError(f"{path} is not a regular file")
        if status.st_uid not in (0, os.geteuid()):
            raise EventLogError(f"{path} belongs to uid {status.st_uid}: a log database is read only when it is root's or yours"
                                " (copy it to read it)")  # fmt: skip
        live = os.path.exists(target + "-wal")
        uri = f"file:{quote(target)}?mode=ro" + ("" if live else "&immutable=1")
        try:
            db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA trusted_schema=OFF")
            db.execute("PRAGMA query_only=ON")
            db.execute("PRAGMA cell_size_check=ON")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot open the log database {path}: {exc}") from None
        try:
            check_schema(db, path)
        except BaseException:
            db.close()
            raise
        return db

    def open(self, log: str) -> sqlite3.Connection:
        """A connection to the log's database (for readers that query it themselves)."""
        return self._connect(self.path(log))

    # -- settings ------------------------------------------------------------------------------
    def create(self, log: str, config: LogConfig | None = None, *, replace: bool = False) -> LogConfig:
        """Make the log (``replace``: its settings too, when it exists); returns its settings."""
        config = config or LogConfig()
        path = self.path(log)
        self.directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        existed = path.is_file()
        db = self._connect(path, create=True)
        try:
            return self._create(db, log, config, existed, replace)
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot make the log {log!r} in {path}: {exc}") from None
        finally:
            self._release(db)

    def _create(self, db: sqlite3.Connection, log: str, config: LogConfig, existed: bool, replace: bool) -> LogConfig:
        if not existed:
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # free pages can go back to the file system (``_fit``)
        db.executescript(SCHEMA)
        fieldtext.create(db)
        db.execute("BEGIN IMMEDIATE")
        text = self._meta(db, "config")
        if existed and not replace and text is not None:
            db.execute("COMMIT")
            return LogConfig.from_json(json.loads(text))
        self._set_meta(db, "config", config.dumps())
        if self._meta(db, "log_id") is None:
            self._set_meta(db, "log_id", uuid.uuid4().hex[:16])
            for counter in _COUNTERS:
                self._set_meta(db, counter, "0")
        self._tune(db, config)
        db.execute("COMMIT")
        return config

    def ensure(self, log: str, config: LogConfig | None = None) -> LogConfig:
        """The log's settings, making it with ``config`` first when it does not exist."""
        return self.config(log) if self.exists(log) else self.create(log, config)

    def config(self, log: str) -> LogConfig:
        db = self.open(log)
        try:
            text = self._meta(db, "config")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return LogConfig.from_json(json.loads(text)) if text else LogConfig()

    def set_config(self, log: str, config: LogConfig) -> LogConfig:
        """New settings (``wevtutil sl``); a shrunk bound applies at the next append."""
        db = self.open(log)
        try:
            db.execute("BEGIN IMMEDIATE")
            self._set_meta(db, "config", config.dumps())
            self._tune(db, config)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot write the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return config

    @staticmethod
    def _tune(db: sqlite3.Connection, config: LogConfig) -> None:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        pages = wal_pages(config.max_size, page)
        db.execute(f"PRAGMA wal_autocheckpoint={pages}")
        db.execute(f"PRAGMA journal_size_limit={pages * page}")

    @staticmethod
    def _meta(db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _set_meta(db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def _add_counter(self, db: sqlite3.Connection, key: str, amount: int) -> None:
        if amount:
            db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = ?", (amount, key))

    # -- writing -------------------------------------------------------------------------------
    def append(self, log: str, events: Iterable[NewEvent], *, lost: int = 0) -> AppendResult:
        """Store ``events`` in order as the log's retention allows, in one transaction per
        database; ``lost``: events counted lost on their way (added to ``written`` and ``lost``)."""
        return self.append_rows(log, [_row(event) for event in events], lost=lost)

    def append_rows(self, log: str, rows: list[Row], *, lost: int = 0, records: bool = False, refused: int = 0,
                    mark: tuple[str, int] | None = None, loss_mark: tuple[str, int] | None = None) -> AppendResult:  # fmt: skip
        """``append`` of events already made rows (``row_of``, or tuples built in that order
        by a writer that stores many: no event object per event). ``records``: the rows hold
        ``RECORD_COLUMNS`` only, ETW records stored unrendered (the cheapest to store).
        ``refused``: events refused on their way, counted in the same transaction; ``mark``:
        (pool, buffer SequenceNumber) of the last buffer these rows come from, kept with them
        (see ``marks``); ``loss_mark``: (pool, its losses counted so far, these included)."""
        return self._append(log, [(_RECORDS if records else _FULL, rows)], lost=lost, refused=refused, mark=mark, loss_mark=loss_mark)

    def append_records(self, log: str, runs: list[tuple[RecordSource, Sequence[Row]]], *, refused: int = 0,
                       mark: tuple[str, int] | None = None, marks: Sequence[tuple[str, int]] = ()) -> AppendResult:  # fmt: skip
        """``append_rows`` of ETW records stored unrendered, in runs that share their
        ``SOURCE_COLUMNS`` (written in the statement, not bound per event): each row holds
        ``VARYING_COLUMNS`` only. The cheapest way to store. ``marks``: more marks (rows of
        buffers of several pools, or several drains of one), each kept as ``mark`` is."""
        cache = self._source_cache
        return self._append(log, [(cache.get(source) or cache.setdefault(source, _source_statements(source)), rows) for source, rows in runs],
                            refused=refused, mark=mark, marks=marks, writers=[source.uid for source, _ in runs])  # fmt: skip

    def _append(self, log: str, runs: list[tuple[_Statements, Sequence[Row]]], *, lost: int = 0, refused: int = 0,
                mark: tuple[str, int] | None = None, loss_mark: tuple[str, int] | None = None,
                writers: list[int | None] | None = None, marks: Sequence[tuple[str, int]] = ()) -> AppendResult:  # fmt: skip
        """``writers``: the uid whose events each run holds (``VARYING_COLUMNS`` rows), held to
        its share of the log unless root or the log's owner."""
        if refused < 0:
            raise InvalidArgument(f"refused must not be negative, not {refused}")
        if len(self._source_cache) > 4096:
            self._source_cache.clear()
        result = AppendResult()
        path = self.path(log)
        db = self._connect(path)
        total = sum(len(rows) for _, rows in runs)
        earlier = self.unsaved.pop(log, [0, 0, 0])
        committed = False
        try:
            config = self._config_of(db)
            db.execute(f"PRAGMA wal_autocheckpoint={wal_pages(config.max_size, db.execute('PRAGMA page_size').fetchone()[0])}")
            db.execute("BEGIN IMMEDIATE")
            self._add_counter(db, "written", total + lost + refused + earlier[0])
            self._add_counter(db, "lost", lost + earlier[2])
            self._add_counter(db, "refused", refused + earlier[1])
            result.refused += refused
            for index, (statements, batch) in enumerate(runs):
                uid = writers[index] if writers is not None else None
                if uid is not None and uid not in (0, config.owner) and batch:
                    batch = self._within_share(db, config, uid, batch, result)
                stored_before = result.stored
                position = 0
                while position < len(batch):
                    position = self._store_from(db, log, config, batch, position, result, statements)
                    if position < len(batch):  # auto-backup: archive this database, go on in a new one
                        db.execute("COMMIT")
                        self._release(db)
                        result.archives.append(str(self._archive(log, config)))
                        db = self._connect(path)
                        db.execute("BEGIN IMMEDIATE")
                if uid is not None and uid not in (0, config.owner):
                    held = sum(event_cost(len(row[_RECORD_AT])) for row in batch[: result.stored - stored_before])
                    db.execute(_WRITER_ADD, (uid, held, 0, 0))
            self._set_meta(db, "last_write", datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"))
            pool_marks = [mark, *marks] if mark is not None else list(marks)
            if pool_marks or loss_mark is not None:
                db.execute(_MARKS_TABLE)
            for pool, sequence in pool_marks:
                db.execute(_MARK, (pool, sequence, time.time()))
            if loss_mark is not None:
                db.execute(_LOSS_MARK, (loss_mark[0], loss_mark[1], time.time()))
            db.execute("COMMIT")
            committed = True
            self._fit(db, path, config)
            if self.reserve is not None:
                self._make_reserve()
        except sqlite3.Error as exc:
            if committed:  # stored; only giving room back failed
                raise EventLogError(f"cannot shrink the log {log!r}: {exc}") from None
            try:
                if db.in_transaction:
                    db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite rolled back already
            # not stored: every event of this append is counted lost (refused ones refused), in
            # the log's books when they can be written, else at its next write
            missed = total - (result.stored if result.archives else 0)
            books = [earlier[0] + missed + lost + refused, earlier[1] + refused, earlier[2] + missed + lost]
            self._save_books(db, log, books)
            raise EventLogWriteError(f"cannot write the log {log!r}: {exc}; {missed + lost} events counted lost", missed + lost) from None
        except BaseException:
            if not committed:  # the earlier books were not written: kept for the next write
                kept = self.unsaved.setdefault(log, [0, 0, 0])
                for index, value in enumerate(earlier):
                    kept[index] += value
            raise
        finally:
            self._release(db)
        return result

    def _save_books(self, db: sqlite3.Connection, log: str, books: list[int]) -> None:
        """Counters of a failed append into the log's books, or kept for its next write (and
        ``info``). On a full disk the reserve (``keep_reserve``) gives the room for them."""
        for attempt in range(2):
            try:
                if attempt and not self._spend_reserve():
                    break
                db.execute("BEGIN IMMEDIATE")
                self._add_counter(db, "written", books[0])
                self._add_counter(db, "refused", books[1])
                self._add_counter(db, "lost", books[2])
                db.execute("COMMIT")
                return
            except sqlite3.Error:
                try:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
        kept = self.unsaved.setdefault(log, [0, 0, 0])
        for index, value in enumerate(books):
            kept[index] += value

    def keep_reserve(self, path: Path, size: int = RESERVE_BYTES) -> None:
        """Keep ``size`` bytes in a file at ``path`` (on the logs' file system): on a full disk
        it is given up to write the books of the events that could not be stored, and made
        again once a write succeeds."""
        self.reserve, self._reserve_size = path, size
        self._make_reserve()

    def _make_reserve(self) -> None:
        if self.reserve is None or self.reserve.exists():
            return
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, self._reserve_size)
        except OSError:  # no room for it yet
            os.close(fd)
            fd = -1
            try:
                os.unlink(self.reserve)
            except OSError:
                pass
        finally:
            if fd >= 0:
                os.close(fd)

    def _spend_reserve(self) -> bool:
        if self.reserve is None:
            return False
        try:
            os.unlink(self.reserve)
        except OSError:
            return False
        return True

    def _within_share(self, db: sqlite3.Connection, config: LogConfig, uid: int, batch: Sequence[Row], result: AppendResult) -> Sequence[Row]:
        """The rows of ``batch`` (``VARYING_COLUMNS``) a writer other than root and the owner may
        store within its share of the log: in a circular log its newest, its own oldest events
        dropped to make room (``overwritten``); else what fits, the rest refused. Both counted
        for the writer."""
        db.execute(_WRITERS_TABLE)
        share = writer_share(config.max_size)
        row = db.execute("SELECT bytes FROM writers WHERE uid = ?", (uid,)).fetchone()
        held = int(row[0]) if row is not None else 0
        costs = [event_cost(len(row[_RECORD_AT])) for row in batch]
        if held + sum(costs) <= share:
            return batch
        if config.retention == "circular":
            keep, room = 0, share
            while keep < len(batch) and costs[len(batch) - 1 - keep] <= room:
                room -= costs[len(batch) - 1 - keep]
                keep += 1
            passed = len(batch) - keep  # stored and overwritten at once by the writer's own newer events
            result.stored += passed
            result.overwritten += passed
            dropped = self._drop_writer_oldest(db, uid, held - room) if held > room else 0
            result.overwritten += dropped
            db.execute(_WRITER_ADD, (uid, 0, 0, passed + dropped))
            return batch[passed:]
        fits, room = 0, share - held
        while fits < len(batch) and costs[fits] <= room:
            room -= costs[fits]
            fits += 1
        refused = len(batch) - fits
        self._add_counter(db, "refused", refused)
        result.refused += refused
        db.execute(_WRITER_ADD, (uid, 0, refused, 0))
        return batch[:fits]

    def _drop_writer_oldest(self, db: sqlite3.Connection, uid: int, need: int) -> int:
        """Drop the oldest events of ``uid`` until ``need`` bytes of its share are free; returns how many."""
        ids: list[int] = []
        freed = 0
        cursor = db.execute("SELECT record_id, 2 * length(record) + ? FROM events WHERE uid = ? ORDER BY record_id", (ROW_OVERHEAD, uid))
        while freed < need:
            rows = cursor.fetchmany(512)
            if not rows:
                break
            for record_id, cost in rows:
                ids.append(record_id)
                freed += cost
                if freed >= need:
                    break
        cursor.close()
        for start in range(0, len(ids), 4096):
            chunk = json.dumps(ids[start : start + 4096])
            db.execute("INSERT INTO messages(messages, rowid, message) SELECT 'delete', record_id, message FROM events"
                       " WHERE record_id IN (SELECT value FROM json_each(?)) AND message IS NOT NULL", (chunk,))  # fmt: skip
            fieldtext.drop_ids(db, ids[start : start + 4096])
            db.execute("DELETE FROM events WHERE record_id IN (SELECT value FROM json_each(?))", (chunk,))
        db.execute(_WRITER_ADD, (uid, -freed, 0, 0))
        return len(ids)

    def _fit(self, db: sqlite3.Connection, path: Path, config: LogConfig) -> None:
        """After a commit: a write-ahead file past its share of the bound is folded into the
        database, and a database file past the bound (free pages left by dropped events, a
        bound lowered) gives its free pages back, so that the files hold the bound on disk."""
        page = db.execute("PRAGMA page_size").fetchone()[0]
        files = _file_sizes(path)
        if files[1] > wal_pages(config.max_size, page) * page or sum(files) > config.max_size:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            files = _file_sizes(path)
        if sum(files) <= config.max_size or not db.execute("PRAGMA freelist_count").fetchone()[0]:
            return
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a log made before: rebuilt once, then given back page by page
            db.execute("VACUUM")
        else:
            db.execute("PRAGMA incremental_vacuum").fetchall()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def marks(self, log: str) -> dict[str, int]:
        """Pool -> the SequenceNumber of the last of its buffers whose events this log holds
        (``append_rows``' ``mark``)."""
        db = self.open(log)
        try:
            return {str(pool): int(sequence) for pool, sequence in db.execute("SELECT pool, sequence FROM stored_buffers")}
        except sqlite3.OperationalError:  # a log made before the table was, never marked
            return {}
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)

    def mark(self, log: str, pool: str) -> tuple[int, int]:
        """(SequenceNumber of the last buffer of ``pool`` this log holds, the pool's losses
        counted here so far): (-1, 0) when the log has no mark for it."""
        db = self.open(log)
        try:
            row = db.execute("SELECT sequence, losses FROM stored_buffers WHERE pool = ?", (pool,)).fetchone()
        except sqlite3.OperationalError:  # a log made before the table was, never marked
            row = None
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return (-1, 0) if row is None else (int(row[0]), int(row[1]))

    def forget_marks(self, log: str, pools: Iterable[str] = (), *, keep: int | None = None) -> int:
        """Drop the marks of ``pools`` (pools nobody will hand over any more), and with ``keep``
        all but the ``keep`` newest. Returns how many were dropped."""
        names = list(pools)
        db = self.open(log)
        try:
            db.execute(_MARKS_TABLE)
            db.execute("BEGIN IMMEDIATE")
            dropped = sum(db.execute("DELETE FROM stored_buffers WHERE pool = ?", (name,)).rowcount for name in names)
            if keep is not None:
                dropped += db.execute(
                    "DELETE FROM stored_buffers WHERE pool NOT IN (SELECT pool FROM stored_buffers ORDER BY at DESC, rowid DESC LIMIT ?)", (max(0, keep),)
                ).rowcount  # fmt: skip
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot write the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return int(dropped)

    def note_lost(self, log: str, count: int, *, loss_mark: tuple[str, int] | None = None) -> None:
        """Events meant for ``log`` that never reached it (``written`` and ``lost`` grow);
        ``loss_mark``: (pool, its losses counted so far, these included), kept with them."""
        if count:
            self.append_rows(log, [], lost=count, loss_mark=loss_mark)

    def note_refused(self, log: str, count: int) -> None:
        """Events refused before they reached the store (a writer the log's access refuses)."""
        if count <= 0:
            return
        db = self.open(log)
        try:
            db.execute("BEGIN IMMEDIATE")
            self._add_counter(db, "written", count)
            self._add_counter(db, "refused", count)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot write the log {log!r}: {exc}") from None
        finally:
            self._release(db)

    def _config_of(self, db: sqlite3.Connection) -> LogConfig:
        text = self._meta(db, "config")
        return LogConfig.from_json(json.loads(text)) if text else LogConfig()

    @staticmethod
    def _used(db: sqlite3.Connection) -> int:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
        return int(pages * page)

    def _insert(self, db: sqlite3.Connection, rows: Sequence[Row], statements: _Statements = _FULL) -> None:
        """Insert with the next record ids (ids never go back, even after a clear): the first
        row with its id when it is past SQLite's next, the others take max + 1 from SQLite."""
        if not rows:
            return
        last = db.execute("SELECT coalesce(max(record_id), 0) FROM events").fetchone()[0]
        first = max(last + 1, int(self._meta(db, "next_record_id") or 1))
        rows, statements = _without_activity(rows, statements)
        insert, insert_next, multi = statements.insert, statements.insert_next, statements.multi_next
        rest = rows
        if first != last + 1:
            db.execute(insert, (first, *rows[0]))
            rest = rows[1:]
        if multi and len(rest) >= _MULTI_ROWS:
            whole = len(rest) // _MULTI_ROWS * _MULTI_ROWS
            if isinstance(rest, ColumnRows):  # the parameters laid out column by column, no tuple per row
                db.executemany(multi, (rest.flat(i, i + _MULTI_ROWS) for i in range(0, whole, _MULTI_ROWS)))
            else:
                db.executemany(multi, (tuple(chain.from_iterable(rest[i : i + _MULTI_ROWS])) for i in range(0, whole, _MULTI_ROWS)))
            rest = rest[whole:]
        db.executemany(insert_next, rest)
        if statements.index_text and any(row[_MESSAGE] is not None for row in rows):
            db.execute(_INSERT_TEXT, (first - 1,))
        if statements.index_text and any(row[_FIELDS] is not None for row in rows):
            fieldtext.index_after(db, first - 1)
        self._set_meta(db, "next_record_id", str(first + len(rows)))

    def _store_from(self, db: sqlite3.Connection, log: str, config: LogConfig, batch: Sequence[Row], start: int, result: AppendResult,
                    statements: _Statements = _FULL) -> int:  # fmt: skip
        """Store from ``batch[start:]``; returns where it stopped (the end, or where an auto-backup
        log is full)."""
        page = db.execute("PRAGMA page_size").fetchone()[0]
        limit = budget(config.max_size, page)
        position = start
        while position < len(batch):
            chunk = batch[position : position + _CHUNK]
            if config.retention == "circular":  # make room first: the files never pass the bound
                result.overwritten += self._drop_oldest(db, limit - self._estimate(db, len(chunk)))
            db.execute("SAVEPOINT chunk")
            self._insert(db, chunk, statements)
            decision = decide(config.retention, self._used(db), limit)
            if decision is Decision.WRITE:
                db.execute("RELEASE chunk")
                result.stored += len(chunk)
                position += len(chunk)
                continue
            if decision is Decision.OVERWRITE:
                db.execute("RELEASE chunk")
                result.stored += len(chunk)
                position += len(chunk)
                result.overwritten += self._drop_oldest(db, limit)
                continue
            # retain / autobackup: only what fits, one event at a time
            db.execute("ROLLBACK TO chunk")
            db.execute("RELEASE chunk")
            fitted = 0
            for event in chunk:
                db.execute("SAVEPOINT one")
                self._insert(db, [event], statements)
                if self._used(db) > limit:
                    db.execute("ROLLBACK TO one")
                    db.execute("RELEASE one")
                    break
                db.execute("RELEASE one")
                fitted += 1
            result.stored += fitted
            position += fitted
            if decision is Decision.ARCHIVE:
                if fitted == 0 and db.execute("SELECT count(*) FROM events").fetchone()[0] == 0:
                    # one event larger than the whole log: refused, even by an auto-backup log
                    self._add_counter(db, "refused", 1)
                    result.refused += 1
                    position += 1
                    continue
                return position
            refused = len(batch) - position
            self._add_counter(db, "refused", refused)
            result.refused += refused
            return len(batch)
        return position

    def _estimate(self, db: sqlite3.Connection, events: int) -> int:
        """Bytes ``events`` more events will take, by the log's average so far."""
        count = self._count(db)
        if count < 64:
            return events * 1024
        return int(self._used(db) / count * events * 1.25)

    @staticmethod
    def _count(db: sqlite3.Connection) -> int:
        """The events in the log. Their record ids run without a gap (appends take the next id,
        drops take the oldest, a clear takes all) unless a writer's own oldest were dropped
        (``_drop_writer_oldest``, only where the ``writers`` table is): then they are counted,
        which reads a whole index; else the first and last ids say it at once."""
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'writers'").fetchone() is not None:
            return int(db.execute("SELECT count(*) FROM events").fetchone()[0])
        first, last = db.execute("SELECT (SELECT min(record_id) FROM events), (SELECT max(record_id) FROM events)").fetchone()
        return 0 if first is None else int(last - first + 1)

    def _drop_oldest(self, db: sqlite3.Connection, limit: int) -> int:
        """Circular: drop the oldest events until the log fits ``limit``; returns how many."""
        dropped = 0
        merged = False
        while self._used(db) > limit:
            total = self._count(db)
            if not total:
                break
            share = max(1, min(total, int(total * (1 - limit / max(self._used(db), 1))) + 16))
            last = db.execute("SELECT record_id FROM events ORDER BY record_id LIMIT 1 OFFSET ?", (share - 1,)).fetchone()[0]
            db.execute(
                "INSERT INTO messages(messages, rowid, message) SELECT 'delete', record_id, message FROM events"
                " WHERE record_id <= ? AND message IS NOT NULL", (last,))  # fmt: skip
            fieldtext.drop_upto(db, last)
            self._writers_drop_upto(db, last)
            dropped += db.execute("DELETE FROM events WHERE record_id <= ?", (last,)).rowcount
            if share > total // 4 and not merged:
                # a large drop (a lowered bound): the full-text indexes keep what was taken out
                # until their segments merge; merged now, it stops counting against the bound
                merged = True
                db.execute("INSERT INTO messages(messages) VALUES ('optimize')")
                fieldtext.optimize(db)
        return dropped

    @staticmethod
    def _writers_drop_upto(db: sqlite3.Connection, record_id: int) -> None:
        """The writers' shares less their events up to ``record_id`` (about to be dropped)."""
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'writers'").fetchone() is None:
            return
        held = db.execute(
            "SELECT uid, 2 * sum(length(record)) + count(*) * ? FROM events WHERE record_id <= ? AND uid IN (SELECT uid FROM writers) GROUP BY uid",
            (ROW_OVERHEAD, record_id)).fetchall()  # fmt: skip
        db.executemany(_WRITER_ADD, [(uid, -int(cost), 0, 0) for uid, cost in held])

    def _archive(self, log: str, config: LogConfig) -> Path:
        """Auto-backup: the full database becomes ``Archive-<log>-<time>.db``; a new log begins
        with the same settings, record ids and counters going on."""
        path = self.path(log)
        db = self._connect(path)
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            meta = {row[0]: row[1] for row in db.execute("SELECT key, value FROM meta")}
        finally:
            self._release(db)
        stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")[:-3]
        target = self.directory / f"Archive-{log_file_name(log)[:-3]}-{stamp}.db"
        counter = 1
        while target.exists():
            counter += 1
            target = target.with_name(f"Archive-{log_file_name(log)[:-3]}-{stamp}-{counter}.db")
        # the new database made whole beside, then put in place: a reader finds the log missing
        # for two renames at most, never half made
        fresh = path.with_name(f".{path.name}.new")
        for name in (str(fresh), str(fresh) + "-wal", str(fresh) + "-shm"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
        db = self._connect_new(fresh, create=True)
        try:
            self._create(db, log, config, False, True)
            db.execute("BEGIN IMMEDIATE")
            for key, value in meta.items():
                if key != "last_write":
                    self._set_meta(db, key, value)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot begin the log {log!r} anew: {exc}") from None
        finally:
            db.close()
        self._forget(path)
        os.replace(path, target)
        for suffix in ("-wal", "-shm"):
            try:
                os.unlink(str(path) + suffix)
            except FileNotFoundError:
                pass
        os.replace(fresh, path)
        return target

    def render_pending(self, log: str, renderer: Renderer, limit: int = 2000) -> int:
        """Render up to ``limit`` events stored unrendered (oldest first): their fields and
        message are saved and their message indexed. Returns how many were rendered."""
        db = self.open(log)
        try:
            start = int(self._meta(db, "render_from") or 0)
            updates = self._rendered(db, log, renderer, start, limit)
            if not updates:
                self._note_rendered(db, start)
                return 0
            config = self._config_of(db)
            room = budget(config.max_size, db.execute("PRAGMA page_size").fetchone()[0])
            db.execute("BEGIN IMMEDIATE")
            self._save_rendered(db, updates)
            if self._used(db) > room:  # what rendering adds counts against the bound too
                if config.retention == "circular":
                    self._drop_oldest(db, room)
                else:  # a full log renders what fits; readers render the rest as they read them
                    db.execute("ROLLBACK")
                    db.execute("BEGIN IMMEDIATE")
                    for update in updates:
                        db.execute("SAVEPOINT one")
                        self._save_rendered(db, [update])
                        if self._used(db) > room:
                            db.execute("ROLLBACK TO one")
                            db.execute("RELEASE one")
                            break
                        db.execute("RELEASE one")
            self._set_meta(db, "render_from", str(updates[-1][2] + 1))
            db.execute("COMMIT")
            self._fit(db, self.path(log), config)
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot render in the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return len(updates)

    @staticmethod
    def _rendered(db: sqlite3.Connection, log: str, renderer: Renderer, start: int, limit: int) -> list[_Rendered]:
        """(fields as JSON, message, record id, their fields' text: ``fieldtext.text_of``) of up
        to ``limit`` unrendered events from ``start`` on. A renderer that renders many ETW
        records at once (``records``, as ``rendering.EtwRenderer``) is given their records
        alone when every one is an ETW record; otherwise each event is read whole and rendered
        by itself."""
        select = "SELECT {} FROM events WHERE record_id >= ? AND rendered = 0 ORDER BY record_id LIMIT ?"
        many = getattr(renderer, "records", None)
        if many is not None:
            found = db.execute(select.format("record_id, format, record"), (start, limit)).fetchall()
            if all(form == "etw" and isinstance(record, bytes) for _, form, record in found):
                rendered = many([record for _, _, record in found])
                return [_rendered_row(record_id, fields, message) for (record_id, _, _), (fields, message) in zip(found, rendered, strict=True)]
        updates = []
        for row in db.execute(select.format("*"), (start, limit)).fetchall():
            event = _stored(row, log)
            fields, message = renderer(event)
            updates.append(_rendered_row(event.record_id, fields, message))
        return updates

    @staticmethod
    def _save_rendered(db: sqlite3.Connection, updates: list[_Rendered]) -> None:
        db.executemany("UPDATE events SET fields = ?, message = ?, rendered = 1 WHERE record_id = ? AND rendered = 0",
                       [(fields, message, rid) for fields, message, rid, _ in updates])  # fmt: skip
        db.executemany("INSERT INTO messages(rowid, message) VALUES (?, ?)", [(rid, message) for _, message, rid, _ in updates if message is not None])
        fieldtext.index_rendered(db, [(rid, text) for fields, _, rid, text in updates if fields is not None])

    def _note_rendered(self, db: sqlite3.Connection, start: int) -> None:
        """Nothing unrendered from ``start`` on: the next render begins at the end."""
        db.execute("BEGIN IMMEDIATE")  # what another connection appended meanwhile counts too
        first = db.execute("SELECT min(record_id) FROM events WHERE record_id >= ? AND rendered = 0", (start,)).fetchone()[0]
        end = first if first is not None else db.execute("SELECT coalesce(max(record_id), 0) FROM events").fetchone()[0] + 1
        if end > start:
            self._set_meta(db, "render_from", str(end))
        db.execute("COMMIT")

    def pending(self, log: str) -> int:
        """Events stored unrendered."""
        db = self.open(log)
        try:
            start = int(self._meta(db, "render_from") or 0)
            return int(db.execute("SELECT count(*) FROM events WHERE record_id >= ? AND rendered = 0", (start,)).fetchone()[0])
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)

    def archives(self, log: str) -> list[Path]:
        prefix = f"Archive-{log_file_name(log)[:-3]}-"
        return sorted(p for p in self.directory.glob(prefix + "*.db") if p.name[len(prefix) :][:1].isdigit())

    def clear(self, log: str) -> int:
        """Remove every event (``wevtutil cl``); record ids and counters go on. Returns how many."""
        db = self.open(log)
        try:
            db.execute("BEGIN IMMEDIATE")
            removed = db.execute("DELETE FROM events").rowcount
            db.execute(_WRITERS_TABLE)
            db.execute("UPDATE writers SET bytes = 0")
            db.execute("INSERT INTO messages(messages) VALUES ('delete-all')")
            fieldtext.drop_all(db)
            db.execute("COMMIT")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot clear the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        return int(removed)

    def damage(self, log: str) -> str | None:
        """What is wrong with the log's database when it is damaged (not a database, not a
        log's schema, or SQLite's ``quick_check`` finds fault: run on files up to
        ``QUICK_CHECK_MAX``, which it reads whole); ``None`` when sound."""
        path = self.path(log)
        self._forget(path)
        try:
            db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            return str(exc) if is_damaged(exc) else None
        try:
            check_schema(db, path)
            if os.path.getsize(path) <= QUICK_CHECK_MAX:
                problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(4)")]
                if problems != ["ok"]:
                    return "; ".join(problems)
            db.execute("SELECT key, value FROM meta").fetchall()
            db.execute("SELECT max(record_id), min(record_id) FROM events").fetchone()
        except sqlite3.Error as exc:
            return str(exc) if is_damaged(exc) else None
        except (EventLogError, OSError) as exc:
            return str(exc)
        finally:
            db.close()
        return None

    def set_aside(self, log: str) -> Path:
        """Move a damaged log's database (and its -wal and -shm) aside as
        ``<file>.damaged-<UTC time>``; the log is missing then. Returns the new path."""
        path = self.path(log)
        self._forget(path)
        stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")[:-3]
        target = path.with_name(f"{path.name}.damaged-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(str(path) + suffix, str(target) + suffix)
            except FileNotFoundError:
                pass
        return target

    def delete(self, log: str) -> None:
        path = self.path(log)
        self._forget(path)
        for name in (str(path), str(path) + "-wal", str(path) + "-shm"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass

    # -- reading -------------------------------------------------------------------------------
    def info(self, log: str) -> LogInfo:
        path = self.path(log)
        db = self.open(log)
        try:
            meta = {row[0]: row[1] for row in db.execute("SELECT key, value FROM meta")}
            records, oldest = db.execute("SELECT count(*), min(record_id) FROM events").fetchone()
            writers: dict[str, dict[str, int]] = {}
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'writers'").fetchone() is not None:
                for uid, held, refused_by, overwritten_by in db.execute("SELECT uid, bytes, refused, overwritten FROM writers ORDER BY uid"):
                    writers[str(uid)] = {"bytes": int(held), "refused": int(refused_by), "overwritten": int(overwritten_by)}
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)
        size = sum(_file_sizes(path))
        unsaved = self.unsaved.get(log, [0, 0, 0])
        written, refused, lost = (int(meta.get(key, 0)) + extra for key, extra in zip(_COUNTERS, unsaved, strict=True))
        return LogInfo(
            name=log, records=records, bytes=size, oldest_record_id=oldest, last_write=meta.get("last_write"),
            refused=refused, lost=lost, written=written, stored=written - refused - lost,
            next_record_id=int(meta.get("next_record_id", 1)), log_id=meta.get("log_id", ""), writers=writers,
        )  # fmt: skip

    def size(self, log: str) -> int:
        """Bytes of all the log's files together (database, -wal, -shm)."""
        return sum(_file_sizes(self.path(log)))

    def query(
        self,
        log: str,
        *,
        xpath: str | Query | QueryList | None = None,
        count: int | None = None,
        reverse: bool = False,
        after_record_id: int | None = None,
        text: str | None = None,
        own_uid: int | None = None,
        now: int | None = None,
    ) -> Iterator[StoredEvent]:
        """The log's events in record-id order (``reverse``: newest first) that ``xpath`` selects
        (a selector, a parsed ``Query`` or a ``QueryList``), after ``after_record_id`` (before it
        when ``reverse``), at most ``count``; ``text``: an FTS5 match over messages; ``own_uid``:
        only the events that user wrote (Application isolation). Reads the database directly."""
        yield from self._query(self.open(log), log, xpath=xpath, count=count, reverse=reverse,
                               after_record_id=after_record_id, text=text, own_uid=own_uid, now=now)  # fmt: skip

    def query_file(self, path: str | os.PathLike[str], **options: Any) -> Iterator[StoredEvent]:
        """``query`` over a log database named by path (an archive, or another directory's log)."""
        target = Path(path)
        yield from self._query(self.open_foreign(target), log_name_from_file(target.name), **options)

    def _query(
        self, db: sqlite3.Connection, log: str, *, xpath: str | Query | QueryList | None = None, count: int | None = None, reverse: bool = False,
        after_record_id: int | None = None, text: str | None = None, own_uid: int | None = None, now: int | None = None,
    ) -> Iterator[StoredEvent]:  # fmt: skip
        try:
            now = now_filetime() if now is None else now
            query = parse_filter(xpath) if isinstance(xpath, str) else xpath
            where: list[str] = ["1"]
            params: list[Any] = []
            test: Query | QueryList | None = None
            if query is not None:
                lowered = query.lowered(now, log) if isinstance(query, QueryList) else query.lowered(now)
                where.append(condition_sql(lowered.condition, params))
                if not lowered.exact:
                    test = query
            if after_record_id is not None:
                where.append("record_id < ?" if reverse else "record_id > ?")
                params.append(after_record_id)
            if own_uid is not None:
                where.append("uid = ?")
                params.append(own_uid)
            order = "DESC" if reverse else "ASC"
            if text:  # the full-text index walked in record-id order, joined to the events
                statement = (f"SELECT events.* FROM messages JOIN events ON events.record_id = messages.rowid"
                             f" WHERE messages MATCH ? AND {' AND '.join(where)} ORDER BY messages.rowid {order}")  # fmt: skip
                params.insert(0, text)
            else:
                statement = f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY record_id {order}"
            if test is None and count is not None:
                statement += f" LIMIT {int(count)}"
            taken = 0
            renderer = self.renderer
            for row in db.execute(statement, params):
                try:
                    event = _stored(row, log)
                except (TypeError, ValueError, OverflowError):  # json.JSONDecodeError is a ValueError
                    self.skipped += 1
                    continue
                if not event.rendered and renderer is not None:
                    event.fields, event.message = renderer(event)
                if test is not None:
                    node = event_node(event)
                    selected = test.matches(node, now, log) if isinstance(test, QueryList) else test.matches(node, now)
                    if not selected:
                        continue
                yield event
                taken += 1
                if count is not None and taken >= count:
                    return
        except sqlite3.OperationalError as exc:
            if text and _is_text_error(exc):
                raise InvalidArgument(f"not a text query: {text!r} (words, \"a phrase\", word*, AND, OR, NOT and parentheses;"
                                      " quote a word that holds punctuation)") from None  # fmt: skip
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        except sqlite3.Error as exc:
            raise EventLogError(f"cannot read the log {log!r}: {exc}") from None
        finally:
            self._release(db)
