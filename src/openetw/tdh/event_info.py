"""TDH's own event descriptions as schemas: TRACE_EVENT_INFO and EVENT_MAP_INFO blobs.

These are what ``TdhGetEventInformation`` / ``TdhGetEventMapInformation`` return, laid out as
``tdh.h`` declares them (names and messages are NUL-terminated UTF-16 at offsets from the
start of the blob). Traces merged by xperf or PerfView carry them as KernelTraceControl
``MetaData/EventInfo`` and ``MetaData/EventMapInfo`` events, so a trace can describe events
no manifest at hand knows. Damaged blobs give ``None`` (or a property with a ``problem``),
never an exception.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from openetw.etl.intypes import InType, OutType
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema

__all__ = ["TraceMetadata", "map_from_event_map_info", "schema_from_event_info"]

_TEI_HEAD = struct.Struct("<16s16sHBBBBHQI15I")  # up to and including Flags: 112 bytes
_PROPERTY = struct.Struct("<IIHHIHHI")  # EVENT_PROPERTY_INFO: 24 bytes
_PROPERTY_STRUCT, _PROPERTY_PARAM_LENGTH, _PROPERTY_PARAM_COUNT = 0x1, 0x2, 0x4
_PROPERTY_FIXED_LENGTH, _PROPERTY_FIXED_COUNT = 0x10, 0x20
_MAP_HEAD = struct.Struct("<IIII")
_MAP_BITMAP_FLAGS = 0x2 | 0x10  # manifest bitmap, WBEM bitmap
_MAX_PROPERTIES = 4096
_VARIABLE_LENGTH_TYPES = frozenset({InType.UNICODESTRING, InType.ANSISTRING, InType.BINARY})
_DECODING_SOURCE_WBEM = 1


def _utf16_at(blob: bytes, offset: int) -> str | None:
    """The NUL-terminated UTF-16 string at ``offset`` (``None`` for offset 0 or out of range)."""
    if offset <= 0 or offset >= len(blob):
        return None
    end = offset
    while end + 1 < len(blob) and blob[end : end + 2] != b"\0\0":
        end += 2
    return blob[offset:end].decode("utf-16-le", "replace")


def _winmeta_name(name: str | None) -> str | None:
    return name[4:] if name is not None and name.startswith("win:") else name


def map_from_event_map_info(blob: bytes) -> EventMap | None:
    """An EVENT_MAP_INFO blob as an ``EventMap`` (``None`` when it is too damaged to read)."""
    if len(blob) < _MAP_HEAD.size:
        return None
    name_offset, flags, count, _ = _MAP_HEAD.unpack_from(blob, 0)
    name = _utf16_at(blob, name_offset)
    if name is None or count > (len(blob) - _MAP_HEAD.size) // 8:
        return None
    entries = []
    for index in range(count):
        output_offset, value = struct.unpack_from("<II", blob, _MAP_HEAD.size + 8 * index)
        text = _utf16_at(blob, output_offset)
        if text is not None:
            entries.append(MapEntry(value, text.strip()))
    return EventMap(name, "bit" if flags & _MAP_BITMAP_FLAGS else "value", tuple(entries))


def _metadata_property(blob: bytes, raw: list[tuple[int, ...]], index: int, names: list[str], depth: int = 0) -> PropertyInfo:
    flags, _, in_or_start, out_or_members, map_offset, count, length, _ = raw[index]
    name = names[index]
    count_ref: int | str | None = None
    if flags & _PROPERTY_PARAM_COUNT:
        count_ref = names[count] if count < len(names) else f"#{count}"
    elif flags & _PROPERTY_FIXED_COUNT or count > 1:
        count_ref = count
    if flags & _PROPERTY_STRUCT:
        start, size = in_or_start, out_or_members
        members: tuple[PropertyInfo, ...] = ()
        problem = None
        if depth < 8 and start + size <= len(raw) and not start <= index < start + size:
            members = tuple(_metadata_property(blob, raw, member, names, depth + 1) for member in range(start, start + size))
        else:
            problem = "struct members are out of range"
        return PropertyInfo(name, InType.NULL, count=count_ref, members=members, problem=problem)
    in_type: InType | int
    try:
        in_type = InType(in_or_start)
    except ValueError:
        in_type = in_or_start
    try:
        out_type: OutType | int | None = OutType(out_or_members) if out_or_members else None
    except ValueError:
        out_type = out_or_members
    length_ref: int | str | None = None
    if flags & _PROPERTY_PARAM_LENGTH:
        length_ref = names[length] if length < len(names) else f"#{length}"
    elif (flags & _PROPERTY_FIXED_LENGTH or in_type in _VARIABLE_LENGTH_TYPES) and length:
        length_ref = length
    return PropertyInfo(
        name, in_type, out_type, count=count_ref, length=length_ref,
        map_name=_utf16_at(blob, map_offset) if map_offset else None,
    )


def schema_from_event_info(blob: bytes, maps: Mapping[str, EventMap] | None = None) -> Schema | None:
    """A TRACE_EVENT_INFO blob (what TdhGetEventInformation returns) as a ``Schema``.

    Names are TDH's, the event name PerfView's composite (``Task/Opcode``, the task alone for
    opcode 0). ``maps`` supplies the maps its properties name. ``None`` when the blob is too
    short or damaged to describe anything.
    """
    if len(blob) < _TEI_HEAD.size:
        return None
    head = _TEI_HEAD.unpack_from(blob, 0)
    provider_le, event_guid_le, event_id, version, channel, level, opcode, task, keyword, source = head[:10]
    (provider_off, level_off, channel_off, keywords_off, task_off, opcode_off, message_off,
     provider_message_off, _, _, event_name_off, _, property_count) = head[10:23]
    top_level = head[23]
    if property_count > _MAX_PROPERTIES or top_level > property_count:
        return None
    if _TEI_HEAD.size + property_count * _PROPERTY.size > len(blob):
        return None
    raw = [_PROPERTY.unpack_from(blob, _TEI_HEAD.size + _PROPERTY.size * i) for i in range(property_count)]
    names = [_utf16_at(blob, item[1]) or f"Property{i}" for i, item in enumerate(raw)]
    properties = tuple(_metadata_property(blob, raw, i, names) for i in range(top_level))
    provider_name = _utf16_at(blob, provider_off)
    task_name = _utf16_at(blob, task_off)
    opcode_name = _winmeta_name(_utf16_at(blob, opcode_off))
    event_name = _utf16_at(blob, event_name_off) if event_name_off else None
    base = task_name or event_name or f"EventID({event_id})"
    composite = f"{base}/{opcode_name}" if opcode and opcode_name else base
    wanted = {prop.map_name for prop in properties if prop.map_name}
    keywords = _utf16_at(blob, keywords_off)
    return Schema(
        provider_id=uuid.UUID(bytes_le=provider_le),
        event_id=opcode if source == _DECODING_SOURCE_WBEM else event_id,
        version=version,
        opcode=opcode,
        level=level,
        task=task,
        keyword=keyword,
        channel=channel,
        provider_name=provider_name,
        event_name=composite,
        task_name=task_name,
        opcode_name=opcode_name,
        level_name=_winmeta_name(_utf16_at(blob, level_off)),
        keyword_names=tuple(keywords.split()) if keywords else (),
        channel_name=_utf16_at(blob, channel_off),
        message=_utf16_at(blob, message_off),
        provider_message=_utf16_at(blob, provider_message_off),
        properties=properties,
        maps={name: maps[name] for name in wanted if maps and name in maps},
        source="manifest" if source != _DECODING_SOURCE_WBEM else "mof",
        decode_guid=uuid.UUID(bytes_le=event_guid_le) if any(event_guid_le) else None,
    )


@dataclass(slots=True)
class TraceMetadata:
    """Event descriptions and maps met in the trace, turned into schemas on first use."""

    infos: dict[tuple[uuid.UUID, int, int], bytes] = field(default_factory=dict)
    maps: dict[uuid.UUID, dict[str, EventMap]] = field(default_factory=dict)
    built: dict[tuple[uuid.UUID, int, int], Schema | None] = field(default_factory=dict)

    def add_event_info(self, blob: bytes) -> None:
        if len(blob) < _TEI_HEAD.size:
            return
        provider = uuid.UUID(bytes_le=blob[:16])
        event_id, version = struct.unpack_from("<HB", blob, 32)
        opcode = blob[37]
        if struct.unpack_from("<I", blob, 48)[0] == _DECODING_SOURCE_WBEM:
            provider, event_id = uuid.UUID(bytes_le=blob[16:32]), opcode
        key = (provider, event_id, version)
        if key not in self.infos:
            self.infos[key] = bytes(blob)
            self.built.pop(key, None)

    def add_map_info(self, provider: uuid.UUID, blob: bytes) -> None:
        event_map = map_from_event_map_info(blob)
        if event_map is not None:
            self.maps.setdefault(provider, {}).setdefault(event_map.name, event_map)
            self.built.clear()

    def holds(self, schema: Schema) -> bool:
        return any(built is schema for built in self.built.values())

    def schema(self, provider: uuid.UUID, event_id: int, version: int) -> Schema | None:
        key = (provider, event_id, version)
        if key not in self.infos:
            lower = [v for (p, e, v) in self.infos if p == provider and e == event_id and v < version]
            if not lower:
                return None
            key = (provider, event_id, max(lower))
        if key not in self.built:
            self.built[key] = schema_from_event_info(self.infos[key], self.maps.get(provider))
        return self.built[key]
