"""How PerfView presents an event's payload: which fields, in which order, typed how.

TraceEvent's hand-written parsers (kernel, CLR, KernelTraceControl) show fields that are not
always the raw layout: some are renamed, reordered, dropped or computed (``BuildTime`` from a
``TimeDateStamp``, ``ElapsedTimeMSec`` from two timestamps, a file name looked up by key).
A ``View`` says that for one event; events without a view show their schema's properties.

A field spec is ``"Name:kind"`` or ``"Name=Source:kind"`` where kind is how TraceEvent types
the value: ``i`` int (32-bit, signed, separators), ``l`` long, ``a`` address, ``s`` string,
``b`` bool, ``n`` a small integer printed bare, ``d`` date-time, ``g`` GUID, ``f`` double,
``e`` enum (names from the view's ``enums``), ``F`` flags enum, ``p`` as the schema types it.
A missing property prints as the kind's default (``0``, empty) as TraceEvent's classes do for
older event versions; a trailing ``?`` prints it empty instead. ``Name@8+1u4:i`` reads the
payload itself: a ``u1``/``u2``/``u4``/``u8``/``i4``/``i8``/``p`` (pointer) at byte offset 8 plus
one pointer's growth beyond 4 bytes (TraceEvent's ``HostOffset(8, 1)``); ``b2`` is a big-endian
u16 (a port); past the end of the payload it is missing.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from openetw.etl.intypes import filetime_to_datetime
from openetw.report.perfview import dotnet
from openetw.report.perfview.render import enum_text, flags_text, render_property, render_value
from openetw.tdh.schema import Schema

if TYPE_CHECKING:
    from openetw.etl.record import EventRecord
    from openetw.report.perfview.state import PerfViewState

__all__ = ["EventInput", "Field", "View", "fields"]

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class EventInput:
    """What a view reads: the decoded properties (typed), the schema, the record, trace state."""

    props: Mapping[str, Any]
    schema: Schema | None
    record: EventRecord
    state: PerfViewState | None = None

    def get(self, name: str, default: Any = None) -> Any:
        return self.props.get(name, default)


Compute = Callable[[EventInput], Any]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    source: str
    kind: str
    compute: Compute | None = None
    nullable: bool = False
    raw: tuple[int, int, str] | None = None  # (offset, pointers, type)


_RAW = re.compile(r"^(\d+)(?:\+(\d+))?(u1|u2|u4|u8|i4|i8|b2|p)$")
_RAW_FORMATS = {"u1": "<B", "u2": "<H", "u4": "<I", "u8": "<Q", "i4": "<i", "i8": "<q", "b2": ">H"}


def _spec(text: str) -> Field:
    name, _, kind = text.partition(":")
    nullable = kind.endswith("?")
    kind = kind.rstrip("?") or "p"
    raw = None
    if "@" in name:
        name, _, where = name.partition("@")
        match = _RAW.match(where)
        if match is None:
            raise ValueError(f"bad raw field spec {text!r}")
        raw = (int(match.group(1)), int(match.group(2) or 0), match.group(3))
    name, _, source = name.partition("=")
    return Field(name, source or name, kind, None, nullable, raw)


def read_raw(data: EventInput, raw: tuple[int, int, str]) -> int | None:
    """An integer read from the payload at a TraceEvent-style host offset (``None`` past the end)."""
    offset, pointers, kind = raw
    pointer_size = data.record.pointer_size
    offset += (pointer_size - 4) * pointers
    payload = data.record.user_data
    if kind == "p":
        size, fmt = pointer_size, ("<I" if pointer_size == 4 else "<Q")
    else:
        fmt = _RAW_FORMATS[kind]
        size = struct.calcsize(fmt)
    if offset + size > len(payload):
        return None
    return int(struct.unpack_from(fmt, payload, offset)[0])


def fields(spec: str, **computed: tuple[str, Compute]) -> tuple[Field, ...]:
    """Field specs separated by spaces; ``computed`` gives ``name=(kind, function)`` for the
    specs whose value is computed (named ``name:kind`` in ``spec`` too, to fix the order)."""
    out = []
    for text in spec.split():
        item = _spec(text)
        if item.name in computed:
            kind, function = computed[item.name]
            item = Field(item.name, item.name, kind.rstrip("?"), function, kind.endswith("?"))
        out.append(item)
    return tuple(out)


def filetime_value(value: Any) -> Any:
    """A FILETIME integer as a UTC datetime (``DateTime.FromFileTime``); datetimes pass."""
    if isinstance(value, int):
        return filetime_to_datetime(max(value, 0))
    return value


def unix_time(seconds: Any) -> datetime | None:
    """A PE TimeDateStamp (seconds since 1970, unsigned 32-bit) as a UTC datetime."""
    if not isinstance(seconds, int):
        return None
    try:
        return _UNIX_EPOCH + timedelta(seconds=seconds & 0xFFFFFFFF)
    except OverflowError:
        return None


def _default(kind: str) -> Any:
    return "" if kind in "sdg" else (False if kind == "b" else 0)


def render_field(item: Field, view: View, data: EventInput) -> str:
    kind = item.kind
    if item.compute is not None:
        value = item.compute(data)
        missing = value is None
    elif item.raw is not None:
        value = read_raw(data, item.raw)
        missing = value is None
    else:
        value = data.props.get(item.source)
        missing = item.source not in data.props
    if missing and not item.nullable and kind != "p":
        value = _default(kind)
    if value is None:
        return ""
    if kind == "p":
        schema = data.schema
        prop = schema.property_named(item.source) if schema is not None else None
        return render_property(value, prop, schema.maps if schema is not None else None, builtin=view.builtin)
    if kind == "i":
        return dotnet.n0(dotnet.as_signed(int(value), 32)) if isinstance(value, int) else render_value(value)
    if kind == "l":
        return dotnet.n0(dotnet.as_signed(int(value), 64)) if isinstance(value, int) else render_value(value)
    if kind == "a":
        return dotnet.address(value) if isinstance(value, int) else render_value(value)
    if kind == "n":
        return str(value)
    if kind == "b":
        return dotnet.boolean(value)
    if kind == "f":
        return dotnet.n3(float(value))
    if kind == "d":
        value = filetime_value(value)
        return dotnet.date_time(value) if isinstance(value, datetime) else str(value)
    if kind == "g":
        return dotnet.guid(value) if isinstance(value, uuid.UUID) else str(value)
    if kind in ("e", "F"):
        names = view.enums.get(item.name, {})
        if not isinstance(value, int):
            return str(value)
        return flags_text(value, names) if kind == "F" else enum_text(value, names)
    return str(value)


@dataclass(frozen=True, slots=True)
class View:
    """The fields PerfView shows for one event, and where it takes PID/TID from when it does
    not use the header's (``pid``/``tid`` return ``None`` to keep the header's)."""

    fields: tuple[Field, ...]
    enums: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    pid: Compute | None = None
    tid: Compute | None = None
    builtin: bool = True

    def render(self, data: EventInput) -> list[tuple[str, str]]:
        return [(item.name, render_field(item, self, data)) for item in self.fields]
