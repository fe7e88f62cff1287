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
from openetw.tdh.format import fill_plan, format_event_message, format_value, int_as_str, message_plan
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
            if decoder.plain is not None:
                rendered = _planned(decoder.plain, decoder.maps, raw)
                if rendered is not None:
                    out.append(rendered)
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
        unique = all(schema.property_named(name) is prop for name, prop in zip(names, schema.properties, strict=True))
        compiled = self.registry.compiled(schema, record.pointer_size)
        plan = message_plan(schema.message, len(names)) if schema.message is not None else None
        plain = None
        if unique and (schema.message is None or plan is not None):
            plain = _Plain(compiled, names, schema.properties, [int_as_str(prop, schema.maps) for prop in schema.properties], plan)
        return _Decoder(compiled, schema.property_named, schema.maps, names if unique else None, plain)


class _Plain(NamedTuple):
    """What renders an event of a schema whose properties' names are unique and whose message
    inserts have no ``!spec!``: its properties in order, which of them ``format_value`` gives
    as ``str`` when they are ints (``tdh.format.int_as_str``), and its message's plan."""

    compiled: Any  # tdh.compiled.CompiledSchema
    names: list[str]
    properties: Sequence[Any]
    int_as_str: list[bool]
    plan: tuple[str | int, ...] | None  # tdh.format.message_plan; None: the schema has no message


class _Decoder(NamedTuple):
    compiled: Any  # tdh.compiled.CompiledSchema
    properties: Callable[[str], Any]
    maps: Any
    names: list[str] | None  # the properties' names in order, when each name finds its own property
    plain: _Plain | None = None


def _planned(plain: _Plain, maps: Any, raw: bytes) -> tuple[dict[str, Any], str | None] | None:
    """(fields, message) of a record whose every property decodes, with the texts the general
    path gives (strings as they are, ints as ``str`` where that is their text, anything else by
    ``format_value``); ``None`` for the general path to decide (a property that does not
    decode, a message longer than is kept whole)."""
    try:
        values, errors = plain.compiled(raw[_USER_DATA_AT:])
    except Exception:  # noqa: BLE001 - the general path decides (and leaves it unrendered)
        return None
    if errors or len(values) != len(plain.names):
        return None
    texts: list[str] = []
    for value, prop, as_str in zip(values.values(), plain.properties, plain.int_as_str, strict=True):
        kind = type(value)
        if kind is str:
            texts.append(value)
        elif kind is int and as_str:
            texts.append(str(value))
        else:
            texts.append(format_value(value, prop, maps))
    if list(values) != plain.names:
        return None
    if plain.plan is None:
        return dict(zip(plain.names, texts, strict=True)), None
    message = fill_plan(plain.plan, texts)
    if message is None:
        return None
    return dict(zip(plain.names, texts, strict=True)), message


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
