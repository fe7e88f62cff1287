"""Decoding events: a schema per event (the TRACE_EVENT_INFO idea) and its properties, on demand.

``Schema`` / ``PropertyInfo`` / ``EventMap`` describe an event wherever the description comes
from (manifest: ``schemas_from_manifest``; TraceLogging metadata: ``schema_from_record``; MOF
class: ``schema_from_mof``; WPP format); ``decode_properties`` walks an event's user data with
it lazily, ``decode_all`` decodes everything at once through the schema's compiled reader
(``compile_schema``); ``openetw.tdh.format`` renders values and messages as TDH does.
"""

from openetw.etl.schema import REST, EventMap, MapEntry, PropertyInfo, Schema
from openetw.etl.tracelogging import encode_event_metadata, encode_provider_traits, pack_values, tl_field
from openetw.tdh.compiled import CompiledSchema, compile_schema
from openetw.tdh.decode import DecodedEvent, decode_all, decode_properties
from openetw.tdh.format import format_event_message, format_message, format_properties, format_property, format_value
from openetw.tdh.from_manifest import schema_from_manifest_event, schemas_from_manifest
from openetw.tdh.mof import schema_from_mof
from openetw.tdh.tracelogging import (
    ProviderTraits,
    parse_event_metadata,
    parse_provider_traits,
    schema_from_record,
    schema_from_tracelogging,
)

__all__ = [
    "REST",
    "CompiledSchema",
    "DecodedEvent",
    "EventMap",
    "MapEntry",
    "PropertyInfo",
    "ProviderTraits",
    "Schema",
    "compile_schema",
    "decode_all",
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
    "schema_from_manifest_event",
    "schema_from_mof",
    "schema_from_record",
    "schema_from_tracelogging",
    "schemas_from_manifest",
    "tl_field",
]
