"""What the collector keeps on disk: per host and session, ``.etl`` files and the books.

Layout of the output directory::

    <host>/<session>/<start>-<n>.etl        the session's buffers, rotating by size
    parquet/host=<host>/date=<YYYY-MM-DD>/<session>-<start>-<n>/   a finished file's table layout
    logs/ForwardedEvents...                 with ``log``: every event in the Event Log (``openetw.fleet.to_log``)
    .collector-state.json                   what is durable: files, sequences seen, counts

Each ``.etl`` file begins with the host's logfile header buffer, its BuffersWritten, EventsLost
and BuffersLost rewritten on every commit (the buffers the file holds, the losses the host counted), so a file being written reads up
to its last committed buffer (openetw, dissect.etl). ``add`` appends a message's buffer (or
drops it: a sequence already seen is a duplicate); ``commit`` makes everything added durable
(data fsynced, then the books written and renamed into place): only then may the messages be
acknowledged. After a crash, ``FleetStore`` cuts every file back to its committed size, so the
messages redelivered are written once.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.export.tables import safe_part
from openetw.fleet.check import BadMessage, Checked
from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER

__all__ = ["FleetStore", "SessionBooks", "STATE_FILE", "ranges"]

STATE_FILE = ".collector-state.json"
_U32 = struct.Struct("<I")
OUTPUTS = frozenset({"etl", "parquet", "log"})
ANNOUNCED_GAPS_KEPT = 64
REJECTED_KEPT = 20  # the last refused messages named per host (the counts are all of them)
REJECTED_HOSTS_KEPT = 4096  # hosts counted by name; beyond (a server without accounts), under OTHER_HOSTS
OTHER_HOSTS = "*"  # not a subject token: no host is named so
# Sessions of one host open at once (no end yet, data within the last hour): a machine runs at
# most 64 ETW sessions; more is a host making sessions to swell the books.
OPEN_SESSIONS_PER_HOST = 256
OPEN_SESSION_IDLE = 3600.0
OPEN_FILES_KEPT = 64  # files left open between commits (a host starting many sessions opens no more)


def ranges(numbers: set[int]) -> list[list[int]]:
    """Sorted numbers as [first, last] runs."""
    runs: list[list[int]] = []
    for number in sorted(numbers):
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return runs


@dataclass
class EtlFile:
    path: str  # relative to the output directory
    size: int
    buffers: int  # pool buffers in it (the header buffer not counted)
    events: int
    done: bool = False
    exported: bool = False


@dataclass
class SessionBooks:
    host: str
    session: str
    start: int
    seen: set[int] = field(default_factory=set)
    buffers: int = 0
    events: int = 0
    duplicates: int = 0
    events_lost: int = 0
    buffers_lost: int = 0
    announced_gaps: list[list[int]] = field(default_factory=list)
    end_sequence: int | None = None
    files: list[EtlFile] = field(default_factory=list)
    buffer_size: int = 0
    first_received: float = 0.0
    last_received: float = 0.0
    damaged_buffers: int = 0  # buffers stored with the records before their damage only

    @property
    def key(self) -> str:
        return f"{self.host}\x1f{self.session}\x1f{self.start}"

    @property
    def ended(self) -> bool:
        return self.end_sequence is not None

    def gaps(self) -> list[list[int]]:
        """Sequence numbers not received below the highest one received (or the end's): from
        the runs received, so a far sequence number costs nothing."""
        if not self.seen:
            return []
        top = self.end_sequence if self.end_sequence is not None else max(self.seen)
        missing: list[list[int]] = []
        following = 0
        for first, last in ranges(self.seen):
            if first > following:
                missing.append([following, first - 1])
            following = last + 1
        if following <= top:
            missing.append([following, top])
        return missing

    def as_json(self) -> dict[str, Any]:
        gaps = self.gaps()
        return {
            "host": self.host, "session": self.session, "start": self.start, "buffers": self.buffers, "events": self.events,
            "duplicates": self.duplicates, "events_lost": self.events_lost, "buffers_lost": self.buffers_lost,
            "gaps": sum(last - first + 1 for first, last in gaps), "gap_ranges": gaps[:20], "announced_gaps": self.announced_gaps[:20],
            "ended": self.ended, "files": [f.path for f in self.files], "first_received": self.first_received,
            "last_received": self.last_received, "damaged_buffers": self.damaged_buffers,
        }  # fmt: skip


class FleetStore:
    def __init__(self, directory: str | Path, *, outputs: frozenset[str] = frozenset({"etl"}), rotate_bytes: int = 64 << 20) -> None:
        unknown = outputs - OUTPUTS
        if unknown:
            raise InvalidArgument(f"unknown output {', '.join(sorted(unknown))} (choose from etl, parquet, log)")
        self.directory = Path(directory)
        self.outputs = outputs
        self.rotate_bytes = rotate_bytes
        self.sessions: dict[str, SessionBooks] = {}
        # Per host (its subject token): messages refused, by reason, and the last few named.
        self.rejected: dict[str, dict[str, Any]] = {}
        # Per host: stream sequences of buffers delivered before their session's header (not kept).
        self.waiting: dict[str, set[int]] = {}
        self._fds: dict[str, int] = {}  # open files by relative path
        self._headers: dict[str, bytes] = {}  # session key -> the host's header buffer
        self._touched: set[str] = set()
        self._to_export: list[tuple[SessionBooks, EtlFile]] = []
        # With ``log``: this batch's buffers as (session key, file, offset, bytes), for the Event Log.
        self._for_log: list[tuple[str, str, int, bytes]] = []
        self._log_pending: dict[str, Any] | None = None
        self._registry: Any = None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # its Parquet tables private with the rest
        self.log: Any = None
        if "log" in outputs:
            from openetw.fleet.to_log import LogOutput

            self.log = LogOutput(self.directory / "logs")
        self._load()

    # -- messages --------------------------------------------------------------------------------
    def add(self, message: Checked) -> str:
        """One checked message (``openetw.fleet.check``): ``"written"``, ``"duplicate"`` or
        ``"later"`` (a buffer whose session's header has not arrived yet: to be delivered again);
        ``BadMessage`` when it does not fit its session's books, before anything is changed.

        First writer wins: a sequence number the books hold is never written again, and a new
        file is created only where no file is (``O_EXCL``), so no message replaces stored data."""
        info, payload = message.info, message.payload
        key = f"{info.host}\x1f{info.session}\x1f{info.start}"
        books = self.sessions.get(key)
        if books is None:
            if info.kind != KIND_HEADER:
                return "later"
            now = time.time()
            open_sessions = sum(1 for b in self.sessions.values()
                                if b.host == info.host and b.end_sequence is None and now - b.last_received < OPEN_SESSION_IDLE)  # fmt: skip
            if open_sessions >= OPEN_SESSIONS_PER_HOST:
                raise BadMessage("sessions", f"{info.host!r} has {open_sessions} sessions open (at most {OPEN_SESSIONS_PER_HOST})")
            books = SessionBooks(info.host, info.session, info.start)
            self._headers[key] = bytes(payload)
            books.buffer_size = len(payload)
            try:
                self._new_file(books)
            except BadMessage:
                del self._headers[key]
                raise
            self.sessions[key] = books
            books.seen.add(info.sequence)
            self._note(books, message)
            return "written"
        if info.sequence in books.seen:
            books.duplicates += 1
            return "duplicate"
        if books.end_sequence is not None and info.sequence > books.end_sequence:
            raise BadMessage("sequence", f"sequence {info.sequence} after the session's end ({books.end_sequence})")
        if info.kind == KIND_END:
            if max(books.seen) > info.sequence:
                raise BadMessage("sequence", f"an end at {info.sequence} below sequence {max(books.seen)} already stored")
            books.seen.add(info.sequence)
            books.end_sequence = info.sequence
            self._note(books, message)
            self._finish_file(books)
            return "written"
        assert info.kind == KIND_BUFFER
        if len(payload) != books.buffer_size:
            raise BadMessage("buffer", f"{len(payload)} bytes, the session's buffers have {books.buffer_size}")
        current = books.files[-1] if books.files and not books.files[-1].done else None
        if current is None or (current.buffers and current.size + len(payload) > self.rotate_bytes):
            if current is not None:
                self._finish_file(books)
            current = self._new_file(books)
        fd = self._fd(current.path)
        _pwrite_all(fd, payload, current.size)
        if self.log is not None:
            self._for_log.append((key, current.path, current.size, bytes(payload)))
        current.size += len(payload)
        current.buffers += 1
        current.events += message.records
        books.seen.add(info.sequence)
        books.buffers += 1
        books.events += message.records
        books.damaged_buffers += message.damage is not None
        self._note(books, message)
        self._touched.add(current.path)
        return "written"

    def _note(self, books: SessionBooks, message: Checked) -> None:
        info = message.info
        now = time.time()
        books.first_received = books.first_received or now
        books.last_received = now
        books.events_lost = max(books.events_lost, info.events_lost)
        books.buffers_lost = max(books.buffers_lost, info.buffers_lost)
        if info.gap is not None and len(books.announced_gaps) < ANNOUNCED_GAPS_KEPT:
            books.announced_gaps.append(list(info.gap))

    def reject(self, host: str, reason: str, text: str, *, subject: str = "", stream_sequence: int = 0) -> None:
        """A message refused: counted for ``host`` (the subject's, as NATS authenticated it) by
        ``reason``, and named among the last few; the books carry it at the next commit."""
        host = host[:64] if host[:64] in self.rejected or len(self.rejected) < REJECTED_HOSTS_KEPT else OTHER_HOSTS
        entry = self.rejected.setdefault(host, {"messages": 0, "reasons": {}, "last": []})
        if stream_sequence and any(item["stream_sequence"] == stream_sequence for item in entry["last"]):
            return  # the same message delivered again (its termination did not reach the server)
        entry["messages"] += 1
        entry["reasons"][reason] = entry["reasons"].get(reason, 0) + 1
        entry["last"].append({"reason": reason, "text": text[:300], "subject": subject[:200], "stream_sequence": stream_sequence,
                              "time": time.time()})  # fmt: skip
        del entry["last"][:-REJECTED_KEPT]

    def commit(self) -> None:
        """Everything added is on disk: data, rewritten headers, then the books."""
        by_path = {f.path: (books, f) for books in self.sessions.values() for f in books.files}
        for path in sorted(self._touched):
            books, etl = by_path[path]
            fd = self._fd(path)
            _pwrite_all(fd, self._header_for(books, etl), 0)
            os.fsync(fd)
            if etl.done:
                os.close(self._fds.pop(path))
        self._touched.clear()
        if len(self._fds) > OPEN_FILES_KEPT:
            self.close()  # opened again when written to
        if self._for_log:
            self._store_in_log()
        self._write_state()
        if "parquet" in self.outputs:
            for books, etl in [item for item in self._to_export if item[1].done]:
                self._export(books, etl)
            self._to_export = [item for item in self._to_export if not item[1].exported]
            self._write_state()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def report(self) -> dict[str, Any]:
        """Per host: buffers, events, gaps, duplicates dropped, losses the hosts counted; and per session."""
        hosts: dict[str, dict[str, Any]] = {}
        for books in self.sessions.values():
            item = hosts.setdefault(books.host, {"sessions": 0, "buffers": 0, "events": 0, "gaps": 0, "duplicates": 0,
                                                 "events_lost": 0, "buffers_lost": 0, "last_received": 0.0})  # fmt: skip
            described = books.as_json()
            item["sessions"] += 1
            for name in ("buffers", "events", "gaps", "duplicates", "events_lost", "buffers_lost"):
                item[name] += described[name]
            item["last_received"] = max(item["last_received"], books.last_received)
        for host, entry in self.rejected.items():
            hosts.setdefault(host, {"sessions": 0})["rejected"] = entry["messages"]
        return {"directory": str(self.directory), "hosts": hosts, "sessions": [b.as_json() for b in self.sessions.values()],
                "rejected": self.rejected}  # fmt: skip

    # -- files -------------------------------------------------------------------------------------
    def _new_file(self, books: SessionBooks) -> EtlFile:
        index = len(books.files) + 1
        relative = f"{safe_part(books.host)}/{safe_part(books.session)}/{books.start}-{index}.etl"
        (self.directory / relative).parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(self.directory / relative, flags, 0o600)
        except FileExistsError:
            if relative in {f.path for b in self.sessions.values() for f in b.files}:
                # Another session's file (two names made the same path): never replaced.
                raise BadMessage("identity", f"session {books.session!r} of {books.host!r} would write over {relative}") from None
            # Begun after the last commit and never acknowledged: its messages are coming again.
            os.unlink(self.directory / relative)
            fd = os.open(self.directory / relative, flags, 0o600)
        self._fds[relative] = fd
        etl = EtlFile(relative, books.buffer_size, 0, 0)
        books.files.append(etl)
        _pwrite_all(fd, self._header_for(books, etl), 0)
        self._touched.add(relative)
        return etl

    def _finish_file(self, books: SessionBooks) -> None:
        if books.files and not books.files[-1].done:
            etl = books.files[-1]
            etl.done = True
            self._touched.add(etl.path)
            self._to_export.append((books, etl))

    def _fd(self, relative: str) -> int:
        fd = self._fds.get(relative)
        if fd is None:
            fd = os.open(self.directory / relative, os.O_RDWR | os.O_CLOEXEC)
            self._fds[relative] = fd
        return fd

    def _header_for(self, books: SessionBooks, etl: EtlFile) -> bytes:
        """The host's header buffer with this file's BuffersWritten and the host's losses so far,
        patched in place: whatever else the host's header buffer holds stays as it came."""
        data = bytearray(self._headers[books.key])
        record_at = L.BUFFER_HEADER_SIZE
        header_type = L.SYSTEM_TRACE_HEADER.unpack_from(data, record_at)[1]
        layout = L.trace_logfile_header(8 if header_type == L.HEADER_TYPE_SYSTEM64 else 4)
        payload_at = record_at + L.SYSTEM_TRACE_HEADER.size
        for name, value in (("BuffersWritten", etl.buffers + 1), ("EventsLost", books.events_lost), ("BuffersLost", books.buffers_lost)):
            _U32.pack_into(data, payload_at + layout.offset(name), min(value, 0xFFFFFFFF))
        return bytes(data)

    def _export(self, books: SessionBooks, etl: EtlFile) -> None:
        """A finished file's table layout, under ``parquet/host=/date=/`` (written aside, then renamed)."""
        from openetw.export import export_files

        date = datetime.datetime.fromtimestamp(books.start / 1e6, tz=datetime.UTC).date().isoformat()
        name = Path(etl.path).stem
        target = self.directory / "parquet" / f"host={safe_part(books.host)}" / f"date={date}" / f"{safe_part(books.session)}-{name}"
        scratch = target.with_name("." + target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        if etl.buffers:
            if self._registry is None:
                from openetw.events.registry import build_registry

                self._registry = build_registry()  # the installed manifests, as openetw export uses them
            (self.directory / "parquet").mkdir(mode=0o700, exist_ok=True)
            export_files([str(self.directory / etl.path)], str(scratch), "parquet", registry=self._registry)
            os.replace(scratch, target)
        etl.exported = True

    def _store_in_log(self) -> None:
        """This batch's events into the Event Log once: the books first say what is about to be
        appended (``_log_pending``), then the append, then the books without it."""
        batch, self._for_log = self._for_log, []
        events: list[Any] = []
        by_session: dict[str, list[bytes]] = {}
        for key, _, _, payload in batch:
            by_session.setdefault(key, []).append(payload)
        for key, payloads in by_session.items():
            events.extend(self.log.events(self.sessions[key].host, self._headers[key], payloads))
        self._log_pending = {"before": self.log.written(), "count": len(events),
                             "buffers": [[key, path, offset, len(payload)] for key, path, offset, payload in batch]}  # fmt: skip
        self._write_state()
        self.log.append(events)
        self._log_pending = None

    def _finish_log_batch(self, pending: dict[str, Any]) -> None:
        """After a restart: the batch the books announced, appended unless the log has it."""
        if self.log is None or self.log.written() >= pending["before"] + pending["count"]:
            return
        by_session: dict[str, list[bytes]] = {}
        for key, path, offset, length in pending["buffers"]:
            with open(self.directory / path, "rb") as stream:
                stream.seek(offset)
                by_session.setdefault(key, []).append(stream.read(length))
        for key, payloads in by_session.items():
            self.log.append(self.log.events(self.sessions[key].host, self._headers[key], payloads))

    # -- the books ---------------------------------------------------------------------------------
    def _write_state(self) -> None:
        state = {
            "version": 1,
            "log_pending": self._log_pending,
            "rejected": self.rejected,
            "sessions": [
                {
                    "host": b.host, "session": b.session, "start": b.start, "seen": ranges(b.seen), "buffers": b.buffers,
                    "events": b.events, "duplicates": b.duplicates, "events_lost": b.events_lost, "buffers_lost": b.buffers_lost,
                    "announced_gaps": b.announced_gaps, "end_sequence": b.end_sequence, "buffer_size": b.buffer_size,
                    "first_received": b.first_received, "last_received": b.last_received,
                    "damaged_buffers": b.damaged_buffers, "files": [vars(f) for f in b.files],
                }
                for b in self.sessions.values()
            ],
        }
        path = self.directory / STATE_FILE
        scratch = path.with_name(path.name + ".new")
        with open(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w", encoding="utf-8") as stream:
            json.dump(state, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(scratch, path)
        directory_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)

    def _load(self) -> None:
        path = self.directory / STATE_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"{path}: not the collector's books ({exc})") from None
        self.rejected = dict(state.get("rejected") or {})
        for item in state.get("sessions", []):
            books = SessionBooks(item["host"], item["session"], int(item["start"]))
            books.seen = {n for first, last in item["seen"] for n in range(first, last + 1)}
            for name in ("buffers", "events", "duplicates", "events_lost", "buffers_lost", "buffer_size"):
                setattr(books, name, int(item[name]))
            books.announced_gaps = item["announced_gaps"]
            books.end_sequence = item["end_sequence"]
            books.first_received, books.last_received = item["first_received"], item["last_received"]
            books.damaged_buffers = int(item.get("damaged_buffers", 0))
            books.files = [EtlFile(**f) for f in item["files"]]
            self.sessions[books.key] = books
            if books.files:
                first = self.directory / books.files[0].path
                with open(first, "rb") as stream:
                    self._headers[books.key] = stream.read(books.buffer_size)
            for etl in books.files:
                # What was written after the last commit was never acknowledged: it comes again.
                with open(self.directory / etl.path, "r+b") as stream:
                    stream.truncate(etl.size)
                if etl.done and not etl.exported and "parquet" in self.outputs:
                    self._to_export.append((books, etl))
            # A file begun after the last commit is made again when its buffers come again.
            index = len(books.files) + 1
            stray = self.directory / f"{safe_part(books.host)}/{safe_part(books.session)}/{books.start}-{index}.etl"
            if stray.exists():
                stray.unlink()
        pending = state.get("log_pending")
        if pending:
            self._finish_log_batch(pending)
            self._write_state()


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written

