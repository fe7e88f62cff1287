"""The Event Log's logs as viewer sources: the logs tree (Windows Logs, Applications and
Services Logs by provider) and a log's events, tailed as the log grows.

A log is read through ``openetw.eventlog.LogStore`` with the same access rules as ``openetw log
query`` for the user running the viewer (``eventlog.access``): a log that user may read whole
is shown whole, an Application-isolation log only with that user's own events, any other is
refused. The events' header facts become columns; each row keeps its fields and message (the
record bytes are read again only for the event opened).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.report.sources import LazyManifestRegistry
from openetw.viewer.model import Columns, level_name
from openetw.viewer.sources import ViewerSource, _iso

__all__ = ["WINDOWS_LOGS", "LogSource", "log_dirs", "logs_tree"]

WINDOWS_LOGS = ("Application", "Security", "Setup", "System", "ForwardedEvents")
_POLL_SECONDS = 0.25


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
        self._events: list[Any] = []
        self._columns = Columns.empty()
        self._tables: dict[str, dict[str, int]] = {name: {} for name in ("provider", "event", "channel", "user")}
        self._more = threading.Condition(self._lock)
        self._stopped = threading.Event()
        self._last_id = 0
        self._read_new()
        self.ready.set()
        threading.Thread(target=self._follow, name=f"viewer-log-{source_id}", daemon=True).start()

    def _read_new(self) -> int:
        fresh = []
        for event in self.store.query(self.name, after_record_id=self._last_id or None, own_uid=self._own_uid):
            event.record = b""  # read again when the event is opened
            fresh.append(event)
        if fresh:
            with self._more:
                self._events.extend(fresh)
                self._last_id = fresh[-1].record_id
                if self._texts is not None:
                    self._texts.extend(_text(event) for event in fresh)
                self._more.notify_all()
        return len(fresh)

    def _follow(self) -> None:
        while not self._stopped.wait(_POLL_SECONDS):
            try:
                self._read_new()
            except (OpenEtwError, OSError) as error:
                self.error = str(error)
                return

    def columns(self) -> Columns:
        with self._lock:
            count, done = len(self._events), len(self._columns)
            if done < count:
                self._columns = _grown(self._columns, self._events[done:count], self._tables)
            return self._columns

    def events(self, rows: Iterable[int]) -> Iterator[Any]:
        raise InvalidArgument("a log's events are shown as rows, not decoded records")

    def render(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        events = self._events
        return [log_row(events[row], row) for row in rows]

    def stored(self, row: int) -> Any:
        """The whole stored event of ``row`` (its record bytes read again)."""
        brief = self._events[row]
        for event in self.store.query(self.name, after_record_id=brief.record_id - 1, count=1, own_uid=self._own_uid):
            return event
        raise InvalidArgument(f"event {brief.record_id} is no longer in the log {self.name!r} (cleared or overwritten)")

    def detail(self, row: int) -> dict[str, Any]:
        from openetw.eventlog import event_xml

        if not 0 <= row < len(self._events):
            raise InvalidArgument(f"no event {row} in {self.name}")
        event = self.stored(row)
        out = log_row(event, row)
        out["xml"] = event_xml(event)
        out["activity"] = event.activity_id or ""
        out["version"] = event.version
        return out

    def export_rows(self, rows: np.ndarray, fmt: str) -> bytes:
        """The rows as ``log query`` prints them: ``json`` (one object a line), ``xml``, ``csv``."""
        import csv
        import io
        import json

        from openetw.eventlog import event_xml

        chosen = [self.stored(int(row)) for row in rows.tolist()]
        if fmt == "json":
            return "".join(json.dumps(event.to_json(), default=str) + "\n" for event in chosen).encode()
        if fmt == "xml":
            return ("<Events>\n" + "".join(event_xml(event) + "\n" for event in chosen) + "</Events>\n").encode()
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["Level", "Date and Time", "Source", "Event ID", "Task Category", "Log", "Record", "Message"])
            for event in chosen:
                writer.writerow([level_name(event.level), _iso(event.time_created), event.provider, event.event_id, event.task,
                                 self.name, event.record_id, event.message or ""])  # fmt: skip
            return out.getvalue().encode()
        raise InvalidArgument(f"a log exports as csv, json or xml, not {fmt}")

    def _all_texts(self) -> Iterator[str]:
        count = len(self._events)
        for number, event in enumerate(self._events[:count]):
            if number % 4096 == 0:
                self._text_progress = number / max(1, count)
            yield _text(event)

    def wait_for_more(self, count: int, timeout: float) -> int:
        with self._more:
            if len(self._events) <= count:
                self._more.wait(timeout)
            return len(self._events)

    def lost(self) -> dict[str, int]:
        try:
            info = self.store.info(self.name)
        except (OpenEtwError, OSError):
            return {"events_lost": 0, "buffers_lost": 0}
        return {"events_lost": info.lost, "buffers_lost": 0, "refused": info.refused}

    def close(self) -> None:
        self._stopped.set()


def _text(event: Any) -> str:
    fields = " ".join(f"{name}={value}" for name, value in (event.fields or {}).items())
    return f"{event.provider} {event.message or ''} {fields}".lower()


def log_row(event: Any, row: int) -> dict[str, Any]:
    """A stored event as the table shows it (the keys of ``sources.event_row``)."""
    fields = {name: "" if value is None else str(value) for name, value in (event.fields or {}).items()}
    message = " ".join((event.message or "").split()) or "; ".join(f"{name}: {value}" for name, value in fields.items())
    return {
        "row": row, "level": int(event.level), "levelName": level_name(event.level), "time": _iso(event.time_created),
        "filetime": str(event.time_created), "provider": event.provider, "event": "", "id": int(event.event_id),
        "task": int(event.task), "opcode": int(event.opcode), "keywords": f"0x{int(event.keywords):x}", "pid": int(event.pid),
        "tid": int(event.tid), "cpu": 0, "channel": event.channel or event.log, "user": event.user_sid or "",
        "computer": event.computer, "process": "", "message": message, "fields": fields, "recordId": int(event.record_id),
    }  # fmt: skip


def _coded(values: list[str], table: dict[str, int]) -> np.ndarray:
    return np.fromiter((table.setdefault(value, len(table)) for value in values), dtype=np.int32, count=len(values))


def _grown(columns: Columns, events: list[Any], tables: dict[str, dict[str, int]]) -> Columns:
    count = len(events)

    def ints(values: Iterable[int], dtype: Any = np.int32) -> np.ndarray:
        return np.fromiter(values, dtype=dtype, count=count)

    added = {
        "time": ints((e.time_created for e in events), np.int64), "level": ints(e.level for e in events),
        "provider": _coded([e.provider for e in events], tables["provider"]),
        "event": _coded([f"{e.provider}/{e.event_id}" for e in events], tables["event"]), "id": ints(e.event_id for e in events),
        "task": ints(e.task for e in events), "opcode": ints(e.opcode for e in events),
        "keyword": ints((e.keywords & (2**64 - 1) for e in events), np.uint64), "process": ints(e.pid for e in events),
        "thread": ints(e.tid for e in events), "cpu": np.zeros(count, dtype=np.int32),
        "channel": _coded([e.channel or e.log for e in events], tables["channel"]),
        "user": _coded([e.user_sid or "" for e in events], tables["user"]),
    }  # fmt: skip
    merged = {name: np.concatenate([getattr(columns, name), values]) for name, values in added.items()}
    return Columns(**merged, labels={name: list(table) for name, table in tables.items()})

