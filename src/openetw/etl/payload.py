"""Event payloads from values: field descriptions, the one general payload packer, value checks.

Every encoder of event payloads packs through ``PayloadPacker``: the providers' encoders
(``openetw.provider.encode``, whose generated fast path falls back here), classic events, and
``etl.tracelogging.pack_values`` (the test kit's TraceLogging events). Pure.

A field is described by the decoder's own model, ``openetw.tdh.PropertyInfo``, so the schema
a consumer decodes with is the very list the producer encoded from. ``count`` and ``length`` are
constants or the name of an earlier integer field (manifests); ``count_in_data`` is
TraceLogging's variable-count array (u16 count in the payload); ``members`` makes a struct.

``PayloadPacker`` is the general path: every value is checked and a bad one raises
``InvalidFieldValue`` naming the field (``items[2].size`` inside arrays and structs). The
encoders (``openetw.provider.encode``) run a generated fast path first and come here when it
gives up, so both paths must accept exactly the same values: fixed-size scalars are packed with
the same ``struct`` codes on both (``fixed_code``).

What a value may be, by in-type: integers (anything with ``__index__``) in the type's range;
FLOAT/DOUBLE any real number; BOOLEAN a bool or an integer (4 bytes); GUID a ``uuid.UUID`` or
its text; FILETIME a non-negative tick count or a ``datetime`` (naive means UTC); SYSTEMTIME a
``datetime`` (aware ones are converted to UTC; milliseconds are kept, finer digits dropped); SID
its binary form or ``"S-1-5-..."``; UNICODESTRING a ``str`` (lone surrogates are written as the
16-bit units they are, as a Windows program would); ANSISTRING a ``str`` (cp1252 unless the
encoder says otherwise; UTF-8 for the UTF8/XML/JSON out-types) or raw ``bytes``; BINARY and
counted binary any bytes-like object; IPV4 / IPV6 out-types also take ``ipaddress`` objects.
NUL-terminated strings may not contain NUL.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.intypes import (
    FLOAT_CODES,
    INTEGER_CODES,
    InType,
    OutType,
    datetime_to_filetime,
    datetime_to_systemtime,
    struct_code,
)
from openetw.etl.schema import REST, PropertyInfo
from openetw.etl.tracelogging import is_ip_address

__all__ = [
    "FieldSpec",
    "InvalidFieldValue",
    "PayloadPacker",
    "fixed_code",
    "inline_text_encoding",
    "is_integer_field",
    "manifest_field",
    "manifest_fields",
]

FieldSpec = PropertyInfo | tuple[Any, ...]
FieldFn = Callable[[Any, "dict[str, Any] | None"], bytes]
"""Packs one value of a field: (value, integers seen so far by name) -> bytes."""


class InvalidFieldValue(InvalidArgument):
    """A value cannot be written as its field's type; ``field`` names it (with a path inside)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"field {field!r}: {message}")


class _Problem(Exception):
    """A bad value, before the field it belongs to is known: ``subpath`` is ``[3].x`` inside it."""

    def __init__(self, message: str, subpath: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.subpath = subpath


_U16 = struct.Struct("<H")
_U16_BE = struct.Struct(">H")
_UTF8_OUT_TYPES = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})
_BYTES_LIKE = (bytes, bytearray, memoryview)

_INT_CODES: dict[int, str] = {**INTEGER_CODES, InType.BOOLEAN: struct_code(InType.BOOLEAN)}
_FLOAT_CODES: dict[int, str] = dict(FLOAT_CODES)
_POINTER_TYPES = frozenset({InType.POINTER, InType.SIZET})
# In-types whose value a later count or length may refer to (as the decoder remembers them).
_INTEGER_TYPES = frozenset(_INT_CODES) | _POINTER_TYPES
_ENCODABLE = frozenset(range(1, 24)) | {InType.MANIFEST_COUNTEDBINARY, InType.SIZET}


# -- field descriptions ------------------------------------------------------------------------


def manifest_field(
    name: str,
    in_type: InType | int,
    out_type: OutType | int | None = None,
    *,
    count: int | str | None = None,
    length: int | str | None = None,
    members: Sequence[FieldSpec] | None = None,
) -> PropertyInfo:
    """A manifest template field (``<data>``, or ``<struct>`` when ``members`` is given)."""
    if members is not None:
        return PropertyInfo(name, InType.NULL, count=count, length=length, members=manifest_fields(members))
    out = OutType(out_type) if out_type is not None and out_type != OutType.NULL else None
    return PropertyInfo(name, InType(in_type), out, count=count, length=length)


def manifest_fields(specs: Sequence[FieldSpec]) -> tuple[PropertyInfo, ...]:
    """Fields from ``PropertyInfo``s or tuples ``(name, in_type[, out_type[, count[, length]]])``."""
    fields = []
    for spec in specs:
        if isinstance(spec, PropertyInfo):
            fields.append(spec)
        elif isinstance(spec, tuple) and 2 <= len(spec) <= 5:
            name, in_type, *rest = spec
            rest += [None] * (3 - len(rest))
            fields.append(manifest_field(name, in_type, rest[0], count=rest[1], length=rest[2]))
        else:
            raise InvalidArgument(f"a field is a PropertyInfo or (name, in_type[, out_type[, count[, length]]]), not {spec!r}")
    return tuple(fields)


def fixed_code(prop: PropertyInfo, pointer_size: int) -> str | None:
    """The ``struct`` code a scalar of this field is packed with as it is, or ``None``.

    The fast path packs runs of such fields in one call; the general path packs them one by
    one with the same code, so both accept the same values.
    """
    if prop.members is not None or prop.custom_schema is not None:
        return None
    code = int(prop.in_type)
    if code in _POINTER_TYPES:
        return "I" if pointer_size == 4 else "Q"
    if code == InType.UINT16 and prop.out_type == OutType.PORT:
        return None
    return _INT_CODES.get(code) or _FLOAT_CODES.get(code)


def inline_text_encoding(prop: PropertyInfo, ansi_encoding: str, tracelogging: bool) -> str | None:
    """The codec of a plain NUL-terminated string field (``utf-16-le`` or the 8-bit one), else ``None``."""
    if prop.members is not None or prop.custom_schema is not None or prop.length is not None:
        return None
    if prop.in_type == InType.UNICODESTRING:
        return "utf-16-le"
    if prop.in_type == InType.ANSISTRING:
        return _ansi_codec(prop, ansi_encoding)
    return None


def _ansi_codec(prop: PropertyInfo, ansi_encoding: str) -> str:
    return "utf-8" if prop.out_type in _UTF8_OUT_TYPES else ansi_encoding


def is_integer_field(prop: PropertyInfo) -> bool:
    """Whether a later count or length may refer to this field (a scalar integer)."""
    return (
        prop.members is None
        and prop.count is None
        and not prop.count_in_data
        and int(prop.in_type) in _INTEGER_TYPES
        and prop.out_type != OutType.IPV4
    )


# -- scalar values -----------------------------------------------------------------------------


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _int_packer(code: str, type_name: str) -> Callable[[Any], bytes]:
    packer = struct.Struct("<" + code)
    bits = 8 * packer.size
    signed = code.islower()
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def pack(value: Any) -> bytes:
        try:
            return packer.pack(value)
        except (struct.error, TypeError, OverflowError):
            if isinstance(value, float) or not hasattr(type(value), "__index__"):
                raise _Problem(f"{type_name} expects an integer, not {_describe(value)}") from None
            raise _Problem(f"{value} is out of range for {type_name} ({low}..{high})") from None

    return pack


def _float_packer(code: str, type_name: str) -> Callable[[Any], bytes]:
    packer = struct.Struct("<" + code)

    def pack(value: Any) -> bytes:
        try:
            return packer.pack(value)
        except (struct.error, TypeError):
            raise _Problem(f"{type_name} expects a real number, not {_describe(value)}") from None
        except OverflowError:
            raise _Problem(f"{value!r} is too large for {type_name}") from None

    return pack


def _port(value: Any) -> bytes:
    if not hasattr(type(value), "__index__") or isinstance(value, float):
        raise _Problem(f"a port expects an integer, not {_describe(value)}")
    if not 0 <= value <= 0xFFFF:
        raise _Problem(f"port {value} is out of range (0..65535)")
    return _U16_BE.pack(value)


def _ipv4_packer(as_int: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def pack(value: Any) -> bytes:
        if is_ip_address(value, "IPv4Address"):
            return bytes(value.packed)
        if isinstance(value, str):
            import ipaddress

            try:
                return ipaddress.IPv4Address(value).packed
            except ValueError as exc:
                raise _Problem(str(exc)) from None
        return as_int(value)

    return pack


def _guid(value: Any) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes_le
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip().strip("{}")).bytes_le
        except ValueError:
            raise _Problem(f"{value!r} is not a GUID") from None
    raise _Problem(f"GUID expects a uuid.UUID or its text, not {_describe(value)}")


def _filetime_ticks(value: Any) -> int:
    """A FILETIME tick count from a ``datetime`` (naive means UTC) or a non-negative int."""
    if isinstance(value, datetime):
        ticks = datetime_to_filetime(value)
        if ticks < 0:
            raise _Problem(f"{value.isoformat()} is before 1601, where FILETIME starts")
        return ticks
    if isinstance(value, float) or not hasattr(type(value), "__index__"):
        raise _Problem(f"FILETIME expects a datetime or a tick count, not {_describe(value)}")
    if not 0 <= value < 1 << 63:
        raise _Problem(f"FILETIME tick count {value} is out of range (0..2**63-1)")
    return int(value)


def _filetime(value: Any) -> bytes:
    return struct.pack("<q", _filetime_ticks(value))


def _systemtime(value: Any) -> bytes:
    if not isinstance(value, datetime):
        raise _Problem(f"SYSTEMTIME expects a datetime, not {_describe(value)}")
    return datetime_to_systemtime(value)


def _sid(value: Any) -> bytes:
    if isinstance(value, _BYTES_LIKE):
        raw = bytes(value)
        if len(raw) < 8 or len(raw) != 8 + 4 * raw[1]:
            raise _Problem(f"a binary SID of {len(raw)} bytes does not match its sub-authority count")
        return raw
    if not isinstance(value, str):
        raise _Problem(f"SID expects bytes or 'S-1-...' text, not {_describe(value)}")
    parts = value.strip().split("-")
    try:
        if len(parts) < 3 or parts[0].upper() != "S":
            raise ValueError
        revision, authority = int(parts[1]), int(parts[2], 0)
        subs = [int(part) for part in parts[3:]]
        if not 0 <= revision <= 255 or not 0 <= authority < 1 << 48 or len(subs) > 15:
            raise ValueError
        return bytes((revision, len(subs))) + authority.to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)
    except (ValueError, struct.error):
        raise _Problem(f"{value!r} is not a SID") from None


def _text(value: Any, codec: str, type_name: str) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode(codec, "surrogatepass" if codec == "utf-16-le" else "strict")
        except UnicodeEncodeError as exc:
            raise _Problem(f"{type_name} cannot hold {value[exc.start:exc.end]!r} in {codec}") from None
    if codec != "utf-16-le" and isinstance(value, _BYTES_LIKE):
        return bytes(value)
    raise _Problem(f"{type_name} expects a str, not {_describe(value)}")


def _binary(value: Any, ipv6: bool) -> bytes:
    if isinstance(value, _BYTES_LIKE):
        return bytes(value)
    if ipv6:
        if is_ip_address(value, "IPv6Address"):
            return bytes(value.packed)
        if isinstance(value, str):
            import ipaddress

            try:
                return ipaddress.IPv6Address(value).packed
            except ValueError as exc:
                raise _Problem(str(exc)) from None
    raise _Problem(f"binary data expects bytes, not {_describe(value)}")


def _counted(raw: bytes) -> bytes:
    if len(raw) > 0xFFFF:
        raise _Problem(f"{len(raw)} bytes do not fit the u16 size")
    return _U16.pack(len(raw)) + raw


# -- one field ---------------------------------------------------------------------------------


class _Context:
    __slots__ = ("pointer_size", "ansi_encoding", "tracelogging")

    def __init__(self, pointer_size: int, ansi_encoding: str, tracelogging: bool) -> None:
        self.pointer_size = pointer_size
        self.ansi_encoding = ansi_encoding
        self.tracelogging = tracelogging


def _reference(ints: dict[str, Any] | None, name: str, what: str) -> int:
    found = None if ints is None else ints.get(name)
    if found is None:
        raise _Problem(f"its {what} refers to {name!r}, which has no value before it")
    return int(found)


def _sized(prop: PropertyInfo, raw: bytes, unit: int, pad: bool) -> Callable[[dict[str, Any] | None], bytes]:
    """Checks ``raw`` (``unit``-byte characters) against the field's constant or referenced length."""

    def check(ints: dict[str, Any] | None) -> bytes:
        have = len(raw) // unit
        if isinstance(prop.length, str):
            wanted = _reference(ints, prop.length, "length")
            if have != wanted:
                raise _Problem(f"is {have} long but {prop.length!r} says {wanted}")
            return raw
        wanted = int(prop.length)  # type: ignore[arg-type]
        if have == wanted or (pad and have < wanted):
            return raw + bytes(unit * (wanted - have))
        raise _Problem(f"is {have} long, its length is {wanted}")

    return check


def _scalar_fn(prop: PropertyInfo, ctx: _Context) -> FieldFn:
    """Packs one element (not an array, not a struct) of ``prop``."""
    code = int(prop.in_type)
    type_name = getattr(prop.in_type, "name", str(code))
    fixed = fixed_code(prop, ctx.pointer_size)
    if fixed is not None:
        simple = _float_packer(fixed, type_name) if code in _FLOAT_CODES else _int_packer(fixed, type_name)
        if prop.out_type == OutType.IPV4 and code == InType.UINT32:
            simple = _ipv4_packer(simple)
        return lambda value, ints: simple(value)
    if code == InType.UINT16:  # only a PORT gets here: network byte order
        return lambda value, ints: _port(value)
    if code in (InType.UNICODESTRING, InType.ANSISTRING):
        wide = code == InType.UNICODESTRING
        codec = "utf-16-le" if wide else _ansi_codec(prop, ctx.ansi_encoding)
        unit, nul = (2, b"\0\0") if wide else (1, b"\0")

        def text(value: Any, ints: dict[str, Any] | None) -> bytes:
            raw = _text(value, codec, type_name)
            if "\0" in value if isinstance(value, str) else b"\0" in raw:
                raise _Problem("a NUL-terminated string cannot contain NUL")
            return raw + nul if prop.length is None else _sized(prop, raw, unit, pad=True)(ints)

        return text
    if code in (InType.MANIFEST_COUNTEDSTRING, InType.MANIFEST_COUNTEDANSISTRING):
        codec = "utf-16-le" if code == InType.MANIFEST_COUNTEDSTRING else _ansi_codec(prop, ctx.ansi_encoding)
        return lambda value, ints: _counted(_text(value, codec, type_name))
    ipv6 = prop.out_type == OutType.IPV6
    if code == InType.MANIFEST_COUNTEDBINARY or (code == InType.BINARY and ctx.tracelogging):
        return lambda value, ints: _counted(_binary(value, ipv6))
    if code == InType.BINARY:
        if prop.length is None:

            def ipv6_address(value: Any, ints: dict[str, Any] | None) -> bytes:
                raw = _binary(value, True)
                if len(raw) != 16:
                    raise _Problem(f"an IPv6 address is 16 bytes, not {len(raw)}")
                return raw

            return ipv6_address
        return lambda value, ints: _sized(prop, _binary(value, ipv6), 1, pad=False)(ints)
    simple_fns: dict[int, Callable[[Any], bytes]] = {
        InType.GUID: _guid, InType.FILETIME: _filetime, InType.SYSTEMTIME: _systemtime, InType.SID: _sid,
    }  # fmt: skip
    found = simple_fns[code]
    return lambda value, ints: found(value)


def _struct_fn(prop: PropertyInfo, ctx: _Context) -> FieldFn:
    members = prop.members or ()
    fns = [_field_fn(member, ctx) for member in members]
    names = [member.name for member in members]

    def pack(value: Any, ints: dict[str, Any] | None) -> bytes:
        if isinstance(value, Mapping):
            missing = [name for name in names if name not in value]
            if missing:
                raise _Problem(f"struct value has no member(s) {missing}")
            ordered = [value[name] for name in names]
        elif isinstance(value, (list, tuple)):
            if len(value) != len(names):
                raise _Problem(f"struct has {len(names)} members, the value {len(value)}")
            ordered = list(value)
        else:
            raise _Problem(f"struct expects a mapping or a sequence, not {_describe(value)}")
        parts = []
        for name, fn, item in zip(names, fns, ordered, strict=True):
            try:
                parts.append(fn(item, ints))
            except _Problem as problem:
                raise _Problem(problem.message, f".{name}{problem.subpath}") from None
        return b"".join(parts)

    return pack


def _array_fn(prop: PropertyInfo, element: FieldFn, code: str | None) -> FieldFn:
    def pack(value: Any, ints: dict[str, Any] | None) -> bytes:
        if isinstance(value, (str, Mapping)) or (isinstance(value, _BYTES_LIKE) and code not in ("b", "B")):
            raise _Problem(f"an array expects a sequence of values, not {_describe(value)}")
        try:
            items = value if isinstance(value, (list, tuple)) else list(value)
        except TypeError:
            raise _Problem(f"an array expects a sequence of values, not {_describe(value)}") from None
        count = len(items)
        prefix = b""
        if prop.count_in_data:
            if count > 0xFFFF:
                raise _Problem(f"{count} values do not fit the u16 count")
            prefix = _U16.pack(count)
        elif isinstance(prop.count, str):
            wanted = _reference(ints, prop.count, "count")
            if count != wanted:
                raise _Problem(f"has {count} values but {prop.count!r} says {wanted}")
        elif count != prop.count:
            raise _Problem(f"takes {prop.count} values, got {count}")
        if code is not None and prop.out_type != OutType.IPV4:
            try:
                return prefix + struct.pack(f"<{count}{code}", *items)
            except (struct.error, TypeError, OverflowError):
                pass  # the loop below names the bad element
        parts = [prefix]
        for index, item in enumerate(items):
            try:
                parts.append(element(item, ints))
            except _Problem as problem:
                raise _Problem(problem.message, f"[{index}]{problem.subpath}") from None
        return b"".join(parts)

    return pack


def _field_fn(prop: PropertyInfo, ctx: _Context) -> FieldFn:
    if prop.custom_schema is not None:
        return lambda value, ints: _counted(_binary(value, False))
    element = _struct_fn(prop, ctx) if prop.members is not None else _scalar_fn(prop, ctx)
    if prop.count is not None or prop.count_in_data:
        return _array_fn(prop, element, fixed_code(prop, ctx.pointer_size))
    if is_integer_field(prop):
        name = prop.name

        def remembered(value: Any, ints: dict[str, Any] | None) -> bytes:
            raw = element(value, ints)
            if ints is not None:
                ints[name] = value
            return raw

        return remembered
    return element


def _named(fn: FieldFn, name: str) -> FieldFn:
    def pack(value: Any, ints: dict[str, Any] | None) -> bytes:
        try:
            return fn(value, ints)
        except _Problem as problem:
            raise InvalidFieldValue(name + problem.subpath, problem.message) from None

    return pack


# -- checking a field list ---------------------------------------------------------------------


def _check(props: Sequence[PropertyInfo], ctx: _Context, integers: set[str]) -> None:
    """Raise ``InvalidArgument`` for a field list that cannot be encoded (types, references)."""
    for prop in props:
        where = f"field {prop.name!r}"
        if prop.problem is not None:
            raise InvalidArgument(f"{where}: {prop.problem}")
        for what, ref in (("count", prop.count), ("length", prop.length)):
            if ref == REST:
                raise InvalidArgument(f"{where}: a rest-of-payload {what} cannot be encoded")
            if isinstance(ref, str):
                if ctx.tracelogging:
                    raise InvalidArgument(f"{where}: TraceLogging has no {what} that refers to another field")
                if ref not in integers:
                    raise InvalidArgument(f"{where}: {what} refers to {ref!r}, which is not an earlier integer field")
            elif ref is not None and not 0 <= ref <= 0xFFFF:
                raise InvalidArgument(f"{where}: {what} {ref} is out of range")
        if prop.members is not None:
            if not prop.members:
                raise InvalidArgument(f"{where}: a struct needs at least one member")
            _check(prop.members, ctx, integers)
            continue
        code = int(prop.in_type)
        if code not in _ENCODABLE or (ctx.tracelogging and code in _POINTER_TYPES):
            raise InvalidArgument(f"{where}: in-type {prop.in_type!r} cannot be encoded")
        needs_length = code == InType.BINARY and not ctx.tracelogging and prop.out_type != OutType.IPV6
        if needs_length and prop.length is None and prop.custom_schema is None:
            raise InvalidArgument(f"{where}: BINARY needs a length (a constant or an earlier integer field)")
        if is_integer_field(prop):
            integers.add(prop.name)


class PayloadPacker:
    """The general payload packer of one field list: checks everything, names what is wrong."""

    __slots__ = ("properties", "names", "field_fns")

    def __init__(self, properties: Sequence[PropertyInfo], *, pointer_size: int, ansi_encoding: str = "cp1252", tracelogging: bool = False) -> None:
        ctx = _Context(pointer_size, ansi_encoding, tracelogging)
        _check(properties, ctx, set())
        self.properties = tuple(properties)
        self.names = tuple(prop.name for prop in properties)
        # One function per top-level field, raising InvalidFieldValue; the fast path calls them too.
        self.field_fns: tuple[FieldFn, ...] = tuple(_named(_field_fn(prop, ctx), prop.name) for prop in properties)

    def ordered(self, values: Sequence[Any] | Mapping[str, Any]) -> tuple[Any, ...]:
        """The values in field order, from a sequence or a mapping by field name."""
        if isinstance(values, Mapping):
            missing = [name for name in self.names if name not in values]
            extra = [name for name in values if name not in self.names]
            if missing or extra:
                raise InvalidArgument(f"values do not match the fields: missing {missing}, unknown {extra}")
            return tuple(values[name] for name in self.names)
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise InvalidArgument(f"values are a tuple (or a mapping by field name), not {_describe(values)}")
        if len(values) != len(self.names):
            raise InvalidArgument(f"{len(self.names)} fields but {len(values)} values")
        return tuple(values)

    def pack(self, values: Sequence[Any] | Mapping[str, Any]) -> bytes:
        ints: dict[str, Any] = {}
        return b"".join([fn(value, ints) for fn, value in zip(self.field_fns, self.ordered(values), strict=True)])

