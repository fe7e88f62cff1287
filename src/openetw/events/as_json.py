"""Records as JSON objects: the keys ``dump --json`` prints, plus the decoded properties.

``record_fields`` is the record as stored (header, names, sizes); ``event_to_json`` adds
``properties`` (decoded values, JSON-safe; absent when no schema was found), ``errors``
(property -> message, when some did not decode), ``message`` and ``process_name`` when known.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from openetw.etl.record import EventRecord
from openetw.events.decoded import DecodedRecord
from openetw.events.text import json_properties
from openetw.guids import format_guid
from openetw.manifest.messages import TruncatedMessage

__all__ = ["event_to_json", "record_fields", "write_json"]


def record_fields(record: EventRecord, provider_name: str | None, event_name: str | None) -> dict[str, Any]:
    """The record's header facts as a JSON-ready dict (names only when known)."""
    out: dict[str, Any] = {"kind": record.kind}
    if record.provider_guid_bytes is not None:
        out["provider_id"] = format_guid(record.provider_id)
    if provider_name:
        out["provider_name"] = provider_name
    if event_name:
        out["event_name"] = event_name
    out.update(
        id=record.id, version=record.version, channel=record.channel, level=record.level,
        opcode=record.opcode, task=record.task, keyword=record.keyword,
    )
    if record.hook_id is not None:
        out["hook_id"] = record.hook_id
    out.update(pid=record.pid, tid=record.tid, cpu=record.cpu, timestamp=record.timestamp)
    out["time"] = record.time_iso if record.kind != "unknown" else None
    out["size"] = record.size
    if record.kind == "event":
        out["activity_id"] = format_guid(record.activity_id)
        related = record.related_activity_id
        if related is not None:
            out["related_activity_id"] = format_guid(related)
        ext = record.extended
        if ext:
            out["extended"] = [item.type_name for item in ext]
    out["pointer_size"] = record.pointer_size
    out["user_data_length"] = record.user_data_length
    if record.kind == "unknown":
        out["reason"] = record.reason  # type: ignore[attr-defined]
    return out


def event_to_json(event: DecodedRecord, provider_name: str | None = None, event_name: str | None = None) -> dict[str, Any]:
    """``record_fields`` plus what decoding found; the names given override the event's own."""
    out = record_fields(event.record, provider_name or event.provider_name, event_name or event.event_name)
    if event.process_name:
        out["process_name"] = event.process_name
    if event.record.kind == "evtx":  # an Event Log record: its header facts and EventData / UserData
        record: Any = event.record
        header = record.header
        out.update(record_id=record.record_id, channel_name=header.channel, computer=header.computer, user_id=header.user_id)
        out["properties"] = json_properties(event.properties)
    elif event.decoded is not None:
        out["properties"] = json_properties(event.decoded)
        errors = event.errors
        if errors:
            out["errors"] = errors
        message = event.message
        if message is not None:
            out["message"] = message
            if isinstance(message, TruncatedMessage):
                out["message_truncated"] = message.cut  # characters left out
    return out


def write_json(events: Iterable[DecodedRecord], out: TextIO) -> int:
    """One JSON object per line; returns how many were written."""
    count = 0
    for event in events:
        out.write(json.dumps(event_to_json(event)))
        out.write("\n")
        count += 1
    return count
