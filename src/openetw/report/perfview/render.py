"""Decoded values as PerfView's TraceEvent shows them (``PayloadString``), from their TDH types.

TraceEvent reads a field into a .NET type and prints that type: 32-bit integers become ``int``
and 64-bit ones ``long`` (signed, so unsigned values past the top bit print negative) with
thousands separators; pointers and hex-typed 64-bit values are addresses (``0x`` + at least
eight hex digits); 8- and 16-bit integers print bare; date-times, GUIDs, booleans and strings
as .NET does. A map turns the integer into the name(s) of its entries.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from openetw.etl.intypes import InType, OutType
from openetw.report.perfview import dotnet
from openetw.tdh.schema import EventMap, PropertyInfo

__all__ = ["render_property", "render_value", "render_map", "flags_text", "enum_text"]

_BITS: dict[int, int] = {  # keyed by InType; an unknown in-type is a plain int
    InType.INT8: 8, InType.UINT8: 8, InType.INT16: 16, InType.UINT16: 16, InType.INT32: 32,
    InType.UINT32: 32, InType.HEXINT32: 32, InType.INT64: 64, InType.UINT64: 64, InType.HEXINT64: 64,
}  # fmt: skip
_HEX_OUT_64 = frozenset({OutType.HEXINT64, OutType.CODE_POINTER})


def enum_text(value: int, names: Mapping[int, str]) -> str:
    """A .NET enum value: its member's name, else the number."""
    found = names.get(value)
    return found if found is not None else str(value)


def flags_text(value: int, names: Mapping[int, str]) -> str:
    """A .NET ``[Flags]`` enum value: member names in value order joined by ``", "``.

    As ``Enum.ToString`` does, a value with bits no member names prints as the plain number,
    and 0 prints as the member named for 0, else ``0``.
    """
    if value == 0:
        return names.get(0, "0")
    left = value
    parts: list[tuple[int, str]] = []
    for member in sorted((m for m in names if m), reverse=True):
        if member & left == member:
            parts.append((member, names[member]))
            left &= ~member
    if left:
        return str(value)
    return ", ".join(name for _, name in sorted(parts))


def render_map(value: int, event_map: EventMap, *, builtin: bool = True) -> str | None:
    """A manifest map applied as TraceEvent prints it.

    ``builtin``: as its generated .NET enums print (``Enum.ToString``). Otherwise as its
    manifest-driven parser does: a value map's name (``None`` when the value has none, so the
    number prints as its type does); a bit map's names in value order joined by ``|``, each
    entry taken when it shares any bit with what is left, and the bits no entry names in hex.
    """
    names = {entry.value: entry.message.strip() for entry in event_map.entries}
    if builtin:
        return flags_text(value, names) if event_map.kind == "bit" else enum_text(value, names)
    if event_map.kind != "bit":
        return names.get(value)
    parts = []
    left = value
    for key in sorted(names):
        if not left:
            break
        if key & left:
            parts.append(names[key])
            left &= ~key
    if left:
        parts.append(f"0x{left:x}")
    return "|".join(parts) if parts else "0"


def render_value(value: Any) -> str:
    """A value with no type information (its Python type decides)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return dotnet.boolean(value)
    if isinstance(value, int):
        return dotnet.n0(value)
    if isinstance(value, float):
        return dotnet.n3(value)
    if isinstance(value, uuid.UUID):
        return dotnet.guid(value)
    if isinstance(value, datetime):
        return dotnet.date_time(value)
    if isinstance(value, (bytes, bytearray)):
        return _bytes_text(bytes(value), "")
    if isinstance(value, list):
        return "[" + ",".join(render_value(item) for item in value) + "]"
    return str(value)


def _bytes_text(raw: bytes, name: str) -> str:
    if name.endswith(("Address", "Addr")):
        if len(raw) == 16 and raw[0] == 2 and raw[1] == 0:
            return f"{raw[4]}.{raw[5]}.{raw[6]}.{raw[7]}:{(raw[2] << 8) + raw[3]}"
        if len(raw) == 28 and raw[0] == 23 and raw[1] == 0:
            return f"[{ipaddress.IPv6Address(raw[8:24]).compressed}]:{(raw[2] << 8) + raw[3]}"
    text = raw[:16].hex().upper()
    return text + "..." if len(raw) > 16 else text


def render_property(
    value: Any,
    prop: PropertyInfo | None,
    maps: Mapping[str, EventMap] | None = None,
    *,
    builtin: bool = False,
    unsigned_64_as_address: bool = False,
) -> str:
    """One decoded property as TraceEvent prints a field of its TDH type.

    ``builtin`` follows TraceEvent's hand-written parsers (every integer an ``int`` or a
    ``long``, hex out-types still numbers) rather than its manifest-driven one.
    ``unsigned_64_as_address``: TraceEvent's reader of manifest XML (EventSource manifests
    among them) reads ``win:UInt64`` as an address and prints it in hex.
    """
    if value is None:
        return ""
    if prop is None:
        return render_value(value)
    if isinstance(value, list) and not isinstance(value, (bytes, bytearray)):
        return "[" + ",".join(
            render_property(item, prop, maps, builtin=builtin, unsigned_64_as_address=unsigned_64_as_address) for item in value
        ) + "]"
    in_type = prop.in_type
    if isinstance(value, bool):
        return dotnet.boolean(value)
    if isinstance(value, int):
        if prop.map_name and maps and prop.map_name in maps:
            mapped = render_map(value, maps[prop.map_name], builtin=builtin)
            if mapped is not None:
                return mapped
        if in_type in (InType.POINTER, InType.SIZET) or (
            not builtin
            and (
                in_type == InType.HEXINT64
                or (prop.out_type in _HEX_OUT_64 and _BITS.get(in_type) == 64)
                or (unsigned_64_as_address and in_type == InType.UINT64)
            )
        ):
            return dotnet.address(value)
        bits = _BITS.get(in_type)
        if bits is None:
            return dotnet.n0(value)
        if bits <= 16:
            return dotnet.n0(value) if builtin else str(value)
        return dotnet.n0(dotnet.as_signed(value, bits))
    if isinstance(value, float):
        return dotnet.single(value) if in_type == InType.FLOAT else dotnet.n3(value)
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return _bytes_text(bytes(value), prop.name)
    if isinstance(value, datetime) and in_type == InType.SYSTEMTIME:
        # TraceEvent builds the DateTime with the seconds field passed as milliseconds too.
        return dotnet.date_time(value.replace(microsecond=value.second * 1000))
    return render_value(value)
