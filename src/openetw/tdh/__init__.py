"""Decoding events: a schema per event (the TRACE_EVENT_INFO idea) and its properties, on demand.

``Schema`` / ``PropertyInfo`` / ``EventMap`` describe an event wherever the description comes
from (manifest, TraceLogging metadata, MOF class, WPP format); ``decode_properties`` walks an
event's user data with it; ``openetw.tdh.format`` renders values and messages as TDH does.
"""

from openetw.tdh.decode import DecodedEvent, decode_properties
from openetw.tdh.format import format_event_message, format_message, format_properties, format_property, format_value
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema
from openetw.tdh.tracelogging import (
    ProviderTraits,
    encode_event_metadata,
    encode_provider_traits,
    pack_values,
    parse_event_metadata,
    parse_provider_traits,
    schema_from_record,
    schema_from_tracelogging,
    tl_field,
)

__all__ = [
    "DecodedEvent",
    "EventMap",
    "MapEntry",
    "PropertyInfo",
    "ProviderTraits",
    "Schema",
    "decode_properties",
    "encode_event_metadata",
    "encode_provider_traits",
    "format_event_message",
    "format_message",
    "format_properties",
    "format_property",
    "format_value",
    "pack_values",
    "parse_event_metadata",
    "parse_provider_traits",
    "schema_from_record",
    "schema_from_tracelogging",
    "tl_field",
]
