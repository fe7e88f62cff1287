"""Decoding events: a schema per event (the TRACE_EVENT_INFO idea) and its properties, on demand.

``Schema`` / ``PropertyInfo`` / ``EventMap`` describe an event wherever the description comes
from (manifest: ``schemas_from_manifest``; TraceLogging metadata: ``schema_from_record``; MOF
class: ``schema_from_mof``; WPP format); ``decode_properties`` walks an event's user data with
it lazily, ``decode_all`` decodes everything at once through the schema's compiled reader
(``compile_schema``); ``openetw.tdh.format`` renders values and messages as TDH does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.etl.schema import REST, EventMap, MapEntry, PropertyInfo, Schema
    from openetw.etl.tracelogging import encode_event_metadata, encode_provider_traits, pack_values, tl_field
    from openetw.tdh.compiled import CompiledSchema, compile_schema
    from openetw.tdh.decode import DecodedEvent, decode_all, decode_properties
    from openetw.tdh.format import (
        format_event_message,
        format_message,
        format_properties,
        format_property,
        format_value,
    )
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

# Each name loads its module on first use, so that importing one module of the package (or the
# package) loads nothing else: a command pays at start-up for the modules it uses only.
_LAZY: dict[str, str] = {
    "REST": "openetw.etl.schema",
    "EventMap": "openetw.etl.schema",
    "MapEntry": "openetw.etl.schema",
    "PropertyInfo": "openetw.etl.schema",
    "Schema": "openetw.etl.schema",
    "encode_event_metadata": "openetw.etl.tracelogging",
    "encode_provider_traits": "openetw.etl.tracelogging",
    "pack_values": "openetw.etl.tracelogging",
    "tl_field": "openetw.etl.tracelogging",
    "CompiledSchema": "openetw.tdh.compiled",
    "compile_schema": "openetw.tdh.compiled",
    "DecodedEvent": "openetw.tdh.decode",
    "decode_all": "openetw.tdh.decode",
    "decode_properties": "openetw.tdh.decode",
    "format_event_message": "openetw.tdh.format",
    "format_message": "openetw.tdh.format",
    "format_properties": "openetw.tdh.format",
    "format_property": "openetw.tdh.format",
    "format_value": "openetw.tdh.format",
    "schema_from_manifest_event": "openetw.tdh.from_manifest",
    "schemas_from_manifest": "openetw.tdh.from_manifest",
    "schema_from_mof": "openetw.tdh.mof",
    "ProviderTraits": "openetw.tdh.tracelogging",
    "parse_event_metadata": "openetw.tdh.tracelogging",
    "parse_provider_traits": "openetw.tdh.tracelogging",
    "schema_from_record": "openetw.tdh.tracelogging",
    "schema_from_tracelogging": "openetw.tdh.tracelogging",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
