"""The ETL binary format (pure): layouts, records, a streaming reader and a writer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.etl.clock import TraceClock, filetime_to_datetime, filetime_to_iso
    from openetw.etl.extended import ExtendedItem, StackTrace
    from openetw.etl.logfile import LogfileHeader
    from openetw.etl.reader import BufferInfo, EtlReader, ReadStatistics, merge_records, read_records
    from openetw.etl.record import (
        ClassicRecord,
        CompactRecord,
        EventHeaderRecord,
        EventRecord,
        InstanceRecord,
        MessageRecord,
        PerfInfoRecord,
        RecordContext,
        SystemRecord,
        UnknownRecord,
    )

__all__ = [
    "BufferInfo",
    "ClassicRecord",
    "CompactRecord",
    "EtlReader",
    "EventHeaderRecord",
    "EventRecord",
    "ExtendedItem",
    "InstanceRecord",
    "LogfileHeader",
    "MessageRecord",
    "PerfInfoRecord",
    "ReadStatistics",
    "RecordContext",
    "StackTrace",
    "SystemRecord",
    "TraceClock",
    "UnknownRecord",
    "filetime_to_datetime",
    "filetime_to_iso",
    "merge_records",
    "read_records",
]

# Each name loads its module on first use, so that importing one module of the package (or the
# package) loads nothing else: a program pays at start-up for the modules it uses only.
_LAZY: dict[str, str] = {
    "TraceClock": "openetw.etl.clock",
    "filetime_to_datetime": "openetw.etl.clock",
    "filetime_to_iso": "openetw.etl.clock",
    "ExtendedItem": "openetw.etl.extended",
    "StackTrace": "openetw.etl.extended",
    "LogfileHeader": "openetw.etl.logfile",
    "BufferInfo": "openetw.etl.reader",
    "EtlReader": "openetw.etl.reader",
    "ReadStatistics": "openetw.etl.reader",
    "merge_records": "openetw.etl.reader",
    "read_records": "openetw.etl.reader",
    "ClassicRecord": "openetw.etl.record",
    "CompactRecord": "openetw.etl.record",
    "EventHeaderRecord": "openetw.etl.record",
    "EventRecord": "openetw.etl.record",
    "InstanceRecord": "openetw.etl.record",
    "MessageRecord": "openetw.etl.record",
    "PerfInfoRecord": "openetw.etl.record",
    "RecordContext": "openetw.etl.record",
    "SystemRecord": "openetw.etl.record",
    "UnknownRecord": "openetw.etl.record",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
