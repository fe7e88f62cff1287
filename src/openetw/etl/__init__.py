"""The ETL binary format (pure): layouts, records, a streaming reader and a writer."""

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
