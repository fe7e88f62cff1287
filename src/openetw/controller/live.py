"""One line per event for a live view (``openetw trace``): time, process, provider, event, fields,
and the event's message as ``openetw dump`` shows it (a JSON-quoted string; newlines and other
control characters in values escaped so that an event stays one line).

Decoding goes through a schema registry: TraceLogging events describe themselves; manifest
events decode with the installed manifests when there are some. An event nothing describes is
shown with its descriptor and the size of its payload.
"""

from __future__ import annotations

import json
from typing import Any

from openetw.errors import OpenEtwError
from openetw.etl.record import EventRecord
from openetw.guids import format_guid
from openetw.tdh import decode_all, format_properties
from openetw.tdh.format import format_event_message, one_line
from openetw.tdh.registry import SchemaRegistry

__all__ = ["LiveFormatter", "default_registry"]


def default_registry() -> SchemaRegistry:
    """The installed manifests when the store can be read, else TraceLogging (and kernel) only."""
    try:
        from openetw.manifest.store.manifests import installed_manifests
        from openetw.tdh.from_files import build_registry

        return build_registry(manifests=installed_manifests())
    except (ImportError, OpenEtwError, OSError):
        return SchemaRegistry()


class LiveFormatter:
    def __init__(self, registry: SchemaRegistry | None = None, *, as_json: bool = False) -> None:
        self.registry = registry if registry is not None else default_registry()
        self.as_json = as_json

    def describe(self, record: EventRecord) -> dict[str, Any]:
        """The event as plain values: time, pid, tid, provider, event name, descriptor, fields."""
        fields: dict[str, str] = {}
        provider = event = message = None
        schema = None
        try:
            schema = self.registry.schema_for(record)
        except OpenEtwError:
            schema = None
        if schema is not None:
            provider, event = schema.provider_name, schema.event_name
            try:
                decoded = decode_all(schema, record.user_data)
                fields = format_properties(decoded)
                message = format_event_message(decoded)
            except OpenEtwError as exc:
                fields = {"<error>": str(exc)}
        provider_id = getattr(record, "provider_id", None)
        return {
            "time": record.time_iso,
            "pid": record.pid,
            "tid": record.tid,
            "provider": provider or (format_guid(provider_id) if provider_id is not None else record.kind),
            "event": event or f"id {getattr(record, 'id', 0)}",
            "level": getattr(record, "level", 0),
            "keyword": getattr(record, "keyword", 0),
            "opcode": getattr(record, "opcode", 0),
            "fields": fields,
            "user_data_size": len(record.user_data),
            "message": " ".join(message.split()) if message else None,
        }

    def format(self, record: EventRecord) -> str:
        info = self.describe(record)
        if self.as_json:
            return json.dumps(info, sort_keys=True, default=str)
        fields = " ".join(f"{name}={value}" for name, value in info["fields"].items())
        if not info["fields"] and info["user_data_size"]:
            fields = f"({info['user_data_size']} bytes)"
        text = f"{info['time']} {info['pid']:>6}/{info['tid']:<6} {info['provider']}/{info['event']} L{info['level']} {fields}".rstrip()
        if info["message"]:
            text += " " + json.dumps(info["message"], ensure_ascii=False)
        return one_line(text)
