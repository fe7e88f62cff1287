"""The schema of one event: what TDH calls TRACE_EVENT_INFO, as plain frozen data.

A ``Schema`` says how an event's user data is laid out and named. ``openetw.tdh`` builds them
(from a manifest, from TraceLogging metadata carried in the event, from a classic MOF layout or
from a WPP format) and decodes by them, never looking at where one came from; providers and the
test kit encode by the same model. It lives here, beside the type table, so that a program that
only writes events never loads the decoder (``openetw.tdh.schema`` names the same classes).

In-types and out-types use TDH's numbers (``openetw.etl.intypes.InType`` / ``OutType``).
A code read from damaged or newer metadata that the enums do not know is kept as a plain ``int``
so the property can still be reported (as a decode error) instead of being dropped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from openetw.etl.intypes import InType, OutType

SchemaSource = Literal["manifest", "tracelogging", "mof", "wpp"]
REST = "*"
"""A ``count`` or ``length`` meaning "everything left in the payload"."""
MapKind = Literal["value", "bit"]


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One ``<map value message>``: for a bit map, ``value`` is the mask of the bit(s)."""

    value: int
    message: str


@dataclass(frozen=True, slots=True)
class EventMap:
    """A value map (the whole value names one string) or a bit map (each set bit names one)."""

    name: str
    kind: MapKind
    entries: tuple[MapEntry, ...]

    def lookup(self, value: int) -> str | None:
        """The message of the entry whose value equals ``value`` (value maps), else ``None``."""
        for entry in self.entries:
            if entry.value == value:
                return entry.message
        return None

    def bit_names(self, value: int) -> tuple[list[str], int]:
        """Messages of the entries whose bits are all set in ``value``, and the bits left unnamed."""
        names: list[str] = []
        named = 0
        for entry in self.entries:
            if entry.value and value & entry.value == entry.value:
                names.append(entry.message)
                named |= entry.value
            elif entry.value == 0 and value == 0:
                names.append(entry.message)
        return names, value & ~named


@dataclass(frozen=True, slots=True)
class PropertyInfo:
    """One property (EVENT_PROPERTY_INFO), possibly an array or a struct.

    ``count`` and ``length`` are either constants or the name of an earlier integer property of
    the same template (references may point outside an enclosing struct, as manifests allow),
    or ``REST`` ("*", classic MOF layouts): as many elements, or as long, as the bytes left in
    the payload allow. ``length`` counts characters for strings and bytes for binary data.
    An ``optional`` top-level property is decoded only when bytes remain (MOF layouts whose
    trailing fields some Windows builds leave out); otherwise it is simply absent.
    """

    name: str
    in_type: InType | int
    out_type: OutType | int | None = None
    count: int | str | None = None
    length: int | str | None = None
    map_name: str | None = None
    members: tuple[PropertyInfo, ...] | None = None
    # TraceLogging: 28-bit field tag, and the "count is a u16 in the payload" arity (0x40).
    tags: int = 0
    count_in_data: bool = False
    # TraceLogging custom arity (0x60): the serialization schema; the payload holds u16 size + bytes.
    custom_schema: bytes | None = None
    # The out-type code as the source wrote it, when it had to be translated (TraceLogging TlgOut).
    source_out_type: int | None = None
    # Set when the source describing this property was malformed: decoding reports it as the
    # property's error (and, its size being unknown, stops there) instead of guessing.
    problem: str | None = None
    optional: bool = False

    @property
    def is_struct(self) -> bool:
        return self.members is not None

    @property
    def is_array(self) -> bool:
        return self.count is not None or self.count_in_data


@dataclass(frozen=True, slots=True)
class Schema:
    """Everything needed to name, describe and decode one kind of event."""

    provider_id: uuid.UUID
    event_id: int = 0
    version: int = 0
    opcode: int = 0
    level: int = 0
    task: int = 0
    keyword: int = 0
    channel: int = 0
    provider_name: str | None = None
    event_name: str | None = None
    task_name: str | None = None
    opcode_name: str | None = None
    level_name: str | None = None
    keyword_names: tuple[str, ...] = ()
    channel_name: str | None = None
    message: str | None = None
    provider_message: str | None = None
    properties: tuple[PropertyInfo, ...] = ()
    maps: dict[str, EventMap] = field(default_factory=dict, hash=False)
    source: SchemaSource = "manifest"
    decode_guid: uuid.UUID | None = None
    # TraceLogging: the event's 28-bit tag and the provider group from the provider traits.
    tags: int = 0
    provider_group: uuid.UUID | None = None
    # MOF: the event class GUID (TRACE_EVENT_INFO.EventGuid).
    event_guid: uuid.UUID | None = None

    def property_named(self, name: str) -> PropertyInfo | None:
        for prop in self.properties:
            if prop.name == name:
                return prop
        return None
