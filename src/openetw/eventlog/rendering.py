"""Rendering stored ETW events (fields and message) from their whole record bytes and a schema
registry. Pure given the registry: the service renders what it stored first in batches, a
reader renders what is not rendered yet as it reads (``LogStore(renderer=...)``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from openetw.etl import layouts as L
from openetw.etl.record import DEFAULT_CONTEXT, EventHeaderRecord
from openetw.eventlog.model import StoredEvent
from openetw.tdh.format import format_event_message, format_value
from openetw.tdh.registry import SchemaRegistry

__all__ = ["EtwRenderer", "Renderer", "etw_renderer", "installed_renderer"]

Renderer = Callable[[StoredEvent], tuple[dict[str, Any] | None, str | None]]


class EtwRenderer:
    """(fields as text, message) of a stored ETW event, decoded with ``registry``'s schemas;
    ``(None, None)`` when no schema knows it or it does not decode. Called with one event, or
    ``records(raws)`` for the whole records of many at once (``LogStore.render_pending``): the
    schema found once per (provider, event id, version) and its compiled decoder and property
    table reused, with the same results event by event."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry

    def __call__(self, event: StoredEvent) -> tuple[dict[str, Any] | None, str | None]:
        from openetw.events.decoded import decode_record

        raw = event.record
        if event.format != "etw" or not _is_event_header(raw):
            return event.fields, event.message
        record = EventHeaderRecord(L.EVENT_HEADER.unpack_from(raw, 0), raw, 0, len(raw), 0, DEFAULT_CONTEXT)
        try:
            decoded = decode_record(record, self.registry)
        except Exception:  # noqa: BLE001 - a record that does not decode stays unrendered
            return None, None
        if decoded.decoded is None:
            return None, None
        return decoded.text_properties(), decoded.message

    def records(self, raws: Sequence[bytes]) -> list[tuple[dict[str, Any] | None, str | None]]:
        """What ``self(event)`` gives for ETW events whose whole records are ``raws``."""
        out: list[tuple[dict[str, Any] | None, str | None]] = []
        schemas: dict[bytes, _Decoder | None] = {}
        for raw in raws:
            if not _is_event_header(raw) or _u16(raw, _FLAGS_AT)[0] & L.EVENT_HEADER_FLAG_EXTENDED_INFO:
                out.append(self(_etw_event(raw)))  # no header to key on, or a schema of its own (TraceLogging)
                continue
            key = raw[_KEY_FROM:_KEY_TO] + raw[2:3]
            decoder = schemas.get(key, _MISSING)
            if decoder is _MISSING:
                decoder = schemas[key] = self._decoder(raw)
            if decoder is None:
                out.append((None, None))
                continue
            try:
                values = decoder.compiled.decode(raw[_USER_DATA_AT:])
            except Exception:  # noqa: BLE001 - as the per-event path: stays unrendered
                out.append((None, None))
                continue
            properties, maps = decoder.properties, decoder.maps
            fields = {name: format_value(value, properties(name), maps) for name, value in values.items()}
            # every property decoded, in schema order: the message takes their texts as they are
            texts = list(fields.values()) if decoder.names is not None and list(fields) == decoder.names else None
            out.append((fields, format_event_message(values, texts=texts)))
        return out

    def _decoder(self, raw: bytes) -> _Decoder | None:
        record = EventHeaderRecord(L.EVENT_HEADER.unpack_from(raw, 0), raw, 0, len(raw), 0, DEFAULT_CONTEXT)
        try:
            schema = self.registry.schema_for(record)
        except Exception:  # noqa: BLE001 - as the per-event path: a lookup that fails leaves it unrendered
            return None
        if schema is None:
            return None
        names = [prop.name for prop in schema.properties]
        plain = all(schema.property_named(name) is prop for name, prop in zip(names, schema.properties, strict=True))
        return _Decoder(self.registry.compiled(schema, record.pointer_size), schema.property_named, schema.maps, names if plain else None)


class _Decoder(NamedTuple):
    compiled: Any  # tdh.compiled.CompiledSchema
    properties: Callable[[str], Any]
    maps: Any
    names: list[str] | None  # the properties' names in order, when each name finds its own property


_MISSING: Any = object()
_u16 = struct.Struct("<H").unpack_from
_FLAGS_AT = L.EVENT_HEADER.offset("Flags")
_KEY_FROM = L.EVENT_HEADER.offset("ProviderId")
_KEY_TO = L.EVENT_HEADER.offset("Version") + 1  # provider, event id, version
_USER_DATA_AT = L.EVENT_HEADER.size


def _is_event_header(raw: Any) -> bool:
    return isinstance(raw, bytes) and len(raw) >= L.EVENT_HEADER.size and raw[2] in (L.HEADER_TYPE_EVENT_HEADER32, L.HEADER_TYPE_EVENT_HEADER64)


def _etw_event(raw: bytes) -> StoredEvent:
    return StoredEvent(time_created=0, provider="", event_id=0, record=raw, format="etw")


def etw_renderer(registry: SchemaRegistry) -> EtwRenderer:
    """The renderer of stored ETW events over ``registry`` (see ``EtwRenderer``)."""
    return EtwRenderer(registry)


def installed_renderer() -> Renderer:
    """A renderer over the installed manifests (both stores), as ``openetw log query`` reads."""
    from openetw.events.registry import build_registry

    return etw_renderer(build_registry())
