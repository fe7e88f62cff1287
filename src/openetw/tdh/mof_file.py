"""Schemas from MOF files: how classic (WMI) providers publish the layout of their events.

A classic provider describes its events in three levels of MOF classes::

    [Guid("{provider}")] class MyProvider : EventTrace {};
    [Guid("{event class}"), EventVersion(1), DisplayName("Transfer")] class MyCategory : MyProvider {};
    [EventType{1, 2}, EventTypeName{"Start", "Stop"}] class MyCategory_Start : MyCategory
    {
        [WmiDataId(1), format("x")] uint32 Flags;
        [WmiDataId(2), StringTermination("Counted"), format("w")] string Name;
    };

Every class with an ``EventType`` qualifier becomes a ``MofEventClass``: the event class GUID and
version come from the nearest class up its parents with a ``Guid`` (``EventVersion`` from there
or below), the provider is the next class up with a ``Guid``. Its properties are those with a
``WmiDataId`` (inherited ones too, a child's replacing its parent's of the same name), in
``WmiDataId`` order, with no padding between them. ``schemas_from_mof`` turns them into one
``Schema`` per (event class GUID, event type, version): source ``"mof"``, ``event_id`` and
``opcode`` both the event type (the key ``SchemaRegistry`` finds classic records by), event name
``"Class/TypeName"`` where Class is the event class's ``DisplayName`` or its name without a
``_Vn`` suffix.

Types (Microsoft's "Publishing Your Event Schema for a Classic Provider" and "Event Tracing MOF
Qualifiers"): ``sint8``..``uint64`` (``format("x")`` shows them in hex, ``format("c")`` makes an
8-bit one a character, the ``pointer``/``PointerType`` qualifier makes any integer, or an
``object`` without an extension, pointer-sized), ``boolean`` (4 bytes), ``real32``/``real64``, ``char16``, ``string`` (8-bit, or
UTF-16 with ``format("w")``; ``StringTermination`` NullTerminated, Counted, ReverseCounted or
NotCounted), and ``object`` with an ``extension``: Guid, IPAddr/IPAddrV4, IPAddrV6, Port, SizeT,
WmiTime (the raw 64-bit timestamp), Sid (the kernel's TOKEN_USER + SID blob), Variant (u32 size,
then bytes). Arrays are ``name[N]``, or ``name[]`` with ``MAX(N)`` or ``WmiSizeIs("Field")``;
an unsized array as the last property takes the rest of the payload. ``char16`` arrays (and 8-bit
arrays with ``format("s")``) are fixed-length strings; ``uint8`` arrays with
``extension("NoPrint")`` are binary blobs. ``ValueMap``/``Values`` (with ``ValueType("flag")``
for bit flags) and ``BitMap``/``BitValues`` become maps.

A class with an ``EventVersion`` is that version; one without is the newest: one above the
highest explicit version of the same GUID (0 when there is none).
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openetw.etl.intypes import InType, OutType
from openetw.tdh.mof_syntax import (
    MAX_MOF_CHARS,
    MofClassDecl,
    MofError,
    MofPropertyDecl,
    decode_mof_bytes,
    parse_declarations,
)
from openetw.tdh.schema import REST, EventMap, MapEntry, MapKind, PropertyInfo, Schema

__all__ = ["MofError", "MofEventClass", "parse_mof", "schemas_from_mof", "schemas_from_mof_file", "schemas_from_mof_text"]

_MAX_ARRAY = 0xFFFF  # no payload holds more (records are at most 64 KB)
_VERSION_SUFFIX = re.compile(r"_V(\d+)$", re.I)
_INTEGERS: dict[str, tuple[InType, OutType]] = {
    "sint8": (InType.INT8, OutType.HEXINT8), "uint8": (InType.UINT8, OutType.HEXINT8),
    "sint16": (InType.INT16, OutType.HEXINT16), "uint16": (InType.UINT16, OutType.HEXINT16),
    "sint32": (InType.INT32, OutType.HEXINT32), "uint32": (InType.UINT32, OutType.HEXINT32),
    "sint64": (InType.INT64, OutType.HEXINT64), "uint64": (InType.UINT64, OutType.HEXINT64),
}  # fmt: skip
_OTHER_SCALARS = {"boolean": InType.BOOLEAN, "real32": InType.FLOAT, "real64": InType.DOUBLE, "char16": InType.UNICODECHAR}
# StringTermination -> (8-bit in-type, UTF-16 in-type)
_STRINGS = {
    "nullterminated": (InType.ANSISTRING, InType.UNICODESTRING),
    "counted": (InType.COUNTEDANSISTRING, InType.COUNTEDSTRING),
    "reversecounted": (InType.REVERSEDCOUNTEDANSISTRING, InType.REVERSEDCOUNTEDSTRING),
    "notcounted": (InType.NONNULLTERMINATEDANSISTRING, InType.NONNULLTERMINATEDSTRING),
}
# object + extension(...) -> (in-type, out-type, fixed length)
_OBJECTS: dict[str, tuple[InType, OutType | None, int | None]] = {
    "guid": (InType.GUID, None, None),
    "ipaddr": (InType.UINT32, OutType.IPV4, None),
    "ipaddrv4": (InType.UINT32, OutType.IPV4, None),
    "ipaddrv6": (InType.BINARY, OutType.IPV6, 16),
    "port": (InType.UINT16, OutType.PORT, None),
    "sizet": (InType.SIZET, None, None),
    "wmitime": (InType.UINT64, None, None),
    "sid": (InType.WBEMSID, None, None),
    "variant": (InType.HEXDUMP, None, None),
}
# What WmiSizeIs may name: an integer property.
_COUNT_TYPES = frozenset(in_type for in_type, _ in _INTEGERS.values())
# extension(...) on an integer type: only a different rendering
_INTEGER_EXTENSIONS = {"ipaddr": OutType.IPV4, "ipaddrv4": OutType.IPV4, "port": OutType.PORT}


@dataclass(frozen=True)
class MofEventClass:
    """One event type class: the layout shared by its event types."""

    name: str  # the event type class, e.g. "MyCategory_Start"
    event_class: str  # the class with the Guid, e.g. "MyCategory_V0"
    display_name: str  # what events are named after, e.g. "MyCategory"
    guid: uuid.UUID
    version: int | None  # EventVersion; None: the newest version
    event_types: tuple[tuple[int, str | None], ...]  # (EventType, EventTypeName)
    properties: tuple[PropertyInfo, ...]
    maps: Mapping[str, EventMap] = field(default_factory=dict, hash=False)
    provider_name: str | None = None
    provider_guid: uuid.UUID | None = None
    line: int = 0
    path: str | None = None

    def schemas(self, version: int | None = None) -> list[Schema]:
        """A schema per event type, as ``version`` (default: ``self.version``, else 0)."""
        resolved = version if version is not None else (self.version or 0)
        schemas = []
        for event_type, type_name in self.event_types:
            schemas.append(
                Schema(
                    provider_id=self.guid,
                    event_id=event_type,
                    version=resolved,
                    opcode=event_type,
                    provider_name=self.provider_name or self.display_name,
                    event_name=f"{self.display_name}/{type_name}" if type_name else self.display_name,
                    task_name=self.display_name,
                    opcode_name=type_name,
                    properties=self.properties,
                    maps=dict(self.maps),
                    source="mof",
                    event_guid=self.guid,
                )
            )
        return schemas


# -- qualifiers ----------------------------------------------------------------------------------


class _Context:
    """Where an error is: the file and the class being built."""

    def __init__(self, path: str | None, decl: MofClassDecl) -> None:
        self.path = path
        self.decl = decl

    def error(self, message: str, line: int | None = None) -> MofError:
        return MofError(message, path=self.path, line=line or self.decl.line, element=self.decl.name)


def _qualifier(quals: Mapping[str, Any], name: str) -> Any:
    found = quals.get(name)
    return None if found is None else found.value


def _text(ctx: _Context, quals: Mapping[str, Any], name: str, line: int) -> str | None:
    value = _qualifier(quals, name)
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise ctx.error(f"{name} must be a string", line)
    return value


def _integer(ctx: _Context, value: Any, what: str, line: int, high: int, low: int = 0) -> int:
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text[2:], 16) if text[:2].lower() == "0x" else int(text, 10)
        except ValueError:
            raise ctx.error(f"{what} must be an integer, not {value!r}", line) from None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ctx.error(f"{what} must be an integer in {low}..{high}, not {value!r}", line)
    return value


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


# -- properties ----------------------------------------------------------------------------------


def _count(ctx: _Context, prop: MofPropertyDecl, earlier: Mapping[str, PropertyInfo], last: bool) -> int | str | None:
    """The element count of an array property (``None`` for a scalar)."""
    quals = prop.qualifiers
    size_is = _qualifier(quals, "wmisizeis")
    if prop.array is False and size_is is None:
        return None
    if size_is is not None:
        if not isinstance(size_is, str):
            raise ctx.error(f"WmiSizeIs of {prop.name} must name a property", prop.line)
        target = earlier.get(size_is.lower())
        if target is None or target.count is not None or target.in_type not in _COUNT_TYPES:
            raise ctx.error(f"WmiSizeIs of {prop.name} names {size_is!r}, not an earlier integer property", prop.line)
        return target.name
    if isinstance(prop.array, int) and not isinstance(prop.array, bool):
        return _integer(ctx, prop.array, f"array size of {prop.name}", prop.line, _MAX_ARRAY)
    maximum = _qualifier(quals, "max")
    if maximum is not None:
        return _integer(ctx, maximum, f"MAX of {prop.name}", prop.line, _MAX_ARRAY)
    if last:
        return REST
    raise ctx.error(f"array {prop.name} has no size (name[N], MAX(N) or WmiSizeIs) and is not the last property", prop.line)


def _scalar_type(ctx: _Context, prop: MofPropertyDecl) -> tuple[InType, OutType | None, int | None]:
    """(in-type, out-type, fixed length) of one element of ``prop``."""
    quals = prop.qualifiers
    type_name = prop.type_name.lower()
    fmt = (_text(ctx, quals, "format", prop.line) or "").lower()
    extension = (_text(ctx, quals, "extension", prop.line) or "").lower()
    if prop.is_ref:
        raise ctx.error(f"property {prop.name} is a reference; event data cannot hold one", prop.line)
    if type_name in _INTEGERS:
        if "pointer" in quals or "pointertype" in quals or extension == "sizet":
            return (InType.POINTER if extension != "sizet" else InType.SIZET), None, None
        in_type, hex_out = _INTEGERS[type_name]
        if fmt == "c" and in_type in (InType.UINT8, InType.INT8):
            return InType.ANSICHAR, None, None
        out = _INTEGER_EXTENSIONS.get(extension)
        if out is None and fmt == "x":
            out = hex_out
        return in_type, out, None
    if type_name in _OTHER_SCALARS:
        return _OTHER_SCALARS[type_name], None, None
    if type_name == "string":
        termination = (_text(ctx, quals, "stringtermination", prop.line) or "NullTerminated").lower()
        if termination not in _STRINGS:
            raise ctx.error(f"StringTermination {termination!r} of {prop.name} is none of {', '.join(_STRINGS)}", prop.line)
        wide = fmt == "w" or extension == "rwstring"
        return _STRINGS[termination][wide], None, None
    if type_name == "object":
        if not extension and ("pointer" in quals or "pointertype" in quals):
            return InType.POINTER, None, None
        if extension not in _OBJECTS:
            shown = f"extension {extension!r}" if extension else "no extension"
            raise ctx.error(f"object {prop.name} has {shown}; its size is unknown (one of {', '.join(_OBJECTS)} is needed)", prop.line)
        return _OBJECTS[extension]
    raise ctx.error(f"type {prop.type_name!r} of {prop.name} has no event tracing layout", prop.line)


def _property(ctx: _Context, prop: MofPropertyDecl, earlier: Mapping[str, PropertyInfo], last: bool) -> PropertyInfo:
    in_type, out_type, length = _scalar_type(ctx, prop)
    count = _count(ctx, prop, earlier, last)
    quals = prop.qualifiers
    fmt = (_text(ctx, quals, "format", prop.line) or "").lower()
    extension = (_text(ctx, quals, "extension", prop.line) or "").lower()
    if count is not None:
        # Character arrays are fixed-length strings; a NoPrint byte array is one blob.
        if in_type == InType.UNICODECHAR:
            return PropertyInfo(prop.name, InType.UNICODESTRING, length=count)
        if in_type in (InType.UINT8, InType.INT8, InType.ANSICHAR) and fmt == "s":
            return PropertyInfo(prop.name, InType.ANSISTRING, length=count)
        if in_type in (InType.UINT8, InType.INT8) and extension == "noprint":
            return PropertyInfo(prop.name, InType.BINARY, length=count)
    return PropertyInfo(prop.name, in_type, out_type, count=count, length=length)


def _map(ctx: _Context, prop: MofPropertyDecl, map_name: str) -> EventMap | None:
    quals = prop.qualifiers
    values, value_map = _qualifier(quals, "values"), _qualifier(quals, "valuemap")
    bit_values, bit_map = _qualifier(quals, "bitvalues"), _qualifier(quals, "bitmap")
    if values is not None:
        names = _as_tuple(values)
        keys = _as_tuple(value_map) if value_map is not None else tuple(range(len(names)))
        kind: MapKind = "bit" if (_text(ctx, quals, "valuetype", prop.line) or "").lower() == "flag" else "value"
        masks = [_integer(ctx, key, f"ValueMap entry of {prop.name}", prop.line, 2**64 - 1) for key in keys]
    elif bit_values is not None:
        names = _as_tuple(bit_values)
        positions = _as_tuple(bit_map) if bit_map is not None else tuple(range(len(names)))
        kind = "bit"
        masks = [1 << _integer(ctx, p, f"BitMap entry of {prop.name}", prop.line, 63) for p in positions]
    else:
        return None
    if len(masks) != len(names) or not all(isinstance(n, str) for n in names):
        raise ctx.error(f"the map of {prop.name} needs as many strings as values ({len(names)} for {len(masks)})", prop.line)
    return EventMap(map_name, kind, tuple(MapEntry(mask, name) for mask, name in zip(masks, names, strict=True)))


# -- classes -------------------------------------------------------------------------------------


def _chain(ctx: _Context, decl: MofClassDecl, classes: Mapping[str, MofClassDecl]) -> list[MofClassDecl]:
    """``decl`` and its parents declared in the same text, nearest first."""
    chain = [decl]
    seen = {decl.name.lower()}
    while chain[-1].parent is not None:
        parent = classes.get(chain[-1].parent.lower())
        if parent is None:
            break
        if parent.name.lower() in seen:
            raise ctx.error(f"class {parent.name} is its own ancestor")
        seen.add(parent.name.lower())
        chain.append(parent)
    return chain


def _guid(ctx: _Context, decl: MofClassDecl) -> uuid.UUID:
    qualifier = decl.qualifiers["guid"]
    try:
        return uuid.UUID(str(qualifier.value).strip().strip("{}"))
    except ValueError:
        raise MofError(f"Guid {qualifier.value!r} is not a GUID", path=ctx.path, line=qualifier.line, element=decl.name) from None


def _event_types(ctx: _Context, decl: MofClassDecl) -> tuple[tuple[int, str | None], ...]:
    line = decl.qualifiers["eventtype"].line
    types = [_integer(ctx, t, "EventType", line, 0xFF) for t in _as_tuple(decl.qualifiers["eventtype"].value)]
    if len(set(types)) != len(types):
        raise ctx.error("EventType lists a type twice", line)
    names_value = _qualifier(decl.qualifiers, "eventtypename")
    names = list(_as_tuple(names_value)) if names_value is not None else []
    if not all(isinstance(n, str) for n in names):
        raise ctx.error("EventTypeName must be strings", line)
    names += [None] * (len(types) - len(names))  # fewer names than types: the rest are unnamed
    return tuple(zip(types, names[: len(types)], strict=True))


def _display_name(event_class: MofClassDecl, version: int | None) -> str:
    display = _qualifier(event_class.qualifiers, "displayname")
    if isinstance(display, str) and display.strip():
        return display.strip()
    suffix = _VERSION_SUFFIX.search(event_class.name)
    if suffix and version is not None and int(suffix.group(1)) == version:
        return event_class.name[: suffix.start()]
    return event_class.name


def _event_class(decl: MofClassDecl, classes: Mapping[str, MofClassDecl], path: str | None) -> MofEventClass:
    ctx = _Context(path, decl)
    chain = _chain(ctx, decl, classes)
    with_guid = [i for i, c in enumerate(chain) if "guid" in c.qualifiers]
    if not with_guid:
        raise ctx.error(f"event type class {decl.name} has no Guid, on itself or on a parent class")
    event_index = with_guid[0]
    event_class = chain[event_index]
    version = None
    for each in chain[: event_index + 1]:
        if "eventversion" in each.qualifiers:
            qualifier = each.qualifiers["eventversion"]
            version = _integer(_Context(path, each), qualifier.value, "EventVersion", qualifier.line, 0xFFFF)
            break
    provider = chain[with_guid[1]] if len(with_guid) > 1 else None
    properties, maps = _layout(ctx, chain)
    return MofEventClass(
        name=decl.name,
        event_class=event_class.name,
        display_name=_display_name(event_class, version),
        guid=_guid(_Context(path, event_class), event_class),
        version=version,
        event_types=_event_types(ctx, decl),
        properties=properties,
        maps=maps,
        provider_name=provider.name if provider is not None else None,
        provider_guid=_guid(_Context(path, provider), provider) if provider is not None else None,
        line=decl.line,
        path=path,
    )


def _layout(ctx: _Context, chain: Sequence[MofClassDecl]) -> tuple[tuple[PropertyInfo, ...], dict[str, EventMap]]:
    merged: dict[str, MofPropertyDecl] = {}
    for each in reversed(chain):  # parents first, so a child's property replaces its parent's
        own: set[str] = set()
        for prop in each.properties:
            key = prop.name.lower()
            if key in own:
                raise MofError(f"property {prop.name} is declared twice", path=ctx.path, line=prop.line, element=each.name)
            own.add(key)
            merged[key] = prop
    ordered: list[tuple[int, MofPropertyDecl]] = []
    for prop in merged.values():
        qualifier = prop.qualifiers.get("wmidataid")
        if qualifier is None:
            continue  # not event data (WMI's own properties)
        ordered.append((_integer(ctx, qualifier.value, f"WmiDataId of {prop.name}", prop.line, 0xFFFF, 1), prop))
    ordered.sort(key=lambda item: item[0])
    for (a, first), (b, second) in itertools.pairwise(ordered):
        if a == b:
            raise ctx.error(f"WmiDataId({a}) is given to both {first.name} and {second.name}", second.line)
    properties: list[PropertyInfo] = []
    maps: dict[str, EventMap] = {}
    earlier: dict[str, PropertyInfo] = {}
    for index, (_, prop) in enumerate(ordered):
        info = _property(ctx, prop, earlier, last=index == len(ordered) - 1)
        event_map = _map(ctx, prop, f"{ctx.decl.name}.{prop.name}")
        if event_map is not None:
            maps[event_map.name] = event_map
            info = PropertyInfo(info.name, info.in_type, info.out_type, count=info.count, length=info.length, map_name=event_map.name)
        properties.append(info)
        earlier[prop.name.lower()] = info
    return tuple(properties), maps


def parse_mof(text: str | bytes, path: str | None = None) -> list[MofEventClass]:
    """The event type classes of MOF ``text`` (bytes are decoded as ``mofcomp`` would), in file order.

    Raises ``MofError`` (a ``ManifestError``) naming the line and class of the first problem.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        if len(text) > 2 * MAX_MOF_CHARS + 2:
            raise MofError(f"MOF file of {len(text)} bytes is too large", path=path)
        try:
            text = decode_mof_bytes(bytes(text))
        except MofError as exc:
            raise MofError(exc.message, path=path) from None
    declarations = parse_declarations(text, path)
    classes: dict[str, MofClassDecl] = {}
    for decl in declarations:
        key = decl.name.lower()
        if key in classes:
            message = f"class {decl.name} is declared twice (first on line {classes[key].line})"
            raise MofError(message, path=path, line=decl.line, element=decl.name)
        classes[key] = decl
    return [_event_class(decl, classes, path) for decl in declarations if "eventtype" in decl.qualifiers]


def schemas_from_mof(classes: Iterable[MofEventClass]) -> list[Schema]:
    """One schema per (event class GUID, event type, version); unversioned classes are the newest."""
    classes = list(classes)
    highest: dict[uuid.UUID, int] = {}
    for each in classes:
        if each.version is not None:
            highest[each.guid] = max(highest.get(each.guid, -1), each.version)
    schemas: list[Schema] = []
    for each in classes:
        version = each.version if each.version is not None else highest.get(each.guid, -1) + 1
        schemas.extend(each.schemas(version))
    return schemas


def schemas_from_mof_text(text: str | bytes, path: str | None = None) -> list[Schema]:
    return schemas_from_mof(parse_mof(text, path))


def schemas_from_mof_file(path: str | Path) -> list[Schema]:
    """The schemas of the MOF file at ``path`` (a regular file of at most 32 MB)."""
    from openetw.safeio import read_regular_file

    try:
        data = read_regular_file(Path(path), 2 * MAX_MOF_CHARS + 2)
    except OSError as exc:
        raise MofError(f"cannot read MOF file: {exc.strerror or exc}", path=str(path)) from None
    return schemas_from_mof_text(data, str(path))
