"""Event Log (``.evtx``) records in the table layout.

An ``.evtx`` record carries its values already decoded (``EventData``/``UserData`` by name), not
a payload to decode with a schema. Its table is ``"<Provider>/Event<id>"`` (``_v<version>``),
and its columns are typed from the values of the first record with that set of names
(integers as ``int64``, ``uint64`` when they need it, floats, booleans, strings, binary, GUIDs
as text, times as UTC timestamps, arrays as lists; nested ``UserData`` elements as JSON text).
A later value that does not fit its column is null and counted as untyped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from openetw.events.text import json_value
from openetw.manifest.winmeta import InType
from openetw.tdh.schema import REST, PropertyInfo, Schema

__all__ = ["evtx_identity", "evtx_values"]

_INT64_MAX = (1 << 63) - 1


def _in_type(value: Any) -> int:
    if isinstance(value, bool):
        return InType.BOOLEAN
    if isinstance(value, int):
        return InType.UINT64 if value > _INT64_MAX else InType.INT64
    if isinstance(value, float):
        return InType.DOUBLE
    if isinstance(value, (bytes, bytearray, memoryview)):
        return InType.BINARY
    if isinstance(value, uuid.UUID):
        return InType.GUID
    if isinstance(value, datetime):
        return InType.FILETIME
    return InType.UNICODESTRING


def _property(name: str, value: Any) -> PropertyInfo:
    if isinstance(value, (list, tuple)):
        first = next((item for item in value if item is not None), None)
        return PropertyInfo(name, _in_type(first), count=REST)
    return PropertyInfo(name, _in_type(value))


def evtx_values(values: dict[str, Any]) -> dict[str, Any]:
    """The record's values as the columns take them (nested elements as JSON text)."""
    return {name: json.dumps(json_value(value)) if isinstance(value, dict) else value for name, value in values.items()}


def evtx_identity(record: Any) -> tuple[tuple[Any, ...], Callable[[], Schema], dict[str, Any]]:
    """(the record's table key, how to make its schema, its values)."""
    values = evtx_values(record.properties())
    provider = record.provider_name or (str(record.provider_id) if record.provider_guid_bytes is not None else "evtx")
    key = ("evtx", provider, record.id, record.version, tuple(values))

    def schema() -> Schema:
        guid = record.provider_id if record.provider_guid_bytes is not None else uuid.UUID(int=0)
        return Schema(
            provider_id=guid, event_id=record.id, version=record.version, opcode=record.opcode, level=record.level,
            task=record.task, keyword=record.keyword, provider_name=provider, event_name=f"Event{record.id}",
            properties=tuple(_property(name, value) for name, value in values.items()), source=cast(Any, "evtx"),
        )  # fmt: skip

    return key, schema, values
