"""Stored events written as an ``.evtx`` file (``log export``, ``log clear --backup``, the
viewer's export of a log) or as an ``.etl`` file (the viewer's export of a log).

``.evtx``: an event imported from an ``.evtx`` file and an ETW event alike are written from
their ``<System>`` facts and their fields (``EventData``); record ids run from 1 in the new
file, as ``wevtutil epl`` numbers them. The file header is written last, at offset 0, so the
output must be a regular file.

``.etl``: each ETW event's whole stored record (EVENT_HEADER, extended items, user data) is
written byte for byte by the ETL writer, its TimeStamp moved to the file's clock (system time:
the timestamp is the event's TimeCreated FILETIME). Events imported from ``.evtx`` files carry
no ETW record, so a set holding any is refused.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from typing import BinaryIO

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.record import DEFAULT_CONTEXT, EventHeaderRecord, EventRecord
from openetw.eventlog.model import StoredEvent
from openetw.evtx.record import EvtxHeader
from openetw.evtx.writer import EvtxWriter

__all__ = ["etl_records", "evtx_header", "write_etl", "write_evtx"]

_EVENT_HEADER_TYPES = (L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_EVENT_HEADER64)


def evtx_header(event: StoredEvent) -> EvtxHeader:
    header = EvtxHeader()
    header.provider_name = event.provider
    header.provider_guid = uuid.UUID(event.provider_guid) if event.provider_guid else None
    header.event_id = event.event_id
    header.version = event.version
    header.level = event.level
    header.task = event.task
    header.opcode = event.opcode
    header.keywords = event.keywords
    header.time_created = event.time_created
    header.process_id = event.pid
    header.thread_id = event.tid
    header.activity_id = uuid.UUID(event.activity_id) if event.activity_id else None
    header.channel = event.channel
    header.computer = event.computer
    header.user_id = event.user_sid
    return header


def write_evtx(events: Iterable[StoredEvent], out: BinaryIO) -> int:
    """Write ``events`` to ``out`` as an ``.evtx`` file; returns how many."""
    writer = EvtxWriter()
    start = out.tell()
    out.write(writer.file_header(dirty=True))
    count = 0
    for event in events:
        writer.add_event(evtx_header(event), {name: "" if value is None else value for name, value in (event.fields or {}).items()})
        count += 1
        for chunk in writer.take_chunks():
            out.write(chunk)
    for chunk in writer.finish():
        out.write(chunk)
    out.flush()
    os.pwrite(out.fileno(), writer.file_header(), start)
    return count


def etl_records(events: Iterable[StoredEvent]) -> list[EventRecord]:
    """The ETW records of ``events`` in time order (stable), each carrying its TimeCreated as a
    system-time timestamp. Raises ``InvalidArgument`` when an event holds no ETW record."""
    records: list[EventRecord] = []
    refused: list[int] = []
    for event in sorted(events, key=lambda e: e.time_created):
        raw = event.record
        if (event.format != "etw" or len(raw) < L.EVENT_HEADER.size or raw[2] not in _EVENT_HEADER_TYPES
                or int.from_bytes(raw[:2], "little") != len(raw)):  # fmt: skip
            refused.append(event.record_id)
            continue
        record = EventHeaderRecord(L.EVENT_HEADER.unpack_from(raw, 0), raw, 0, len(raw), 0, DEFAULT_CONTEXT)
        records.append(record.with_timestamp(event.time_created))
    if refused:
        shown = ", ".join(str(record_id) for record_id in refused[:5]) + (", …" if len(refused) > 5 else "")
        raise InvalidArgument(f"{len(refused)} of the events hold no ETW record (imported from .evtx files; record ids {shown}): "
                              "export them as .evtx, XML, JSON or CSV")  # fmt: skip
    return records


def write_etl(events: Iterable[StoredEvent], out: BinaryIO, *, logger_name: str = "openetw") -> int:
    """Write the ETW records of ``events`` to ``out`` as an ``.etl`` file (see the module doc);
    returns how many. ``out`` must be seekable (the header buffer is rewritten at the end)."""
    from openetw.etl.clock import TraceClock
    from openetw.etl.writer import DEFAULT_BUFFER_SIZE, EtlWriter, new_logfile_header

    records = etl_records(events)
    start = records[0].timestamp if records else 0
    largest = max((len(record.raw) for record in records), default=0)
    size = max(DEFAULT_BUFFER_SIZE, (L.BUFFER_HEADER_SIZE + largest + 7 + 1023) // 1024 * 1024)
    clock = TraceClock(L.CLOCK_SYSTEM_TIME, start, start, 10_000_000)
    with EtlWriter(out, header=new_logfile_header(clock=clock, buffer_size=size, logger_name=logger_name)) as writer:
        for record in records:
            writer.write(record)
    return writer.records_written
