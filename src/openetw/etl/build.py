"""Building records from fields: the bytes a provider, a test or a converter would write."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.extended import ExtendedItem, encode_extended_items
from openetw.etl.record import (
    DEFAULT_CONTEXT,
    ClassicRecord,
    CompactRecord,
    EventHeaderRecord,
    EventRecord,
    InstanceRecord,
    MessageRecord,
    PerfInfoRecord,
    RecordContext,
    SystemRecord,
)
from openetw.guids import NULL_GUID

MAX_RECORD_SIZE = 0xFFFF  # sizes are u16 in every header


def _finish(cls: type[EventRecord], header: bytes, body: bytes, cpu: int, ctx: RecordContext) -> EventRecord:
    raw = header + body
    if len(raw) > MAX_RECORD_SIZE:
        raise InvalidArgument(f"a record of {len(raw)} bytes does not fit ETW's 64 KB limit")
    layout = cls.layout
    assert layout is not None
    return cls(layout.unpack_from(raw, 0), raw, 0, len(raw), cpu, ctx)


def build_event_record(
    *,
    provider_id: uuid.UUID,
    id: int = 0,  # noqa: A002 - EVENT_DESCRIPTOR's field name
    version: int = 0,
    channel: int = 0,
    level: int = 0,
    opcode: int = 0,
    task: int = 0,
    keyword: int = 0,
    pid: int = 0,
    tid: int = 0,
    timestamp: int = 0,
    cpu: int = 0,
    activity_id: uuid.UUID = NULL_GUID,
    user_data: bytes = b"",
    extended: Sequence[ExtendedItem] = (),
    flags: int = 0,
    event_property: int = 0,
    processor_time: int = 0,
    pointer_size: int = 8,
    context: RecordContext = DEFAULT_CONTEXT,
) -> EventRecord:
    """An EVENT_HEADER record (manifest-based or TraceLogging event)."""
    ext = encode_extended_items(list(extended)) if extended else b""
    if extended:
        flags |= L.EVENT_HEADER_FLAG_EXTENDED_INFO
    else:
        flags &= ~L.EVENT_HEADER_FLAG_EXTENDED_INFO
    size = L.EVENT_HEADER.size + len(ext) + len(user_data)
    header_type = L.HEADER_TYPE_EVENT_HEADER64 if pointer_size == 8 else L.HEADER_TYPE_EVENT_HEADER32
    try:
        header = L.EVENT_HEADER.pack(
            size & 0xFFFF, header_type, L.MARKER_FLAGS_TYPED, flags, event_property, tid, pid, timestamp,
            provider_id.bytes_le, id, version, channel, level, opcode, task, keyword, processor_time, activity_id.bytes_le,
        )
    except struct.error as exc:
        raise InvalidArgument(f"event header field out of range: {exc}") from exc
    return _finish(EventHeaderRecord, header, ext + user_data, cpu, context)


def build_system_record(
    *, hook_id: int, version: int = 2, pid: int = 0, tid: int = 0, timestamp: int = 0, cpu: int = 0,
    user_data: bytes = b"", kernel_time: int = 0, user_time: int = 0, pointer_size: int = 8,
    compact: bool = False, context: RecordContext = DEFAULT_CONTEXT,
) -> EventRecord:
    """A SYSTEM_TRACE_HEADER (or compact) kernel record."""
    if compact:
        header_type = L.HEADER_TYPE_COMPACT64 if pointer_size == 8 else L.HEADER_TYPE_COMPACT32
        size = L.COMPACT_SYSTEM_TRACE_HEADER.size + len(user_data)
        header = L.COMPACT_SYSTEM_TRACE_HEADER.pack(version, header_type, L.MARKER_FLAGS_TYPED, size & 0xFFFF, hook_id, tid, pid, timestamp)
        return _finish(CompactRecord, header, user_data, cpu, context)
    header_type = L.HEADER_TYPE_SYSTEM64 if pointer_size == 8 else L.HEADER_TYPE_SYSTEM32
    size = L.SYSTEM_TRACE_HEADER.size + len(user_data)
    header = L.SYSTEM_TRACE_HEADER.pack(version, header_type, L.MARKER_FLAGS_TYPED, size & 0xFFFF, hook_id, tid, pid, timestamp, kernel_time, user_time)
    return _finish(SystemRecord, header, user_data, cpu, context)


def build_perfinfo_record(
    *, hook_id: int, version: int = 2, timestamp: int = 0, cpu: int = 0, user_data: bytes = b"",
    pointer_size: int = 8, context: RecordContext = DEFAULT_CONTEXT,
) -> EventRecord:
    header_type = L.HEADER_TYPE_PERFINFO64 if pointer_size == 8 else L.HEADER_TYPE_PERFINFO32
    size = L.PERFINFO_TRACE_HEADER.size + len(user_data)
    header = L.PERFINFO_TRACE_HEADER.pack(version, header_type, L.MARKER_FLAGS_TYPED, size & 0xFFFF, hook_id, timestamp)
    return _finish(PerfInfoRecord, header, user_data, cpu, context)


def build_classic_record(
    *, event_guid: uuid.UUID, type: int = 0, level: int = 0, version: int = 0, pid: int = 0, tid: int = 0,  # noqa: A002 - the header's name
    timestamp: int = 0, cpu: int = 0, user_data: bytes = b"", kernel_time: int = 0, user_time: int = 0,
    pointer_size: int = 8, instance: tuple[int, int, uuid.UUID] | None = None, context: RecordContext = DEFAULT_CONTEXT,
) -> EventRecord:
    """An EVENT_TRACE_HEADER record, or the instance form when ``instance`` = (id, parent id, parent GUID)."""
    common = (type, level, version, tid, pid, timestamp, event_guid.bytes_le, kernel_time, user_time)
    if instance is None:
        header_type = L.HEADER_TYPE_FULL_HEADER64 if pointer_size == 8 else L.HEADER_TYPE_FULL_HEADER32
        size = L.EVENT_TRACE_HEADER.size + len(user_data)
        header = L.EVENT_TRACE_HEADER.pack(size & 0xFFFF, header_type, L.MARKER_FLAGS_TYPED, *common)
        return _finish(ClassicRecord, header, user_data, cpu, context)
    header_type = L.HEADER_TYPE_INSTANCE64 if pointer_size == 8 else L.HEADER_TYPE_INSTANCE32
    size = L.EVENT_INSTANCE_HEADER.size + len(user_data)
    instance_id, parent_id, parent_guid = instance
    header = L.EVENT_INSTANCE_HEADER.pack(size & 0xFFFF, header_type, L.MARKER_FLAGS_TYPED, *common, instance_id, parent_id, parent_guid.bytes_le)
    return _finish(InstanceRecord, header, user_data, cpu, context)


def build_message_record(
    *, message_number: int, message_guid: uuid.UUID | None = None, component_id: int | None = None,
    sequence: int | None = None, timestamp: int | None = None, pid: int | None = None, tid: int | None = None,
    cpu: int = 0, user_data: bytes = b"", pointer_size: int | None = None, context: RecordContext = DEFAULT_CONTEXT,
) -> EventRecord:
    """A MESSAGE_TRACE_HEADER (WPP) record with the optional items in their fixed order."""
    flags = 0
    items = b""
    if sequence is not None:
        flags |= L.TRACE_MESSAGE_SEQUENCE
        items += struct.pack("<I", sequence)
    if message_guid is not None:
        flags |= L.TRACE_MESSAGE_GUID
        items += message_guid.bytes_le
    elif component_id is not None:
        flags |= L.TRACE_MESSAGE_COMPONENTID
        items += struct.pack("<I", component_id)
    if timestamp is not None:
        flags |= L.TRACE_MESSAGE_TIMESTAMP
        items += struct.pack("<q", timestamp)
    if pid is not None or tid is not None:
        flags |= L.TRACE_MESSAGE_SYSTEMINFO
        items += struct.pack("<II", tid or 0, pid or 0)
    if pointer_size == 4:
        flags |= L.TRACE_MESSAGE_POINTER32
    elif pointer_size == 8:
        flags |= L.TRACE_MESSAGE_POINTER64
    size = L.MESSAGE_TRACE_HEADER.size + len(items) + len(user_data)
    header = L.MESSAGE_TRACE_HEADER.pack(size & 0xFFFF, L.HEADER_TYPE_MESSAGE, L.MARKER_FLAGS_MESSAGE, message_number, flags)
    return _finish(MessageRecord, header, items + user_data, cpu, context)
