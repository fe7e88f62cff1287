"""From an ETW ``EventRecord`` (read from an ``.etl``, built, or live) to what an ``.evtx`` event holds.

``event_header`` gives the ``<System>`` facts of a record; the properties come from decoding it
(``tdh``), done by the caller. Kernel (MOF) events have no provider GUID in their header: the
schema's provider id is used when the caller passes it.
"""

from __future__ import annotations

import uuid
from typing import Any

from openetw.etl.record import EventRecord
from openetw.evtx.record import EvtxHeader

__all__ = ["event_header"]

_NO_PROCESS = 0xFFFFFFFF


def event_header(
    record: EventRecord,
    *,
    provider_name: str | None = None,
    provider_id: uuid.UUID | None = None,
    channel: str | None = None,
    computer: str = "",
    user_id: str | None = None,
) -> EvtxHeader:
    """The ``<System>`` facts of ``record`` (names the caller knows from its schema)."""
    header = EvtxHeader()
    guid = record.provider_id if record.provider_guid_bytes is not None else provider_id
    header.provider_guid = guid
    header.provider_name = provider_name or (str(guid).upper() if guid is not None else record.kind)
    header.event_id = record.id
    header.version = record.version
    header.level = record.level
    header.task = record.task
    header.opcode = record.opcode
    header.keywords = record.keyword
    try:
        header.time_created = max(0, record.filetime)
    except (OverflowError, ValueError):
        header.time_created = 0
    header.process_id = 0 if record.pid == _NO_PROCESS else record.pid
    header.thread_id = 0 if record.tid == _NO_PROCESS else record.tid
    activity = record.activity_id
    header.activity_id = activity if activity is not None and activity.int else None
    related: Any = record.related_activity_id
    header.related_activity_id = related if isinstance(related, uuid.UUID) and related.int else None
    header.channel = channel or ""
    header.computer = computer
    header.user_id = user_id
    return header
