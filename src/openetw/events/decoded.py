"""One record with everything a report shows about it: names, schema, decoded fields, message.

``decode_record`` looks the record's schema up in a ``SchemaRegistry`` and decodes its user data
(every format shows every property, so all at once, through the registry's compiled schemas).
``decode_records`` does it for a stream, feeding a ``DecodeContext`` on the way so that process
names and in-trace manifests are known.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from openetw.errors import OpenEtwError
from openetw.etl.record import EventRecord
from openetw.guids import format_guid
from openetw.tdh.context import DecodeContext
from openetw.tdh.decode import DecodedEvent
from openetw.tdh.format import format_event_message, format_value
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema

__all__ = ["DecodedRecord", "decode_record", "decode_records", "provider_key"]

_KERNEL_KINDS = ("system", "compact", "perfinfo")


def provider_key(record: EventRecord) -> str:
    """A stable key for the record's source: its provider GUID, the kernel group, or its kind."""
    if record.provider_guid_bytes is not None:
        return format_guid(record.provider_id)
    if record.hook_id is not None:
        return f"kernel group 0x{(record.hook_id >> 8):02x}"
    return record.kind


@dataclass(slots=True)
class DecodedRecord:
    """A record, its schema (``None`` when none is known) and its decoded properties."""

    record: EventRecord
    schema: Schema | None
    decoded: DecodedEvent | None
    provider_name: str | None
    event_name: str | None
    process_name: str | None = None
    lookup_error: str | None = None

    @property
    def provider_label(self) -> str:
        """The provider's name, else its GUID, else what kind of record it is."""
        return self.provider_name or provider_key(self.record)

    @property
    def errors(self) -> dict[str, str]:
        """Property name -> why it did not decode (empty when everything decoded)."""
        if self.decoded is None:
            return {}
        return {name: error.message for name, error in self.decoded.errors.items()}

    @property
    def is_decoded(self) -> bool:
        """A schema was found and every property decoded (an Event Log record carries its values)."""
        if self.record.kind == "evtx":
            return True
        return self.decoded is not None and not self.decoded.errors

    @property
    def properties(self) -> dict[str, Any]:
        """Decoded values by name (typed), in schema order; empty without a schema."""
        if self.record.kind == "evtx":
            values: dict[str, Any] = self.record.properties()  # type: ignore[attr-defined]  # an EvtxRecord's own values
            return values
        return {} if self.decoded is None else dict(self.decoded.items())

    def text_properties(self) -> dict[str, str]:
        """Decoded values rendered as TDH renders them, in schema order."""
        if self.record.kind == "evtx":
            texts: dict[str, Any] = self.record.text_properties()  # type: ignore[attr-defined]  # as Windows shows them
            return {name: value if isinstance(value, str) else str(value) for name, value in texts.items()}
        if self.decoded is None or self.schema is None:
            return {}
        schema = self.schema
        return {name: format_value(value, schema.property_named(name), schema.maps) for name, value in self.decoded.items()}

    @property
    def message(self) -> str | None:
        """The event's message with its inserts filled, when the schema has one."""
        if self.decoded is None:
            return None
        return format_event_message(self.decoded)


def _tracelogging_names(record: EventRecord) -> tuple[str | None, str | None]:
    from openetw.tdh.tracelogging import parse_event_metadata, parse_provider_traits

    provider = event = None
    traits = record.provider_traits
    if traits:
        try:
            provider = parse_provider_traits(traits).name or None
        except OpenEtwError:  # damaged traits: the name is only a nicety
            provider = None
    metadata = record.tracelogging_schema
    if metadata:
        event = parse_event_metadata(metadata)[0]
    return provider, event


def decode_record(record: EventRecord, registry: SchemaRegistry, context: DecodeContext | None = None) -> DecodedRecord:
    """The schema, names and decoded properties of one record."""
    lookup_error = None
    schema: Schema | None = None
    if record.kind == "evtx":  # an Event Log record: its System names and values are in it
        return DecodedRecord(record, None, None, record.provider_name or None, None)  # type: ignore[attr-defined]
    if record.kind != "unknown":
        try:
            schema = context.schema_for(record) if context is not None else registry.schema_for(record)
        except ImportError as error:  # a schema source this installation lacks
            lookup_error = str(error)
    decoded = None
    provider_name = event_name = None
    if schema is not None:
        decoded = registry.decode(schema, record.user_data, record.pointer_size)
        provider_name, event_name = schema.provider_name, schema.event_name
    if provider_name is None and record.provider_guid_bytes is not None:
        try:
            provider_name = registry.provider_name(record)
        except ImportError:
            provider_name = None
    if (provider_name is None or event_name is None) and record.kind == "event" and record.flags & 1:
        tl_provider, tl_event = _tracelogging_names(record)
        provider_name, event_name = provider_name or tl_provider, event_name or tl_event
    process_name = context.process_name_of(record) if context is not None and record.kind != "unknown" else None
    return DecodedRecord(record, schema, decoded, provider_name, event_name, process_name, lookup_error)


def decode_records(
    records: Iterable[EventRecord],
    registry: SchemaRegistry,
    context: DecodeContext | None = None,
    *,
    observe: bool = True,
) -> Iterator[DecodedRecord]:
    """``decode_record`` for each record; the context observes each record first (unless it
    already learned the whole trace: ``observe=False``)."""
    for record in records:
        if context is not None and observe:
            context.observe(record)
        yield decode_record(record, registry, context)
