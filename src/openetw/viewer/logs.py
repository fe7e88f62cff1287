"""The Event Log's logs as viewer sources: the logs tree (Windows Logs, Applications and
Services Logs by provider) and a log's events, tailed as the log grows.

A log is read through ``openetw.eventlog.LogStore`` with the same access rules as ``openetw log
query`` for the user running the viewer (``eventlog.access``): a log that user may read whole
is shown whole, an Application-isolation log only with that user's own events, any other is
refused. The events' header facts become columns (read straight from the log's database, as
``LogStore.open`` allows); the rows on screen, the event opened and an export are read through
``LogStore.query``. Search uses the log's own full-text indexes over messages and field values.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.events.registry import LazyManifestRegistry
from openetw.events.text import filetime_text
from openetw.viewer.model import Columns, level_name
from openetw.viewer.sources import ViewerSource

__all__ = ["WINDOWS_LOGS", "LogSource", "log_dirs", "logs_tree"]

WINDOWS_LOGS = ("Application", "Security", "Setup", "System", "ForwardedEvents")
_POLL_SECONDS = 0.25
_SPAN_GAP = 64  # rows this close are read together with those between them


def log_dirs() -> list[tuple[str, Path]]:
    """(scope, directory) of the logs this user may look at: the machine's, then the user's own."""
    from openetw.eventlog.paths import default_logs_dir

    seen: list[tuple[str, Path]] = []
    for scope, system in (("machine", True), ("user", False)):
        path = default_logs_dir(system)
        if path.is_dir() and all(path != other for _, other in seen):
            seen.append((scope, path))
    return seen


def logs_tree() -> list[dict[str, Any]]:
    """Every log with its place in the tree: ``group`` is ``Windows Logs`` or ``Applications and
    Services Logs``, ``folder`` the provider part of the name (``Microsoft-Windows-X`` of
    ``Microsoft-Windows-X/Operational``)."""
    from openetw.eventlog import LogStore

    out = []
    for scope, directory in log_dirs():
        store = LogStore(directory)
        for name in store.names():
            try:
                records: int | None = store.info(name).records
            except (OpenEtwError, OSError):
                records = None  # listed, but this user may not read it
            windows = name in WINDOWS_LOGS
            folder = "" if windows or "/" not in name else name.split("/", 1)[0]
            out.append({"name": name, "scope": scope, "directory": str(directory), "records": records,
                        "group": "Windows Logs" if windows else "Applications and Services Logs", "folder": folder})  # fmt: skip
    return out


_COLUMN_SQL = ("SELECT record_id, time_created, level, provider, event_id, task, opcode, keywords, pid, tid, channel, user_sid "
               "FROM events WHERE record_id > ?{own} ORDER BY record_id")  # fmt: skip


class LogSource(ViewerSource):
    """One log of the Event Log (see the module doc); ``live``: it is polled for new events."""

    kind = "log"
    live = True

    def __init__(self, source_id: str, directory: str | os.PathLike[str], log: str, registry: LazyManifestRegistry) -> None:
        from openetw.eventlog import LogStore
        from openetw.eventlog.access import Caller, ReadAccess, read_access

        super().__init__(source_id, log, registry)
        self.store = LogStore(directory)
        self.path = str(self.store.path(log))
        if not self.store.exists(log):
            raise InvalidArgument(f"no log {log!r} in {directory}")
        if not os.access(self.path, os.R_OK):
            raise InvalidArgument(f"log {log!r}: permission denied")
        caller = Caller(os.getuid(), frozenset(os.getgroups()) | {os.getgid()})
        access = read_access(self.store.config(log), caller)
        if access is ReadAccess.NONE:
            raise InvalidArgument(f"log {log!r}: access denied (its channel access does not let this user read it)")
        self._own_uid = os.getuid() if access is ReadAccess.READ_OWN else None
        self._ids = np.zeros(0, dtype=np.int64)  # each row's EventRecordID
        self._columns = Columns.empty()
        self._tables: dict[str, dict[str, int]] = {name: {} for name in ("provider", "event", "channel", "user")}
        self._more = threading.Condition(self._lock)
        self._stopped = threading.Event()
        self._read_new()
        self.ready.set()
        threading.Thread(target=self._follow, name=f"viewer-log-{source_id}", daemon=True).start()

    def _read_new(self) -> int:
        """Add the events written since the last look (their header facts only)."""
        import sqlite3

        from openetw.errors import EventLogError

        last = int(self._ids[-1]) if len(self._ids) else 0
        db = self.store.open(self.name)
        try:
            own = "" if self._own_uid is None else " AND uid = ?"
            params = (last,) if self._own_uid is None else (last, self._own_uid)
            rows = db.execute(_COLUMN_SQL.format(own=own), params).fetchall()
        except sqlite3.Error as error:
            raise EventLogError(f"cannot read the log {self.name!r}: {error}") from None
        finally:
            db.close()
        if rows:
            with self._more:
                self._columns, ids = _grown(self._columns, rows, self._tables, self.name)
                self._ids = np.concatenate([self._ids, ids])
                self._more.notify_all()
        return len(rows)

    def _follow(self) -> None:
        while not self._stopped.wait(_POLL_SECONDS):
            try:
                self._read_new()
            except (OpenEtwError, OSError) as error:
                self.error = str(error)
                return

    def columns(self) -> Columns:
        return self._columns

    def events(self, rows: Iterable[int]) -> Iterator[Any]:
        raise InvalidArgument("a log's events are shown as rows, not decoded records")

    def _stored(self, rows: list[int]) -> list[Any]:
        """The stored events of ``rows`` (``None`` for one no longer in the log), a run of
        consecutive record ids at a time."""
        ids = self._ids[np.asarray(rows, dtype=np.int64)].tolist() if rows else []
        found: dict[int, Any] = {}
        order = sorted(set(ids))
        at = 0
        while at < len(order):  # ids close together are read as one span (one connection, one query)
            end = at
            while end + 1 < len(order) and order[end + 1] - order[end] <= _SPAN_GAP:
                end += 1
            first, last = order[at], order[end]
            wanted = set(order[at : end + 1])
            for event in self.store.query(self.name, after_record_id=first - 1, count=last - first + 1, own_uid=self._own_uid):
                if event.record_id > last:
                    break
                if event.record_id in wanted:
                    found[event.record_id] = event
            at = end + 1
        return [found.get(record_id) for record_id in ids]

    def render(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        wanted = [int(row) for row in rows]
        out = []
        for row, event in zip(wanted, self._stored(wanted), strict=True):
            out.append(log_row(event, row) if event is not None else _gone_row(row, int(self._ids[row]), self.name))
        return out

    def detail(self, row: int) -> dict[str, Any]:
        from openetw.eventlog import event_xml

        if not 0 <= row < len(self._ids):
            raise InvalidArgument(f"no event {row} in {self.name}")
        (event,) = self._stored([row])
        if event is None:
            raise InvalidArgument(f"event {int(self._ids[row])} is no longer in the log {self.name!r} (cleared or overwritten)")
        out = log_row(event, row)
        out["xml"] = event_xml(event)
        out["activity"] = event.activity_id or ""
        out["version"] = event.version
        return out

    def export_rows(self, rows: np.ndarray, fmt: str) -> bytes:
        """The rows as ``log query`` prints them: ``json`` (one object a line), ``xml``, ``csv``;
        as ``log export`` writes them (``evtx``); or their stored ETW records as an ``etl`` file."""
        import csv
        import io
        import json
        import tempfile

        from openetw.eventlog import event_xml
        from openetw.eventlog.export import write_etl, write_evtx

        if fmt not in ("json", "xml", "csv", "evtx", "etl"):
            raise InvalidArgument(f"a log exports as csv, json, xml, evtx or etl, not {fmt}")
        chosen = [event for event in self._stored(rows.tolist()) if event is not None]
        if fmt in ("evtx", "etl"):
            with tempfile.TemporaryFile(prefix="openetw-viewer-") as file:  # the writers seek back to the file header
                if fmt == "evtx":
                    write_evtx(chosen, file)
                else:
                    write_etl(chosen, file, logger_name=self.name)
                file.seek(0)
                return file.read()
        if fmt == "json":
            return "".join(json.dumps(event.to_json(), default=str) + "\n" for event in chosen).encode()
        if fmt == "xml":
            return ("<Events>\n" + "".join(event_xml(event) + "\n" for event in chosen) + "</Events>\n").encode()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["Level", "Date and Time", "Source", "Event ID", "Task Category", "Log", "Record", "Message"])
        for event in chosen:
            writer.writerow([level_name(event.level), filetime_text(event.time_created), event.provider, event.event_id, event.task,
                             self.name, event.record_id, event.message or ""])  # fmt: skip
        return out.getvalue().encode()

    def text_index(self, wait: float = 0.0) -> list[str] | None:
        self._text_progress = 1.0
        return []  # a log's own full-text indexes (FTS5 over its messages and field values) are always there

    def info(self) -> dict[str, Any]:
        out = super().info()
        out["text_index"] = {"state": "ready", "progress": 1.0}
        return out

    def search(self, needle: str) -> np.ndarray:
        """Rows where each word of ``needle`` starts a word of the message or of a field value
        (the log's FTS5 indexes over messages and over field values)."""
        import sqlite3

        from openetw.eventlog import fieldtext

        words = [word for word in needle.replace('"', " ").split() if word]
        if not words:
            return np.ones(len(self._ids), dtype=bool)
        db = self.store.open(self.name)
        try:
            found: set[int] | None = None
            for word in words:
                match = f'"{word}"*'
                either = {row[0] for row in db.execute("SELECT rowid FROM messages WHERE messages MATCH ?", (match,))}
                either.update(fieldtext.matching(db, match))
                found = either if found is None else found & either
                if not found:
                    break
        except sqlite3.Error as error:
            raise InvalidArgument(f"cannot search the log {self.name!r}: {error}") from None
        finally:
            db.close()
        return np.isin(self._ids, np.fromiter(found or (), dtype=np.int64))

    def xpath(self, text: str) -> np.ndarray:
        """Rows ``log query --query`` selects: the log's own XPath, as SQL when it says all of it."""
        import sqlite3

        from openetw.eventlog.store import now_filetime
        from openetw.events.xpath import QueryList, condition_sql
        from openetw.viewer.xpath import parse_viewer_filter

        query = parse_viewer_filter(text)
        now = now_filetime()
        lowered = query.lowered(now, self.name) if isinstance(query, QueryList) else query.lowered(now)
        if lowered.exact:
            params: list[Any] = []
            where = condition_sql(lowered.condition, params)
            db = self.store.open(self.name)
            try:
                found = [row[0] for row in db.execute(f"SELECT record_id FROM events WHERE {where}", params)]
            except sqlite3.Error as error:
                raise InvalidArgument(f"cannot query the log {self.name!r}: {error}") from None
            finally:
                db.close()
        else:
            found = [event.record_id for event in self.store.query(self.name, xpath=query, own_uid=self._own_uid, now=now)]
        return np.isin(self._ids, np.asarray(found, dtype=np.int64))

    def wait_for_more(self, count: int, timeout: float) -> int:
        with self._more:
            if len(self._ids) <= count:
                self._more.wait(timeout)
            return len(self._ids)

    def lost(self) -> dict[str, int]:
        try:
            info = self.store.info(self.name)
        except (OpenEtwError, OSError):
            return {"events_lost": 0, "buffers_lost": 0}
        return {"events_lost": info.lost, "buffers_lost": 0, "refused": info.refused}

    def close(self) -> None:
        self._stopped.set()


def _gone_row(row: int, record_id: int, log: str) -> dict[str, Any]:
    return {"row": row, "level": 0, "levelName": "", "time": "", "filetime": "", "provider": "", "event": "", "id": 0, "task": 0,
            "opcode": 0, "keywords": "0x0", "pid": 0, "tid": 0, "cpu": 0, "channel": log, "user": "", "computer": "", "process": "",
            "message": f"(event {record_id} is no longer in the log: cleared or overwritten)", "fields": {}, "recordId": record_id}  # fmt: skip


def log_row(event: Any, row: int) -> dict[str, Any]:
    """A stored event as the table shows it (the keys of ``sources.event_row``)."""
    fields = {name: "" if value is None else str(value) for name, value in (event.fields or {}).items()}
    message = " ".join((event.message or "").split()) or "; ".join(f"{name}: {value}" for name, value in fields.items())
    return {
        "row": row, "level": int(event.level), "levelName": level_name(event.level), "time": filetime_text(event.time_created),
        "filetime": str(event.time_created), "provider": event.provider, "event": "", "id": int(event.event_id),
        "task": int(event.task), "opcode": int(event.opcode), "keywords": f"0x{int(event.keywords):x}", "pid": int(event.pid),
        "tid": int(event.tid), "cpu": 0, "channel": event.channel or event.log, "user": event.user_sid or "",
        "computer": event.computer, "process": "", "message": message, "fields": fields, "recordId": int(event.record_id),
    }  # fmt: skip


def _coded(values: list[str], table: dict[str, int]) -> np.ndarray:
    return np.fromiter((table.setdefault(value, len(table)) for value in values), dtype=np.int32, count=len(values))


def _grown(columns: Columns, rows: list[Any], tables: dict[str, dict[str, int]], log: str) -> tuple[Columns, np.ndarray]:
    """``columns`` with the rows of ``_COLUMN_SQL`` added, and those rows' record ids."""
    count = len(rows)

    def ints(at: int, dtype: Any = np.int32) -> np.ndarray:
        return np.fromiter((row[at] or 0 for row in rows), dtype=dtype, count=count)

    ids = ints(0, np.int64)
    added = {
        "time": ints(1, np.int64), "level": ints(2), "provider": _coded([row[3] for row in rows], tables["provider"]),
        "event": _coded([f"{row[3]}/{row[4]}" for row in rows], tables["event"]), "id": ints(4), "task": ints(5), "opcode": ints(6),
        "keyword": np.fromiter(((row[7] or 0) & (2**64 - 1) for row in rows), dtype=np.uint64, count=count),
        "process": ints(8), "thread": ints(9), "cpu": np.zeros(count, dtype=np.int32),
        "channel": _coded([row[10] or log for row in rows], tables["channel"]), "user": _coded([row[11] or "" for row in rows], tables["user"]),
    }  # fmt: skip
    merged = {name: np.concatenate([getattr(columns, name), values]) for name, values in added.items()}
    return Columns(**merged, labels={name: list(table) for name, table in tables.items()}), ids
