"""The text of TraceEvent's EventPipe parsing tests: the first event of each name, as XML.

One line per event name, in ordinal order::

    <Provider>/<Event>, <count>, <Event MSec=.. PID=.. PName=.. TID=.. [ActivityID=..] EventName=.. <field>=".."/>

where the event is the first of its name in time order, written as TraceEvent's
``TraceEvent.ToXml`` writes it: ``MSec`` (four decimals, quoted and padded to 13), ``PID``
(padded to 6), ``PName`` (padded to 10), ``TID``; ``ProviderName`` for events no shipped layout
describes (self-describing and EventSource events); then the fields: for the events TraceEvent
parses with a hand-written class, that class's fields (the ``views`` of ``report --format
perfview``), else the schema's. Integers of 32 and 64 bits
with thousands separators, addresses and hex-typed values as ``0x`` and 8 (or, past 32 bits,
16) upper-case digits, maps as their names, structs as ``{ "name":value, ... }``; line breaks
as the two characters ``\\r\\n``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from openetw.errors import OpenEtwError
from openetw.etl.intypes import InType, OutType
from openetw.report.perfview import dotnet
from openetw.report.perfview.catalog import view_for
from openetw.report.perfview.render import render_map
from openetw.report.perfview.state import relative_msec
from openetw.report.perfview.tracelog import event_identity, removed_by_tracelog
from openetw.report.perfview.views import EventInput, Field, View, read_raw, render_field
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import PropertyInfo, Schema

__all__ = ["first_event_lines", "xml_event"]

_HEX_32 = frozenset({InType.HEXINT32})
_HEX_64 = frozenset({InType.HEXINT64, InType.POINTER, InType.SIZET})
_HEX_OUT = frozenset({OutType.HEXINT32, OutType.HEXINT64, OutType.HEXINT8, OutType.HEXINT16, OutType.CODE_POINTER})
_SMALL = frozenset({InType.INT8, InType.UINT8, InType.INT16, InType.UINT16})
_SIGNED_BITS = {InType.INT32: 32, InType.UINT32: 32, InType.INT64: 64, InType.UINT64: 64}
_EVENTPIPE_PROVIDER = "Microsoft-DotNETCore-EventPipe"
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;", "\r": "\\r", "\n": "\\n"})


def _escape(text: str) -> str:
    return text.translate(_ESCAPES)


def _quote_pad(text: str, width: int) -> str:
    return f'"{text}"'.rjust(width)


def _hex(value: int) -> str:
    value &= 0xFFFFFFFFFFFFFFFF
    return f"0x{value:08X}" if value <= 0xFFFFFFFF else f"0x{value:016X}"


def _json(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{key}":{_json(item)}' for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ",".join(_json(item) for item in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _value(value: Any, prop: PropertyInfo | None, schema: Schema | None) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)) and not isinstance(value, (bytes, bytearray)):
        return _json(value)
    if isinstance(value, bool):
        return dotnet.boolean(value)
    if isinstance(value, int) and prop is not None:
        maps = schema.maps if schema is not None else {}
        if prop.map_name and prop.map_name in maps:
            mapped = render_map(value, maps[prop.map_name], builtin=True)
            if mapped is not None:
                return mapped
        if prop.in_type in _HEX_64 or prop.in_type in _HEX_32 or prop.out_type in _HEX_OUT:
            return _hex(value)
        if prop.in_type in _SMALL:
            return str(value)
        bits = _SIGNED_BITS.get(InType(prop.in_type)) if prop.in_type in _SIGNED_BITS else None
        return dotnet.n0(dotnet.as_signed(value, bits) if bits else value)
    if isinstance(value, int):
        return dotnet.n0(value)
    if isinstance(value, float):
        return dotnet.single(value) if prop is not None and prop.in_type == InType.FLOAT else _double(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return dotnet.date_time(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex().upper()
    return str(value)


_OPCODE_NAMES = {1: "Start", 2: "Stop"}


def _double(value: float) -> str:
    """``double.ToString()`` of .NET Framework: 15 significant digits, ``E-05`` exponents."""
    text = f"{value:.15G}"
    return "0" if text in ("0", "-0") else text


def _event_name(name: str, schema: Schema | None, opcode: int) -> str:
    """TraceEvent names a self-describing event with an opcode ``Name/Opcode``: ``XStart`` with
    opcode 1 is ``X/Start``, ``XStop`` with 2 ``X/Stop``, other opcodes by number."""
    if schema is None or schema.source == "manifest" or "/" in name or not opcode:
        return name
    suffix = _OPCODE_NAMES.get(opcode, str(opcode))
    if name.endswith(suffix) and len(name) > len(suffix):
        name = name[: -len(suffix)]
    return f"{name}/{suffix}"


def xml_event(record: Any, event: str, provider: str, schema: Schema | None, props: dict[str, Any], process_name: str) -> str:
    """One event as ``TraceEvent.ToXml`` writes it (on one line)."""
    msec = relative_msec(record)
    pid, tid = dotnet.as_signed(record.pid, 32), dotnet.as_signed(record.tid, 32)
    parts = [
        f"<Event MSec={_quote_pad(f'{float(msec):.4f}', 13)} PID={_quote_pad(str(pid), 6)} PName={_quote_pad(_escape(process_name), 10)} TID=\"{tid}\"",
    ]
    activity = record.activity_guid_bytes
    if activity is not None and any(activity):
        parts.append(f' ActivityID="{uuid.UUID(bytes_le=bytes(activity)).hex}"')
    parts.append(f' EventName="{_escape(event)}"')
    if schema is None or schema.source != "manifest":
        parts.append(f' ProviderName="{_escape(provider)}"')
    view = view_for(f"{provider}/{event}", record, schema)
    if view is not None:
        data = EventInput(props, schema, record, None)
        for item in view.fields:
            if item.compute is not None:
                continue  # a value the class computes for PayloadString (a file name from a path): ToXml leaves it out
            parts.append(f' {item.name}="{_escape(_view_value(item, view, data))}"')
    elif schema is not None:
        lengths = {prop.length for prop in schema.properties if isinstance(prop.length, str)}
        for prop in schema.properties:
            if prop.name in lengths:
                continue
            parts.append(f' {prop.name}="{_escape(_value(props.get(prop.name), prop, schema))}"')
    parts.append("/>")
    return "".join(parts)


def _view_value(item: Field, view: View, data: EventInput) -> str:
    """A field of TraceEvent's hand-written class as its ``ToXml`` writes it: addresses and
    hex-typed values as ``0x`` and upper-case digits, doubles in full, the rest as the class
    shows them (``PayloadString``)."""
    if item.compute is not None:
        value = item.compute(data)
    elif item.raw is not None:
        value = read_raw(data, item.raw)
    else:
        value = data.props.get(item.source)
    if isinstance(value, int) and not isinstance(value, bool):
        schema = data.schema
        prop = schema.property_named(item.source) if schema is not None and item.compute is None else None
        hex_typed = prop is not None and item.kind not in ("e", "F") and (prop.in_type in _HEX_64 or prop.in_type in _HEX_32 or prop.out_type in _HEX_OUT)
        if item.kind == "a" or hex_typed:
            return _hex(value)
    if isinstance(value, float) and item.kind in ("f", "p"):
        return _double(value)
    return render_field(item, view, data)


def _ordinal(text: str) -> list[int]:
    encoded = text.encode("utf-16-le")
    return [int.from_bytes(encoded[i : i + 2], "little") for i in range(0, len(encoded), 2)]


class _Properties:
    """An event's decoded properties, decoded only when asked for (most events are only counted)."""

    __slots__ = ("registry", "schema", "record", "_values")

    def __init__(self, registry: SchemaRegistry, schema: Schema | None, record: Any) -> None:
        self.registry, self.schema, self.record = registry, schema, record
        self._values: dict[str, Any] | None = None

    def decoded(self) -> dict[str, Any]:
        if self._values is None:
            schema, record = self.schema, self.record
            self._values = {} if schema is None else dict(self.registry.decode(schema, record.user_data, record.pointer_size).items())
        return self._values

    def get(self, name: str, default: Any = None) -> Any:
        return self.decoded().get(name, default)


def _process_names(record: Any, props: dict[str, Any], names: dict[int, str]) -> None:
    """EventPipe's ProcessInfo event names the traced process by its command line."""
    command = props.get("CommandLine")
    if isinstance(command, str) and command.strip():
        exe = command.strip().split('"')[1] if command.startswith('"') else command.split()[0]
        base = exe.replace("\\", "/").rsplit("/", 1)[-1]
        names[record.pid & 0xFFFFFFFF] = base[:-4] if base.lower().endswith(".exe") else base


def first_event_lines(records: Iterable[Any], registry: SchemaRegistry, context: DecodeContext | None = None) -> Iterator[str]:
    """``<name>, <count>, <first event as XML>`` for each event name, in ordinal order.

    ``records`` in time order; events TraceLog keeps only as bookkeeping (method rundown, IL
    maps, stacks) are left out, as TraceEvent's tests leave them. Process names are the ones
    the whole trace gives (each line is written once every record was read)."""
    context = context if context is not None else DecodeContext(registry)
    counts: dict[str, int] = {}
    first: dict[str, tuple[Any, str, str, Schema | None, dict[str, Any]]] = {}
    named: dict[int, str] = {}
    for record in records:
        context.observe(record)
        if record.kind == "unknown":
            continue
        try:
            schema = context.schema_for(record)
        except OpenEtwError:
            schema = None
        props = _Properties(registry, schema, record)
        if removed_by_tracelog(record, props):
            continue
        registry_name = None
        if schema is None and record.provider_guid_bytes is not None:
            try:
                registry_name = registry.provider_name(record)
            except (ImportError, OpenEtwError):
                registry_name = None
        provider, event = event_identity(record, schema, registry_name)
        if provider == _EVENTPIPE_PROVIDER:
            _process_names(record, props.decoded(), named)
        event = _event_name(event, schema, record.opcode)
        key = f"{provider}/{event}"
        count = counts[key] = counts.get(key, 0) + 1
        if count == 1:
            first[key] = (record, event, provider, schema, props.decoded())
    for key in sorted(counts, key=_ordinal):
        record, event, provider, schema, values = first[key]
        pid = record.pid & 0xFFFFFFFF
        name = named.get(pid) or context.process_name(pid, record.filetime)
        shown = name if name is not None else (f"Process({pid})" if pid else "")
        yield f"{key}, {counts[key]}, {xml_event(record, event, provider, schema, values, shown)}"
