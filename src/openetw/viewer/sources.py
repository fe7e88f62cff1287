"""What the viewer shows: ``.etl`` files (through the consumer's index), ``.evtx`` files and live
sessions, each as a ``ViewerSource``.

A source answers the page's questions through its ``Columns`` (``viewer.model``) and builds
events only for the rows on screen (``render``), the one opened (``detail``) and an export
(``events``). An ``.etl`` file is indexed on first open in a background thread (``status``
reports the progress); its full-text index is built once, on the first search, also with
progress. A live session is consumed on a thread; its columns grow as events come, and
``wait_for_more`` wakes the page's tail stream.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.etl.record import EventRecord
from openetw.events.decoded import DecodedRecord, decode_record
from openetw.events.registry import LazyManifestRegistry, build_registry
from openetw.events.text import filetime_text
from openetw.guids import format_guid
from openetw.tdh.context import DecodeContext
from openetw.viewer.model import Columns, level_name
from openetw.viewer.text_index import TextIndex

__all__ = ["EtlSource", "EvtxSource", "RecordFileSource", "LiveSource", "ViewerSource", "event_row", "open_file"]

_KERNEL_KINDS = ("system", "compact", "perfinfo")


def _value_text(value: Any) -> str:
    """A field's value as text: bytes in upper-case hex (as the event's XML shows them), arrays
    item by item, never a Python repr."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex().upper()
    if isinstance(value, (list, tuple)):
        return ", ".join(_value_text(item) for item in value)
    return str(value)


def event_fields(event: DecodedRecord) -> dict[str, str]:
    """The event's fields as text (empty when it has no schema or did not decode)."""
    try:
        if event.record.kind == "evtx":
            return {name: _value_text(value) for name, value in event.properties.items()}
        return {name: _value_text(value) for name, value in event.text_properties().items()}
    except OpenEtwError:
        return {}


def _schemaless(event: DecodedRecord) -> bool:
    return event.record.kind not in ("evtx", "unknown") and event.schema is None and event.decoded is None


def missing_description(event: DecodedRecord) -> str:
    """What Event Viewer says of an event whose provider's description is not installed."""
    return (f"The description for Event ID {int(event.record.id)} from source {event.provider_label} cannot be found. "
            "Either the component that raises this event is not installed on your local computer or the installation is "
            "corrupted. You can install or repair the component on the local computer.")  # fmt: skip


def _failure(path: str, error: Exception) -> str:
    return f"{path}: cannot be read ({type(error).__name__}: {error})"


def event_text(event: DecodedRecord) -> str:
    """Everything searchable about an event, lowercased: names, message and each field."""
    parts = [event.provider_label, event.event_name or ""]
    try:
        parts.append(event.message or "")
    except OpenEtwError:
        pass
    parts.extend(f"{name}={value}" for name, value in event_fields(event).items())
    return " ".join(parts).lower()


def event_message(event: DecodedRecord) -> str:
    """The rendered message; for an event without a known schema Event Viewer's "description
    cannot be found" line; else the fields as ``name: value`` (what Event Viewer falls back to)."""
    try:
        message = event.message
        if message:
            return " ".join(str(message).split())
    except OpenEtwError as error:
        return f"(not decoded: {error})"
    fields = "; ".join(f"{name}: {value}" for name, value in event_fields(event).items())
    if _schemaless(event):
        return missing_description(event) + (f" {fields}" if fields else "")
    return fields


def event_row(event: DecodedRecord, row: int) -> dict[str, Any]:
    """One event as the table shows it (text only: the page escapes every value)."""
    record = event.record
    evtx = record.kind == "evtx"
    header: Any = record.header if evtx else None  # type: ignore[attr-defined]
    fields = event_fields(event)
    return {
        "row": row,
        "level": int(record.level),
        "levelName": level_name(record.level),
        "time": filetime_text(record.filetime) if record.kind != "unknown" else "",
        "filetime": str(record.filetime) if record.kind != "unknown" else "",
        "provider": event.provider_label,
        "event": event.event_name or "",
        "id": int(record.id),
        "task": int(record.task),
        "opcode": int(record.opcode),
        "keywords": f"0x{int(record.keyword):x}",
        "pid": int(record.pid),
        "tid": int(record.tid),
        "cpu": int(getattr(record, "cpu", 0) or 0),
        "channel": header.channel if evtx else "",
        "user": (header.user_id or "") if evtx else "",
        "computer": header.computer if evtx else "",
        "process": event.process_name or "",
        "message": event_message(event),
        "fields": fields,
    }


class ViewerSource:
    """One thing the viewer shows (see the module doc)."""

    kind = "source"
    live = False

    def __init__(self, source_id: str, name: str, registry: LazyManifestRegistry) -> None:
        self.id = source_id
        self.name = name
        self.registry = registry
        self.error: str | None = None
        self.ready = threading.Event()
        self._lock = threading.RLock()
        self._texts: TextIndex | None = None
        self._text_progress = 0.0
        self._text_thread: threading.Thread | None = None

    # -- what every source gives ---------------------------------------------------------------
    def columns(self) -> Columns:
        raise NotImplementedError

    def events(self, rows: Iterable[int]) -> Iterator[DecodedRecord]:
        """The decoded events of ``rows`` (in the order given)."""
        raise NotImplementedError

    def progress(self) -> float:
        return 1.0 if self.ready.is_set() else 0.0

    def lost(self) -> dict[str, int]:
        return {"events_lost": 0, "buffers_lost": 0}

    def healthy(self) -> bool:
        """Whether the source can answer: its columns build (a failure becomes its ``error``)."""
        if self.error is None and self.ready.is_set():
            try:
                self.columns()
            except Exception as error:  # noqa: BLE001 - one bad source breaks itself, never the viewer
                self.error = f"{self.name}: cannot be shown ({type(error).__name__}: {error})"
        return self.error is None

    def info(self) -> dict[str, Any]:
        text_state = "ready" if self._texts is not None else "building" if self._text_thread is not None else "none"
        count = len(self.columns()) if self.ready.is_set() and self.healthy() else 0
        return {
            "id": self.id, "name": self.name, "kind": self.kind, "live": self.live, "ready": self.ready.is_set(),
            "progress": round(self.progress(), 4), "error": self.error, "events": count,
            "text_index": {"state": text_state, "progress": round(self._text_progress, 4)}, **self.lost(),
        }  # fmt: skip

    def render(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        wanted = [int(row) for row in rows]
        return [event_row(event, row) for event, row in zip(self.events(wanted), wanted, strict=True)]

    def detail(self, row: int) -> dict[str, Any]:
        from openetw.events.as_xml import event_xml

        if not 0 <= row < len(self.columns()):
            raise InvalidArgument(f"no event {row} in {self.name}")
        event = next(self.events([row]))
        out = event_row(event, row)
        out["xml"] = event_xml(event)
        record = event.record
        out["activity"] = format_guid(record.activity_id) if record.activity_guid_bytes is not None else ""
        out["version"] = int(record.version)
        return out

    # -- full-text search ------------------------------------------------------------------------
    def _all_texts(self) -> Iterator[str]:
        count = len(self.columns())
        step = 2048
        for first in range(0, count, step):
            rows = range(first, min(count, first + step))
            for event in self.events(rows):
                yield event_text(event)
            self._text_progress = min(1.0, (first + step) / max(1, count))

    def text_index(self, wait: float = 0.0) -> Sequence[str] | None:
        """The text of every event, lowercased, as a ``TextIndex`` (built once, on a thread;
        ``None`` while it is built)."""
        with self._lock:
            if self._texts is None and self._text_thread is None:
                self._text_thread = threading.Thread(target=self._build_texts, name=f"viewer-text-{self.id}", daemon=True)
                self._text_thread.start()
            thread = self._text_thread
        if self._texts is None and thread is not None and wait > 0:
            thread.join(wait)
        return self._texts

    def _build_texts(self) -> None:
        self.ready.wait()
        texts = TextIndex(self._all_texts())
        if not self.live:
            texts.freeze()
        self._text_progress = 1.0
        with self._lock:
            self._texts = texts

    def _index_new_rows(self, texts: TextIndex, count: int) -> None:
        """Add the text of rows the index does not hold yet, up to ``count`` (a live source's
        events that came while its index was built)."""
        with self._lock:
            first = len(texts)
            if first < count:
                texts.extend(event_text(event) for event in self.events(range(first, count)))

    def search(self, needle: str) -> np.ndarray:
        """Rows whose text holds ``needle`` (case-insensitive): one boolean per row."""
        needle = needle.lower()
        self.text_index(wait=30.0)
        texts = self._texts
        if texts is None:
            raise InvalidArgument("the text index is being built: search again when it is done")
        count = len(self.columns())
        if len(texts) < count:
            self._index_new_rows(texts, count)
        return texts.search(needle)[:count]

    def xpath(self, text: str) -> np.ndarray:
        """Rows an Event Log XPath query (or ``<QueryList>``) selects: on the columns, and on the
        events themselves for what the columns do not hold (``EventData``, ...)."""
        from openetw.viewer.xpath import xpath_rows

        return xpath_rows(text, self.columns(), self.event_nodes)

    def event_nodes(self, rows: np.ndarray) -> Iterator[Any]:
        """The ``Event`` tree queries test, per row (``None`` for a record that has none)."""
        from openetw.viewer.xpath import report_event_node

        columns = self.columns()
        for row, event in zip(rows.tolist(), self.events(rows), strict=True):
            yield report_event_node(event, row, columns)

    def wait_for_more(self, count: int, timeout: float) -> int:
        """The number of events, once it exceeds ``count`` or ``timeout`` seconds passed."""
        return len(self.columns())

    def close(self) -> None:
        pass


class EtlSource(ViewerSource):
    """An ``.etl`` file through its index (built on first open, with progress)."""

    kind = "etl"

    def __init__(self, source_id: str, path: str, registry: LazyManifestRegistry, index_options: dict[str, Any] | None = None) -> None:
        super().__init__(source_id, os.path.basename(path), registry)
        self.path = path
        self._index_options = dict(index_options or {})
        self._columns = Columns.empty()
        self._done_rows = 0
        self._size = max(1, os.path.getsize(path))
        self._index: Any = None
        self._loader: Any = None
        self._context = DecodeContext(registry)
        threading.Thread(target=self._open, name=f"viewer-index-{source_id}", daemon=True).start()

    def _open(self) -> None:
        from openetw.consumer.index import EtlIndex

        try:
            index = EtlIndex.open(self.path, **self._index_options)
            self._buffer_size = max(1, int(index.header.buffer_size))
            parts = []
            for segment in index.segments():
                rows = segment.records
                parts.append(rows)
                self._done_rows += len(rows)
                if len(rows):
                    buffer = int(rows["buffer"][-1])
                    self._progress_at = buffer
            table = np.concatenate(parts) if parts else np.zeros(0, dtype=np.dtype([]))
            self._index = index
            self._loader = index.loader()
            # What the trace says about itself (EventSource manifests, TDH metadata of .NET
            # rundown and MOF classes, process names), learnt once, as `openetw report` does.
            self._context.learn(self._loader.records(np.arange(len(table), dtype=np.int64)))
            self._columns = self._build_columns(index, table)
        except OpenEtwError as error:
            self.error = str(error)
        except OSError as error:
            self.error = f"{self.path}: {error.strerror or error}"
        except Exception as error:  # noqa: BLE001 - a damaged file breaks its own source, never the viewer
            self.error = _failure(self.path, error)
        finally:
            self.ready.set()

    _progress_at = 0
    _buffer_size = 65536

    @property
    def index(self) -> Any:
        """The file's ``EtlIndex`` once the first pass is done, else None."""
        return self._index if self.ready.is_set() else None

    def progress(self) -> float:
        """How far the first pass is: the last buffer indexed, as a share of the file."""
        if self.ready.is_set():
            return 1.0
        return min(0.99, self._progress_at * self._buffer_size / self._size)

    def _sample_event(self, row: int) -> DecodedRecord:
        record = next(self._loader.records(np.asarray([row])))
        return decode_record(record, self.registry, self._context)

    def _build_columns(self, index: Any, table: np.ndarray) -> Columns:
        from openetw.consumer.index import KIND_CODES, KIND_NAMES

        count = len(table)
        if not count:
            return Columns.empty()
        kinds = table["kind"].astype(np.int64)
        providers = table["provider"].astype(np.int64)
        base = len(index.providers)
        provider_cat = np.where(providers >= 0, providers, base + kinds)
        unique_cats, first_rows = np.unique(provider_cat, return_index=True)
        names: list[str] = []
        code_of: dict[str, int] = {}
        cat_code = np.zeros(int(unique_cats.max()) + 1, dtype=np.int32)
        for cat, row in zip(unique_cats.tolist(), first_rows.tolist(), strict=True):
            if cat >= base and KIND_NAMES[cat - base] == "unknown":
                label = "(damaged records)"
            elif cat >= base and KIND_NAMES[cat - base] == "wpp":
                label = "WPP"
            else:
                event = self._sample_event(row)
                label = event.provider_label
                if cat >= base and KIND_NAMES[cat - base] in _KERNEL_KINDS:
                    label = "Windows Kernel"
            if label not in code_of:
                code_of[label] = len(names)
                names.append(label)
            cat_code[cat] = code_of[label]
        provider_codes = cat_code[provider_cat]
        is_event = kinds == KIND_CODES["event"]
        ident = np.where(is_event, table["id"].astype(np.int64), (1 << 24) | (table["hook_id"].astype(np.int64) << 8) | table["opcode"].astype(np.int64))
        event_key = (provider_cat << 32) | ident
        unique_keys, key_rows, inverse = np.unique(event_key, return_index=True, return_inverse=True)
        event_names: list[str] = []
        if len(unique_keys) <= 5000:
            for row in key_rows.tolist():
                sample = self._sample_event(int(row)) if kinds[row] < KIND_CODES["wpp"] else None
                provider = names[int(provider_codes[row])]
                if sample is not None and sample.event_name:
                    label = f"{provider}/{sample.event_name}"
                elif is_event[row]:
                    label = f"{provider}/Event({int(table['id'][row])})"
                else:
                    label = f"{provider}/Opcode({int(table['opcode'][row])})"
                event_names.append(label)
        else:
            event_names = [f"event {key:x}" for key in unique_keys.tolist()]
        empty = np.zeros(count, dtype=np.int32)
        return Columns(
            time=table["filetime"].astype(np.int64), level=table["level"].astype(np.int32), provider=provider_codes,
            event=inverse.astype(np.int32).reshape(-1), id=table["id"].astype(np.int32), task=table["task"].astype(np.int32),
            opcode=table["opcode"].astype(np.int32), keyword=table["keyword"].astype(np.uint64), process=table["pid"].astype(np.int32),
            thread=table["tid"].astype(np.int32), cpu=table["cpu"].astype(np.int32), channel=empty, user=empty,
            labels={"provider": names, "event": event_names, "channel": [], "user": []},
        )  # fmt: skip

    def columns(self) -> Columns:
        return self._columns

    def events(self, rows: Iterable[int]) -> Iterator[DecodedRecord]:
        wanted = np.asarray(list(rows), dtype=np.int64)
        if not len(wanted):
            return
        order = np.argsort(wanted, kind="stable")
        built: dict[int, DecodedRecord] = {}
        for row, record in zip(wanted[order].tolist(), self._loader.records(wanted[order]), strict=True):
            built[row] = decode_record(record, self.registry, self._context)
        for row in wanted.tolist():
            yield built[row]

    def records(self, rows: np.ndarray) -> Iterator[EventRecord]:
        yield from self._loader.records(np.sort(np.asarray(rows, dtype=np.int64)))

    def lost(self) -> dict[str, int]:
        if self._index is None:
            return {"events_lost": 0, "buffers_lost": 0}
        header = self._index.header
        return {"events_lost": int(header.events_lost), "buffers_lost": int(header.buffers_lost)}

    def close(self) -> None:
        if self._index is not None:
            self._index.close()


def _coded(values: list[str], table: dict[str, int]) -> np.ndarray:
    """Codes of ``values`` in ``table`` (new values are added to it)."""
    return np.fromiter((table.setdefault(value, len(table)) for value in values), dtype=np.int32, count=len(values))


class _RecordList(ViewerSource):
    """A source whose decoded events are all held (``.evtx`` files, live sessions). Its columns
    grow with it: only the events added since the last question are turned into columns."""

    def __init__(self, source_id: str, name: str, registry: LazyManifestRegistry) -> None:
        super().__init__(source_id, name, registry)
        self._events: list[DecodedRecord] = []
        self._columns = Columns.empty()
        self._tables: dict[str, dict[str, int]] = {name: {} for name in ("provider", "event", "channel", "user")}

    def columns(self) -> Columns:
        with self._lock:
            count = len(self._events)
            done = len(self._columns)
            if done < count:
                self._columns = _grown(self._columns, self._events[done:count], self._tables)
            return self._columns

    def events(self, rows: Iterable[int]) -> Iterator[DecodedRecord]:
        events = self._events
        for row in rows:
            yield events[row]

    def records(self, rows: np.ndarray) -> Iterator[EventRecord]:
        for row in np.sort(np.asarray(rows, dtype=np.int64)).tolist():
            yield self._events[row].record

    def _all_texts(self) -> Iterator[str]:
        count = len(self._events)
        for number, event in enumerate(self._events[:count]):
            if number % 4096 == 0:
                self._text_progress = number / max(1, count)
            yield event_text(event)


def _grown(columns: Columns, events: list[DecodedRecord], tables: dict[str, dict[str, int]]) -> Columns:
    """``columns`` with ``events`` added at the end (their labels coded through ``tables``)."""
    records = [event.record for event in events]
    evtx = [record.header if record.kind == "evtx" else None for record in records]  # type: ignore[attr-defined]
    count = len(records)

    def ints(values: Iterable[int], dtype: Any = np.int32) -> np.ndarray:
        # A damaged record's value may not fit its column (a FILETIME above 2^63, a pid above
        # 2^31): it is held at the column's limit, and shown as read when its row is rendered.
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)
        return np.fromiter((min(max(int(value), low), high) for value in values), dtype=dtype, count=count)

    added = {
        "time": ints((record.filetime for record in records), np.int64), "level": ints(record.level for record in records),
        "provider": _coded([event.provider_label for event in events], tables["provider"]),
        "event": _coded([f"{event.provider_label}/{event.event_name or f'Event({event.record.id})'}" for event in events], tables["event"]),
        "id": ints(record.id for record in records), "task": ints(record.task for record in records),
        "opcode": ints(record.opcode for record in records), "keyword": ints((record.keyword for record in records), np.uint64),
        "process": ints(record.pid for record in records), "thread": ints(record.tid for record in records),
        "cpu": ints(int(getattr(record, "cpu", 0) or 0) for record in records),
        "channel": _coded([header.channel if header is not None else "" for header in evtx], tables["channel"]),
        "user": _coded([(header.user_id or "") if header is not None else "" for header in evtx], tables["user"]),
    }  # fmt: skip
    merged = {name: np.concatenate([getattr(columns, name), values]) for name, values in added.items()}
    return Columns(**merged, labels={name: list(table) for name, table in tables.items()})


class RecordFileSource(_RecordList):
    """A trace file other than ``.etl`` (an ``.evtx`` log, ...), read whole on open through the
    consumer's table of formats (an Event Log file is at most a few hundred MB)."""

    kind = "evtx"

    def __init__(self, source_id: str, path: str, registry: LazyManifestRegistry, trace_format: Any = None) -> None:
        super().__init__(source_id, os.path.basename(path), registry)
        self.path = path
        if trace_format is None:
            from openetw.events.sources import EVTX

            trace_format = EVTX
        self.format = trace_format
        self.kind = trace_format.name
        threading.Thread(target=self._open, name=f"viewer-{self.kind}-{source_id}", daemon=True).start()

    def _open(self) -> None:
        try:
            from openetw.events.sources import damage_of, open_source

            source = open_source(self.path, as_format=self.format)
            source.open()
            events = [decode_record(record, self.registry) for record in source.records()]
            with self._lock:
                self._events = events
            lost = damage_of(source).summary()  # the records the read model's damage policy could not keep
            if lost is not None:
                self.error = lost
        except OpenEtwError as error:
            self.error = str(error)
        except OSError as error:
            self.error = f"{self.path}: {error.strerror or error}"
        except Exception as error:  # noqa: BLE001 - a damaged file breaks its own source, never the viewer
            self.error = _failure(self.path, error)
        finally:
            self.ready.set()


EvtxSource = RecordFileSource


class LiveSource(_RecordList):
    """A real-time session of the trace service, consumed on a thread while the viewer runs."""

    kind = "session"
    live = True

    def __init__(self, source_id: str, session_name: str, registry: LazyManifestRegistry, socket: str | None = None) -> None:
        from openetw.events.sources import open_session

        super().__init__(source_id, session_name, registry)
        self._more = threading.Condition(self._lock)
        self._socket = socket
        self._lost = {"events_lost": 0, "buffers_lost": 0}
        self._lost_at = -10.0
        self._live: Any = open_session(session_name, socket=socket)
        self._live.open()  # a session that is not there fails here, for the page to say so
        self.ready.set()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._consume, name=f"viewer-live-{source_id}", daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        from openetw.tdh.context import DecodeContext

        context = DecodeContext(self.registry)
        try:
            for record in self._live.records():
                context.observe(record)
                event = decode_record(record, self.registry, context)
                with self._more:
                    self._events.append(event)
                    texts = self._texts
                    if texts is not None and len(texts) == len(self._events) - 1:
                        texts.append(event_text(event))  # the index follows the tail
                    self._more.notify_all()
        except OpenEtwError as error:
            self.error = str(error)
        except OSError as error:
            self.error = f"the session's stream broke: {error}"

    def wait_for_more(self, count: int, timeout: float) -> int:
        with self._more:
            if len(self._events) <= count:
                self._more.wait(timeout)
            return len(self._events)

    def lost(self) -> dict[str, int]:
        """The session's own counts, asked of the service (at most once a second)."""
        now = time.monotonic()
        if now - self._lost_at >= 1.0:
            self._lost_at = now
            try:
                from openetw.controller import Session

                session = Session.attach(self.name, socket=self._socket)
                try:
                    numbers = session.query()
                finally:
                    session.detach()
                self._lost = {
                    "events_lost": int(numbers.get("events_lost", 0) or 0),
                    "buffers_lost": int(numbers.get("realtime_buffers_lost", 0) or 0) + int(numbers.get("log_buffers_lost", 0) or 0),
                }
            except (OpenEtwError, OSError):
                pass  # the session stopped: its last counts stay
        return dict(self._lost)

    def close(self) -> None:
        self._live.stop()


def open_file(source_id: str, path: str, registry: LazyManifestRegistry, *, index_options: dict[str, Any] | None = None) -> ViewerSource:
    """An ``.etl`` or ``.evtx`` file as a source (checked readable by this user first)."""
    from openetw.events.sources import ETL, trace_format

    real = os.path.realpath(path)
    try:
        is_file = stat.S_ISREG(os.stat(real).st_mode)
    except PermissionError:  # a folder on the way this user may not enter
        raise InvalidArgument(f"{path}: permission denied") from None
    except OSError:
        is_file = False
    if not is_file:
        raise InvalidArgument(f"no such file: {path}")
    if not os.access(real, os.R_OK):
        raise InvalidArgument(f"{path}: permission denied")
    found = trace_format(real)
    if found is not ETL:
        return RecordFileSource(source_id, real, registry, found)
    return EtlSource(source_id, real, registry, index_options)


def default_registry() -> LazyManifestRegistry:
    """The installed manifests (the user's store first), as ``openetw dump`` reads them."""
    return build_registry((), installed=True)
