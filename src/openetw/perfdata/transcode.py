"""perf.data samples as ``EventRecord``s: every tracepoint event becomes a TraceLogging event.

An EventHeader event keeps its identity: the provider is the tracepoint's provider name with
ETW's name hash as its GUID, level and keyword come from the tracepoint name, id, version,
opcode, tag and activity ids from the event's header, and its fields become TraceLogging
fields (an EVENT_SCHEMA_TL metadata blob and a PROV_TRAITS blob ride along as extended items,
as on Windows). So every reader of ``.etl`` TraceLogging events (``dump``, ``export``, ``sql``,
probes, the viewer, ``relog``) reads them unchanged, and a relogged ``.etl`` carries them as
ordinary TraceLogging events.

What EventHeader has and TraceLogging lacks is written in the nearest faithful type:

* strings and characters of any code unit size: counted UTF-16 strings (``COUNTEDSTRING``);
  XML and JSON formats keep their out-type;
* ``hex_bytes``, ``Value128`` and binary fields: ``COUNTEDBINARY`` (IPv6 with out-type IPV6);
* ``time`` (seconds since 1970): ``FILETIME`` when a FILETIME holds it, else the raw seconds
  as an integer; ``errno``: INT32; ``pid``: INT32 with out-type PID;
* a boolean that is neither 0 nor 1, and a counted field whose format reads values (an
  ``unsigned_int`` binary of 4 bytes) become the integer they hold; an empty one an empty binary.

A plain tracepoint (``sched:sched_switch``) becomes a TraceLogging event of provider
``sched`` and event ``sched_switch`` with the fields of its ``format`` file (the common fields
left out: pid and cpu are in the header). A sample of another kind of event (a counter) becomes
an event of provider ``perf`` named by the event, with its ip, addr and period.
"""

from __future__ import annotations

import ipaddress
import struct
import uuid
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from openetw.errors import InvalidArgument, PerfDataFormatError, TraceDataError
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.extended import (
    EXT_EVENT_SCHEMA_TL,
    EXT_PROV_TRAITS,
    EXT_RELATED_ACTIVITYID,
    ExtendedItem,
    encode_extended_items,
)
from openetw.etl.intypes import MAX_FILETIME, InType, OutType
from openetw.etl.record import EventHeaderRecord, EventRecord, RecordContext
from openetw.etl.schema import PropertyInfo
from openetw.etl.tracelogging import (
    TLG_STRUCT,
    TRACELOGGING_CHANNEL,
    encode_event_metadata,
    encode_provider_traits,
    pack_values,
    tl_field,
)
from openetw.guids import NULL_GUID, provider_guid_from_name
from openetw.kernel.event_decoder import EventDecoder
from openetw.kernel.tracefs_format import (
    DATA_LOC,
    DYNAMIC_TAIL,
    INT_ARRAY,
    INTEGER,
    REL_LOC,
    STRING,
    EventFormat,
)
from openetw.perfdata import eventheader as EH
from openetw.perfdata.reader import EventAttr, PerfData, Sample

__all__ = ["Transcoder", "eventheader_fields", "eventheader_record", "is_eventheader_format"]

_COUNTED_STRING = InType.MANIFEST_COUNTEDSTRING
_COUNTED_BINARY = InType.MANIFEST_COUNTEDBINARY
_UNSIGNED = {1: InType.UINT8, 2: InType.UINT16, 4: InType.UINT32, 8: InType.UINT64}
_SIGNED = {1: InType.INT8, 2: InType.INT16, 4: InType.INT32, 8: InType.INT64}
_HEX_OUT = {1: OutType.HEXINT8, 2: OutType.HEXINT16, 4: OutType.HEXINT32, 8: OutType.HEXINT64}
_UNIX_EPOCH_SECONDS = 11_644_473_600  # 1601-01-01 to 1970-01-01
_EVENTHEADER_FIELDS = ("eventheader_flags", "version", "id", "tag", "opcode", "level")

Spec = tuple[int, int | None]  # (in-type, out-type)
_EVENT_HEADER = L.EVENT_HEADER
_NULL_LE = NULL_GUID.bytes_le


def _text(value: str) -> str:
    """UTF-16 cannot hold lone surrogates: they read as U+FFFD."""
    return (
        value.encode("utf-16-le", "replace").decode("utf-16-le")
        if any(0xD800 <= ord(c) < 0xE000 for c in value)
        else value
    )


def _scalar(typed: EH.Typed, fmt: int) -> tuple[Spec, Any]:
    kind, size, value = typed
    if kind == "uint":
        return (_UNSIGNED[size], None), value
    if kind == "int":
        return (_SIGNED[size], None), value
    if kind == "hex":
        return (_UNSIGNED[size], _HEX_OUT[size]), value
    if kind == "errno":
        return (InType.INT32, None), value
    if kind == "pid":
        return (InType.INT32, OutType.PID), value
    if kind == "time":
        ticks = (value + _UNIX_EPOCH_SECONDS) * 10_000_000
        if 0 < ticks <= MAX_FILETIME:
            return (InType.FILETIME, None), ticks
        return (_SIGNED[size], None), value
    if kind == "bool":
        if value not in (0, 1):
            return (_UNSIGNED[size], None), value
        return ((InType.BOOLEAN, None) if size == 4 else (_UNSIGNED[size], OutType.BOOLEAN)), bool(value)
    if kind == "float":
        return (InType.FLOAT if size == 4 else InType.DOUBLE, None), value
    if kind in ("char", "str"):
        out = OutType.XML if fmt == EH.STRING_XML else OutType.JSON if fmt == EH.STRING_JSON else None
        return (_COUNTED_STRING, out), _text(value)
    if kind == "uuid":
        return (InType.GUID, None), value
    if kind == "port":
        return (InType.UINT16, OutType.PORT), value
    if kind == "ipv4":
        return (InType.UINT32, OutType.IPV4), ipaddress.IPv4Address(value)
    if kind == "ipv6":
        return (_COUNTED_BINARY, OutType.IPV6), ipaddress.IPv6Address(value)
    return (_COUNTED_BINARY, None), (value or b"")  # bytes, null


def _nominal(field: EH.EhField) -> Spec:
    """The type of a field with no value to look at (an empty array)."""
    size = EH.VALUE_SIZES.get(field.encoding)
    if size is not None:
        return _scalar(EH._fixed(b"\0" * size, field.format, "<"), field.format)[0]
    if field.format == EH.HEX_BYTES or (field.encoding == EH.BINARY_LENGTH16_CHAR8 and field.format < EH.STRING8):
        return (_COUNTED_BINARY, None)
    return _scalar(("str", 0, ""), field.format)[0]


def _unify(specs: list[Spec], items: list[EH.Typed], field: EH.EhField) -> tuple[Spec, list[Any]]:
    """One type for an array whose elements read as different types (booleans that are not 0/1,
    times outside FILETIME): the elements as the integers they are."""
    size = items[0][1] if items else 0
    if all(kind in ("bool", "int", "uint", "time", "hex") for kind, _, _ in items) and size in _SIGNED:
        signed = any(kind in ("int", "time") for kind, _, _ in items)
        return ((_SIGNED if signed else _UNSIGNED)[size], None), [value for _, _, value in items]
    raise PerfDataFormatError(f"array {field.name!r} mixes element types {sorted(set(specs))}", structure="eventheader")


def _field(field: EH.EhField, value: EH.Typed | list[EH.Typed]) -> tuple[PropertyInfo, Any]:
    count: int | Literal["variable"] | None = (
        None if field.count is None else ("variable" if field.count == "variable" else int(field.count))
    )
    if field.encoding == EH.STRUCT:
        if isinstance(value, list):
            elements = [_struct_members(field, item) for item in value]
            members = elements[0][0] if elements else [_field(member, _empty(member))[0] for member in field.members]
            return tl_field(field.name, TLG_STRUCT, count=count, members=members, tags=field.tag), [
                values for _, values in elements
            ]
        props, values = _struct_members(field, value)
        return tl_field(field.name, TLG_STRUCT, members=props, tags=field.tag), values
    if isinstance(value, list):
        pairs = [_scalar(item, field.format) for item in value]
        specs = [spec for spec, _ in pairs]
        if not specs:
            spec, values = _nominal(field), []
        elif len(set(specs)) == 1:
            spec, values = specs[0], [item for _, item in pairs]
        else:
            spec, values = _unify(specs, value, field)
        return tl_field(field.name, spec[0], spec[1], count, tags=field.tag), values
    spec, converted = _scalar(value, field.format)
    return tl_field(field.name, spec[0], spec[1], tags=field.tag), converted


def _empty(field: EH.EhField) -> EH.Typed | list[EH.Typed]:
    if field.count is not None:
        return []
    if field.encoding == EH.STRUCT:
        return ("struct", 0, [(member.name, _empty(member)) for member in field.members])
    size = EH.VALUE_SIZES.get(field.encoding)
    return EH._fixed(b"\0" * size, field.format, "<") if size else ("str", 0, "")


def _struct_members(field: EH.EhField, typed: EH.Typed) -> tuple[list[PropertyInfo], list[Any]]:
    props, values = [], []
    for member, (_, member_value) in zip(field.members, typed[2], strict=True):
        prop, converted = _field(member, member_value)
        props.append(prop)
        values.append(converted)
    return props, values


def eventheader_fields(event: EH.EhEvent, *, base: int = 0) -> tuple[list[PropertyInfo], list[Any]]:
    """The TraceLogging fields and values of an EventHeader event's payload."""
    props, values = [], []
    for field, (_, typed) in zip(event.fields, EH.decode_typed(event, base=base), strict=True):
        prop, converted = _field(field, typed)
        props.append(prop)
        values.append(converted)
    return props, values


def is_eventheader_format(fmt: EventFormat) -> bool:
    """Whether a tracepoint's fields are EventHeader's (``u8 eventheader_flags; u8 version; ...``)."""
    names = tuple(f.name for f in fmt.fields[: len(_EVENTHEADER_FIELDS)])
    return names == _EVENTHEADER_FIELDS and EH.parse_tracepoint_name(fmt.name) is not None


@lru_cache(maxsize=4096)
def _metadata(name: str, props: tuple[PropertyInfo, ...], tags: int) -> bytes:
    return encode_event_metadata(name, props, tags=tags)


@lru_cache(maxsize=1024)
def _traits(provider: str) -> tuple[uuid.UUID, bytes]:
    return provider_guid_from_name(provider), encode_provider_traits(provider)


class _Plain:
    """A plain tracepoint: its TraceLogging metadata, once, and how its payload is rewritten."""

    __slots__ = ("provider", "guid", "items", "extended", "fields", "decoder", "repack", "fixed_size")

    def __init__(self, fmt: EventFormat) -> None:
        self.provider = fmt.system or "tracepoint"
        self.guid, traits = _traits(self.provider)
        props: list[PropertyInfo] = []
        in_codes, out_codes, simple = "<", "<", True
        position = 0
        for f in fmt.fields:
            if f.kind == INTEGER:
                props.append(tl_field(f.name, (_SIGNED if f.signed else _UNSIGNED)[f.size]))
                code = f.struct_code or "B"
            elif f.kind == INT_ARRAY and f.array_length:
                props.append(
                    tl_field(f.name, (_SIGNED if f.signed else _UNSIGNED)[f.element_size], count=f.array_length)
                )
                code = f"{f.array_length}{f.struct_code}"
            elif f.kind in (STRING, DATA_LOC, REL_LOC, DYNAMIC_TAIL) and (f.text or f.kind == STRING):
                props.append(tl_field(f.name, _COUNTED_STRING))
                simple = False
                continue
            else:  # BYTES, binary dynamic arrays
                props.append(tl_field(f.name, _COUNTED_BINARY))
                simple = False
                continue
            if f.offset < position:
                simple = False
            in_codes += (f"{f.offset - position}x" if f.offset > position else "") + code
            out_codes += code
            position = f.offset + f.size
        self.fields = tuple(props)
        metadata = encode_event_metadata(fmt.name, self.fields)
        self.items = (ExtendedItem(EXT_PROV_TRAITS, traits), ExtendedItem(EXT_EVENT_SCHEMA_TL, metadata))
        self.extended = encode_extended_items(list(self.items))  # the same bytes on every record
        # Integer-only formats: the payload is the fields' bytes without the common fields and padding.
        self.repack = (struct.Struct(in_codes), struct.Struct(out_codes)) if simple else None
        self.fixed_size = position
        self.decoder = None if simple else EventDecoder([fmt])

    def user_data(self, raw: bytes) -> bytes:
        if self.repack is not None:
            if len(raw) < self.fixed_size:
                raise TraceDataError(
                    f"payload of {len(raw)} bytes is shorter than its {self.fixed_size}-byte layout",
                    structure="payload",
                )
            source, target = self.repack
            return target.pack(*source.unpack_from(raw))
        assert self.decoder is not None
        decoded = self.decoder.decode(raw)
        if decoded is None:
            raise TraceDataError("payload of another tracepoint", structure="payload")
        _, values = decoded
        ordered = []
        for prop in self.fields:
            value = values.get(prop.name)
            if prop.in_type == _COUNTED_STRING:
                value = _text(
                    value
                    if isinstance(value, str)
                    else bytes(value or b"").split(b"\0", 1)[0].decode("utf-8", "replace")
                )
            elif prop.in_type == _COUNTED_BINARY:
                value = value if isinstance(value, (bytes, bytearray)) else str(value or "").encode("utf-8")
            elif prop.count is not None:
                value = list(value or ())
            ordered.append(value)
        return pack_values(self.fields, ordered)


def eventheader_record(
    name: EH.TracepointName, data: bytes, *, pid: int = 0, tid: int = 0, timestamp: int = 0, cpu: int = 0,
    context: RecordContext, base: int = 0,
) -> EventRecord:  # fmt: skip
    """An EventHeader event (``data``: its header, extensions and payload) written to the
    tracepoint ``name``, as a TraceLogging ``EventRecord``; ``PerfDataFormatError`` when the
    event is malformed or cannot be a TraceLogging event (past 64 KB)."""
    try:
        return _eventheader_record(name, data, pid, tid, timestamp, cpu, context, base)
    except (InvalidArgument, struct.error, ValueError, OverflowError) as error:
        raise PerfDataFormatError(f"EventHeader event: {error}", offset=base, structure="eventheader") from None


def _eventheader_record(
    name: EH.TracepointName,
    data: bytes,
    pid: int,
    tid: int,
    timestamp: int,
    cpu: int,
    context: RecordContext,
    base: int,
) -> EventRecord:
    event = EH.parse_event(data, base=base)
    if event.metadata is None:
        props: list[PropertyInfo] = [tl_field("payload", _COUNTED_BINARY)]
        values: list[Any] = [event.payload]
    else:
        props, values = eventheader_fields(event, base=base)
    guid, traits = _traits(name.provider)
    items = [
        ExtendedItem(EXT_PROV_TRAITS, traits),
        ExtendedItem(EXT_EVENT_SCHEMA_TL, _metadata(event.name, tuple(props), event.tag)),
    ]
    activity = uuid.UUID(bytes=event.activity_id) if event.activity_id is not None else NULL_GUID
    if event.related_id is not None:
        items.insert(0, ExtendedItem(EXT_RELATED_ACTIVITYID, uuid.UUID(bytes=event.related_id).bytes_le))
    return build_event_record(
        provider_id=guid, id=event.id, version=event.version, channel=TRACELOGGING_CHANNEL, level=event.level,
        opcode=event.opcode, keyword=name.keyword, pid=pid, tid=tid, timestamp=timestamp, cpu=cpu, activity_id=activity,
        user_data=pack_values(props, values), extended=items, context=context,
    )  # fmt: skip


class Transcoder:
    """Samples of one ``PerfData`` as ``EventRecord``s in ``context`` (its clock: the sample clock)."""

    def __init__(self, perf: PerfData, context: RecordContext) -> None:
        self.perf = perf
        self.context = context
        self._kinds: dict[int, Any] = {}  # attr config (tracepoint id) or id(attr) -> how to transcode

    def _kind(self, attr: EventAttr) -> Any:
        key = attr.config if attr.is_tracepoint else -1 - id(attr)
        found = self._kinds.get(key)
        if found is None:
            fmt = self.perf.tracing.formats.get(attr.config) if attr.is_tracepoint and self.perf.tracing else None
            if fmt is None:
                found = ("other", self.perf.event_name(attr))
            elif is_eventheader_format(fmt):
                offset = fmt.fields[0].offset
                found = ("eventheader", EH.parse_tracepoint_name(fmt.name), offset)
            else:
                found = ("plain", _Plain(fmt))
            self._kinds[key] = found
        return found

    def record(self, sample: Sample) -> EventRecord:
        """The sample as a TraceLogging ``EventRecord``; ``PerfDataFormatError`` when its payload is damaged."""
        kind = self._kind(sample.attr)
        try:
            if kind[0] == "eventheader":
                return self._eventheader(sample, kind[1], kind[2])
            if kind[0] == "plain":
                plain: _Plain = kind[1]
                return self._plain(sample, plain)
            return self._other(sample, kind[1])
        except (TraceDataError, InvalidArgument, struct.error, ValueError, OverflowError) as error:
            raise PerfDataFormatError(
                f"sample payload: {error}",
                offset=sample.offset,
                structure="PERF_SAMPLE_RAW",
                record_index=sample.record_index,
                path=self.perf.path,
            ) from None

    def _build(
        self,
        sample: Sample,
        guid: uuid.UUID,
        items: Sequence[ExtendedItem],
        user_data: bytes,
        *,
        level: int = 0,
        **header: Any,
    ) -> EventRecord:
        pid = sample.pid if sample.pid is not None else 0
        tid = sample.tid if sample.tid is not None else 0
        return build_event_record(
            provider_id=guid, channel=TRACELOGGING_CHANNEL, level=level, pid=pid & 0xFFFFFFFF, tid=tid & 0xFFFFFFFF,
            timestamp=sample.time or 0, cpu=sample.cpu or 0, user_data=user_data, extended=items, context=self.context, **header,
        )  # fmt: skip

    def _plain(self, sample: Sample, plain: _Plain) -> EventRecord:
        """A plain tracepoint's record, its header packed here (its extended items are constant)."""
        user_data = plain.user_data(sample.raw or b"")
        size = _EVENT_HEADER.size + len(plain.extended) + len(user_data)
        if size > 0xFFFF:
            raise InvalidArgument(f"a record of {size} bytes does not fit ETW's 64 KB limit")
        raw = (
            _EVENT_HEADER.pack(
                size, L.HEADER_TYPE_EVENT_HEADER64, L.MARKER_FLAGS_TYPED, L.EVENT_HEADER_FLAG_EXTENDED_INFO, 0,
                (sample.tid or 0) & 0xFFFFFFFF, (sample.pid or 0) & 0xFFFFFFFF, sample.time or 0, plain.guid.bytes_le,
                0, 0, TRACELOGGING_CHANNEL, 5, 0, 0, 0, 0, _NULL_LE,
            )
            + plain.extended
            + user_data
        )  # fmt: skip
        return EventHeaderRecord(_EVENT_HEADER.unpack_from(raw, 0), raw, 0, size, sample.cpu or 0, self.context)

    def _eventheader(self, sample: Sample, name: EH.TracepointName, offset: int) -> EventRecord:
        pid = sample.pid if sample.pid is not None else 0
        tid = sample.tid if sample.tid is not None else 0
        return eventheader_record(
            name, (sample.raw or b"")[offset:], pid=pid & 0xFFFFFFFF, tid=tid & 0xFFFFFFFF, timestamp=sample.time or 0,
            cpu=sample.cpu or 0, context=self.context, base=sample.raw_offset + offset,
        )  # fmt: skip

    def _other(self, sample: Sample, event_name: str) -> EventRecord:
        props, values = [], []
        for label, value in (("ip", sample.ip), ("addr", sample.addr), ("period", sample.period)):
            if value is not None:
                props.append(tl_field(label, InType.UINT64, OutType.HEXINT64 if label != "period" else None))
                values.append(value)
        guid, traits = _traits("perf")
        items = [
            ExtendedItem(EXT_PROV_TRAITS, traits),
            ExtendedItem(EXT_EVENT_SCHEMA_TL, _metadata(event_name, tuple(props), 0)),
        ]
        return self._build(sample, guid, items, pack_values(props, values), level=5)
