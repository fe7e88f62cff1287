"""The ``events`` table: one row per record, the keys of ``dump --json`` as typed columns.

Columns (nullable where ``dump --json`` leaves a key out): ``record`` (the record's position in
the export's time order, the key the per-event tables join on), ``kind``, ``provider_id``
(lower-case GUID text), ``provider_name``, ``event_name``, ``id``, ``version``, ``channel``,
``level``, ``opcode``, ``task``, ``keyword``, ``hook_id``, ``pid``, ``tid``, ``cpu``,
``timestamp`` (the raw clock value), ``time`` (UTC, 100 ns ticks kept), ``size``,
``activity_id``, ``related_activity_id``, ``extended`` (the extended data items' type names),
``pointer_size``, ``user_data_length``, ``process_name`` and ``reason`` (why an unknown record
could not be read).
"""

from __future__ import annotations

from typing import Any

from openetw.etl.record import EventRecord
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.guids import format_guid

__all__ = ["EVENT_COLUMNS", "EventColumns", "events_schema"]

_FILETIME_UNIX_TICKS = UNIX_EPOCH_FILETIME
# nanoseconds since 1970 fit an int64 from 1677 to 2262; other times are damage and become null
_MIN_TICKS = _FILETIME_UNIX_TICKS - (1 << 63) // 100 + 1
_MAX_TICKS = _FILETIME_UNIX_TICKS + ((1 << 63) - 1) // 100

EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("record", "int64"),
    ("kind", "string"),
    ("provider_id", "string"),
    ("provider_name", "string"),
    ("event_name", "string"),
    ("id", "uint16"),
    ("version", "uint16"),
    ("channel", "uint8"),
    ("level", "uint8"),
    ("opcode", "uint8"),
    ("task", "uint16"),
    ("keyword", "uint64"),
    ("hook_id", "uint16"),
    ("pid", "uint32"),
    ("tid", "uint32"),
    ("cpu", "uint32"),
    ("timestamp", "int64"),
    ("time", "timestamp[ns, UTC]"),
    ("size", "uint32"),
    ("activity_id", "string"),
    ("related_activity_id", "string"),
    ("extended", "list<string>"),
    ("pointer_size", "uint8"),
    ("user_data_length", "uint32"),
    ("process_name", "string"),
    ("reason", "string"),
)
"""Name and Arrow type of every column, in order."""



def events_schema(pa: Any) -> Any:
    fields = []
    for name, text in EVENT_COLUMNS:
        if text == "timestamp[ns, UTC]":
            kind = pa.timestamp("ns", tz="UTC")
        elif text == "list<string>":
            kind = pa.list_(pa.string())
        else:
            kind = getattr(pa, text if text != "string" else "string")()
        fields.append(pa.field(name, kind, nullable=name != "record"))
    return pa.schema(fields)


_ZERO_GUID = "00000000-0000-0000-0000-000000000000"


class EventColumns:
    """Rows of the ``events`` table gathered as tuples, turned into Arrow columns at once."""

    __slots__ = ("rows", "_guids")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self._guids: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def _guid(self, raw: bytes, value: Any) -> str:
        text = self._guids.get(raw)
        if text is None:
            text = format_guid(value)
            if len(self._guids) < 4096:
                self._guids[raw] = text
        return text

    def add(self, position: int, record: EventRecord, filetime: int | None, provider: str | None, event: str | None, process: str | None) -> None:
        """One record (with the names ``dump --json`` gives it; ``filetime`` None for unknown records)."""
        kind = record.kind
        guid = record.provider_guid_bytes
        if kind == "event":
            activity = record.activity_id
            activity_text = None if activity is None else _ZERO_GUID if activity.int == 0 else format_guid(activity)
            related = record.related_activity_id
            ext = record.extended
            tail: tuple[Any, ...] = (activity_text, None if related is None else format_guid(related), [item.type_name for item in ext] if ext else None)
        else:
            tail = (None, None, None)
        in_range = filetime is not None and _MIN_TICKS <= filetime <= _MAX_TICKS
        nanos = (filetime - _FILETIME_UNIX_TICKS) * 100 if in_range else None  # type: ignore[operator]
        self.rows.append((
            position, kind, None if guid is None else self._guid(guid, record.provider_id), provider or None, event or None,
            record.id, record.version, record.channel, record.level, record.opcode, record.task, record.keyword,
            record.hook_id, record.pid, record.tid, record.cpu, record.timestamp, nanos, record.size, *tail,
            record.pointer_size, record.user_data_length, process, getattr(record, "reason", None) if kind == "unknown" else None,
        ))  # fmt: skip

    def table(self, pa: Any, schema: Any) -> Any:
        """The gathered rows as an Arrow table (and the rows emptied)."""
        rows, self.rows = self.rows, []
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            if field.name == "time":
                arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        return pa.Table.from_arrays(arrays, schema=schema)

