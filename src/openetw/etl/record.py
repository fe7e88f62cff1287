"""``EventRecord``: the EVENT_RECORD of ETW, the one record type consumers see.

A record keeps the bytes it came from (``raw``) and the header unpacked once into a tuple; the
named fields are views on that tuple, so reading a file costs one ``unpack_from`` per record and
rewriting a record is a byte copy. Each header kind is a subclass; fields a kind does not have
read as 0 or ``None``.
"""

from __future__ import annotations

import struct
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from openetw._native import module as native_module
from openetw.errors import EtlFormatError
from openetw.etl import layouts as L
from openetw.etl.clock import SYSTEM_TIME_CLOCK, TraceClock, filetime_to_datetime, filetime_to_iso
from openetw.etl.extended import (
    EXT_EVENT_SCHEMA_TL,
    EXT_PROV_TRAITS,
    EXT_RELATED_ACTIVITYID,
    EXT_STACK_TRACE32,
    EXT_STACK_TRACE64,
    ExtendedItem,
    StackTrace,
)
from openetw.etl.framing import header_type_of, system_header_extension
from openetw.guids import NULL_GUID, guid_from_le

if TYPE_CHECKING:
    from collections.abc import Iterator

_EXT_ITEM = L.EVENT_HEADER_EXTENDED_ITEM.unpack_from
_u32 = struct.Struct("<I").unpack_from


class RecordContext:
    """What records of one source share: its clock, its pointer size, where it came from."""

    __slots__ = ("clock", "pointer_size", "source", "logger_name")

    def __init__(self, clock: TraceClock, pointer_size: int = 8, source: str | None = None, logger_name: str = "") -> None:
        self.clock = clock
        self.pointer_size = pointer_size
        self.source = source
        self.logger_name = logger_name


# Records built in memory, whose timestamps are in whatever clock the writer that takes them uses.
DEFAULT_CONTEXT = RecordContext(SYSTEM_TIME_CLOCK, source="<built>")


_native = native_module("_read")
_NATIVE_FIELD: Any = type(_native.field(0)) if _native is not None else None


def _tuple_field(index: int, doc: str = "") -> property:
    """A read-only header field, ``self._h[index]`` (read in C when the compiled core runs)."""
    if _native is not None:
        made: property = _native.field(index, doc)
        return made

    def getter(self: EventRecord) -> Any:
        return self._h[index]

    return property(getter, doc=doc)


def tuple_field_index(attr: object) -> int | None:
    """Where in the header tuple the field ``attr`` (a class attribute) reads, if ``_tuple_field`` made it."""
    if _NATIVE_FIELD is not None and isinstance(attr, _NATIVE_FIELD):
        return int(attr.index)
    getter = getattr(attr, "fget", None)
    if isinstance(attr, property) and getter is not None and getter.__qualname__ == "_tuple_field.<locals>.getter" and getter.__closure__:
        index = getter.__closure__[0].cell_contents
        if isinstance(index, int):
            return index
    return None


class EventRecord:
    """One trace record: header fields, extended data items, user data bytes.

    ``kind`` is one of ``system``, ``compact``, ``perfinfo``, ``classic``, ``instance``,
    ``event``, ``wpp``, ``unknown``.
    """

    __slots__ = ("_h", "_raw", "_pos", "_size", "cpu", "_ctx", "buffer_index")

    kind = "unknown"
    layout: L.Layout | None = None
    header_size = 0
    size_index = 0  # where the header tuple keeps the record size
    _TIMESTAMP_INDEX: int | None = None  # where it keeps the timestamp (None: not in the header)

    def __init__(self, header: tuple[Any, ...], raw: bytes, pos: int, size: int, cpu: int, ctx: RecordContext, buffer_index: int = -1) -> None:
        self._h = header
        self._raw = raw
        self._pos = pos
        self._size = size
        self.cpu = cpu
        self._ctx = ctx
        self.buffer_index = buffer_index

    # -- identity -------------------------------------------------------------------------
    # Class defaults; each header kind overrides those its header has with a read-only property
    # over the header tuple (so those properties carry ``type: ignore[override]``: mypy sees a
    # writable attribute made read-only, where no record ever assigns one).
    header_type = 0
    provider_guid_bytes: bytes | None = None
    id = 0
    version = 0
    channel = 0
    level = 0
    opcode = 0
    task = 0
    keyword = 0
    hook_id: int | None = None
    pid = 0
    tid = 0
    timestamp = 0
    flags = 0
    event_property = 0
    kernel_time = 0
    user_time = 0
    processor_time = 0
    activity_guid_bytes: bytes | None = None

    @property
    def size(self) -> int:
        """The whole record, header included (without alignment padding)."""
        return self._size

    @property
    def provider_id(self) -> uuid.UUID | None:
        """The provider (EVENT_HEADER) or event GUID (classic); ``None`` for system records."""
        raw = self.provider_guid_bytes
        return None if raw is None else guid_from_le(raw)

    @property
    def activity_id(self) -> uuid.UUID | None:
        raw = self.activity_guid_bytes
        if raw is None:
            return None
        return guid_from_le(raw)

    @property
    def pointer_size(self) -> int:
        return self._ctx.pointer_size

    @property
    def context(self) -> RecordContext:
        return self._ctx

    # -- bytes ----------------------------------------------------------------------------
    @property
    def raw(self) -> bytes:
        """The record's bytes as stored (header, extended items, user data)."""
        return self._raw[self._pos : self._pos + self._size]

    @property
    def user_data_offset(self) -> int:
        """Offset of the user data inside ``raw``."""
        return self.header_size

    @property
    def user_data(self) -> bytes:
        start = self._pos + self.user_data_offset
        return self._raw[start : self._pos + self._size]

    @property
    def user_data_length(self) -> int:
        return self._size - self.user_data_offset

    @property
    def extended(self) -> tuple[ExtendedItem, ...]:
        return ()

    def tracelogging_blobs(self) -> tuple[bytes | None, bytes | None]:
        """(EVENT_SCHEMA_TL data, PROV_TRAITS data): only EVENT_HEADER records carry them."""
        return None, None

    def extended_item(self, ext_type: int) -> ExtendedItem | None:
        for item in self.extended:
            if item.ext_type == ext_type:
                return item
        return None

    @property
    def related_activity_id(self) -> uuid.UUID | None:
        item = self.extended_item(EXT_RELATED_ACTIVITYID)
        return None if item is None else item.value

    @property
    def stack(self) -> StackTrace | None:
        item = self.extended_item(EXT_STACK_TRACE64) or self.extended_item(EXT_STACK_TRACE32)
        return None if item is None else item.value

    @property
    def tracelogging_schema(self) -> bytes | None:
        """The TraceLogging event metadata blob (EVENT_SCHEMA_TL), when the event carries one."""
        item = self.extended_item(EXT_EVENT_SCHEMA_TL)
        return None if item is None else item.data

    @property
    def provider_traits(self) -> bytes | None:
        item = self.extended_item(EXT_PROV_TRAITS)
        return None if item is None else item.data

    # -- time -----------------------------------------------------------------------------
    @property
    def filetime(self) -> int:
        return self._ctx.clock.to_filetime(self.timestamp)

    @property
    def time(self) -> datetime:
        """The wall-clock time; ``EtlFormatError`` when no calendar date fits (a damaged timestamp)."""
        filetime = self.filetime
        try:
            return filetime_to_datetime(filetime)
        except OverflowError:
            raise EtlFormatError(
                f"timestamp {self.timestamp} is FILETIME {filetime}, outside the years 1 to 9999",
                buffer_index=self.buffer_index,
                structure=self.layout.name if self.layout else None,
            ) from None

    @property
    def time_iso(self) -> str:
        """ISO 8601 UTC; a damaged timestamp no calendar date fits reads as ``FILETIME(<ticks>)``."""
        filetime = self.filetime
        try:
            return filetime_to_iso(filetime)
        except OverflowError:
            return f"FILETIME({filetime})"

    # -- derived --------------------------------------------------------------------------
    def with_context(self, ctx: RecordContext) -> EventRecord:
        return type(self)(self._h, self._raw, self._pos, self._size, self.cpu, ctx, self.buffer_index)

    def with_timestamp(self, timestamp: int) -> EventRecord:
        """A copy whose raw bytes and header carry another timestamp (used when merging clocks)."""
        index = self._TIMESTAMP_INDEX
        if index is None:
            return self
        raw = bytearray(self.raw)
        struct.pack_into("<q", raw, self.layout.offset(self.layout.fields[index][0]), timestamp)  # type: ignore[union-attr]
        header = self._h[:index] + (timestamp,) + self._h[index + 1 :]
        return type(self)(header, bytes(raw), 0, self._size, self.cpu, self._ctx, self.buffer_index)


    def header_fields(self) -> dict[str, Any]:
        """The header as the format names it (``{'Size': .., 'HookId': ..}``)."""
        if self.layout is None:
            return {}
        return self.layout.as_dict(self._h)

    def __repr__(self) -> str:
        ident = self.provider_id if self.provider_guid_bytes is not None else f"hook 0x{self.hook_id or 0:04x}"
        return (
            f"<{type(self).__name__} {self.kind} {ident} id={self.id} v{self.version} op={self.opcode} "
            f"pid={self.pid} tid={self.tid} cpu={self.cpu} ts={self.timestamp} size={self._size}>"
        )

    def same_as(self, other: EventRecord) -> bool:
        """Same kind, header and data (the buffer it sat in and its padding aside)."""
        return self.kind == other.kind and self._h == other._h and self.raw == other.raw and self.cpu == other.cpu


# Indices into the unpacked tuples.
_S = L.SYSTEM_TRACE_HEADER.index
_P = L.PERFINFO_TRACE_HEADER.index
_C = L.EVENT_TRACE_HEADER.index
_E = L.EVENT_HEADER.index
_M = L.MESSAGE_TRACE_HEADER.index
_HOOK_ID, _HEADER_TYPE = _S("HookId"), _S("HeaderType")  # read per record: looked up once


class _HookRecord(EventRecord):
    """What SYSTEM and PERFINFO headers share: a HookId (group << 8 | type) and a MOF version.

    Both layouts keep Version first and HookId at the same place; subclasses say where the
    timestamp sits and which header types mean 32-bit pointers.
    """

    __slots__ = ()
    _POINTER32_TYPES: tuple[int, ...] = ()
    header_type = _tuple_field(_S("HeaderType"))
    hook_id = _tuple_field(_S("HookId"))

    @property
    def version(self) -> int:  # type: ignore[override]
        first: int = self._h[0]
        return first & 0xFF

    @property
    def opcode(self) -> int:  # type: ignore[override]
        hook: int = self._h[_HOOK_ID]
        return hook & 0xFF

    @property
    def group(self) -> int:
        """The kernel event group (EVENT_TRACE_GROUP_*): the hook id's high byte."""
        hook: int = self._h[_HOOK_ID]
        return hook >> 8

    @property
    def user_data_offset(self) -> int:
        return self.header_size + system_header_extension(self._h[0])

    @property
    def pointer_size(self) -> int:
        return 4 if self._h[_HEADER_TYPE] in self._POINTER32_TYPES else 8



assert _S("HookId") == _P("HookId") and _S("HeaderType") == _P("HeaderType") and _S("Size") == _P("Size")


class SystemRecord(_HookRecord):
    """SYSTEM_TRACE_HEADER: kernel (MOF) events identified by a hook id and a MOF version."""

    __slots__ = ()
    kind = "system"
    layout = L.SYSTEM_TRACE_HEADER
    header_size = L.SYSTEM_TRACE_HEADER.size
    size_index = _S("Size")
    _TIMESTAMP_INDEX = _S("SystemTime")
    _POINTER32_TYPES = (L.HEADER_TYPE_SYSTEM32, L.HEADER_TYPE_COMPACT32)
    tid = _tuple_field(_S("ThreadId"))
    pid = _tuple_field(_S("ProcessId"))
    timestamp = _tuple_field(_S("SystemTime"))
    kernel_time = _tuple_field(_S("KernelTime"))
    user_time = _tuple_field(_S("UserTime"))


class CompactRecord(SystemRecord):
    """The compact SYSTEM_TRACE_HEADER (no kernel/user times)."""

    __slots__ = ()
    kind = "compact"
    layout = L.COMPACT_SYSTEM_TRACE_HEADER
    header_size = L.COMPACT_SYSTEM_TRACE_HEADER.size
    kernel_time = 0
    user_time = 0


class PerfInfoRecord(_HookRecord):
    """PERFINFO_TRACE_HEADER: high-volume kernel events (samples, syscalls, interrupts)."""

    __slots__ = ()
    kind = "perfinfo"
    layout = L.PERFINFO_TRACE_HEADER
    header_size = L.PERFINFO_TRACE_HEADER.size
    size_index = _P("Size")
    _TIMESTAMP_INDEX = _P("SystemTime")
    _POINTER32_TYPES = (L.HEADER_TYPE_PERFINFO32,)
    timestamp = _tuple_field(_P("SystemTime"))
    # PERFINFO records carry no process or thread: ETW reports them as -1 (0xFFFFFFFF).
    pid = 0xFFFFFFFF
    tid = 0xFFFFFFFF


class ClassicRecord(EventRecord):
    """EVENT_TRACE_HEADER: classic (MOF/WMI) events identified by an event GUID and a class type."""

    __slots__ = ()
    kind = "classic"
    layout = L.EVENT_TRACE_HEADER
    header_size = L.EVENT_TRACE_HEADER.size
    _TIMESTAMP_INDEX = _C("TimeStamp")
    header_type = _tuple_field(_C("HeaderType"))
    opcode = _tuple_field(_C("Type"))
    level = _tuple_field(_C("Level"))
    version = _tuple_field(_C("Version"))
    tid = _tuple_field(_C("ThreadId"))
    pid = _tuple_field(_C("ProcessId"))
    timestamp = _tuple_field(_C("TimeStamp"))
    provider_guid_bytes = _tuple_field(_C("Guid"))
    kernel_time = _tuple_field(_C("KernelTime"))
    user_time = _tuple_field(_C("UserTime"))

    @property
    def pointer_size(self) -> int:
        return 4 if self._h[_C("HeaderType")] in (L.HEADER_TYPE_FULL_HEADER32, L.HEADER_TYPE_INSTANCE32) else 8



class InstanceRecord(ClassicRecord):
    """EVENT_INSTANCE_HEADER: a classic event with instance and parent identifiers."""

    __slots__ = ()
    kind = "instance"
    layout = L.EVENT_INSTANCE_HEADER
    header_size = L.EVENT_INSTANCE_HEADER.size
    instance_id = _tuple_field(L.EVENT_INSTANCE_HEADER.index("InstanceId"))
    parent_instance_id = _tuple_field(L.EVENT_INSTANCE_HEADER.index("ParentInstanceId"))

    @property
    def parent_guid(self) -> uuid.UUID:
        return guid_from_le(self._h[L.EVENT_INSTANCE_HEADER.index("ParentGuid")])


class EventHeaderRecord(EventRecord):
    """EVENT_HEADER: manifest-based and TraceLogging events."""

    __slots__ = ()
    kind = "event"
    layout = L.EVENT_HEADER
    header_size = L.EVENT_HEADER.size
    _TIMESTAMP_INDEX = _E("TimeStamp")
    header_type = _tuple_field(_E("HeaderType"))
    flags = _tuple_field(_E("Flags"))
    event_property = _tuple_field(_E("EventProperty"))
    tid = _tuple_field(_E("ThreadId"))
    pid = _tuple_field(_E("ProcessId"))
    timestamp = _tuple_field(_E("TimeStamp"))
    provider_guid_bytes = _tuple_field(_E("ProviderId"))
    id = _tuple_field(_E("Id"))
    version = _tuple_field(_E("Version"))
    channel = _tuple_field(_E("Channel"))
    level = _tuple_field(_E("Level"))
    opcode = _tuple_field(_E("Opcode"))
    task = _tuple_field(_E("Task"))
    keyword = _tuple_field(_E("Keyword"))
    processor_time = _tuple_field(_E("ProcessorTime"))

    @property
    def activity_guid_bytes(self) -> bytes:  # type: ignore[override]
        activity: bytes = self._h[_E("ActivityId")]
        return activity

    @property
    def activity_id(self) -> uuid.UUID:
        return guid_from_le(self._h[_E("ActivityId")])

    @property
    def kernel_time(self) -> int:  # type: ignore[override]
        times: int = self._h[_E("ProcessorTime")]
        return times & 0xFFFFFFFF

    @property
    def user_time(self) -> int:  # type: ignore[override]
        times: int = self._h[_E("ProcessorTime")]
        return times >> 32

    @property
    def pointer_size(self) -> int:
        return 4 if self._h[_E("HeaderType")] == L.HEADER_TYPE_EVENT_HEADER32 else 8

    def _iter_extended(self) -> Iterator[tuple[int, int, int, int]]:
        """(ext_type, data start, data size, linkage) of each item, bounded by the record."""
        raw, end = self._raw, self._pos + self._size
        pos = self._pos + L.EVENT_HEADER.size
        while pos + 8 <= end:
            item_size, ext_type, linkage, data_size = _EXT_ITEM(raw, pos)
            if item_size < 8 or pos + item_size > end or data_size > item_size - 8:
                return
            yield ext_type, pos + 8, data_size, linkage
            pos += item_size
            if not linkage & 1:
                return

    @property
    def extended(self) -> tuple[ExtendedItem, ...]:
        if not self._h[_E("Flags")] & L.EVENT_HEADER_FLAG_EXTENDED_INFO:
            return ()
        raw = self._raw
        return tuple(ExtendedItem(t, raw[s : s + n], k) for t, s, n, k in self._iter_extended())

    def tracelogging_blobs(self) -> tuple[bytes | None, bytes | None]:
        """(EVENT_SCHEMA_TL data, PROV_TRAITS data) in one pass, without building item objects."""
        if not self._h[_E("Flags")] & L.EVENT_HEADER_FLAG_EXTENDED_INFO:
            return None, None
        raw = self._raw
        schema = traits = None
        for ext_type, start, size, _ in self._iter_extended():
            if ext_type == EXT_EVENT_SCHEMA_TL and schema is None:
                schema = raw[start : start + size]
            elif ext_type == EXT_PROV_TRAITS and traits is None:
                traits = raw[start : start + size]
        return schema, traits

    @property
    def user_data_offset(self) -> int:
        if not self._h[_E("Flags")] & L.EVENT_HEADER_FLAG_EXTENDED_INFO:
            return L.EVENT_HEADER.size
        raw, pos = self._raw, self._pos + L.EVENT_HEADER.size
        end = self._pos + self._size
        while pos + 8 <= end:
            item_size, _, linkage, _ = _EXT_ITEM(raw, pos)
            if item_size < 8:
                break
            pos += item_size
            if not linkage & 1:
                break
        return min(pos, end) - self._pos



class MessageRecord(EventRecord):
    """MESSAGE_TRACE_HEADER (WPP / TraceMessage): optional items follow in a fixed order."""

    __slots__ = ()
    kind = "wpp"
    layout = L.MESSAGE_TRACE_HEADER
    header_size = L.MESSAGE_TRACE_HEADER.size
    header_type = _tuple_field(_M("HeaderType"))
    id = _tuple_field(_M("MessageNumber"))
    message_flags = _tuple_field(_M("OptionFlags"))

    @property
    def message_number(self) -> int:
        number: int = self._h[_M("MessageNumber")]
        return number

    def _optional_items(self) -> dict[str, Any]:
        flags = self._h[_M("OptionFlags")]
        raw, pos = self._raw, self._pos + L.MESSAGE_TRACE_HEADER.size
        end = self._pos + self._size
        items: dict[str, Any] = {}

        def take(n: int) -> bytes:
            nonlocal pos
            if pos + n > end:
                raise IndexError
            chunk = raw[pos : pos + n]
            pos += n
            return chunk

        try:
            if flags & L.TRACE_MESSAGE_SEQUENCE:
                items["sequence"] = _u32(take(4))[0]
            if flags & L.TRACE_MESSAGE_GUID:
                items["guid"] = take(16)
            elif flags & L.TRACE_MESSAGE_COMPONENTID:
                items["component_id"] = _u32(take(4))[0]
            if flags & L.TRACE_MESSAGE_TIMESTAMP:
                items["timestamp"] = struct.unpack("<q", take(8))[0]
            if flags & L.TRACE_MESSAGE_SYSTEMINFO:
                items["tid"], items["pid"] = struct.unpack("<II", take(8))
        except IndexError:
            items["truncated"] = True
        items["_end"] = pos - self._pos
        return items

    @property
    def sequence(self) -> int | None:
        return self._optional_items().get("sequence")

    @property
    def provider_guid_bytes(self) -> bytes | None:  # type: ignore[override]
        return self._optional_items().get("guid")

    @property
    def component_id(self) -> int | None:
        return self._optional_items().get("component_id")

    @property
    def timestamp(self) -> int:  # type: ignore[override]
        return int(self._optional_items().get("timestamp", 0))

    @property
    def pid(self) -> int:  # type: ignore[override]
        return int(self._optional_items().get("pid", 0))

    @property
    def tid(self) -> int:  # type: ignore[override]
        return int(self._optional_items().get("tid", 0))

    @property
    def user_data_offset(self) -> int:
        return int(self._optional_items()["_end"])

    @property
    def pointer_size(self) -> int:
        flags = self._h[_M("OptionFlags")]
        if flags & L.TRACE_MESSAGE_POINTER32:
            return 4
        if flags & L.TRACE_MESSAGE_POINTER64:
            return 8
        return self._ctx.pointer_size

    def with_timestamp(self, timestamp: int) -> EventRecord:
        flags = self._h[_M("OptionFlags")]
        if not flags & L.TRACE_MESSAGE_TIMESTAMP:
            return self
        offset = L.MESSAGE_TRACE_HEADER.size
        offset += 4 if flags & L.TRACE_MESSAGE_SEQUENCE else 0
        offset += 16 if flags & L.TRACE_MESSAGE_GUID else (4 if flags & L.TRACE_MESSAGE_COMPONENTID else 0)
        raw = bytearray(self.raw)
        struct.pack_into("<q", raw, offset, timestamp)
        return MessageRecord(self._h, bytes(raw), 0, self._size, self.cpu, self._ctx, self.buffer_index)


class UnknownRecord(EventRecord):
    """Bytes the reader could not frame as a known header: kept, reported, never skipped silently.

    ``reason`` says why; ``raw`` holds the bytes (up to the end of the buffer's data when the
    size could not be known).
    """

    __slots__ = ("reason",)
    kind = "unknown"

    def __init__(self, raw: bytes, pos: int, size: int, cpu: int, ctx: RecordContext, buffer_index: int, reason: str) -> None:
        marker = _u32(raw, pos)[0] if pos + 4 <= len(raw) else 0
        super().__init__((marker,), raw, pos, size, cpu, ctx, buffer_index)
        self.reason = reason

    @property
    def header_type(self) -> int:  # type: ignore[override]
        return header_type_of(self._h[0])

    @property
    def marker(self) -> int:
        marker: int = self._h[0]
        return marker

    @property
    def user_data_offset(self) -> int:
        return 0


RECORD_CLASSES: dict[int, type[EventRecord]] = {
    L.HEADER_TYPE_SYSTEM32: SystemRecord,
    L.HEADER_TYPE_SYSTEM64: SystemRecord,
    L.HEADER_TYPE_COMPACT32: CompactRecord,
    L.HEADER_TYPE_COMPACT64: CompactRecord,
    L.HEADER_TYPE_PERFINFO32: PerfInfoRecord,
    L.HEADER_TYPE_PERFINFO64: PerfInfoRecord,
    L.HEADER_TYPE_FULL_HEADER32: ClassicRecord,
    L.HEADER_TYPE_FULL_HEADER64: ClassicRecord,
    L.HEADER_TYPE_INSTANCE32: InstanceRecord,
    L.HEADER_TYPE_INSTANCE64: InstanceRecord,
    L.HEADER_TYPE_EVENT_HEADER32: EventHeaderRecord,
    L.HEADER_TYPE_EVENT_HEADER64: EventHeaderRecord,
}

KINDS = ("system", "compact", "perfinfo", "classic", "instance", "event", "wpp", "unknown")

__all__ = [
    "NULL_GUID",
    "ClassicRecord",
    "CompactRecord",
    "EventHeaderRecord",
    "EventRecord",
    "InstanceRecord",
    "MessageRecord",
    "PerfInfoRecord",
    "RecordContext",
    "SystemRecord",
    "UnknownRecord",
]
