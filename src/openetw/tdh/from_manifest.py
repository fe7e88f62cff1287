"""Schemas from an EventManifest: one ``Schema`` per ``<event>`` of a parsed manifest.

Names are the ones TDH reports (and PerfView shows): an item's localized message when it has
one, else its ``name``; winmeta's items by their winmeta message (``win:Informational`` is
"Information", ``win:DC_Start`` "DCStart"). ``event_name`` is PerfView's composite: the task,
then ``/`` and the opcode unless the opcode is 0 (``win:Info``); an event without a task is
named by its symbol, else ``EventID(N)``.

Damaged manifests never make this raise. A count or length naming no earlier integer field, or
a data item whose type could not be read, becomes a property with a ``problem`` (which decoding
reports as that property's error); references to undefined tasks, opcodes or maps lose the name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from openetw.etl.intypes import InType, OutType
from openetw.guids import provider_guid_from_name
from openetw.manifest import winmeta
from openetw.manifest.model import Event, Field, Keyword, Level, Manifest, Map, MapKind, Opcode, Provider, Task
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema
from openetw.tdh.schema import MapKind as SchemaMapKind

__all__ = ["schema_from_manifest_event", "schemas_from_manifest"]


# In-types whose decoded value is an integer a count or length can refer to.
_INTEGER_IN_TYPES = frozenset({
    InType.INT8, InType.UINT8, InType.INT16, InType.UINT16, InType.INT32, InType.UINT32,
    InType.INT64, InType.UINT64, InType.HEXINT32, InType.HEXINT64, InType.BOOLEAN,
    InType.POINTER, InType.SIZET,
})  # fmt: skip
# Out-types that turn an integer into something else (an address object).
_NON_INTEGER_OUT_TYPES = frozenset({OutType.IPV4})


def _display(item: Level | Task | Opcode | Keyword) -> str:
    """The text TDH shows for a level, task, opcode, keyword: its message, else its name."""
    name = item.name
    if getattr(item, "standard", False):  # (a task is never a standard one)
        return winmeta.MESSAGE_TEXT.get(name, name.removeprefix("win:"))
    message = item.message
    return message.strip() if message and message.strip() else name


def _event_name(provider: Provider, event: Event) -> tuple[str, str | None, str | None]:
    """(composite event name, task name, opcode name)."""
    task = provider.task_for(event)
    task_name = _display(task) if task is not None else event.task
    opcode = provider.opcode_for(event)
    opcode_name = _display(opcode) if opcode is not None else (event.opcode.removeprefix("win:") if event.opcode else None)
    base = task_name or event.symbol or f"EventID({event.value})"
    if event.opcode_value != 0 and opcode_name:
        return f"{base}/{opcode_name}", task_name, opcode_name
    return base, task_name, opcode_name


def _loose(name: str) -> str:
    return "".join(name.split()).casefold()


def _event_map(item: Map) -> EventMap:
    kind: SchemaMapKind = "bit" if item.kind is MapKind.BIT_MAP else "value"
    entries = tuple(
        MapEntry(entry.value, entry.message if entry.message is not None else (entry.message_ref or str(entry.value)))
        for entry in item.entries
    )
    return EventMap(item.name, kind, entries)


class _TemplateBuilder:
    """Turns a template's fields into properties, checking references in document order."""

    def __init__(self, provider: Provider, map_cache: dict[str, EventMap]) -> None:
        self.provider = provider
        self.map_cache = map_cache
        self.maps: dict[str, EventMap] = {}
        # Every field seen so far (at any depth) -> whether its value is an integer.
        self.earlier: dict[str, bool] = {}

    def properties(self, fields: tuple[Field, ...]) -> tuple[PropertyInfo, ...]:
        return tuple(self.prop(field) for field in fields)

    def prop(self, field: Field) -> PropertyInfo:
        count, count_problem = self.reference("count", field.count)
        length, length_problem = self.reference("length", field.length)
        problem = count_problem or length_problem
        if field.is_struct:
            members = self.properties(field.members)
            self.earlier.setdefault(field.name, False)
            return PropertyInfo(field.name, InType.NULL, count=count, length=length, members=members, problem=problem)
        out_type = field.out_type if field.out_type is not OutType.NULL else None
        if field.in_type is InType.NULL and problem is None:
            problem = f"inType {field.in_type_name!r} does not describe the payload, which cannot be decoded"
        is_integer = field.in_type in _INTEGER_IN_TYPES and out_type not in _NON_INTEGER_OUT_TYPES and field.count is None
        self.earlier[field.name] = is_integer
        return PropertyInfo(
            field.name,
            field.in_type,
            out_type,
            count=count,
            length=length,
            map_name=self.map_name(field.map),
            problem=problem,
        )

    def reference(self, kind: str, ref: int | str | None) -> tuple[int | str | None, str | None]:
        """The count or length to use, and the problem with it (``None`` when it resolves).

        Some regenerated manifests spell a reference as the field's display name ("Byte Length"
        for ``ByteLength``); a unique match ignoring spaces and case is taken as meant.
        """
        if not isinstance(ref, str):
            return ref, None
        found = self.earlier.get(ref)
        if found is None:
            wanted = _loose(ref)
            matches = [name for name in self.earlier if _loose(name) == wanted]
            if len(matches) == 1:
                ref = matches[0]
                found = self.earlier[ref]
        if found is None:
            return ref, f"{kind} refers to {ref!r}, which is not an earlier field of the template"
        if not found:
            return ref, f"{kind} refers to {ref!r}, which is not an integer field"
        return ref, None

    def map_name(self, name: str | None) -> str | None:
        if name is None:
            return None
        converted = self.map_cache.get(name)
        if converted is None:
            item = self.provider.map(name)
            if item is None:
                return None
            converted = self.map_cache[name] = _event_map(item)
        self.maps[name] = converted
        return name


def _build(provider: Provider, event: Event, map_cache: dict[str, EventMap]) -> Schema:
    event_name, task_name, opcode_name = _event_name(provider, event)
    level = provider.level(event.level) if event.level is not None else None
    if level is None:
        level = provider.level_by_value(event.level_value)
    keyword_names: list[str] = []
    for word in event.keywords:
        keyword = provider.keyword(word)
        keyword_names.append(_display(keyword) if keyword is not None else word)
    channel = provider.channel(event.channel) if event.channel else None
    builder = _TemplateBuilder(provider, map_cache)
    template = provider.template_for(event)
    properties: tuple[PropertyInfo, ...] = ()
    if template is not None:
        properties = builder.properties(template.fields)
    elif event.template is not None:
        problem = f"template {event.template!r} is not defined"
        properties = (PropertyInfo("", InType.NULL, problem=problem),)
    return Schema(
        provider_id=provider.guid if provider.guid is not None else provider_guid_from_name(provider.name),
        event_id=event.value,
        version=event.version,
        opcode=event.opcode_value,
        level=event.level_value,
        task=event.task_value,
        keyword=event.keyword_mask,
        channel=event.channel_value,
        provider_name=provider.name,
        event_name=event_name,
        task_name=task_name,
        opcode_name=opcode_name,
        level_name=_display(level) if level is not None else None,
        keyword_names=tuple(keyword_names),
        channel_name=channel.name if channel is not None else event.channel,
        message=event.message,
        provider_message=provider.message,
        properties=properties,
        maps=builder.maps,
        source="manifest",
    )


def schema_from_manifest_event(manifest: Manifest, provider: Provider, event: Event) -> Schema:
    """The schema of one ``<event>`` of ``provider`` (a provider of ``manifest``).

    A provider without a GUID gets the one ETW derives from its name (as EventSource does).
    """
    del manifest  # the model has already resolved every message into ``provider``
    return _build(provider, event, {})


def schemas_from_manifest(manifest: Manifest) -> Iterator[tuple[uuid.UUID, int, int, Schema]]:
    """``(provider GUID, event id, version, schema)`` for every event of every provider.

    When a damaged manifest defines the same (id, version) twice, both are yielded, in order.
    """
    for provider in manifest.providers:
        map_cache: dict[str, EventMap] = {}
        for event in provider.events:
            schema = _build(provider, event, map_cache)
            yield schema.provider_id, event.value, event.version, schema
