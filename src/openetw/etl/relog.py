"""Relogging: several ETL files merged in time order into one uncompressed file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.clock import SYSTEM_TIME_CLOCK, TraceClock
from openetw.etl.logfile import LogfileHeader
from openetw.etl.reader import merge_records
from openetw.etl.record import EventRecord
from openetw.etl.writer import EtlWriter, new_logfile_header, relog_header

_MIN_RELOG_BUFFER = 64 * 1024


@dataclass(frozen=True, slots=True)
class RelogResult:
    records_written: int
    records_refused: int  # unknown (damaged) records, or records larger than a buffer
    buffers_written: int
    events_lost: int


def logfile_header_of(reader: Any) -> LogfileHeader:
    """An input's logfile header: an ``.etl`` reader's own; for a reader of another container
    whose records are ETW records (an EventPipe trace), one made from its records' clock and
    pointer size, with the events and buffers it lost."""
    header = reader.header
    if isinstance(header, LogfileHeader):
        return header
    context = getattr(reader, "context", None)
    clock = context.clock if context is not None else SYSTEM_TIME_CLOCK
    made = new_logfile_header(
        clock=clock, pointer_size=context.pointer_size if context is not None else 8, logger_name=getattr(context, "logger_name", "") or "openetw",
        number_of_processors=1, cpu_speed_mhz=1,
    )  # fmt: skip
    return made.with_(events_lost=getattr(header, "events_lost", 0), buffers_lost=getattr(header, "buffers_lost", 0))


def is_logfile_header_record(record: EventRecord) -> bool:
    return record.kind == "system" and record.hook_id == 0 and record.buffer_index == 0


def relog(
    readers: list[Any], target: str | os.PathLike[str] | BinaryIO, *, buffer_size: int | None = None, file_mode: int | None = None,
) -> RelogResult:  # fmt: skip
    """Merge ``readers`` in time order and write them to ``target`` (a new file is created with
    ``file_mode``, at most, when given: ``openetw.safeio.create_output``).

    Each input's logfile header record is replaced by the output's own; every other record is
    copied byte for byte (keeping its pointer size). One input keeps its clock; several inputs
    are put on the system-time clock, their timestamps rewritten through wall-clock time.
    """
    if not readers:
        raise InvalidArgument("relog needs at least one input file")
    headers = [logfile_header_of(reader) for reader in readers]
    first = headers[0]
    if len(readers) == 1:
        clock = first.clock
        records = readers[0].records(time_order=True)
    else:
        start = min(header.start_time for header in headers)
        clock = TraceClock(L.CLOCK_SYSTEM_TIME, start, start, 10_000_000)
        records = merge_records(readers)
    size = buffer_size or max([_MIN_RELOG_BUFFER] + [header.buffer_size for header in headers if header.buffer_size <= 16 << 20])
    header = relog_header(
        first,
        buffer_size=size,
        events_lost=sum(header.events_lost for header in headers),
        buffers_lost=sum(header.buffers_lost for header in headers),
        clock=clock,
        logfile_name=os.fspath(target) if isinstance(target, (str, os.PathLike)) else "",
    )
    with EtlWriter(target, header=header, file_mode=file_mode) as writer:
        for record in records:
            if is_logfile_header_record(record):
                continue
            writer.write(record)
    return RelogResult(writer.records_written, writer.records_refused, writer.buffers_written, writer.events_lost)
