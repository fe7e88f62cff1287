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
from openetw.guids import format_guid

__all__ = ["EVENT_COLUMNS", "EventColumns", "events_schema"]

_FILETIME_UNIX_TICKS = 116_444_736_000_000_000
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

_NAMES = [name for name, _ in EVENT_COLUMNS]
_DICTIONARY = ("kind", "provider_id", "provider_name", "event_name", "process_name")


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


class EventColumns:
    """Rows of the ``events`` table gathered column by column, turned into Arrow at once."""

    __slots__ = ("columns", "_append")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in _NAMES}
        self._append = tuple(self.columns[name].append for name in _NAMES)

    def __len__(self) -> int:
        return len(self.columns["record"])

    def add(self, position: int, record: EventRecord, provider: str | None, event: str | None, process: str | None) -> None:
        """One record (with the names ``dump --json`` gives it)."""
        (a_record, a_kind, a_pid_guid, a_provider, a_event, a_id, a_version, a_channel, a_level, a_opcode, a_task,
         a_keyword, a_hook, a_pid, a_tid, a_cpu, a_timestamp, a_time, a_size, a_activity, a_related, a_extended,
         a_pointer, a_length, a_process, a_reason) = self._append  # fmt: skip
        kind = record.kind
        a_record(position)
        a_kind(kind)
        guid = record.provider_guid_bytes
        a_pid_guid(None if guid is None else format_guid(record.provider_id))
        a_provider(provider or None)
        a_event(event or None)
        a_id(record.id)
        a_version(record.version)
        a_channel(record.channel)
        a_level(record.level)
        a_opcode(record.opcode)
        a_task(record.task)
        a_keyword(record.keyword)
        a_hook(record.hook_id)
        a_pid(record.pid)
        a_tid(record.tid)
        a_cpu(record.cpu)
        a_timestamp(record.timestamp)
        if kind == "unknown":
            a_time(None)
        else:
            ticks = record.filetime
            a_time((ticks - _FILETIME_UNIX_TICKS) * 100 if _MIN_TICKS <= ticks <= _MAX_TICKS else None)
        a_size(record.size)
        if kind == "event":
            a_activity(format_guid(record.activity_id))
            related = record.related_activity_id
            a_related(None if related is None else format_guid(related))
            ext = record.extended
            a_extended([item.type_name for item in ext] if ext else None)
        else:
            a_activity(None)
            a_related(None)
            a_extended(None)
        a_pointer(record.pointer_size)
        a_length(record.user_data_length)
        a_process(process)
        a_reason(getattr(record, "reason", None) if kind == "unknown" else None)

    def table(self, pa: Any, schema: Any) -> Any:
        """The gathered rows as an Arrow table (and the columns emptied)."""
        arrays = []
        for field in schema:
            values = self.columns[field.name]
            if field.name in _DICTIONARY:
                arrays.append(_dictionary_strings(values, pa))
            elif field.name == "time":
                arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
            values.clear()
        return pa.Table.from_arrays(arrays, schema=schema)


def _dictionary_strings(values: list[Any], pa: Any) -> Any:
    """A string column of few distinct values, built through a dictionary (one Python pass)."""
    codes: dict[Any, int] = {}
    indices = [codes.setdefault(value, len(codes)) for value in values]
    dictionary = pa.array(list(codes), type=pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(indices, type=pa.int32()), dictionary).cast(pa.string())
