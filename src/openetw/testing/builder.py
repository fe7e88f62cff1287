"""``EventRecordBuilder``: records a provider would write, for tests (krabsetw's record_builder).

::

    record = (EventRecordBuilder("MyCompany.MyComponent", 7, pid=42)
              .add_property("Path", "C:\\\\x.txt").add_property("Count", 3)
              .pack_tracelogging("FileOpened"))

``pack_tracelogging`` writes a self-describing event (metadata and provider traits in extended
items, through ``openetw.tdh.tracelogging``); ``pack_manifest(schema)`` lays the values out as
the manifest template says (``openetw.testing.packing``); ``pack_classic`` writes an
EVENT_TRACE_HEADER event; ``pack(user_data)`` any bytes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.build import build_classic_record, build_event_record
from openetw.etl.extended import EXT_EVENT_SCHEMA_TL, EXT_PROV_TRAITS, ExtendedItem
from openetw.etl.intypes import InType, OutType
from openetw.etl.record import DEFAULT_CONTEXT, EventRecord, RecordContext
from openetw.guids import NULL_GUID, parse_guid, provider_guid_from_name
from openetw.provider.inference import field_for_value
from openetw.tdh.from_manifest import schemas_from_manifest
from openetw.tdh.schema import PropertyInfo, Schema
from openetw.tdh.tracelogging import (
    TRACELOGGING_CHANNEL,
    encode_event_metadata,
    encode_provider_traits,
    pack_values,
    tl_field,
)
from openetw.testing.packing import pack_template

__all__ = ["EventRecordBuilder", "infer_field", "manifest_schema"]


def infer_field(name: str, value: Any) -> PropertyInfo:
    """The TraceLogging field a Python value is written as: the provider's own inference
    (``openetw.provider.inference.field_for_value``: ``int`` as INT64, ``str`` as UTF-16, ``bytes``
    as binary, ``datetime`` as FILETIME, ``dict`` as a struct, ``list`` as an array, ...), so a
    built record is the one a ``TraceLoggingProvider`` writes."""
    return field_for_value(name, value)


def manifest_schema(manifest: Any, event: int | str, version: int | None = None, provider: str | uuid.UUID | None = None) -> Schema:
    """The schema of one event of a parsed manifest, by id, symbol or event name (its highest
    version unless ``version`` is given)."""
    found: list[tuple[int, Schema]] = []
    for provider_id, event_id, event_version, schema in schemas_from_manifest(manifest):
        if provider is not None and provider not in (provider_id, schema.provider_name, str(provider_id)):
            continue
        if version is not None and event_version != version:
            continue
        if event in (event_id, schema.event_name, _symbol(manifest, provider_id, event_id, event_version)) and not isinstance(event, bool):
            found.append((event_version, schema))
    if not found:
        raise InvalidArgument(f"the manifest has no event {event!r}" + (f" version {version}" if version is not None else ""))
    return max(found, key=lambda item: item[0])[1]


def _symbol(manifest: Any, provider_id: uuid.UUID, event_id: int, version: int) -> str | None:
    for provider in manifest.providers:
        if provider.guid == provider_id:
            for event in provider.events:
                if event.value == event_id and event.version == version:
                    return event.symbol  # type: ignore[no-any-return]
    return None


class EventRecordBuilder:
    """One event's header fields and properties, packed into an ``EventRecord`` on request.

    ``provider`` is a GUID (or GUID text) or a provider name (its GUID then comes from ETW's
    name hash, as for TraceLogging and EventSource providers).
    """

    def __init__(
        self,
        provider: uuid.UUID | str,
        id: int = 0,  # noqa: A002 - the event descriptor's name
        version: int = 0,
        *,
        opcode: int = 0,
        level: int = 0,
        task: int = 0,
        keyword: int = 0,
        channel: int = 0,
        pid: int = 0,
        tid: int = 0,
        timestamp: int = 0,
        cpu: int = 0,
        pointer_size: int = 8,
        activity_id: uuid.UUID = NULL_GUID,
        extended: tuple[ExtendedItem, ...] = (),
        context: RecordContext = DEFAULT_CONTEXT,
    ) -> None:
        self.provider_name: str | None = None
        if isinstance(provider, uuid.UUID):
            self.provider_id = provider
        else:
            try:
                self.provider_id = parse_guid(provider)
            except ValueError:
                self.provider_name = provider
                self.provider_id = provider_guid_from_name(provider)
        self.header: dict[str, Any] = {
            "id": id, "version": version, "opcode": opcode, "level": level, "task": task, "keyword": keyword,
            "channel": channel, "pid": pid, "tid": tid, "timestamp": timestamp, "cpu": cpu,
        }  # fmt: skip
        self.pointer_size = pointer_size
        self.activity_id = activity_id
        self.extended = tuple(extended)
        self.context = context
        self.fields: list[PropertyInfo] = []
        self.values: dict[str, Any] = {}

    def add_property(self, name: str, value: Any, in_type: InType | int | None = None, out_type: OutType | int | None = None) -> EventRecordBuilder:
        """A property and its value; its type is inferred from the value unless given."""
        if name in self.values:
            raise InvalidArgument(f"property {name!r} is already set")
        field = infer_field(name, value) if in_type is None else tl_field(name, in_type, out_type)
        self.fields.append(field)
        self.values[name] = value
        return self

    def add_properties(self, values: Mapping[str, Any] | None = None, **more: Any) -> EventRecordBuilder:
        for name, value in {**(values or {}), **more}.items():
            self.add_property(name, value)
        return self

    def with_header(self, **fields: Any) -> EventRecordBuilder:
        """Change header fields (``pid=``, ``timestamp=``, ``level=``, ...)."""
        unknown = set(fields) - set(self.header)
        if unknown:
            raise InvalidArgument(f"unknown header field(s) {sorted(unknown)}; fields are {sorted(self.header)}")
        self.header.update(fields)
        return self

    # -- packing -----------------------------------------------------------------------------
    def pack(self, user_data: bytes = b"") -> EventRecord:
        """A manifest-style EVENT_HEADER record carrying ``user_data`` as is."""
        return self._event(user_data, self.header, self.extended)

    def pack_tracelogging(self, event_name: str = "Event", *, provider_name: str | None = None, tags: int = 0) -> EventRecord:
        """A TraceLogging (self-describing) event: metadata and provider traits travel with it."""
        name = provider_name or self.provider_name or str(self.provider_id)
        metadata = encode_event_metadata(event_name, self.fields, tags)
        traits = encode_provider_traits(name)
        items = (*self.extended, ExtendedItem(EXT_PROV_TRAITS, traits), ExtendedItem(EXT_EVENT_SCHEMA_TL, metadata))
        header = dict(self.header)
        if header["channel"] == 0:
            header["channel"] = TRACELOGGING_CHANNEL
        return self._event(pack_values(self.fields, self.values), header, items)

    def pack_manifest(self, schema: Schema) -> EventRecord:
        """A manifest-based event of ``schema`` (see ``manifest_schema``): its descriptor comes
        from the schema, its user data is the values packed as the template lays them out."""
        header = dict(
            self.header, id=schema.event_id, version=schema.version, opcode=schema.opcode, level=schema.level,
            task=schema.task, keyword=schema.keyword, channel=schema.channel,
        )
        self.provider_id = schema.provider_id
        return self._event(pack_template(schema, self.values, self.pointer_size), header, self.extended)

    def pack_classic(self) -> EventRecord:
        """A classic (EVENT_TRACE_HEADER) event: the provider GUID is the event class GUID, the
        opcode its type; properties are packed as a MOF layout of their types would read them."""
        fields = tuple(_classic_field(field) for field in self.fields)
        data = pack_template(Schema(self.provider_id, properties=fields), self.values, self.pointer_size)
        h = self.header
        return build_classic_record(
            event_guid=self.provider_id, type=h["opcode"], level=h["level"], version=h["version"], pid=h["pid"], tid=h["tid"],
            timestamp=h["timestamp"], cpu=h["cpu"], user_data=data, pointer_size=self.pointer_size, context=self.context,
        )  # fmt: skip

    def _event(self, user_data: bytes, header: Mapping[str, Any], extended: tuple[ExtendedItem, ...]) -> EventRecord:
        return build_event_record(
            provider_id=self.provider_id, activity_id=self.activity_id, user_data=user_data, extended=extended,
            pointer_size=self.pointer_size, context=self.context, **header,
        )  # fmt: skip


def _classic_field(field: PropertyInfo) -> PropertyInfo:
    """Binary values have no length of their own in a MOF layout: give them a counted size."""
    if field.in_type == InType.BINARY:
        return PropertyInfo(field.name, InType.MANIFEST_COUNTEDBINARY, field.out_type)
    return field
