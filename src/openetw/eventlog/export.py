"""Stored events written as an ``.evtx`` file (``log export``, ``log clear --backup``).

An event imported from an ``.evtx`` file and an ETW event alike are written from their
``<System>`` facts and their fields (``EventData``); record ids run from 1 in the new file, as
``wevtutil epl`` numbers them. The file header is written last, at offset 0, so the output
must be a regular file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from typing import BinaryIO

from openetw.eventlog.model import StoredEvent
from openetw.evtx.record import EvtxHeader
from openetw.evtx.writer import EvtxWriter

__all__ = ["evtx_header", "write_evtx"]


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
