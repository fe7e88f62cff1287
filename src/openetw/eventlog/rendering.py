"""Rendering stored ETW events (fields and message) from their whole record bytes and a schema
registry. Pure given the registry: the service renders what it stored first in batches, a
reader renders what is not rendered yet as it reads (``LogStore(renderer=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openetw.etl import layouts as L
from openetw.etl.record import DEFAULT_CONTEXT, EventHeaderRecord
from openetw.eventlog.model import StoredEvent
from openetw.tdh.registry import SchemaRegistry

__all__ = ["Renderer", "etw_renderer", "installed_renderer"]

Renderer = Callable[[StoredEvent], tuple[dict[str, Any] | None, str | None]]


def etw_renderer(registry: SchemaRegistry) -> Renderer:
    """(fields as text, message) of a stored ETW event, decoded with ``registry``'s schemas;
    ``(None, None)`` when no schema knows it or its record is not an EVENT_HEADER one."""
    from openetw.events.decoded import decode_record

    def render(event: StoredEvent) -> tuple[dict[str, Any] | None, str | None]:
        raw = event.record
        if event.format != "etw" or len(raw) < L.EVENT_HEADER.size or raw[2] not in (L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_EVENT_HEADER64):
            return event.fields, event.message
        record = EventHeaderRecord(L.EVENT_HEADER.unpack_from(raw, 0), raw, 0, len(raw), 0, DEFAULT_CONTEXT)
        try:
            decoded = decode_record(record, registry)
        except Exception:  # noqa: BLE001 - a record that does not decode stays unrendered
            return None, None
        if decoded.decoded is None:
            return None, None
        return decoded.text_properties(), decoded.message

    return render


def installed_renderer() -> Renderer:
    """A renderer over the installed manifests (both stores), as ``openetw log query`` reads."""
    from openetw.events.registry import build_registry

    return etw_renderer(build_registry())
