"""EventPipe events as ``EventRecord``s: the EVENT_HEADER an ETW session would have written.

Each event becomes an EVENT_HEADER record (kind ``event``) so every reader of traces treats it
as an ETW event, and relogging it to ``.etl`` is a byte copy:

* the provider GUID is the runtime's known GUID for the .NET providers (whose ETW and EventPipe
  events share ids and layouts) and ETW's name hash (as EventSource computes it) for the rest;
* id, version, level, keywords from the metadata; the opcode from the metadata's opcode tag, or
  (for the runtime's providers) the task and opcode of the shipped manifest's event, or the
  ``Start``/``Stop`` an EventSource name implies;
* pid is the traced process, tid the event's thread, cpu its processor when the capture thread
  is the event's own; the timestamp stays in QPC ticks, converted to FILETIME by the record
  context's clock (the Trace object's sync time and frequency);
* the stack is a STACK_TRACE64 (or 32) extended item, as ETW carries stacks; a related activity
  id a RELATED_ACTIVITYID item;
* events of providers with no shipped layout carry their EventPipe field descriptions as
  TraceLogging metadata (EVENT_SCHEMA_TL and PROV_TRAITS items), so they decode, and relog,
  as self-describing events. The runtime's providers decode through the shipped layouts, as
  their ``.etl`` events do.

ETW records are at most 64 KiB: a larger payload (the runtime writes some) is cut to fit and
counted in ``truncated``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from openetw.errors import InvalidArgument, NettraceFormatError
from openetw.etl import layouts as L
from openetw.etl.build import MAX_RECORD_SIZE
from openetw.etl.clock import TraceClock
from openetw.etl.extended import (
    EXT_RELATED_ACTIVITYID,
    EXT_STACK_TRACE32,
    EXT_STACK_TRACE64,
    ExtendedItem,
    encode_extended_items,
    stack_trace_item,
)
from openetw.etl.intypes import InType, OutType
from openetw.etl.record import EventHeaderRecord, EventRecord, RecordContext
from openetw.etl.schema import PropertyInfo
from openetw.etl.tracelogging import (
    EXT_EVENT_SCHEMA_TL,
    EXT_PROV_TRAITS,
    encode_event_metadata,
    encode_provider_traits,
    tl_field,
)
from openetw.guids import provider_guid_from_name
from openetw.nettrace.container import TraceInfo
from openetw.nettrace.events import NULL_ACTIVITY, EventHeader
from openetw.nettrace.metadata import EventMetadata, Field, TypeCode
from openetw.nettrace.reader import NettraceEvent, NettraceReader

__all__ = ["KNOWN_PROVIDERS", "RUNTIME_PROVIDERS", "RecordBuilder", "provider_guid", "tracelogging_fields"]

# The .NET runtime's providers: the same GUIDs on ETW, and layouts openetw ships.
RUNTIME_PROVIDERS: dict[str, uuid.UUID] = {
    "Microsoft-Windows-DotNETRuntime": uuid.UUID("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
    "Microsoft-Windows-DotNETRuntimeRundown": uuid.UUID("a669021c-c450-4609-a035-5af59af4df18"),
    "Microsoft-Windows-DotNETRuntimeStress": uuid.UUID("cc2bcbba-16b6-4cf3-8990-d74c2e8af500"),
    "Microsoft-Windows-DotNETRuntimePrivate": uuid.UUID("763fd754-7086-4dfe-95eb-c01a46faf4ca"),
}
# EventSources whose ETW GUID predates the name hash.
KNOWN_PROVIDERS: dict[str, uuid.UUID] = {
    **RUNTIME_PROVIDERS,
    "System.Threading.Tasks.TplEventSource": uuid.UUID("2e5dba47-a3d2-4d16-8ee0-6671ffdcd7b5"),
    "System.Diagnostics.Eventing.FrameworkEventSource": uuid.UUID("8e9f5090-2d75-4d03-8a81-e5afbf85daf1"),
}
_RUNTIME_GUIDS = frozenset(RUNTIME_PROVIDERS.values())
_HEADER_SIZE = L.EVENT_HEADER.size
_PACK = L.EVENT_HEADER.pack

_OPCODE_START, _OPCODE_STOP = 1, 2

_SCALARS: dict[int, tuple[InType, OutType | None]] = {
    TypeCode.BOOLEAN: (InType.BOOLEAN, None),
    TypeCode.CHAR: (InType.UINT16, OutType.STRING),
    TypeCode.SBYTE: (InType.INT8, None),
    TypeCode.BYTE: (InType.UINT8, None),
    TypeCode.INT16: (InType.INT16, None),
    TypeCode.UINT16: (InType.UINT16, None),
    TypeCode.INT32: (InType.INT32, None),
    TypeCode.UINT32: (InType.UINT32, None),
    TypeCode.INT64: (InType.INT64, None),
    TypeCode.UINT64: (InType.UINT64, None),
    TypeCode.SINGLE: (InType.FLOAT, None),
    TypeCode.DOUBLE: (InType.DOUBLE, None),
    TypeCode.DATETIME: (InType.FILETIME, None),
    TypeCode.GUID: (InType.GUID, None),
    TypeCode.STRING: (InType.UNICODESTRING, None),
    23: (InType.UINT8, None),  # version 6: a UTF-8 code unit
}
_FIXED_ARRAY = 22  # version 6

Describe = Callable[[uuid.UUID, int, int], Any]  # (provider, id, version) -> a Schema or None


def provider_guid(meta: EventMetadata) -> uuid.UUID:
    """The ETW GUID of the metadata's provider: its known GUID, else ETW's name hash."""
    if meta.provider_guid is not None:
        return meta.provider_guid
    known = KNOWN_PROVIDERS.get(meta.provider_name)
    return known if known is not None else provider_guid_from_name(meta.provider_name)


def _property(field: Field, version: int, count: int | Literal["variable"] | None = None) -> PropertyInfo:
    if field.type_code == TypeCode.OBJECT:
        members = tuple(_property(member, version) for member in field.members or ())
        if not members:
            raise InvalidArgument(f"struct {field.name!r} has no fields")
        return tl_field(field.name, 24, count=count, members=members)
    if field.type_code in (TypeCode.ARRAY, _FIXED_ARRAY):
        element = field.element
        if element is None or element.type_code in (TypeCode.ARRAY, _FIXED_ARRAY) or count is not None:
            raise InvalidArgument(f"array {field.name!r} of arrays")
        inner = Field(field.name, element.type_code, element.members, element.element)
        return _property(inner, version, "variable" if field.type_code == TypeCode.ARRAY else field.count)
    if field.type_code == TypeCode.DATETIME and version >= 6:
        return tl_field(field.name, InType.SYSTEMTIME, count=count)  # version 6 writes the eight shorts of a SYSTEMTIME
    scalar = _SCALARS.get(field.type_code)
    if scalar is None:
        raise InvalidArgument(f"field {field.name!r}: type code {field.type_code} has no TraceLogging type")
    return tl_field(field.name, scalar[0], scalar[1], count=count)


def tracelogging_fields(meta: EventMetadata, version: int = 5) -> tuple[PropertyInfo, ...] | None:
    """The metadata's fields as TraceLogging field descriptions (``None``: not describable, as
    version 6's variable-length integers and relative locations are not)."""
    if meta.fields is None:
        return None
    try:
        return tuple(_property(field, version) for field in meta.fields)
    except InvalidArgument:
        return None


# Events of EventPipe's own providers that older runtimes write with empty metadata.
_WELL_KNOWN: dict[tuple[str, int], tuple[str, tuple[Field, ...]]] = {
    ("Microsoft-DotNETCore-SampleProfiler", 0): ("ThreadSample", (Field("Type", TypeCode.INT32),)),  # 1 external, 2 managed code
    ("Microsoft-DotNETCore-SampleProfiler", 1): ("ThreadStackWalk", ()),
}


def _described(meta: EventMetadata) -> EventMetadata:
    """``meta``, or a copy named and described by ``_WELL_KNOWN`` when the trace left it empty."""
    known = _WELL_KNOWN.get((meta.provider_name, meta.event_id))
    if known is None or meta.event_name or meta.fields:
        return meta
    name, fields = known
    return EventMetadata(
        meta.metadata_id, meta.provider_name, meta.event_id, name, meta.keywords, meta.version, meta.level, meta.opcode, meta.provider_guid, fields,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Kind:
    """What every event of one metadata record shares."""

    provider_id: uuid.UUID
    id: int
    version: int
    level: int
    opcode: int
    task: int
    channel: int
    keyword: int
    items: tuple[ExtendedItem, ...]
    provider_bytes: bytes = b""
    encoded: bytes = b""  # ``items`` as they sit after the header
    linked: bytes = b""  # the same with the last item's linkage bit set: another item follows


def _implied_opcode(name: str) -> int:
    lowered = name.lower()
    if lowered.endswith("start"):
        return _OPCODE_START
    if lowered.endswith("stop"):
        return _OPCODE_STOP
    return 0


class RecordBuilder:
    """Turns one trace's ``NettraceEvent``s into ``EventRecord``s.

    ``describe`` finds the shipped layout of a runtime event (task, opcode, channel for its
    header); without it those come from the metadata alone."""

    def __init__(self, info: TraceInfo, source: str | None = None, describe: Describe | None = None) -> None:
        clock = TraceClock(L.CLOCK_QPC, info.sync_time_filetime, info.sync_qpc, info.qpc_frequency)
        self.info = info
        self.context = RecordContext(clock, info.pointer_size, source, logger_name="EventPipe")
        self.describe = describe
        self.truncated = 0
        self._kinds: dict[int, _Kind] = {}
        self._flags = L.EVENT_HEADER_FLAG_64_BIT_HEADER if info.pointer_size == 8 else L.EVENT_HEADER_FLAG_32_BIT_HEADER
        self._ext_flags = self._flags | L.EVENT_HEADER_FLAG_EXTENDED_INFO
        self._header_type = L.HEADER_TYPE_EVENT_HEADER64 if info.pointer_size == 8 else L.HEADER_TYPE_EVENT_HEADER32
        self._pid = info.process_id & 0xFFFFFFFF
        self._stack_type = EXT_STACK_TRACE64 if info.pointer_size == 8 else EXT_STACK_TRACE32

    def kind(self, meta: EventMetadata) -> _Kind:
        key = id(meta)
        found = self._kinds.get(key)
        if found is not None:
            return found
        provider = provider_guid(meta)
        opcode, task, channel = meta.opcode, 0, 0
        items: tuple[ExtendedItem, ...] = ()
        if provider in _RUNTIME_GUIDS:
            schema = self.describe(provider, meta.event_id, meta.version) if self.describe is not None else None
            if schema is not None:
                task, channel = schema.task, schema.channel
                opcode = schema.opcode if opcode is None else opcode
        else:
            meta = _described(meta)
            fields = tracelogging_fields(meta, self.info.version)
            name = meta.event_name or f"EventID({meta.event_id})"
            try:
                blob = encode_event_metadata(name, fields if fields is not None else ())
                traits = encode_provider_traits(meta.provider_name or str(provider))
                items = (ExtendedItem(EXT_EVENT_SCHEMA_TL, blob), ExtendedItem(EXT_PROV_TRAITS, traits))
            except InvalidArgument:
                items = ()
        if opcode is None:
            opcode = _implied_opcode(meta.event_name)
        found = _Kind(
            provider, meta.event_id & 0xFFFF, meta.version & 0xFF, meta.level & 0xFF, opcode & 0xFF, task & 0xFFFF, channel & 0xFF,
            meta.keywords & 0xFFFFFFFFFFFFFFFF, items, provider.bytes_le, encode_extended_items(items) if items else b"", _linked(items),
        )  # fmt: skip
        if len(self._kinds) > 1 << 20:
            self._kinds.clear()
        self._kinds[key] = found
        return found

    def record(self, event: NettraceEvent) -> EventRecord:
        """The EVENT_HEADER record of ``event`` (header tuple and bytes made directly: this runs
        once per event of the trace)."""
        meta = event.metadata
        kind = self._kinds.get(id(meta))
        if kind is None:
            kind = self.kind(meta)
        header = event.header
        raw_stack = event.raw_stack
        plain = header.related_activity_id == NULL_ACTIVITY
        payload = event.payload
        if raw_stack and plain:
            # STACK_TRACE64/32: a zero match id, then the trace's pointers as they are (one join below).
            length = 8 + len(raw_stack)
            padded = (length + 7) & ~7
            linked = kind.linked
            size = _HEADER_SIZE + len(linked) + 8 + padded + len(payload)
            if size <= MAX_RECORD_SIZE:  # ``_fields`` and ``_cpu`` in line: most events of the largest traces come this way
                pid, processor = header.process_id, header.processor
                fields = (
                    size, self._header_type, _MARKER_FLAGS_TYPED, self._ext_flags, 0, header.thread_id & 0xFFFFFFFF,
                    self._pid if pid < 0 else pid, header.timestamp & 0x7FFFFFFFFFFFFFFF, kind.provider_bytes, kind.id,
                    kind.version, kind.channel, kind.level, kind.opcode, kind.task, kind.keyword, 0, header.activity_id,
                )  # fmt: skip
                item = _EXT_ITEM_HEADER(8 + padded, self._stack_type, 0, length)
                raw = b"".join((_PACK(*fields), linked, item, _NO_MATCH_ID, raw_stack, _PADS[padded - length], payload))
                cpu = processor if processor >= 0 and header.thread_id == header.capture_thread_id else 0
                return EventHeaderRecord(fields, raw, 0, size, cpu, self.context)
            ext = linked + _EXT_ITEM_HEADER(8 + padded, self._stack_type, 0, length) + _NO_MATCH_ID + raw_stack + _PADS[padded - length]
        elif plain and not event.stack:
            ext = kind.encoded
        else:
            items = [*kind.items]
            if not plain:
                items.append(ExtendedItem(EXT_RELATED_ACTIVITYID, header.related_activity_id))
            if event.stack:
                items.append(stack_trace_item(0, list(event.stack), self.info.pointer_size))
            ext = encode_extended_items(items)
        size = _HEADER_SIZE + len(ext) + len(payload)
        if size > MAX_RECORD_SIZE:
            ext, payload, size = self._cut(kind, ext, payload)
        fields = self._fields(header, kind, size, bool(ext))
        return EventHeaderRecord(fields, _PACK(*fields) + ext + payload, 0, size, self._cpu(header), self.context)

    def column_records(self, reader: NettraceReader) -> Iterator[EventRecord]:
        """``record`` of every event of ``reader.row_columns()`` (versions 1-3 on the compiled
        walk), made from the columns: no ``EventHeader`` or ``NettraceEvent`` per event except
        for metadata rows and the records that take ``record``'s general path (a related
        activity id, a record past 64 KiB). The same records, losses and counts as ``record``
        of ``reader.events()``."""
        metadata, stats, data, pointer_size = reader.metadata, reader.stats, reader.data, self.info.pointer_size
        kinds, kind_of, record, context = self._kinds, self.kind, self.record, self.context
        header_type, ext_flags, flags, pid, stack_type = self._header_type, self._ext_flags, self._flags, self._pid, self._stack_type
        for columns, block in reader.row_columns():
            for offset, metadata_id, _, thread_id, _, _, _, timestamp, activity, related, _, start, payload_size, raw in zip(*columns, strict=True):
                if metadata_id == 0:
                    try:
                        reader.learn(EventHeader(offset, 0, 0, thread_id, -1, -1, 0, timestamp, activity, related, False, start, payload_size), block)
                    except NettraceFormatError as exc:
                        reader.stop_span(exc)
                        break
                    continue
                meta = metadata.get(metadata_id)
                if meta is None:
                    stats.unknown_metadata += 1
                    continue
                stats.events += 1
                payload = data[start : start + payload_size]
                if type(payload) is not bytes:
                    payload = bytes(payload)
                if raw:
                    whole = len(raw) - len(raw) % pointer_size
                    raw = raw[:whole] if whole != len(raw) else raw
                kind = kinds.get(id(meta))
                if kind is None:
                    kind = kind_of(meta)
                if related == NULL_ACTIVITY:
                    if raw:
                        length = 8 + len(raw)
                        padded = (length + 7) & ~7
                        linked = kind.linked
                        size = _HEADER_SIZE + len(linked) + 8 + padded + len(payload)
                        if size <= MAX_RECORD_SIZE:
                            fields = (
                                size, header_type, _MARKER_FLAGS_TYPED, ext_flags, 0, thread_id, pid, timestamp & 0x7FFFFFFFFFFFFFFF,
                                kind.provider_bytes, kind.id, kind.version, kind.channel, kind.level, kind.opcode, kind.task, kind.keyword, 0, activity,
                            )  # fmt: skip
                            item = _EXT_ITEM_HEADER(8 + padded, stack_type, 0, length)
                            joined = b"".join((_PACK(*fields), linked, item, _NO_MATCH_ID, raw, _PADS[padded - length], payload))
                            yield EventHeaderRecord(fields, joined, 0, size, 0, context)
                            continue
                    else:
                        ext = kind.encoded
                        size = _HEADER_SIZE + len(ext) + len(payload)
                        if size <= MAX_RECORD_SIZE:
                            fields = (
                                size, header_type, _MARKER_FLAGS_TYPED, ext_flags if ext else flags, 0, thread_id, pid, timestamp & 0x7FFFFFFFFFFFFFFF,
                                kind.provider_bytes, kind.id, kind.version, kind.channel, kind.level, kind.opcode, kind.task, kind.keyword, 0, activity,
                            )  # fmt: skip
                            yield EventHeaderRecord(fields, _PACK(*fields) + ext + payload, 0, size, 0, context)
                            continue
                header = EventHeader(offset, metadata_id, 0, thread_id, -1, -1, 0, timestamp, activity, related, False, start, payload_size, raw)
                event = NettraceEvent(header, meta, payload, None, block, raw, pointer_size) if raw else NettraceEvent(header, meta, payload, (), block)
                yield record(event)

    def _fields(self, header: EventHeader, kind: _Kind, size: int, extended: bool) -> tuple[Any, ...]:
        pid = header.process_id
        return (
            size, self._header_type, _MARKER_FLAGS_TYPED, self._ext_flags if extended else self._flags, 0,
            header.thread_id & 0xFFFFFFFF, self._pid if pid < 0 else pid, header.timestamp & 0x7FFFFFFFFFFFFFFF, kind.provider_bytes, kind.id,
            kind.version, kind.channel, kind.level, kind.opcode, kind.task, kind.keyword, 0, header.activity_id,
        )  # fmt: skip

    @staticmethod
    def _cpu(header: EventHeader) -> int:
        """The event's processor when the thread that captured it is its own (else 0)."""
        processor = header.processor
        return processor if processor >= 0 and header.thread_id == header.capture_thread_id else 0

    def _cut(self, kind: _Kind, ext: bytes, payload: bytes) -> tuple[bytes, bytes, int]:
        """A record past ETW's 64 KiB: the payload cut to fit, or (when the extended items alone
        are too many) the items of the kind and no payload; counted in ``truncated``."""
        room = MAX_RECORD_SIZE - _HEADER_SIZE - len(ext)
        if len(payload) > room:
            payload = payload[: max(room, 0)]
            self.truncated += 1
        size = _HEADER_SIZE + len(ext) + len(payload)
        if size > MAX_RECORD_SIZE:  # extended items alone past 64 KiB (a stack of thousands of frames)
            ext, payload = kind.encoded, b""
            size = _HEADER_SIZE + len(ext)
            self.truncated += 1
        return ext, payload, size


_EXT_ITEM_HEADER = struct.Struct("<HHHH").pack
_NO_MATCH_ID = bytes(8)
_PADS = tuple(bytes(n) for n in range(8))
_MARKER_FLAGS_TYPED = L.MARKER_FLAGS_TYPED


def _linked(items: tuple[ExtendedItem, ...]) -> bytes:
    """``items`` encoded as when another item follows them (an empty last item, cut off)."""
    return encode_extended_items((*items, ExtendedItem(0, b"")))[:-8] if items else b""
