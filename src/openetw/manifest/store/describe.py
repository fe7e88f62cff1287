"""A merged provider as plain data (what ``openetw manifest show --json`` prints). Pure.

Names are the ones the manifest writes (``win:Informational``, ``read``); when an event names
none, the name of the item its descriptor value selects is given. An event's ``name`` is its
symbol, else ``<task>/<opcode>`` (TraceEvent's convention), else ``event_<id>``.
"""

from __future__ import annotations

from typing import Any

from openetw.guids import format_guid
from openetw.manifest.model import Field, Provider
from openetw.manifest.store.merge import MergedProvider, SourcedEvent
from openetw.manifest.winmeta import OUT_TYPE_NAMES, OutType

_OUT_TYPE_SPELLING = {code: name for name, code in reversed(list(OUT_TYPE_NAMES.items()))}


def out_type_name(item: Field) -> str | None:
    """The output type as written, else the name of the one TDH uses for the inType."""
    if item.out_type_name:
        return item.out_type_name
    effective = item.effective_out_type
    return None if effective is OutType.NULL else _OUT_TYPE_SPELLING.get(effective, effective.name)


def field_view(item: Field) -> dict[str, Any]:
    view: dict[str, Any] = {
        "name": item.name,
        "in_type": "struct" if item.is_struct else item.in_type_name,
        "out_type": None if item.is_struct else out_type_name(item),
        "count": item.count,
        "length": item.length,
        "map": item.map,
    }
    if item.is_struct:
        view["members"] = [field_view(member) for member in item.members]
    return view


def event_names(sourced: SourcedEvent) -> dict[str, Any]:
    """The event's level, opcode, task and channel names (written, else found by value)."""
    event, provider = sourced.event, sourced.provider
    level = event.level
    if level is None and event.level_value:
        found_level = provider.level_by_value(event.level_value)
        level = found_level.name if found_level else None
    task = event.task
    if task is None and event.task_value:
        found_task = provider.task_by_value(event.task_value)
        task = found_task.name if found_task else None
    opcode = event.opcode
    if opcode is None and event.opcode_value:
        found_opcode = provider.opcode_by_value(event.opcode_value, event.task_value)
        opcode = found_opcode.name if found_opcode else None
    return {"level": level, "opcode": opcode, "task": task, "channel": _channel_name(sourced)}


def _channel_name(sourced: SourcedEvent) -> str | None:
    event, provider = sourced.event, sourced.provider
    channel = provider.channel(event.channel) if event.channel is not None else None
    if channel is None and event.channel_value:
        channel = provider.channel_by_value(event.channel_value)
    if channel is not None:
        return channel.name
    return event.channel


def event_display_name(sourced: SourcedEvent) -> str:
    event = sourced.event
    if event.symbol:
        return event.symbol
    names = event_names(sourced)
    if names["task"]:
        opcode = names["opcode"]
        return f"{names['task']}/{opcode.removeprefix('win:')}" if opcode else str(names["task"])
    return f"event_{event.value}"


def event_view(sourced: SourcedEvent) -> dict[str, Any]:
    event = sourced.event
    template = sourced.template
    return {
        "id": event.value,
        "version": event.version,
        "symbol": event.symbol,
        "name": event_display_name(sourced),
        **event_names(sourced),
        "keywords": list(event.keywords),
        "level_value": event.level_value,
        "opcode_value": event.opcode_value,
        "task_value": event.task_value,
        "keyword_mask": f"0x{event.keyword_mask:x}",
        "channel_value": event.channel_value,
        "message": event.message,
        "template": event.template,
        "fields": [field_view(item) for item in template.fields] if template else [],
        "source": sourced.source,
    }


def _definitions(merged: MergedProvider) -> dict[str, Any]:
    return {
        "channels": [
            {
                "name": channel.name,
                "chid": channel.chid,
                "type": channel.type.value if channel.type else None,
                "value": channel.value,
                "enabled": channel.enabled,
                "imported": channel.imported,
                "message": channel.message,
            }
            for channel in merged.channels
        ],
        "levels": [{"name": level.name, "value": level.value, "message": level.message} for level in merged.levels],
        "tasks": [
            {
                "name": task.name,
                "value": task.value,
                "event_guid": format_guid(task.event_guid) or None,
                "message": task.message,
            }
            for task in merged.tasks
        ],
        "opcodes": [
            {"name": opcode.name, "value": opcode.value, "task": opcode.task, "message": opcode.message}
            for opcode in merged.opcodes
        ],
        "keywords": [
            {"name": keyword.name, "mask": f"0x{keyword.mask:x}", "message": keyword.message}
            for keyword in merged.keywords
        ],
        "maps": [
            {
                "name": item.name,
                "kind": item.kind.value,
                "entries": [{"value": entry.value, "message": entry.message} for entry in item.entries],
            }
            for item in merged.maps
        ],
    }


def provider_view(merged: MergedProvider, stores: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything about one merged provider. ``stores`` maps a source path to the store holding it."""
    provider: Provider = merged.provider
    return {
        "provider": merged.name,
        "guid": format_guid(merged.guid),
        "symbol": provider.symbol,
        "message": provider.message,
        "resource_file": provider.resource_file,
        "message_file": provider.message_file,
        "sources": [
            {"path": source, "store": (stores or {}).get(source)} for source in merged.sources
        ],
        "events": [event_view(sourced) for sourced in merged.events.values()],
        **_definitions(merged),
        "overridden": [
            {"id": item.key[0], "version": item.key[1], "source": item.replaced_source, "by": item.winning_source}
            for item in merged.overrides
        ],
    }


__all__ = ["event_display_name", "event_names", "event_view", "field_view", "out_type_name", "provider_view"]
