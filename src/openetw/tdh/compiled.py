"""Compiled readers: a schema turned once into Python code that decodes whole events fast.

The general decoder (``openetw.tdh.decode``) walks a payload property by property, looking up a
reader per in-type and checking every size. When every property is wanted, most of that work
can be done once per schema: ``reader_source`` writes a function for the schema, with

* one precompiled ``struct.Struct.unpack_from`` per run of consecutive fixed-size scalars
  (integers, pointers at the producer's width, floats, GUIDs, FILETIMEs, fixed-length strings
  and binary), unpacked straight into locals, then converted where needed (a GUID, a date);
* NUL-terminated strings inline (a UTF-16 string is a ``bytes.find(b"\\0\\0")`` stepped to an
  even offset), and small specialised readers for SIDs, counted and referenced-length data and
  arrays;
* the values dict built as one literal, in schema order;

and ``load_reader`` compiles it. Property names only ever appear in the source as ``repr``
literals. A reader gives up (returns ``None``) on anything unusual: a short payload, a string
that would start at its very end, a count it cannot resolve, a value the general decoder would
reject; the caller then decodes with the general path, so results are always exactly the
general path's, errors included. Schemas no reader covers (structs, duplicate names, properties with a
``problem``, optional properties that are not trailing ones, more than 512 properties) are not
compiled at all.
"""

from __future__ import annotations

import ipaddress
import struct
import sys
import uuid
from array import array
from collections.abc import Callable
from datetime import UTC
from typing import Any, NamedTuple

from openetw.errors import InvalidArgument, PropertyDecodeError
from openetw.etl.intypes import (
    INTEGER_CODES,
    SYSTEMTIME,
    TYPES,
    InType,
    OutType,
    filetime_value,
    systemtime_to_datetime,
)
from openetw.tdh.decode import (
    _MAX_EMPTY_ELEMENTS,
    DecodedEvent,
    _ascii_compatible,
    _decode_ansi,
    _utf16_le_decode,
    sid_to_string,
)
from openetw.tdh.schema import REST, PropertyInfo, Schema

__all__ = ["CompiledSchema", "Reader", "compile_schema", "compiled_reader", "load_reader", "reader_source"]

Reader = Callable[[bytes], "tuple[dict[str, Any], int] | None"]
"""A compiled reader: payload in, ``(values, end offset)`` out, or ``None`` to use the general path."""

_Transform = Callable[[Any], Any]


class _Fallback(Exception):
    """The payload is not the plain case a compiled reader handles."""


# Anything a step raises means "let the general decoder decide".
_GIVE_UP = (_Fallback, struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError)

_INTEGER_CODES = INTEGER_CODES
_CODE = {in_type: row.code for in_type, row in TYPES.items() if row.code is not None}
_UTF8_OUT_TYPES = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})
_U16 = struct.Struct("<H")
_U16_BE = struct.Struct(">H")
_U32 = struct.Struct("<I")
_SYSTEMTIME = SYSTEMTIME
# array typecodes that read little-endian values of the struct code's size, in one call.
_ARRAY_CODES = (
    frozenset(code for code in "bBhHiIqQfd" if array(code).itemsize == struct.calcsize("<" + code))
    if sys.byteorder == "little"
    else frozenset()
)


# -- value conversions (the general decoder's, one value at a time) --------------------------


def _nonzero(value: int) -> bool:
    return value != 0


def _big_endian(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def _guid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes_le=raw)


def _utf16(raw: bytes) -> str:
    return _utf16_le_decode(raw, "replace", True)[0]


def _utf16_to_nul(raw: bytes) -> str:
    return _utf16_le_decode(raw, "replace", True)[0].split("\0", 1)[0]


def _systemtime(utc: bool) -> _Transform:
    def convert(raw: bytes) -> Any:
        try:
            value = systemtime_to_datetime(_SYSTEMTIME.unpack(raw))
        except ValueError:
            raise _Fallback from None  # the general path reports the bad date
        return value.replace(tzinfo=UTC) if utc else value

    return convert


def _ansi(prop: PropertyInfo, encoding: str) -> _Transform:
    if prop.out_type in _UTF8_OUT_TYPES or not _ascii_compatible(encoding):
        return lambda raw: _decode_ansi(raw, prop, encoding)

    def convert(raw: bytes) -> str:
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            return _decode_ansi(raw, prop, encoding)

    return convert


def _ansi_to_nul(prop: PropertyInfo, encoding: str) -> _Transform:
    text = _ansi(prop, encoding)
    return lambda raw: text(raw.split(b"\0", 1)[0])


def _binary(prop: PropertyInfo) -> _Transform | None:
    if prop.out_type == OutType.IPV6:
        return lambda raw: ipaddress.IPv6Address(raw) if len(raw) == 16 else raw
    return None


# -- fixed-size properties: a struct code and an optional conversion ------------------------


def _fixed(prop: PropertyInfo, pointer_size: int, encoding: str) -> tuple[str, _Transform | None] | None:
    """The struct code of one fixed-size element of ``prop`` and its conversion, if it has one."""
    if prop.members is not None or prop.custom_schema is not None or prop.problem is not None:
        return None
    in_type, out = prop.in_type, prop.out_type
    code = _INTEGER_CODES.get(in_type)
    if code is not None:
        size = struct.calcsize(code)
        if out == OutType.BOOLEAN:
            return code, _nonzero
        if out == OutType.PORT and size == 2:
            return "2s", _big_endian
        if out == OutType.IPV4 and size == 4:
            return "4s", ipaddress.IPv4Address
        return code, None
    if in_type in (InType.POINTER, InType.SIZET):
        return ("Q" if pointer_size == 8 else "I"), None
    simple: dict[Any, tuple[str, _Transform | None]] = {
        InType.FLOAT: (_CODE[InType.FLOAT], None),
        InType.DOUBLE: (_CODE[InType.DOUBLE], None),
        InType.BOOLEAN: (_CODE[InType.BOOLEAN], _nonzero),
        InType.GUID: (_CODE[InType.GUID], _guid),
        InType.FILETIME: (_CODE[InType.FILETIME], filetime_value),
        InType.SYSTEMTIME: (_CODE[InType.SYSTEMTIME], _systemtime(out == OutType.DATETIME_UTC)),
        InType.UNICODECHAR: ("2s", _utf16),  # the bytes, turned into text
        InType.ANSICHAR: ("1s", _ansi(prop, encoding)),
    }
    if in_type in simple:
        return simple[in_type]
    length = prop.length
    if in_type == InType.BINARY and length is None and out == OutType.IPV6:
        return "16s", ipaddress.IPv6Address
    if not isinstance(length, int) or length < 0:
        return None
    if in_type == InType.UNICODESTRING:
        return f"{2 * length}s", _utf16_to_nul
    if in_type == InType.ANSISTRING:
        return f"{length}s", _ansi_to_nul(prop, encoding)
    if in_type == InType.NONNULLTERMINATEDSTRING:
        return f"{2 * length}s", _utf16
    if in_type == InType.NONNULLTERMINATEDANSISTRING:
        return f"{length}s", _ansi(prop, encoding)
    if in_type == InType.BINARY:
        return f"{length}s", _binary(prop)
    return None


def _is_scalar(prop: PropertyInfo) -> bool:
    return prop.count is None and not prop.count_in_data


def _gives_integer(prop: PropertyInfo) -> bool:
    """Whether the general decoder always records this property's value for count/length references."""
    if not _is_scalar(prop) or prop.members is not None or prop.custom_schema is not None or prop.problem is not None:
        return False
    if prop.in_type in (InType.POINTER, InType.SIZET, InType.BOOLEAN):
        return True
    return prop.in_type in _INTEGER_CODES and not (prop.out_type == OutType.IPV4 and prop.in_type in (InType.INT32, InType.UINT32, InType.HEXINT32))


# -- variable-size elements: (data, pos, size) -> (value, end) --------------------------------

_ElementReader = Callable[[bytes, int, Any], tuple[Any, int]]


class _Element(NamedTuple):
    """How to read one variable-size element: ``read`` gets the resolved ``size`` (a count of
    ``unit``-byte units, or ``None``). ``inline`` names the cases emitted as code instead."""

    read: _ElementReader
    size: int | str | None = None
    unit: int = 1
    inline: str | None = None
    text: _Transform | None = None


def _utf16z(data: bytes, pos: int, size: Any) -> tuple[str, int]:
    end = data.find(b"\0\0", pos)
    while end >= 0 and (end - pos) & 1:
        end = data.find(b"\0\0", end + 1)
    if end >= 0:
        return _utf16_le_decode(data[pos:end], "replace", True)[0], end + 2
    if pos >= len(data):
        raise _Fallback
    # No NUL: the string runs to the end of the payload (an odd last byte is not text).
    return _utf16_le_decode(data[pos : len(data) - ((len(data) - pos) & 1)], "replace", True)[0], len(data)


def _ansiz(text: _Transform) -> _ElementReader:
    def read(data: bytes, pos: int, size: Any) -> tuple[Any, int]:
        end = data.find(b"\0", pos)
        if end >= 0:
            return text(data[pos:end]), end + 1
        if pos >= len(data):
            raise _Fallback
        return text(data[pos:]), len(data)  # no NUL: the string runs to the end of the payload

    return read


def _sized(unit: int, convert: _Transform | None) -> _ElementReader:
    def read(data: bytes, pos: int, size: int) -> tuple[Any, int]:
        end = pos + unit * size
        if end > len(data):
            raise _Fallback
        raw = data[pos:end]
        return (raw if convert is None else convert(raw)), end

    return read


def _counted(counter: struct.Struct, convert: _Transform | None) -> _ElementReader:
    read_size, width = counter.unpack_from, counter.size

    def read(data: bytes, pos: int, size: Any) -> tuple[Any, int]:
        start = pos + width
        end = start + read_size(data, pos)[0]
        if end > len(data):
            raise _Fallback
        raw = data[start:end]
        return (raw if convert is None else convert(raw)), end

    return read


def _sid(data: bytes, pos: int, size: Any) -> tuple[str, int]:
    if pos + 8 > len(data):
        raise _Fallback
    end = pos + 8 + 4 * data[pos + 1]
    if end > len(data):
        raise _Fallback
    return sid_to_string(data[pos:end]), end


def _wbemsid(pointer_size: int) -> _ElementReader:
    token_user = 2 * pointer_size

    def read(data: bytes, pos: int, size: Any) -> tuple[str | None, int]:
        if _U32.unpack_from(data, pos)[0] == 0:
            return None, pos + 4
        if pos + token_user > len(data):
            raise _Fallback
        return _sid(data, pos + token_user, None)

    return read


def _element(prop: PropertyInfo, pointer_size: int, encoding: str) -> _Element | None:
    """How to read one element of ``prop`` whose size only the payload tells, if a reader fits."""
    if prop.members is not None or prop.problem is not None:
        return None
    in_type, length = prop.in_type, prop.length
    if prop.custom_schema is not None:
        return _Element(_counted(_U16, None))
    if in_type == InType.SID:
        return _Element(_sid)
    if in_type == InType.WBEMSID:
        return _Element(_wbemsid(pointer_size))
    counted: dict[Any, tuple[struct.Struct, _Transform | None]] = {
        InType.MANIFEST_COUNTEDSTRING: (_U16, _utf16),
        InType.COUNTEDSTRING: (_U16, _utf16),
        InType.REVERSEDCOUNTEDSTRING: (_U16_BE, _utf16),
        InType.MANIFEST_COUNTEDANSISTRING: (_U16, _ansi(prop, encoding)),
        InType.COUNTEDANSISTRING: (_U16, _ansi(prop, encoding)),
        InType.REVERSEDCOUNTEDANSISTRING: (_U16_BE, _ansi(prop, encoding)),
        InType.MANIFEST_COUNTEDBINARY: (_U16, _binary(prop)),
        InType.HEXDUMP: (_U32, None),
    }
    if in_type in counted:
        return _Element(_counted(*counted[in_type]))
    if isinstance(length, int) and length < 0:
        return None
    if in_type == InType.UNICODESTRING:
        if length is None:
            return _Element(_utf16z, inline="utf16z")
        return _Element(_sized(2, _utf16_to_nul), length, 2)
    if in_type == InType.ANSISTRING:
        if length is None:
            text = _ansi(prop, encoding)
            return _Element(_ansiz(text), inline="ansiz", text=text)
        return _Element(_sized(1, _ansi_to_nul(prop, encoding)), length, 1)
    if in_type in (InType.NONNULLTERMINATEDSTRING, InType.NONNULLTERMINATEDANSISTRING):
        text = _utf16 if in_type == InType.NONNULLTERMINATEDSTRING else _ansi(prop, encoding)
        if length is None:  # every byte left, even an odd one
            return _Element(_sized(1, text), REST, 1)
        unit = 2 if in_type == InType.NONNULLTERMINATEDSTRING else 1
        return _Element(_sized(unit, text), length, unit)
    if in_type == InType.BINARY and length is not None:
        return _Element(_sized(1, _binary(prop)), length, 1)
    return None


# -- arrays: (data, pos, count, element size) -> (list, end) ----------------------------------


def _array_count(prop: PropertyInfo) -> str:
    return "in_data" if prop.count_in_data else "rest" if prop.count == REST else "count"


def _fixed_array(code: str, convert: _Transform | None, mode: str) -> Callable[[bytes, int, Any, Any], tuple[list[Any], int]]:
    size = struct.calcsize("<" + code)
    use_array = code in _ARRAY_CODES

    def read(data: bytes, pos: int, n: Any, element_size: Any) -> tuple[list[Any], int]:
        if mode == "in_data":
            n = _U16.unpack_from(data, pos)[0]
            pos += 2
        elif mode == "rest":
            left = len(data) - pos
            if left and (not size or left % size):
                raise _Fallback  # a partial last element, or elements of no size: errors the general path reports
            n = left // size if size else 0
        if n > len(data) - pos + _MAX_EMPTY_ELEMENTS:
            raise _Fallback
        end = pos + n * size
        if end > len(data):
            raise _Fallback
        items: list[Any]
        if use_array:
            items = array(code, data[pos:end]).tolist()
        elif code.endswith("s"):
            items = [data[at : at + size] for at in range(pos, end, size)] if size else [b""] * n
        else:
            items = list(struct.unpack_from(f"<{n}{code}", data, pos))
        return (items if convert is None else [convert(item) for item in items]), end

    return read


def _variable_array(element: _ElementReader, mode: str) -> Callable[[bytes, int, Any, Any], tuple[list[Any], int]]:
    def read(data: bytes, pos: int, n: Any, element_size: Any) -> tuple[list[Any], int]:
        items: list[Any] = []
        if mode == "rest":
            while pos < len(data):
                item, end = element(data, pos, element_size)
                if end == pos:
                    raise _Fallback
                items.append(item)
                pos = end
            return items, pos
        if mode == "in_data":
            n = _U16.unpack_from(data, pos)[0]
            pos += 2
        if n > len(data) - pos + _MAX_EMPTY_ELEMENTS:
            raise _Fallback
        for _ in range(n):
            item, pos = element(data, pos, element_size)
            items.append(item)
        return items, pos

    return read


# -- source generation ------------------------------------------------------------------------

_MAX_PROPERTIES = 512  # larger (hostile or odd) schemas are not worth the compile time
_BANNER = "# Generated by openetw.tdh.compiled from one event schema; regenerated on demand, not edited."
_ABSENT = object()  # an optional property with no bytes left


class _Unsupported(Exception):
    """The schema has a property no compiled reader handles."""


class _Source:
    """Emits the body of ``read(data)``; property values live in locals ``v0``, ``v1``, ..."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {"GIVE_UP": _GIVE_UP, "ABSENT": _ABSENT, "utf16": _utf16_le_decode}
        self.static: int | None = 0  # the offset, while every property so far had a fixed size
        self.depth = 2
        self.known: dict[str, str] = {}  # integer property name -> its local
        self.maybe_absent: set[str] = set()
        self.counter = 0

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def bind(self, prefix: str, value: Any) -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.namespace[name] = value
        return name

    def pos(self) -> str:
        return "pos" if self.static is None else str(self.static)

    def go_dynamic(self) -> None:
        if self.static is not None:
            self.emit(f"pos = {self.static}")
            self.static = None

    def fixed_run(self, fields: list[tuple[str, str, _Transform | None]]) -> None:
        packer = struct.Struct("<" + "".join(code for _, code, _ in fields))
        targets = ", ".join(local for local, _, _ in fields) + ("," if len(fields) == 1 else "")
        self.emit(f"{targets} = {self.bind('unpack', packer.unpack_from)}(data, {self.pos()})")
        for local, _, transform in fields:
            if transform is not None:
                self.emit(f"{local} = {self.bind('convert', transform)}({local})")
        if self.static is not None:
            self.static += packer.size
        else:
            self.emit(f"pos += {packer.size}")

    def size(self, ref: int | str | None, unit: int) -> str:
        """An expression for a count or length (checked non-negative), emitting what it needs."""
        if ref is None or isinstance(ref, int):
            if isinstance(ref, int) and ref < 0:
                raise _Unsupported
            return repr(ref)
        if ref == REST:
            return f"(len(data) - {self.pos()}) // {unit}"
        local = self.known.get(ref)
        if local is None:
            raise _Unsupported
        if local in self.maybe_absent:
            self.emit(f"if {local} is ABSENT:")
            self.emit("    return None")
        self.counter += 1
        size = f"n{self.counter}"
        self.emit(f"{size} = int({local})")
        self.emit(f"if {size} < 0:")
        self.emit("    return None")
        return size

    def element(self, local: str, element: _Element) -> None:
        if element.inline is not None:
            self.go_dynamic()
            # A string without its NUL runs to the end of the payload; one that would start
            # at the very end is left to the general path, which reports it.
            if element.inline == "utf16z":
                self.emit("end = data.find(b'\\0\\0', pos)")
                self.emit("while end >= 0 and (end - pos) & 1:")
                self.emit("    end = data.find(b'\\0\\0', end + 1)")
                self.emit("if end >= 0:")
                self.emit(f"    {local} = utf16(data[pos:end], 'replace', True)[0]")
                self.emit("    pos = end + 2")
                self.emit("elif pos < len(data):")
                self.emit(f"    {local} = utf16(data[pos:len(data) - ((len(data) - pos) & 1)], 'replace', True)[0]")
                self.emit("    pos = len(data)")
            else:
                convert = self.bind("convert", element.text)
                self.emit("end = data.find(b'\\0', pos)")
                self.emit("if end >= 0:")
                self.emit(f"    {local} = {convert}(data[pos:end])")
                self.emit("    pos = end + 1")
                self.emit("elif pos < len(data):")
                self.emit(f"    {local} = {convert}(data[pos:])")
                self.emit("    pos = len(data)")
            self.emit("else:")
            self.emit("    return None")
            return
        size = self.size(element.size, element.unit)
        self.emit(f"{local}, pos = {self.bind('read', element.read)}(data, {self.pos()}, {size})")
        self.static = None

    def array(self, local: str, prop: PropertyInfo, pointer_size: int, encoding: str) -> None:
        mode = _array_count(prop)
        count = self.size(prop.count, 1) if mode == "count" else "None"
        fixed = _fixed(prop, pointer_size, encoding)
        if fixed is not None:
            reader = _fixed_array(fixed[0], fixed[1], mode)
            element_size = "None"
        else:
            element = _element(prop, pointer_size, encoding)
            if element is None or element.size == REST:
                raise _Unsupported
            element_size = self.size(element.size, element.unit)
            reader = _variable_array(element.read, mode)
        self.emit(f"{local}, pos = {self.bind('array', reader)}(data, {self.pos()}, {count}, {element_size})")
        self.static = None


def reader_source(schema: Schema, pointer_size: int, ansi_encoding: str = "cp1252") -> tuple[str, dict[str, Any]] | None:
    """The source of ``schema``'s compiled reader and the names it uses, or ``None`` if it has none."""
    properties = schema.properties
    names = [prop.name for prop in properties]
    if len(set(names)) != len(names) or len(properties) > _MAX_PROPERTIES:
        return None
    optional = [prop.optional for prop in properties]
    if any(optional) and not all(optional[optional.index(True) :]):
        return None  # optional properties are trailing ones; anything else takes the general path
    source = _Source()
    run: list[tuple[str, str, _Transform | None]] = []
    try:
        for index, prop in enumerate(properties):
            local = f"v{index}"
            fixed = _fixed(prop, pointer_size, ansi_encoding) if _is_scalar(prop) else None
            if fixed is not None and not prop.optional:
                run.append((local, *fixed))
            else:
                if run:
                    source.fixed_run(run)
                    run = []
                if prop.optional:
                    source.go_dynamic()
                    source.emit(f"{local} = ABSENT")
                    source.emit("if pos < len(data):")
                    source.depth += 1
                    source.maybe_absent.add(local)
                if fixed is not None:
                    source.fixed_run([(local, *fixed)])
                elif not _is_scalar(prop):
                    if prop.members is not None or prop.problem is not None or prop.custom_schema is not None:
                        raise _Unsupported
                    source.array(local, prop, pointer_size, ansi_encoding)
                else:
                    element = _element(prop, pointer_size, ansi_encoding)
                    if element is None:
                        raise _Unsupported
                    source.element(local, element)
                if prop.optional:
                    source.depth -= 1
            if _gives_integer(prop):
                source.known[prop.name] = f"v{index}"
        if run:
            source.fixed_run(run)
    except _Unsupported:
        return None
    entries = ", ".join(f"{prop.name!r}: v{index}" for index, prop in enumerate(properties) if not prop.optional)
    source.emit(f"values = {{{entries}}}")
    for index, prop in enumerate(properties):
        if prop.optional:
            source.emit(f"if v{index} is not ABSENT:")
            source.emit(f"    values[{prop.name!r}] = v{index}")
    source.emit(f"return values, {source.pos()}")
    text = "\n".join([_BANNER, "def read(data):", "    try:", *source.lines, "    except GIVE_UP:", "        return None", ""])
    return text, source.namespace


def load_reader(source: str, namespace: dict[str, Any]) -> Reader:
    """Compile generated reader source (from ``reader_source``) into its ``read`` function."""
    scope = dict(namespace)
    exec(compile(source, "<openetw compiled schema>", "exec"), scope)  # noqa: S102 - our own generated code
    reader: Reader = scope["read"]
    return reader


def _build(schema: Schema, pointer_size: int, encoding: str) -> Reader | None:
    generated = reader_source(schema, pointer_size, encoding)
    return None if generated is None else load_reader(*generated)


_CACHE_LIMIT = 8192
_UNSET: Any = object()  # never asked for
_ASKED_ONCE: Any = object()  # asked for once: a schema seen once is not worth compiling yet
# id(schema) -> [schema, state for 8-byte pointers, state for 4-byte pointers] (cp1252 text);
# the schema is kept so that its id stays its own. Other encodings have their own cache.
_cache: dict[int, list[Any]] = {}
_other_encodings: dict[tuple[int, int, str], tuple[Schema, Any]] = {}


def compiled_reader(schema: Schema, pointer_size: int, ansi_encoding: str = "cp1252", *, at_once: bool = False) -> Reader | None:
    """The compiled reader of ``schema`` for this pointer size (cached), or ``None`` if it has none.

    Compiling costs about as much as ten general decodes: unless ``at_once``, a schema is
    compiled the second time it is asked for, and ``None`` is the first answer.
    """
    if ansi_encoding != "cp1252":
        return _reader_for_encoding(schema, pointer_size, ansi_encoding, at_once)
    entry = _cache.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        entry = _cache[id(schema)] = [schema, _UNSET, _UNSET]
    slot = 1 if pointer_size == 8 else 2
    state = entry[slot]
    if state is _UNSET or state is _ASKED_ONCE:
        if state is _UNSET and not at_once:
            entry[slot] = _ASKED_ONCE
            return None
        state = entry[slot] = _build(schema, pointer_size, ansi_encoding)
    return state  # type: ignore[no-any-return]


def _reader_for_encoding(schema: Schema, pointer_size: int, ansi_encoding: str, at_once: bool) -> Reader | None:
    key = (id(schema), pointer_size, ansi_encoding)
    found = _other_encodings.get(key)
    state = found[1] if found is not None and found[0] is schema else _UNSET
    if state is _UNSET or state is _ASKED_ONCE:
        if len(_other_encodings) >= _CACHE_LIMIT:
            _other_encodings.clear()
        state = _ASKED_ONCE if state is _UNSET and not at_once else _build(schema, pointer_size, ansi_encoding)
        _other_encodings[key] = (schema, state)
    return None if state is _ASKED_ONCE else state


class CompiledSchema:
    """A schema ready to decode whole payloads: call it for ``(values, errors)``.

    ``values`` maps property names to typed values and ``errors`` names to
    ``PropertyDecodeError``, exactly as ``decode_properties`` would give them (the general path
    decodes whatever the compiled reader gives up on). ``fast`` tells whether there is a
    compiled reader at all.
    """

    __slots__ = ("schema", "pointer_size", "ansi_encoding", "_reader")

    def __init__(self, schema: Schema, pointer_size: int, ansi_encoding: str = "cp1252") -> None:
        if pointer_size not in (4, 8):
            raise InvalidArgument(f"pointer_size must be 4 or 8, not {pointer_size!r}")
        self.schema = schema
        self.pointer_size = pointer_size
        self.ansi_encoding = ansi_encoding
        self._reader = compiled_reader(schema, pointer_size, ansi_encoding, at_once=True)

    @property
    def fast(self) -> bool:
        return self._reader is not None

    def __call__(self, data: bytes) -> tuple[dict[str, Any], dict[str, PropertyDecodeError]]:
        if type(data) is not bytes:
            data = bytes(data)
        reader = self._reader
        if reader is not None:
            result = reader(data)
            if result is not None:
                return result[0], {}
        decoded = DecodedEvent(self.schema, data, self.pointer_size, self.ansi_encoding).decode_all(compiled=False)
        return dict(decoded.items()), decoded.errors

    def decode(self, data: bytes) -> DecodedEvent:
        """A fully decoded ``DecodedEvent`` (``raw()`` spans are worked out if asked for)."""
        if type(data) is not bytes:
            data = bytes(data)
        reader = self._reader
        result = reader(data) if reader is not None else None
        if result is None:
            return DecodedEvent(self.schema, data, self.pointer_size, self.ansi_encoding).decode_all(compiled=False)
        return DecodedEvent._completed(self.schema, data, self.pointer_size, self.ansi_encoding, result[0], result[1])


def compile_schema(schema: Schema, pointer_size: int, ansi_encoding: str = "cp1252") -> CompiledSchema:
    """Compile ``schema`` for payloads of a producer with this pointer size (4 or 8)."""
    return CompiledSchema(schema, pointer_size, ansi_encoding)
