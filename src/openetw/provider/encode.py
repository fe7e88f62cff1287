"""Event encoders: field values in, one complete EVENT_HEADER record out (EventWrite's work).

An encoder is built once per event (``ManifestEventEncoder`` for a manifest event,
``TraceLoggingEventEncoder`` for a self-describing one) and then ``encode(values, ...)`` returns
the record's bytes: the 0x50-byte EVENT_HEADER (header type 0x13, or 0x12 for a 32-bit
producer, marker flags 0xC0, ProcessorTime 0), the extended items, the payload. The caller
passes the timestamp (the runtime's QPC: ``time.monotonic_ns()``), the process and thread ids
and the activity ids (``openetw.provider.activity.claim_activity_ids``).

Extended items are in the order Windows writes them: RELATED_ACTIVITYID first when the event
transfers from another activity, then, for TraceLogging, PROV_TRAITS (12) and EVENT_SCHEMA_TL
(11), the order the corpus files show. The TraceLogging blobs are built once per encoder.

Speed: each encoder generates (once per pointer size) a small Python function for its field
list (``openetw.provider.encode_source``); when it fails for any reason the general path (every
value checked, errors naming the field) encodes the event again and either succeeds or raises
``InvalidArgument``. A record over 65,535 bytes raises ``EventTooLarge``.

TraceLogging type inference (``field_for_value``) lives in ``openetw.provider.inference``: one
inference for providers and the test kit.
"""

from __future__ import annotations

import codecs
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any, NamedTuple

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.extended import EXT_RELATED_ACTIVITYID, ExtendedItem, encode_extended_items
from openetw.etl.payload import FieldSpec, InvalidFieldValue, PayloadPacker, manifest_fields
from openetw.etl.schema import PropertyInfo, Schema
from openetw.etl.tracelogging import (
    EXT_EVENT_SCHEMA_TL,
    EXT_PROV_TRAITS,
    TRACELOGGING_CHANNEL,
    encode_event_metadata,
    encode_provider_traits,
    tl_field,
)
from openetw.guids import NULL_GUID, provider_guid_from_name
from openetw.provider.encode_source import (
    HEAD_STRUCT as _HEAD_STRUCT,
)
from openetw.provider.encode_source import (
    HEADER_SIZE as _HEADER_SIZE,
)
from openetw.provider.encode_source import (
    MAX_RECORD_SIZE,
    encoder_source,
    fast_encoder_source,
    load_encoder,
)
from openetw.provider.encode_source import (
    RELATED_ITEM_SIZE as _RELATED_ITEM_SIZE,
)
from openetw.provider.encode_source import (
    guid_le as _guid_le,
)
from openetw.provider.encode_source import (
    head_bits as _head_bits,
)
from openetw.provider.inference import field_for_value, infer_fields
from openetw.provider.inference import fields_of as _fields_of

__all__ = [
    "MAX_RECORD_SIZE",
    "EventDescriptor",
    "EventTooLarge",
    "InvalidFieldValue",
    "ManifestEventEncoder",
    "TraceLoggingEncoderCache",
    "TraceLoggingEventEncoder",
    "encoder_source",
    "fast_encoder_source",
    "field_for_value",
    "infer_fields",
]


class EventTooLarge(InvalidArgument):
    """The record would exceed ETW's 64 KB event limit; ``size`` is what it would have been."""

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"an event record of {size} bytes exceeds ETW's limit of {MAX_RECORD_SIZE} bytes")


class EventDescriptor(NamedTuple):
    """EVENT_DESCRIPTOR, field for field."""

    id: int = 0
    version: int = 0
    channel: int = 0
    level: int = 0
    opcode: int = 0
    task: int = 0
    keyword: int = 0


_DESCRIPTOR_LIMITS = {"id": 0xFFFF, "version": 0xFF, "channel": 0xFF, "level": 0xFF, "opcode": 0xFF, "task": 0xFFFF, "keyword": (1 << 64) - 1}


def _descriptor(value: EventDescriptor | Sequence[int]) -> EventDescriptor:
    if not isinstance(value, EventDescriptor):
        if not isinstance(value, (tuple, list)) or len(value) != 7:
            raise InvalidArgument(f"an event descriptor is (id, version, channel, level, opcode, task, keyword), not {value!r}")
        value = EventDescriptor(*value)
    for name, limit in _DESCRIPTOR_LIMITS.items():
        item = getattr(value, name)
        if not isinstance(item, int) or not 0 <= item <= limit:
            raise InvalidArgument(f"event descriptor {name} must be an integer from 0 to {limit}, not {item!r}")
    return value


# -- encoders ----------------------------------------------------------------------------------


class _RecordEncoder:
    """What both encoders share: the header, the generated ``encode`` and its general path.

    ``encode`` is generated per instance and set on it, hiding the method of the same name,
    which documents it (and does the same, only slower).
    """

    def __init__(
        self, provider_id: uuid.UUID, descriptor: EventDescriptor, fields: tuple[PropertyInfo, ...], *, extended: bytes, tracelogging: bool, ansi_encoding: str
    ) -> None:
        self.provider_id = provider_id
        self.descriptor = descriptor
        self.fields = fields
        self.ansi_encoding = ansi_encoding
        self._tracelogging = tracelogging
        d = descriptor
        self._constant = provider_id.bytes_le + struct.pack("<HBBBBHQQ", d.id, d.version, d.channel, d.level, d.opcode, d.task, d.keyword, 0)
        self._extended = extended
        self._packers: dict[int, PayloadPacker] = {}
        self._encoders: dict[int, Callable[..., bytes]] = {}
        self._fast: dict[tuple[Any, ...], Any] = {}
        self.encode = self._encoder_for(8)  # type: ignore[method-assign]

    def fast_writer_code(
        self,
        value_types: Sequence[type] | None = None,
        value_names: Sequence[str] | None = None,
        *,
        positional: bool = False,
        argument_names: Sequence[str] | None = None,
        variant: tuple[int, int, int] | None = None,
    ) -> tuple[CodeType, dict[str, Any]]:
        """The code of this event's ``write_fast(values)`` (with ``positional``,
        ``write_fast(v0, v1, ...)``, its arguments named ``argument_names`` if given) and the
        names it uses (see ``fast_encoder_source``), generated once per ``value_types``,
        ``value_names``, ``positional``, ``argument_names`` and ``variant``; the caller makes
        functions of it with its own names added."""
        kind = ("positional", None if argument_names is None else tuple(argument_names)) if positional else ("write", variant)
        key = (None if value_types is None else tuple(value_types), None if value_names is None else tuple(value_names), kind)
        made = self._fast.get(key)
        if made is None and argument_names is not None:
            # An argument named like a global or builtin the code uses ("len", "type") would hide it.
            uses = self.fast_writer_code(value_types, value_names, positional=positional)[0].co_names
            shadowed = set(argument_names) & set(uses)
            if shadowed:
                raise InvalidArgument(f"argument names {sorted(shadowed)} hide names the generated writer uses")
        if made is None:
            source, namespace = fast_encoder_source(
                self.fields, self._packer(8), ansi_encoding=self.ansi_encoding, tracelogging=self._tracelogging,
                constant=self._constant, extended=self._extended, value_types=key[0], value_names=key[1], write_through=True,
                positional=positional, argument_names=argument_names, variant=variant,
            )  # fmt: skip
            scope = dict(namespace)
            exec(compile(source, "<openetw generated writer>", "exec"), scope)  # noqa: S102 - our own generated code
            made = self._fast[key] = (scope["write_fast"].__code__, namespace)
        return made

    def fast_encoder(
        self, value_types: Sequence[type] | None = None, value_names: Sequence[str] | None = None
    ) -> Callable[[Any, int, int, int, bytes], bytes | None]:
        """This event's ``encode_fast(values, timestamp, pid, tid, act)`` (see
        ``fast_encoder_source``), generated once per ``value_types`` and ``value_names``: the
        record, or ``None`` when ``encode`` has to decide."""
        key = (None if value_types is None else tuple(value_types), None if value_names is None else tuple(value_names))
        fast: Callable[[Any, int, int, int, bytes], bytes | None] | None = self._fast.get(key)
        if fast is None:
            source, namespace = fast_encoder_source(
                self.fields, self._packer(8), ansi_encoding=self.ansi_encoding, tracelogging=self._tracelogging,
                constant=self._constant, extended=self._extended, value_types=key[0], value_names=key[1],
            )  # fmt: skip
            scope = dict(namespace)
            exec(compile(source, "<openetw generated encoder>", "exec"), scope)  # noqa: S102 - our own generated code
            fast = self._fast[key] = scope["encode_fast"]
        return fast

    def _packer(self, pointer_size: int) -> PayloadPacker:
        packer = self._packers.get(pointer_size)
        if packer is None:
            if pointer_size not in (4, 8):
                raise InvalidArgument(f"pointer_size must be 4 or 8, not {pointer_size!r}")
            packer = PayloadPacker(self.fields, pointer_size=pointer_size, ansi_encoding=self.ansi_encoding, tracelogging=self._tracelogging)
            self._packers[pointer_size] = packer
        return packer

    def _encoder_for(self, pointer_size: int) -> Callable[..., bytes]:
        encoder = self._encoders.get(pointer_size)
        if encoder is None:
            packer = self._packer(pointer_size)
            source, namespace = encoder_source(
                self.fields, packer, pointer_size=pointer_size, ansi_encoding=self.ansi_encoding,
                tracelogging=self._tracelogging, constant=self._constant, extended=self._extended,
            )  # fmt: skip
            header_type = L.HEADER_TYPE_EVENT_HEADER64 if pointer_size == 8 else L.HEADER_TYPE_EVENT_HEADER32

            def general(values: Any, timestamp: int, pid: int, tid: int, act: bytes, rel: bytes | None) -> bytes:
                return self._encode_general(packer, header_type, values, timestamp, pid, tid, act, rel)

            namespace.update(OTHER=self._encode_other, GENERAL=general, ORDERED=packer.ordered)
            encoder = self._encoders[pointer_size] = load_encoder(source, namespace)
        return encoder

    def _encode_other(self, values: Any, *, pointer_size: int, **ids: Any) -> bytes:
        return self._encoder_for(pointer_size)(values, pointer_size=pointer_size, **ids)

    def encode(
        self,
        values: Sequence[Any] | Mapping[str, Any],
        *,
        timestamp: int,
        pid: int,
        tid: int,
        activity_id: uuid.UUID = NULL_GUID,
        related_activity_id: uuid.UUID | None = None,
        pointer_size: int = 8,
    ) -> bytes:
        """The complete record: ``values`` in field order (a tuple), or a mapping by field name.

        ``timestamp`` is the QPC value, ``pid`` / ``tid`` the producer's ids, ``activity_id``
        goes in the header, ``related_activity_id`` (when not ``None``) in a RELATED_ACTIVITYID
        item, ``pointer_size`` picks the header type (0x13 for 8, 0x12 for 4) and the size of
        POINTER fields. Raises ``InvalidArgument``: ``InvalidFieldValue`` naming the field for a
        bad value, ``EventTooLarge`` for a record over 65,535 bytes.
        """
        return self._encoder_for(pointer_size)(
            values, timestamp=timestamp, pid=pid, tid=tid, activity_id=activity_id,
            related_activity_id=related_activity_id, pointer_size=pointer_size,
        )  # fmt: skip

    def encode_general(self, values: Sequence[Any] | Mapping[str, Any], *, timestamp: int, pid: int, tid: int,
                       activity_id: uuid.UUID = NULL_GUID, related_activity_id: uuid.UUID | None = None, pointer_size: int = 8) -> bytes:  # fmt: skip
        """``encode`` without the generated fast path (the same bytes; for tests and comparisons)."""
        rel = None if related_activity_id is None else _guid_le(related_activity_id, "related_activity_id")
        header_type = L.HEADER_TYPE_EVENT_HEADER64 if pointer_size == 8 else L.HEADER_TYPE_EVENT_HEADER32
        act = _guid_le(activity_id, "activity_id")
        return self._encode_general(self._packer(pointer_size), header_type, values, timestamp, pid, tid, act, rel)

    def _encode_general(self, packer: PayloadPacker, header_type: int, values: Any, timestamp: int, pid: int, tid: int, act: bytes, rel: bytes | None) -> bytes:
        payload = packer.pack(values)
        for name, value, limit in (("timestamp", timestamp, None), ("pid", pid, 0xFFFFFFFF), ("tid", tid, 0xFFFFFFFF)):
            if not isinstance(value, int):
                raise InvalidArgument(f"{name} must be an integer, not {type(value).__name__}")
            if limit is not None and not 0 <= value <= limit:
                raise InvalidArgument(f"{name} {value} is out of range (0..{limit})")
        if not -(1 << 63) <= timestamp < 1 << 63:
            raise InvalidArgument(f"timestamp {timestamp} does not fit 64 bits")
        extended = self._extended
        if rel is not None:
            extended = L.EVENT_HEADER_EXTENDED_ITEM.pack(_RELATED_ITEM_SIZE, EXT_RELATED_ACTIVITYID, 1 if extended else 0, 16) + rel + extended
        size = _HEADER_SIZE + len(extended) + len(payload)
        if size > MAX_RECORD_SIZE:
            raise EventTooLarge(size)
        flags = L.EVENT_HEADER_FLAG_EXTENDED_INFO if extended else 0
        head = _HEAD_STRUCT.pack(size + _head_bits(header_type, flags), tid, pid, timestamp, self._constant, act)
        return head + extended + payload


class ManifestEventEncoder(_RecordEncoder):
    """Encodes one manifest event: ``ManifestEventEncoder(provider_id, descriptor, fields)``.

    ``descriptor`` is an ``EventDescriptor`` or ``(id, version, channel, level, opcode, task,
    keyword)``; ``fields`` are the template's fields (``PropertyInfo`` or tuples, see
    ``openetw.etl.payload.manifest_fields``). ``ansi_encoding`` is the code page of
    ANSISTRING fields without a UTF-8 out-type.
    """

    def __init__(
        self, provider_id: uuid.UUID, descriptor: EventDescriptor | Sequence[int], fields: Sequence[FieldSpec] = (), *, ansi_encoding: str = "cp1252"
    ) -> None:
        if not isinstance(provider_id, uuid.UUID):
            raise InvalidArgument(f"provider_id is a uuid.UUID, not {type(provider_id).__name__}")
        try:
            codecs.lookup(ansi_encoding)
        except LookupError:
            raise InvalidArgument(f"unknown ANSI encoding {ansi_encoding!r}") from None
        super().__init__(provider_id, _descriptor(descriptor), manifest_fields(fields), extended=b"", tracelogging=False, ansi_encoding=ansi_encoding)

    @classmethod
    def from_schema(cls, schema: Schema, *, ansi_encoding: str = "cp1252") -> ManifestEventEncoder:
        """The encoder of the event a manifest ``Schema`` describes (``openetw.tdh.schemas_from_manifest``)."""
        s = schema
        descriptor = EventDescriptor(s.event_id, s.version, s.channel, s.level, s.opcode, s.task, s.keyword)
        return cls(s.provider_id, descriptor, s.properties, ansi_encoding=ansi_encoding)


def _tl_fields(specs: Sequence[FieldSpec]) -> tuple[PropertyInfo, ...]:
    fields = []
    for spec in specs:
        if isinstance(spec, PropertyInfo):
            fields.append(spec)
        elif isinstance(spec, tuple) and 2 <= len(spec) <= 4:
            fields.append(tl_field(*spec))
        else:
            raise InvalidArgument(f"a TraceLogging field is a PropertyInfo (tl_field) or (name, in_type[, out_type[, count]]), not {spec!r}")
    return tuple(fields)


class TraceLoggingEventEncoder(_RecordEncoder):
    """Encodes one TraceLogging event; its metadata and provider traits are built once, here.

    The provider id is the ETW name hash of ``provider_name`` unless ``provider_id`` is given.
    The descriptor is channel 11 (TraceLogging), task 0, ``level`` (default 5, verbose, as
    TraceLogging's), ``opcode``, ``keyword``, and id and version 0 unless given (EventSource's
    self-describing events number theirs). ``tags`` is the event's 28-bit tag.
    """

    def __init__(
        self,
        provider_name: str,
        event_name: str,
        fields: Sequence[FieldSpec] = (),
        *,
        level: int = 5,
        keyword: int = 0,
        opcode: int = 0,
        tags: int = 0,
        provider_group: uuid.UUID | None = None,
        provider_id: uuid.UUID | None = None,
        event_id: int = 0,
        version: int = 0,
    ) -> None:
        properties = _tl_fields(fields)
        self.provider_name = provider_name
        self.event_name = event_name
        self.metadata = encode_event_metadata(event_name, properties, tags)
        self.traits = encode_provider_traits(provider_name, provider_group)
        extended = encode_extended_items([ExtendedItem(EXT_PROV_TRAITS, self.traits), ExtendedItem(EXT_EVENT_SCHEMA_TL, self.metadata)])
        descriptor = _descriptor(EventDescriptor(event_id, version, TRACELOGGING_CHANNEL, level, opcode, 0, keyword))
        provider = provider_guid_from_name(provider_name) if provider_id is None else provider_id
        super().__init__(provider, descriptor, properties, extended=extended, tracelogging=True, ansi_encoding="cp1252")


_REFINED_TYPES = frozenset({list, tuple, dict})


def _shape(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return field_for_value("", value)
    if kind is list or kind is tuple:
        return (kind, type(value[0]) if value else None)
    return kind


class TraceLoggingEncoderCache:
    """Encoders of one TraceLogging provider by event shape, for writes that pass plain values.

    ``encode("Started", {"port": 80, "host": "a"}, timestamp=..., ...)`` infers the fields on
    the first write of each shape (event name, level, keyword, opcode, tags, field names and the
    Python types of the values) and reuses that encoder afterwards. A value the cached encoder
    cannot take (an int past 2**63 where earlier writes had small ones) makes the fields be
    inferred from the values themselves, and that encoder is used and cached too.
    """

    __slots__ = ("provider_name", "provider_group", "provider_id", "limit", "_encoders")

    def __init__(self, provider_name: str, provider_group: uuid.UUID | None = None, *, provider_id: uuid.UUID | None = None, limit: int = 1024) -> None:
        self.provider_name = provider_name
        self.provider_group = provider_group
        self.provider_id = provider_guid_from_name(provider_name) if provider_id is None else provider_id
        self.limit = limit
        self._encoders: dict[tuple[Any, ...], TraceLoggingEventEncoder] = {}

    def __len__(self) -> int:
        return len(self._encoders)

    def _encoder(
        self, key: tuple[Any, ...], event_name: str, fields: tuple[PropertyInfo, ...], descriptor: tuple[int, int, int, int]
    ) -> TraceLoggingEventEncoder:
        encoder = self._encoders.get(key)
        if encoder is None:
            level, keyword, opcode, tags = descriptor
            encoder = TraceLoggingEventEncoder(
                self.provider_name, event_name, fields, level=level, keyword=keyword, opcode=opcode, tags=tags,
                provider_group=self.provider_group, provider_id=self.provider_id,
            )  # fmt: skip
            if len(self._encoders) >= self.limit:
                self._encoders.clear()
            self._encoders[key] = encoder
        return encoder

    def encoder_for(
        self, event_name: str, values: Mapping[str, Any], *, level: int = 5, keyword: int = 0, opcode: int = 0, tags: int = 0
    ) -> TraceLoggingEventEncoder:
        """The (cached) encoder for an event of this name written with these values."""
        return self._by_shape(event_name, values, tuple(values.values()), level, keyword, opcode, tags)

    def _by_shape(
        self, event_name: str, values: Mapping[str, Any], vals: tuple[Any, ...], level: int, keyword: int, opcode: int, tags: int
    ) -> TraceLoggingEventEncoder:
        types = tuple(map(type, vals))
        if not _REFINED_TYPES.isdisjoint(types):
            types = tuple(map(_shape, vals))
        key = (event_name, level, keyword, opcode, tags, tuple(values), types)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoder(key, event_name, _fields_of(values), (level, keyword, opcode, tags))
        return encoder

    def encode(
        self,
        event_name: str,
        values: Mapping[str, Any],
        *,
        level: int = 5,
        keyword: int = 0,
        opcode: int = 0,
        tags: int = 0,
        timestamp: int,
        pid: int,
        tid: int,
        activity_id: uuid.UUID = NULL_GUID,
        related_activity_id: uuid.UUID | None = None,
        pointer_size: int = 8,
    ) -> bytes:
        """The record of one write (see ``TraceLoggingEventEncoder.encode``)."""
        vals = tuple(values.values())
        types = tuple(map(type, vals))
        if not _REFINED_TYPES.isdisjoint(types):
            types = tuple(map(_shape, vals))
        encoder = self._encoders.get((event_name, level, keyword, opcode, tags, tuple(values), types))
        if encoder is None:
            encoder = self._by_shape(event_name, values, vals, level, keyword, opcode, tags)
        try:
            return encoder.encode(
                vals, timestamp=timestamp, pid=pid, tid=tid, activity_id=activity_id,
                related_activity_id=related_activity_id, pointer_size=pointer_size,
            )  # fmt: skip
        except InvalidArgument:
            fields = _fields_of(values)
            if fields == encoder.fields:
                raise
        key = (event_name, level, keyword, opcode, tags, fields)
        exact = self._encoder(key, event_name, fields, (level, keyword, opcode, tags))
        return exact.encode(
            vals, timestamp=timestamp, pid=pid, tid=tid, activity_id=activity_id,
            related_activity_id=related_activity_id, pointer_size=pointer_size,
        )  # fmt: skip
