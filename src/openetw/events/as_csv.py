"""Events as CSV: one header row, then one row per event with its decoded fields in one column.

The fields column holds ``name=value`` pairs separated by ``"; "`` (values rendered as TDH
renders them); properties that did not decode are written ``name=<error: why>``. Records
without a schema carry their payload as ``0x`` hex in the same column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import TextIO

from openetw.events.decoded import DecodedRecord

__all__ = ["CSV_COLUMNS", "event_row", "write_csv"]

CSV_COLUMNS = (
    "Time", "Provider", "Event", "Id", "Version", "Level", "Opcode", "Task", "Keyword",
    "PID", "TID", "Process", "CPU", "Fields",
)  # fmt: skip


def _fields(event: DecodedRecord) -> str:
    if event.decoded is None:
        data = event.record.user_data
        return "0x" + data.hex().upper() if data else ""
    values = event.text_properties()
    errors = event.errors
    parts = [f"{name}={value}" for name, value in values.items()]
    parts += [f"{name}=<error: {message}>" for name, message in errors.items() if name not in values]
    return "; ".join(parts)


def event_row(event: DecodedRecord) -> list[str]:
    """The CSV cells of one event, in ``CSV_COLUMNS`` order."""
    record = event.record
    return [
        record.time_iso if record.kind != "unknown" else "",
        event.provider_label,
        event.event_name or "",
        str(record.id),
        str(record.version),
        str(record.level),
        str(record.opcode),
        str(record.task),
        f"0x{record.keyword:X}",
        str(record.pid),
        str(record.tid),
        event.process_name or "",
        str(record.cpu),
        _fields(event),
    ]


def write_csv(events: Iterable[DecodedRecord], out: TextIO) -> int:
    """Header row and one row per event; returns how many events were written."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    count = 0
    for event in events:
        writer.writerow(event_row(event))
        count += 1
    return count
