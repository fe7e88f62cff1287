"""Names for records before (or without) full decoding: TraceLogging traits, kernel classes, manifests."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from openetw.etl.record import EventRecord


def _tracelogging_provider_name(traits: bytes) -> str | None:
    """The provider name at the start of a PROV_TRAITS blob (u16 size, then UTF-8 NUL-terminated)."""
    if len(traits) < 3:
        return None
    end = traits.find(b"\0", 2)
    if end < 0:
        return None
    return traits[2:end].decode("utf-8", "replace") or None


def _tracelogging_event_name(metadata: bytes) -> str | None:
    """The event name in an EVENT_SCHEMA_TL blob: after u16 size and the tag bytes."""
    pos = 2
    while pos < len(metadata) and metadata[pos] & 0x80:
        pos += 1
    pos += 1
    end = metadata.find(b"\0", pos)
    if end < 0:
        return None
    return metadata[pos:end].decode("utf-8", "replace") or None


class RecordNamer:
    """Finds provider and event names for records; results are cached per identity."""

    def __init__(self, lookup: Any = None) -> None:
        self._lookup = lookup  # an optional object with provider_name(record)/event_name(record)
        self._kernel = _kernel_table()
        self._cache: dict[tuple[Any, ...], tuple[str | None, str | None]] = {}

    def _names(self, record: EventRecord) -> tuple[str | None, str | None]:
        if record.kind == "event" and record.flags & 1:
            traits, schema = record.provider_traits, record.tracelogging_schema
            if schema is not None or traits is not None:
                key: tuple[Any, ...] = ("tl", record.provider_guid_bytes, traits, schema)
                found = self._cache.get(key)
                if found is None:
                    found = (
                        _tracelogging_provider_name(traits) if traits else None,
                        _tracelogging_event_name(schema) if schema else None,
                    )
                    if self._lookup is not None:
                        found = (found[0] or self._lookup.provider_name(record), found[1] or self._lookup.event_name(record))
                    self._cache[key] = found
                return found
        key = (record.kind, record.provider_guid_bytes, record.hook_id, record.id, record.version, record.opcode)
        found = self._cache.get(key)
        if found is None:
            found = self._resolve(record)
            self._cache[key] = found
        return found

    def _resolve(self, record: EventRecord) -> tuple[str | None, str | None]:
        if self._lookup is not None:
            provider, event = self._lookup.provider_name(record), self._lookup.event_name(record)
            if provider or event:
                return provider, event
        if self._kernel is not None:
            return self._kernel(record)
        return None, None

    def provider_name(self, record: EventRecord) -> str | None:
        return self._names(record)[0]

    def event_name(self, record: EventRecord) -> str | None:
        return self._names(record)[1]


def _kernel_table() -> Callable[[EventRecord], tuple[str | None, str | None]] | None:
    """A resolver over the classic kernel MOF classes, when that table is available."""
    try:
        from openetw.tdh import mof_kernel
    except ImportError:
        return None
    find = getattr(mof_kernel, "find_layout", None)
    if find is None:
        return None

    def resolve(record: EventRecord) -> tuple[str | None, str | None]:
        if record.kind in ("system", "compact", "perfinfo"):
            key: Any = (record.hook_id or 0) >> 8
        elif record.kind in ("classic", "instance") and record.provider_guid_bytes is not None:
            key = record.provider_id
        else:
            return None, None
        try:
            found = find(key, record.opcode, record.version)
        except Exception:  # noqa: BLE001 - a table under construction must never break a dump
            return None, None
        if not found:
            return None, None
        cls, event = found[0], found[1]
        name = f"{cls.task_name}/{event.event_name}" if event.event_name else cls.task_name
        return cls.provider_name, name

    return resolve


__all__ = ["RecordNamer", "uuid"]
