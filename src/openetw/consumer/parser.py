"""``Schema`` and ``Parser``: naming an event and reading its properties, as krabsetw does.

``Schema(record, context)`` names the event (event, task, opcode, level, keyword and provider
names, where the description came from); ``Parser(schema)`` reads properties by name, decoding
lazily: asking for the first property reads only that one. Properties at a fixed offset (every
property before them has a fixed size) are read straight from the payload with one precompiled
``struct`` per schema and pointer size, which is what most filters and callbacks need.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, NamedTuple

from openetw.consumer.errors import PropertyNotFound, PropertyTypeMismatch
from openetw.errors import PropertyDecodeError
from openetw.etl.intypes import FIXED_SIZES, FLOAT_CODES, INTEGER_CODES, InType, OutType, filetime_value
from openetw.tdh.decode import DecodedEvent
from openetw.tdh.schema import PropertyInfo
from openetw.tdh.schema import Schema as TdhSchema

__all__ = ["Parser", "Property", "Schema"]

_MISSING: Any = object()
_ABSENT: Any = object()


class Property(NamedTuple):
    """One top-level property of a decoded event (``value`` is ``None`` when ``error`` is set)."""

    name: str
    in_type: InType | int
    out_type: OutType | int | None
    value: Any
    error: PropertyDecodeError | None


class Schema:
    """What is known about one record's kind of event; every name is ``None`` when unknown."""

    __slots__ = ("record", "tdh", "_context")

    def __init__(self, record: Any, context: Any = None, *, tdh: TdhSchema | Any | None = _MISSING) -> None:
        self.record = record
        if tdh is _MISSING:
            tdh = context.tdh_schema_for(record) if context is not None else None
        self.tdh: TdhSchema | None = tdh
        self._context = context

    @property
    def found(self) -> bool:
        """Whether a description of this event was found (else only header facts are known)."""
        return self.tdh is not None

    @property
    def event_name(self) -> str | None:
        return self.tdh.event_name if self.tdh else None

    @property
    def task_name(self) -> str | None:
        return self.tdh.task_name if self.tdh else None

    @property
    def opcode_name(self) -> str | None:
        return self.tdh.opcode_name if self.tdh else None

    @property
    def level_name(self) -> str | None:
        return self.tdh.level_name if self.tdh else None

    @property
    def keyword_names(self) -> tuple[str, ...]:
        return self.tdh.keyword_names if self.tdh else ()

    @property
    def channel_name(self) -> str | None:
        return self.tdh.channel_name if self.tdh else None

    @property
    def provider_name(self) -> str | None:
        if self.tdh is not None and self.tdh.provider_name:
            return self.tdh.provider_name
        if self.record.kind == "evtx":
            return self.record.provider_name or None
        return self._context.provider_name_of(self.record) if self._context is not None else None

    @property
    def decoding_source(self) -> str | None:
        """``manifest``, ``tracelogging``, ``mof`` or ``wpp`` (TDH's DecodingSource)."""
        return self.tdh.source if self.tdh else None

    @property
    def message(self) -> str | None:
        return self.tdh.message if self.tdh else None

    @property
    def property_names(self) -> tuple[str, ...]:
        return tuple(prop.name for prop in self.tdh.properties) if self.tdh else ()

    # -- the header, as krabsetw's schema exposes it ------------------------------------------
    @property
    def event_id(self) -> int:
        return self.record.id  # type: ignore[no-any-return]

    @property
    def version(self) -> int:
        return self.record.version  # type: ignore[no-any-return]

    @property
    def opcode(self) -> int:
        return self.record.opcode  # type: ignore[no-any-return]

    @property
    def level(self) -> int:
        return self.record.level  # type: ignore[no-any-return]

    @property
    def task(self) -> int:
        return self.record.task  # type: ignore[no-any-return]

    @property
    def keyword(self) -> int:
        return self.record.keyword  # type: ignore[no-any-return]

    @property
    def provider_id(self) -> uuid.UUID | None:
        return self.record.provider_id  # type: ignore[no-any-return]

    @property
    def process_id(self) -> int:
        return self.record.pid  # type: ignore[no-any-return]

    @property
    def thread_id(self) -> int:
        return self.record.tid  # type: ignore[no-any-return]

    @property
    def timestamp(self) -> datetime:
        return self.record.time  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<Schema {self.provider_name or self.provider_id}/{self.event_name or f'id {self.event_id}'} ({self.decoding_source})>"


# -- fixed-offset reads ---------------------------------------------------------------------------

_Reader = Callable[[bytes, int], tuple[Any]]
"""``reader(buffer, start)`` reads one value from user data that begins ``start`` bytes into
``buffer`` (the record's buffer: no copy of the user data), as a 1-tuple (an integer's reader is
``unpack_from``)."""
_INTEGER_CODES = {**INTEGER_CODES, **FLOAT_CODES}
# Out-types under which the general decoder turns an integer into something else.
_TRANSFORMING_OUT_TYPES = frozenset({OutType.BOOLEAN, OutType.PORT, OutType.IPV4})
_FIXED_SIZES = FIXED_SIZES


def _fixed_reader(prop: PropertyInfo, offset: int, pointer_size: int) -> tuple[int, _Reader | None] | None:
    """(size, reader or None when only the size is known) of a fixed-size scalar; ``None`` otherwise."""
    if prop.members is not None or prop.count is not None or prop.count_in_data or prop.length is not None:
        return None
    if prop.custom_schema is not None or prop.problem is not None or prop.optional:
        return None
    in_type = prop.in_type
    code = _INTEGER_CODES.get(in_type)
    if in_type in (InType.POINTER, InType.SIZET):
        code = "Q" if pointer_size == 8 else "I"
    if code is not None:
        size = struct.calcsize("<" + code)
        if prop.out_type in _TRANSFORMING_OUT_TYPES:
            return size, None
        return size, struct.Struct(f"<{offset}x{code}").unpack_from  # skips to the value: no Python frame
    if in_type == InType.BOOLEAN:
        unpack = struct.Struct("<I").unpack_from
        return 4, lambda data, start=0: (unpack(data, start + offset)[0] != 0,)
    if in_type == InType.GUID:
        return 16, lambda data, start=0: (uuid.UUID(bytes_le=bytes(data[start + offset : start + offset + 16])),)
    if in_type == InType.FILETIME:
        unpack = struct.Struct("<q").unpack_from
        return 8, lambda data, start=0: (filetime_value(unpack(data, start + offset)[0]),)
    fixed = _FIXED_SIZES.get(in_type)
    return None if fixed is None else (fixed, None)


def _plan(schema: TdhSchema, pointer_size: int) -> dict[str, tuple[int, _Reader]]:
    """name -> (end offset, reader) for every property readable at a fixed offset."""
    plan: dict[str, tuple[int, _Reader]] = {}
    offset = 0
    seen: set[str] = set()
    for prop in schema.properties:
        found = _fixed_reader(prop, offset, pointer_size)
        if found is None:
            break
        size, reader = found
        if reader is not None and prop.name not in seen:
            plan[prop.name] = (offset + size, reader)
        seen.add(prop.name)
        offset += size
    return plan


_POINTER_TYPES = frozenset({InType.POINTER, InType.SIZET})
# id(schema) -> (schema, plan for 8-byte pointers, plan for 4-byte pointers, whether they are the
# same, the names of the schema's top-level properties)
Plans = tuple[TdhSchema, dict[str, tuple[int, _Reader]], dict[str, tuple[int, _Reader]], bool, frozenset[str]]
_plans: dict[int, Plans] = {}
_PLAN_LIMIT = 8192


def plans_of(schema: TdhSchema) -> Plans:
    """The fixed-offset readers of ``schema`` for both pointer sizes (cached per schema)."""
    entry = _plans.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_plans) >= _PLAN_LIMIT:
            _plans.clear()
        same = not any(prop.in_type in _POINTER_TYPES for prop in schema.properties)
        wide = _plan(schema, 8)
        names = frozenset(prop.name for prop in schema.properties)
        entry = _plans[id(schema)] = (schema, wide, wide if same else _plan(schema, 4), same, names)
    return entry


def plans_for_pointer_size(plans: Plans, pointer_size: int) -> Plans:
    """``plans`` with the readers of one pointer size in both places (no per-record choice)."""
    if plans[3]:
        return plans
    chosen = plans[1] if pointer_size == 8 else plans[2]
    return (plans[0], chosen, chosen, True, plans[4])


def fixed_offset_plan(schema: TdhSchema, pointer_size: int) -> dict[str, tuple[int, _Reader]]:
    """The fixed-offset readers of ``schema`` for this pointer size."""
    entry = plans_of(schema)
    return entry[1] if pointer_size == 8 else entry[2]


_NO_PLANS: Plans = (TdhSchema(uuid.UUID(int=0)), {}, {}, True, frozenset())


class Parser:
    """Reads the properties of one record through its schema.

    ``parse(name)`` raises ``PropertyNotFound`` (no such property, or no schema),
    ``PropertyDecodeError`` (the bytes do not decode) or ``PropertyTypeMismatch`` (``type`` given
    and the value has another one); ``try_parse(name, default)`` returns ``default`` instead.
    """

    # A parser is made per delivered record: three attributes at first (``_entry`` is the
    # (decoding schema, fixed-offset readers) pair the trace context shares between the records
    # of one kind); ``_schema``, ``_decoded`` and ``_data`` are set when first asked for, and
    # ``_plain`` (set by the trace context on the parsers it makes) turns false then.
    __slots__ = ("record", "_entry", "_context", "_schema", "_decoded", "_data", "_plain")
    _decoded: DecodedEvent | None
    _data: bytes
    _plain: bool

    def __init__(self, schema: Schema, plans: Plans | None = None) -> None:
        self._schema: Schema = schema
        self.record = schema.record
        self._entry: tuple[TdhSchema | None, Plans | None] = (schema.tdh, plans)
        self._context = schema._context

    @classmethod
    def of(cls, record: Any, tdh: TdhSchema | None, plans: Plans | None, context: Any) -> Parser:
        """A parser whose ``Schema`` is made only if asked for (the trace context's fast path)."""
        parser = cls.__new__(cls)
        parser.record = record
        parser._entry = (tdh, plans)
        parser._context = context
        return parser

    @property
    def _tdh(self) -> TdhSchema | None:
        return self._entry[0]

    @property
    def schema(self) -> Schema:
        try:
            return self._schema
        except AttributeError:
            schema = self._schema = Schema(self.record, self._context, tdh=self._entry[0])
            self._plain = False
            return schema

    @property
    def user_data(self) -> bytes:
        try:
            return self._data
        except AttributeError:
            data: bytes = self.record.user_data
            self._data = data
            self._plain = False
            return data

    @property
    def decoded(self) -> DecodedEvent | None:
        """The lazy ``DecodedEvent`` behind the parser (``None`` without a schema)."""
        try:
            return self._decoded
        except AttributeError:
            tdh = self._entry[0]
            if tdh is None:
                return None
            decoded = self._decoded = DecodedEvent(tdh, self.user_data, self.record.pointer_size)
            self._plain = False
            return decoded

    def _evtx_value(self, name: str, missing: Any) -> Any:
        """A property of an Event Log record: its EventData / UserData value."""
        values = self.record.properties()
        if name in values:
            return values[name]
        if missing is not _MISSING:
            return missing
        raise PropertyNotFound(f"the event has no property {name!r}", property_name=name)

    def _value(self, name: str, missing: Any = _MISSING) -> Any:
        """The value of ``name``; ``missing`` instead of raising when one is given."""
        tdh, plans = self._entry
        if tdh is None and self.record.kind == "evtx":
            return self._evtx_value(name, missing)
        if plans is None:
            plans = plans_of(tdh) if tdh is not None else _NO_PLANS
            self._entry = (tdh, plans)
        fast = (plans[1] if plans[3] or self.record.pointer_size == 8 else plans[2]).get(name)
        if fast is not None:
            record = self.record
            pos = record._pos
            start = pos + record.user_data_offset
            if start + fast[0] <= pos + record._size:
                return fast[1](record._raw, start)[0]
        if name not in plans[4]:
            if missing is not _MISSING:
                return missing
            if tdh is None:
                raise PropertyNotFound(f"no schema is known for this event ({self.schema!r})", property_name=name)
            raise PropertyNotFound(f"the event has no property {name!r}", property_name=name)
        decoded = self.decoded
        assert decoded is not None
        try:
            return decoded[name]
        except KeyError:
            if missing is not _MISSING:
                return missing
            error = decoded.errors.get(name)
            if error is not None:
                raise error from None
            if name in decoded.not_decoded:
                raise PropertyDecodeError("not decoded: the size of a property before it is unknown", property_name=name) from None
            raise PropertyNotFound(f"the event has no property {name!r}", property_name=name) from None

    def parse(self, name: str, type: type | tuple[type, ...] | None = None) -> Any:  # noqa: A002 - krabsetw's name
        plans = self._entry[1]
        if plans is not None and plans[3] and type is None:  # the common case: a fixed-offset property
            fast = plans[1].get(name)
            if fast is not None:  # read in the record's buffer: no copy of the user data
                record = self.record
                pos = record._pos
                start = pos + record.user_data_offset
                if start + fast[0] <= pos + record._size:
                    return fast[1](record._raw, start)[0]
        value = self._value(name)
        if type is not None and not _is_of(value, type):
            raise PropertyTypeMismatch(f"value {value!r} is a {value.__class__.__name__}, not {type!r}", property_name=name)
        return value

    def try_parse(self, name: str, default: Any = None, type: type | tuple[type, ...] | None = None) -> Any:  # noqa: A002
        plans = self._entry[1]
        if plans is not None and plans[3] and type is None:  # the common case: a fixed-offset property
            fast = plans[1].get(name)
            if fast is not None:  # read in the record's buffer: no copy of the user data
                record = self.record
                pos = record._pos
                start = pos + record.user_data_offset
                if start + fast[0] <= pos + record._size:
                    return fast[1](record._raw, start)[0]
            elif name not in plans[4]:
                return default
        value = self._value(name, _ABSENT)
        if value is _ABSENT or (type is not None and not _is_of(value, type)):
            return default
        return value

    def properties(self) -> list[Property]:
        """Every top-level property in schema order, decoded (errors kept per property).

        An Event Log record's properties are its EventData / UserData values (``in_type`` is
        then the BinXml value type, ``0x01`` for text)."""
        if self._entry[0] is None and self.record.kind == "evtx":
            return [Property(name, _evtx_type(value), None, value, None) for name, value in self.record.properties().items()]
        decoded = self.decoded
        if decoded is None:
            return []
        values = decoded.values_in_order()
        errors = decoded.errors
        return [
            Property(prop.name, prop.in_type, prop.out_type, value, errors.get(prop.name))
            for prop, value in zip(decoded.schema.properties, values, strict=True)
        ]

    def as_dict(self) -> dict[str, Any]:
        """Every property that decoded: name -> typed value."""
        if self._entry[0] is None and self.record.kind == "evtx":
            return dict(self.record.properties())
        decoded = self.decoded
        return {} if decoded is None else dict(decoded.decode_all().items())

    @property
    def errors(self) -> dict[str, PropertyDecodeError]:
        decoded = self.decoded
        return {} if decoded is None else decoded.errors

    def __iter__(self) -> Iterator[Property]:
        return iter(self.properties())

    def __repr__(self) -> str:
        return f"<Parser {self.schema!r}>"


def _evtx_type(value: Any) -> int:
    from openetw.evtx.values import type_of_python

    return type_of_python(value)


def _is_of(value: Any, wanted: type | tuple[type, ...]) -> bool:
    kinds = wanted if isinstance(wanted, tuple) else (wanted,)
    if isinstance(value, bool) and bool not in kinds:
        return False  # an int is asked for; a bool is not one here
    return isinstance(value, kinds)
