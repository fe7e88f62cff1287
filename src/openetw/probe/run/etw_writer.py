"""``etw_trace(...)``'s writes: TraceLogging events through real openetw providers.

One ``TraceLoggingProvider`` per (provider name, GUID) a program writes with, registered with
the trace service on first use and kept for the run; one declared event per (event name, level,
keyword, fields). A write with no session listening to the provider at that level and keyword
writes nothing, as on Windows ("events will only be logged if there is an active listener").
A GUID other than the ETW hash of the provider name is used as given, with a warning once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from openetw.errors import OpenEtwError
from openetw.etl.schema import PropertyInfo
from openetw.etl.tracelogging import TLG_STRUCT, tl_field
from openetw.guids import provider_guid_from_name
from openetw.probe.lang.errors import ProbeRuntimeError
from openetw.probe.lang.etw_types import ETW_TYPES

__all__ = ["EtwTraceWriter", "etw_fields"]

FieldSpec = tuple[tuple[str, str, int], ...]  # (etw type, field name, members of an etw_struct)


def etw_fields(spec: FieldSpec) -> tuple[list[PropertyInfo], Callable[[tuple[Any, ...]], list[Any]]]:
    """The TraceLogging fields of an ``etw_trace`` field list, and the function that makes the
    event's values from the call's (an ``etw_struct`` takes the values of its members as a
    mapping; its own value is its member count, not written)."""
    at = 0

    def take(count: int) -> tuple[list[PropertyInfo], list[Callable[[tuple[Any, ...]], Any]]]:
        nonlocal at
        fields: list[PropertyInfo] = []
        makers: list[Callable[[tuple[Any, ...]], Any]] = []
        while len(fields) < count:
            kind, name, members = spec[at]
            position = at
            at += 1
            etw = ETW_TYPES[kind]
            if etw.in_type is None:
                inner, inner_makers = take(members)
                fields.append(tl_field(name, TLG_STRUCT, members=inner))
                names = [f.name for f in inner]
                makers.append(_struct_maker(names, inner_makers))
            else:
                fields.append(tl_field(name, etw.in_type, etw.out_type))
                convert = _converter(kind)
                makers.append(_value_maker(position, convert))
        return fields, makers

    out: list[PropertyInfo] = []
    makers: list[Callable[[tuple[Any, ...]], Any]] = []
    while at < len(spec):
        fields, made = take(1)
        out.extend(fields)
        makers.extend(made)
    return out, lambda values: [make(values) for make in makers]


def _struct_maker(names: list[str], makers: list[Callable[[tuple[Any, ...]], Any]]) -> Callable[[tuple[Any, ...]], Any]:
    return lambda values: dict(zip(names, [make(values) for make in makers], strict=True))


def _value_maker(position: int, convert: Callable[[Any], Any]) -> Callable[[tuple[Any, ...]], Any]:
    return lambda values: convert(values[position])


def _converter(kind: str) -> Callable[[Any], Any]:
    etw = ETW_TYPES[kind]
    if etw.value == "float":
        return float
    if etw.value == "string":
        return str
    bits = etw.bits
    mask = (1 << bits) - 1
    if etw.signed:
        half = 1 << (bits - 1)
        return lambda v: ((int(v) + half) & mask) - half
    return lambda v: int(v) & mask


class EtwTraceWriter:
    """Writes ``etw_trace`` events (see the module doc); ``written`` counts those a session took."""

    def __init__(self, warn: Callable[[str], Any]) -> None:
        self.warn = warn
        self.providers: dict[tuple[str, str], Any] = {}
        self.events: dict[tuple[Any, ...], tuple[Any, Callable[[tuple[Any, ...]], list[Any]]]] = {}
        self.written = 0
        self.skipped = 0

    def provider(self, name: str, guid_text: str) -> Any:
        key = (name, guid_text)
        found = self.providers.get(key)
        if found is None:
            from openetw.provider import TraceLoggingProvider

            try:
                guid = uuid.UUID(guid_text.strip().strip("{}"))
            except ValueError:
                raise ProbeRuntimeError(f"etw_trace(): {guid_text!r} is not a provider GUID") from None
            hashed = provider_guid_from_name(name)
            if guid != hashed:
                self.warn(f"openetw probe: etw_trace(): provider {name!r} is given GUID {guid}, not its name's hash {hashed}; using {guid}")
            try:
                found = TraceLoggingProvider(name, guid=guid).register()
            except OpenEtwError as error:
                raise ProbeRuntimeError(f"etw_trace(): provider {name!r}: {error}") from None
            self.providers[key] = found
        return found

    def write(self, name: str, guid: str, event_name: str, level: int, keyword: int, spec: FieldSpec, values: tuple[Any, ...]) -> None:
        provider = self.provider(name, guid)
        level &= 0xFF
        keyword &= 0xFFFFFFFFFFFFFFFF
        if not provider.is_enabled(level, keyword):
            self.skipped += 1
            return
        key = (id(provider), event_name, level, keyword, spec)
        found = self.events.get(key)
        if found is None:
            fields, make = etw_fields(spec)
            try:
                event = provider.event(event_name, level=level, keyword=keyword, fields=fields)
            except OpenEtwError as error:
                raise ProbeRuntimeError(f"etw_trace(): event {event_name!r}: {error}") from None
            found = self.events[key] = (event, make)
        event, make = found
        try:
            took = event.write(*make(values))
        except OpenEtwError as error:
            raise ProbeRuntimeError(f"etw_trace(): {error}") from None
        if took:
            self.written += 1
        else:
            self.skipped += 1

    def close(self) -> None:
        for provider in self.providers.values():
            provider.unregister()
        self.providers.clear()
        self.events.clear()
