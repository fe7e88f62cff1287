"""Property decoding: a ``Schema`` and an event's user data in, typed values out.

Decoding is lazy and per property. Nothing is read until a value is asked for; then the
properties are walked in order up to the one requested (a property's offset depends on the sizes
of all those before it). A property that cannot be decoded becomes a ``PropertyDecodeError`` for
that property alone:

* if only its *value* is bad (a SYSTEMTIME with month 13) its size is still known, so decoding
  goes on with the next property;
* if its *size* is unknown (the payload ends early, a count refers to nothing) every later
  property is reported as not decoded, since its offset cannot be known.

A ``REST`` count repeats elements until the payload ends; a ``REST`` length takes every byte
left; an ``optional`` property with no bytes left is absent (neither a value nor an error). A
NUL-terminated string whose NUL is missing runs to the end of the payload, as Windows decodes it.

Decoding everything at once (``decode_all``, or iterating a ``DecodedEvent``) goes through the
schema's compiled reader (``openetw.tdh.compiled``) when one exists, with the same results.

Nothing raises out of an event. Values stay typed (``int``, ``float``, ``bool``, ``str``,
``bytes``, ``uuid.UUID``, ``datetime``, ``ipaddress`` objects, ``list`` for arrays, ``dict`` for
structs); ``openetw.tdh.format`` turns them into TDH-style text on request.
"""

from __future__ import annotations

import codecs
import ipaddress
import struct
import uuid
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from datetime import UTC
from functools import lru_cache
from typing import Any

from openetw.errors import InvalidArgument, PropertyDecodeError
from openetw.etl.intypes import (
    FLOAT_CODES,
    INTEGER_CODES,
    SYSTEMTIME,
    InType,
    OutType,
    filetime_value,
    systemtime_to_datetime,
)
from openetw.tdh.schema import REST, PropertyInfo, Schema

__all__ = ["DecodedEvent", "decode_all", "decode_properties", "filetime_value", "systemtime_to_datetime", "sid_to_string"]

# Elements of size zero (empty structs, zero-length strings) cost nothing in the payload, so a
# count cannot be bounded by the bytes left; this bounds the work a hostile count can cause.
_MAX_EMPTY_ELEMENTS = 65536
_UTF8_OUT_TYPES = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})

_U16 = struct.Struct("<H")
_utf16_le_decode = codecs.utf_16_le_decode
_U16_BE = struct.Struct(">H")
_U32 = struct.Struct("<I")
_SYSTEMTIME = SYSTEMTIME


class _Stop(Exception):
    """The property's size is unknown: decoding cannot go past it."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.path: str | None = None  # the innermost array element or struct member


class _BadValue(Exception):
    """The bytes of one value were read (its end is known) but do not form a valid value."""

    def __init__(self, message: str, end: int) -> None:
        super().__init__(message)
        self.message = message
        self.end = end


def sid_to_string(raw: bytes) -> str:
    """A binary SID (revision, count, 6-byte big-endian authority, u32 LE sub-authorities) as ``S-1-...``."""
    authority = int.from_bytes(raw[2:8], "big")
    text = f"S-{raw[0]}-{authority}" if authority < 1 << 32 else f"S-{raw[0]}-0x{authority:012X}"
    for index in range(raw[1]):
        text += f"-{_U32.unpack_from(raw, 8 + 4 * index)[0]}"
    return text


@lru_cache(maxsize=64)
def _ascii_compatible(encoding: str) -> bool:
    """Whether ``encoding`` reads bytes 0-127 as ASCII (so ASCII text may take the fast decoder)."""
    try:
        return bytes(range(128)).decode(encoding) == "".join(map(chr, range(128)))
    except (LookupError, UnicodeDecodeError):
        return False


def _decode_ansi(raw: bytes, prop: PropertyInfo, encoding: str) -> str:
    if prop.out_type in _UTF8_OUT_TYPES:
        return raw.decode("utf-8", "replace")
    if _ascii_compatible(encoding):
        try:
            return raw.decode("ascii")  # CPython's own fast path; the same text for these encodings
        except UnicodeDecodeError:
            pass
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        # cp1252 leaves five bytes undefined; Windows maps them to the same code points.
        return "".join(bytes([b]).decode(encoding, "ignore") or chr(b) for b in raw)


def _decode_utf16(raw: bytes) -> str:
    # The codec function itself: ``bytes.decode("utf-16-le")`` looks the codec up on every call.
    return _utf16_le_decode(raw, "replace", True)[0]


class _Walker:
    """Walks one payload: reads values at offsets and remembers integers for count/length references."""

    __slots__ = ("data", "pointer_size", "ansi_encoding", "integers", "bad")

    def __init__(self, data: bytes, pointer_size: int, ansi_encoding: str) -> None:
        self.data = data
        self.pointer_size = pointer_size
        self.ansi_encoding = ansi_encoding
        self.integers: dict[str, int] = {}
        # The first bad value met in the current top-level property: (path, message).
        self.bad: tuple[str, str] | None = None

    # -- sizes -----------------------------------------------------------------------------

    def need(self, offset: int, size: int, what: str) -> int:
        end = offset + size
        if end > len(self.data):
            left = max(len(self.data) - offset, 0)
            raise _Stop(f"{what} needs {size} bytes, {left} left in the payload", offset)
        return end

    def length(self, prop: PropertyInfo, offset: int, unit: int) -> int | None:
        """A property's length in ``unit``-byte units; ``REST`` is as many as the bytes left hold."""
        if prop.length == REST:
            return (len(self.data) - offset) // unit
        return self.reference(prop.length, offset, "length")

    def reference(self, value: int | str | None, offset: int, what: str) -> int | None:
        if value is None or isinstance(value, int):
            if value is not None and value < 0:
                raise _Stop(f"negative {what} {value}", offset)
            return value
        found = self.integers.get(value)
        if found is None:
            raise _Stop(f"{what} refers to {value!r}, which has no decoded integer value", offset)
        if found < 0:
            raise _Stop(f"{what} from {value!r} is negative ({found})", offset)
        return found

    # -- values ----------------------------------------------------------------------------

    def value(self, prop: PropertyInfo, offset: int, path: str) -> tuple[Any, int]:
        """The value of ``prop`` at ``offset`` (a list for arrays) and the offset after it."""
        try:
            return self._value(prop, offset, path)
        except _Stop as stop:
            if stop.path is None:
                stop.path = path
            raise

    def _value(self, prop: PropertyInfo, offset: int, path: str) -> tuple[Any, int]:
        if prop.problem is not None:
            raise _Stop(prop.problem, offset)
        count: int | None
        if prop.count_in_data:
            end = self.need(offset, 2, "array count")
            count = _U16.unpack_from(self.data, offset)[0]
            offset = end
        elif prop.count == REST:
            return self.rest_array(prop, offset, path)
        else:
            count = self.reference(prop.count, offset, "count")
        if count is None:
            value, offset = self.element(prop, offset, path)
            if isinstance(value, int) and prop.members is None:
                self.integers[prop.name] = int(value)
            return value, offset
        if count > len(self.data) - offset + _MAX_EMPTY_ELEMENTS:
            raise _Stop(f"count {count} is more than the {len(self.data) - offset} bytes left can hold", offset)
        items = []
        for index in range(count):
            item, offset = self.element(prop, offset, f"{path}[{index}]")
            items.append(item)
        return items, offset

    def rest_array(self, prop: PropertyInfo, offset: int, path: str) -> tuple[list[Any], int]:
        items: list[Any] = []
        while offset < len(self.data):
            item, end = self.element(prop, offset, f"{path}[{len(items)}]")
            if end == offset:
                raise _Stop("an element of a rest-of-payload array takes no bytes", offset)
            items.append(item)
            offset = end
        return items, offset

    def element(self, prop: PropertyInfo, offset: int, path: str) -> tuple[Any, int]:
        if prop.members is not None:
            members: dict[str, Any] = {}
            for member in prop.members:
                members[member.name], offset = self.value(member, offset, f"{path}.{member.name}")
            return members, offset
        if prop.custom_schema is not None:
            return self.counted_bytes(offset, _U16, "custom-serialized data")
        reader = _READERS.get(int(prop.in_type))
        if reader is None:
            raise _Stop(f"in-type {int(prop.in_type)} is not supported", offset)
        try:
            return reader(self, prop, offset)
        except _BadValue as bad:
            if self.bad is None:
                self.bad = (path, bad.message)
            return None, bad.end

    def counted_bytes(self, offset: int, counter: struct.Struct, what: str) -> tuple[bytes, int]:
        start = self.need(offset, counter.size, f"{what} size")
        size = counter.unpack_from(self.data, offset)[0]
        end = self.need(start, size, what)
        return self.data[start:end], end


# -- readers, one per in-type: (walker, prop, offset) -> (value, end) --------------------------

_Reader = Callable[[_Walker, PropertyInfo, int], tuple[Any, int]]


def _integer(fmt: str, name: str) -> _Reader:
    packer = struct.Struct(fmt)

    def read(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
        end = w.need(offset, packer.size, name)
        value = packer.unpack_from(w.data, offset)[0]
        out = prop.out_type
        if out is None or out == OutType.NULL:
            return value, end
        if out == OutType.BOOLEAN:
            return value != 0, end
        if out == OutType.PORT and packer.size == 2:
            return _U16_BE.unpack_from(w.data, offset)[0], end
        if out == OutType.IPV4 and packer.size == 4:
            return ipaddress.IPv4Address(w.data[offset:end]), end
        return value, end

    return read


def _float(fmt: str, name: str) -> _Reader:
    packer = struct.Struct(fmt)

    def read(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
        end = w.need(offset, packer.size, name)
        return packer.unpack_from(w.data, offset)[0], end

    return read


def _read_boolean(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 4, "BOOLEAN")
    return _U32.unpack_from(w.data, offset)[0] != 0, end


def _read_pointer(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, w.pointer_size, "pointer")
    return int.from_bytes(w.data[offset:end], "little"), end


def _read_guid(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 16, "GUID")
    return uuid.UUID(bytes_le=w.data[offset:end]), end


def _read_filetime(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 8, "FILETIME")
    return filetime_value(int.from_bytes(w.data[offset:end], "little", signed=True)), end


def _read_systemtime(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 16, "SYSTEMTIME")
    fields = _SYSTEMTIME.unpack_from(w.data, offset)
    try:
        value = systemtime_to_datetime(fields)
    except ValueError as exc:
        raise _BadValue(f"SYSTEMTIME {fields} is not a valid date: {exc}", end) from None
    if prop.out_type == OutType.DATETIME_UTC:
        value = value.replace(tzinfo=UTC)
    return value, end


def _sid_at(w: _Walker, offset: int) -> tuple[str, int]:
    w.need(offset, 8, "SID")
    end = w.need(offset, 8 + 4 * w.data[offset + 1], "SID")
    return sid_to_string(w.data[offset:end]), end


def _read_sid(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    return _sid_at(w, offset)


def _read_wbemsid(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    # A TOKEN_USER (SID pointer + attributes: two pointer-sized words) precedes the SID itself;
    # a zero first u32 means "no SID" and the blob is those 4 bytes alone.
    end = w.need(offset, 4, "WBEMSID")
    if _U32.unpack_from(w.data, offset)[0] == 0:
        return None, end
    start = w.need(offset, 2 * w.pointer_size, "WBEMSID TOKEN_USER")
    return _sid_at(w, start)


def _read_binary(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    length = w.length(prop, offset, 1)
    if length is None:
        if prop.out_type != OutType.IPV6:
            raise _Stop("BINARY property without a length", offset)
        length = 16
    end = w.need(offset, length, "BINARY")
    return _binary_value(w.data[offset:end], prop), end


def _binary_value(raw: bytes, prop: PropertyInfo) -> Any:
    if prop.out_type == OutType.IPV6 and len(raw) == 16:
        return ipaddress.IPv6Address(raw)
    return raw


def _read_counted_binary(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    raw, end = w.counted_bytes(offset, _U16, "COUNTEDBINARY")
    return _binary_value(raw, prop), end


def _read_hexdump(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    return w.counted_bytes(offset, _U32, "HEXDUMP")


def _read_unicode(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    length = w.length(prop, offset, 2)
    if length is not None:
        end = w.need(offset, 2 * length, "UNICODESTRING")
        return _decode_utf16(w.data[offset:end]).split("\0", 1)[0], end
    data = w.data
    search = offset
    while True:
        nul = data.find(b"\0\0", search)
        if nul < 0:
            return _unterminated(w, prop, offset, wide=True)
        if (nul - offset) % 2 == 0:
            return _decode_utf16(data[offset:nul]), nul + 2
        search = nul + 1


def _read_ansi(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    length = w.length(prop, offset, 1)
    if length is not None:
        end = w.need(offset, length, "ANSISTRING")
        return _decode_ansi(w.data[offset:end].split(b"\0", 1)[0], prop, w.ansi_encoding), end
    nul = w.data.find(b"\0", offset)
    if nul < 0:
        return _unterminated(w, prop, offset, wide=False)
    return _decode_ansi(w.data[offset:nul], prop, w.ansi_encoding), nul + 1


def _unterminated(w: _Walker, prop: PropertyInfo, offset: int, *, wide: bool) -> tuple[str, int]:
    """A NUL-terminated string whose NUL never comes: it runs to the end of the payload.

    Windows' decoders tolerate this (producers often log a string's characters without its
    NUL): wherever such a string is, it takes every byte left, so anything after it finds the
    payload empty. A UTF-16 string drops an odd last byte from its text but still consumes it.
    A string that would start at the very end of the payload is an error, not an empty string.
    """
    end = len(w.data)
    if offset >= end:
        raise _Stop(f"{'UNICODESTRING' if wide else 'ANSISTRING'} needs at least 1 byte, 0 left in the payload", offset)
    if wide:
        return _decode_utf16(w.data[offset : end - ((end - offset) & 1)]), end
    return _decode_ansi(w.data[offset:end], prop, w.ansi_encoding), end


def _counted_string(counter: struct.Struct, wide: bool, name: str) -> _Reader:
    def read(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
        raw, end = w.counted_bytes(offset, counter, name)
        return (_decode_utf16(raw) if wide else _decode_ansi(raw, prop, w.ansi_encoding)), end

    return read


def _rest_string(wide: bool) -> _Reader:
    def read(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
        length = w.length(prop, offset, 2 if wide else 1)
        end = len(w.data) if length is None else w.need(offset, length * (2 if wide else 1), "string")
        raw = w.data[offset:end]
        return (_decode_utf16(raw) if wide else _decode_ansi(raw, prop, w.ansi_encoding)), end

    return read


def _read_unicode_char(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 2, "UNICODECHAR")
    return _decode_utf16(w.data[offset:end]), end


def _read_ansi_char(w: _Walker, prop: PropertyInfo, offset: int) -> tuple[Any, int]:
    end = w.need(offset, 1, "ANSICHAR")
    return _decode_ansi(w.data[offset:end], prop, w.ansi_encoding), end


_READERS: dict[int, _Reader] = {
    **{in_type: _integer("<" + code, InType(in_type).name) for in_type, code in INTEGER_CODES.items()},
    **{in_type: _float("<" + code, InType(in_type).name) for in_type, code in FLOAT_CODES.items()},
    InType.UNICODESTRING: _read_unicode,
    InType.ANSISTRING: _read_ansi,
    InType.BOOLEAN: _read_boolean,
    InType.BINARY: _read_binary,
    InType.GUID: _read_guid,
    InType.POINTER: _read_pointer,
    InType.FILETIME: _read_filetime,
    InType.SYSTEMTIME: _read_systemtime,
    InType.SID: _read_sid,
    InType.MANIFEST_COUNTEDSTRING: _counted_string(_U16, True, "COUNTEDSTRING"),
    InType.MANIFEST_COUNTEDANSISTRING: _counted_string(_U16, False, "COUNTEDANSISTRING"),
    InType.MANIFEST_COUNTEDBINARY: _read_counted_binary,
    InType.COUNTEDSTRING: _counted_string(_U16, True, "COUNTEDSTRING"),
    InType.COUNTEDANSISTRING: _counted_string(_U16, False, "COUNTEDANSISTRING"),
    InType.REVERSEDCOUNTEDSTRING: _counted_string(_U16_BE, True, "REVERSEDCOUNTEDSTRING"),
    InType.REVERSEDCOUNTEDANSISTRING: _counted_string(_U16_BE, False, "REVERSEDCOUNTEDANSISTRING"),
    InType.NONNULLTERMINATEDSTRING: _rest_string(True),
    InType.NONNULLTERMINATEDANSISTRING: _rest_string(False),
    InType.UNICODECHAR: _read_unicode_char,
    InType.ANSICHAR: _read_ansi_char,
    InType.SIZET: _read_pointer,
    InType.HEXDUMP: _read_hexdump,
    InType.WBEMSID: _read_wbemsid,
}


class DecodedEvent(Mapping[str, Any]):
    """The properties of one event, decoded on demand, in schema order.

    As a mapping it holds the properties that decoded (name -> typed value; with duplicate names
    the first wins). ``errors`` holds a ``PropertyDecodeError`` per property that did not,
    ``not_decoded`` the names after a property whose size was unknown, ``end_offset`` where
    decoding stopped. Asking for any of those decodes the whole payload.
    """

    __slots__ = (
        "schema", "user_data", "pointer_size", "ansi_encoding", "_walker", "_next", "_offset", "_values", "_ordered",
        "_errors", "_stopped", "_spans",
    )  # fmt: skip

    def __init__(self, schema: Schema, user_data: bytes, pointer_size: int, ansi_encoding: str = "cp1252") -> None:
        self.schema = schema
        self.user_data = user_data if type(user_data) is bytes else bytes(user_data)
        self.pointer_size = pointer_size
        self.ansi_encoding = ansi_encoding
        self._walker: _Walker | None = None
        self._next = 0
        self._offset = 0
        self._values: dict[str, Any] = {}
        # Both None once a compiled reader has decoded everything: derived when asked for.
        self._ordered: list[Any] | None = []
        self._spans: list[tuple[int, int] | None] | None = []
        self._errors: dict[str, PropertyDecodeError] = {}
        self._stopped = False

    # -- the walk --------------------------------------------------------------------------

    def _step(self) -> bool:
        """Decode the next top-level property; False when there is none left to decode."""
        properties = self.schema.properties
        if self._stopped or self._next >= len(properties):
            return False
        assert self._ordered is not None and self._spans is not None
        prop = properties[self._next]
        self._next += 1
        start = self._offset
        if prop.optional and start >= len(self.user_data):
            self._ordered.append(None)
            self._spans.append(None)
            return True
        walker = self._walker
        if walker is None:
            walker = self._walker = _Walker(self.user_data, self.pointer_size, self.ansi_encoding)
        walker.bad = None
        try:
            value, end = walker.value(prop, start, prop.name)
        except _Stop as stop:
            message = stop.message if stop.path in (None, prop.name) else f"{stop.path}: {stop.message}"
            self._fail(prop, message, stop.offset, self.user_data[start:])
            self._spans.append(None)
            self._stopped = True
            return False
        except (IndexError, ValueError, OverflowError, TypeError, RecursionError, struct.error) as exc:  # never escape
            self._fail(prop, f"cannot decode: {exc}", start, self.user_data[start:])
            self._spans.append(None)
            self._stopped = True
            return False
        self._offset = end
        self._spans.append((start, end))
        if walker.bad is not None:
            path, message = walker.bad
            self._fail(prop, message if path == prop.name else f"{path}: {message}", start, self.user_data[start:end])
            return True
        self._ordered.append(value)
        self._values.setdefault(prop.name, value)
        return True

    def _fail(self, prop: PropertyInfo, message: str, offset: int, raw: bytes) -> None:
        assert self._ordered is not None
        self._ordered.append(None)
        self._errors.setdefault(prop.name, PropertyDecodeError(message, property_name=prop.name, offset=offset, raw=raw))

    def decode_all(self, *, compiled: bool = True) -> DecodedEvent:
        """Decode every property; by the schema's compiled reader when nothing is decoded yet.

        ``compiled=False`` forces the general walk (the results are the same).
        """
        if self._next >= len(self.schema.properties):
            return self
        if compiled and self._next == 0 and self.schema.properties:
            reader = (_compiled_lookup or _load_compiled_lookup())(self.schema, self.pointer_size, self.ansi_encoding)
            result = reader(self.user_data) if reader is not None else None
            if result is not None:  # else something unusual: the general walk decides, and reports it
                self._complete(*result)
                return self
        while self._step():
            pass
        return self

    @classmethod
    def _completed(cls, schema: Schema, data: bytes, pointer_size: int, ansi_encoding: str, values: dict[str, Any], end: int) -> DecodedEvent:
        """A decoded event made straight from a compiled reader's result (no walk set up)."""
        decoded = cls.__new__(cls)
        decoded.schema = schema
        decoded.user_data = data
        decoded.pointer_size = pointer_size
        decoded.ansi_encoding = ansi_encoding
        decoded._walker = None
        decoded._errors = {}
        decoded._stopped = False
        decoded._values = values
        decoded._offset = end
        decoded._next = len(schema.properties)
        decoded._ordered = None
        decoded._spans = None
        return decoded

    def _complete(self, values: dict[str, Any], end: int) -> None:
        """Take the result of a compiled reader: every property decoded, no error."""
        self._values = values
        self._offset = end
        self._next = len(self.schema.properties)
        self._ordered = None
        self._spans = None

    # -- Mapping ---------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        while name not in self._values:
            if not self._step():
                if name in self._values:
                    break
                raise KeyError(name)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        self.decode_all()
        return iter(self._values)

    def __len__(self) -> int:
        self.decode_all()
        return len(self._values)

    # The views and lookups of the values dict itself, once everything is decoded (the Mapping
    # defaults would go through __getitem__ for every name).
    def __contains__(self, name: object) -> bool:
        if name in self._values:
            return True
        self.decode_all()
        return name in self._values

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._values:
            self.decode_all()
        return self._values.get(name, default)

    def keys(self) -> KeysView[str]:
        self.decode_all()
        return self._values.keys()

    def values(self) -> ValuesView[Any]:
        self.decode_all()
        return self._values.values()

    def items(self) -> ItemsView[str, Any]:
        self.decode_all()
        return self._values.items()

    def __repr__(self) -> str:
        self.decode_all()
        extra = f", errors={list(self._errors)}" if self._errors else ""
        return f"DecodedEvent({self._values!r}{extra})"

    # -- outcome ---------------------------------------------------------------------------

    @property
    def errors(self) -> dict[str, PropertyDecodeError]:
        self.decode_all()
        return dict(self._errors)

    @property
    def not_decoded(self) -> tuple[str, ...]:
        self.decode_all()
        return tuple(prop.name for prop in self.schema.properties[self._next :])

    @property
    def end_offset(self) -> int:
        """Where decoding stopped: after the last property, or at the start of the one that failed."""
        self.decode_all()
        return self._offset

    @property
    def ok(self) -> bool:
        self.decode_all()
        return not self._errors and self._next >= len(self.schema.properties)

    @property
    def trailing(self) -> bytes:
        """Payload bytes after the last property (empty when decoding stopped early)."""
        self.decode_all()
        return b"" if self._stopped else self.user_data[self._offset :]

    def values_in_order(self) -> list[Any]:
        """One entry per top-level property, in schema order (``None`` where it did not decode)."""
        self.decode_all()
        if self._ordered is None:  # compiled readers only take schemas whose names are unique
            return [self._values.get(prop.name) for prop in self.schema.properties]
        return self._ordered + [None] * (len(self.schema.properties) - len(self._ordered))

    def raw(self, name: str) -> bytes | None:
        """The payload bytes of a top-level property (``None`` if it was never reached)."""
        self.decode_all()
        spans = self._spans
        if spans is None:
            walk = DecodedEvent(self.schema, self.user_data, self.pointer_size, self.ansi_encoding)
            while walk._step():
                pass
            spans = self._spans = walk._spans
            assert spans is not None
        for prop, span in zip(self.schema.properties, spans, strict=False):  # a walk that stopped has fewer spans
            if prop.name == name:
                if span is None:
                    error = self._errors.get(name)
                    return error.raw if error else None
                return self.user_data[span[0] : span[1]]
        return None


def decode_properties(schema: Schema, user_data: bytes, pointer_size: int = 8, *, ansi_encoding: str = "cp1252") -> DecodedEvent:
    """Decode ``user_data`` with ``schema`` (lazily). ``pointer_size`` is 4 or 8 (the producer's).

    ``ansi_encoding`` is the code page for 8-bit strings without a UTF-8 out-type (Windows uses
    the producer's ANSI code page, which the event does not record).
    """
    if pointer_size not in (4, 8):
        raise InvalidArgument(f"pointer_size must be 4 or 8, not {pointer_size!r}")
    return DecodedEvent(schema, user_data, pointer_size, ansi_encoding)


def decode_all(schema: Schema, user_data: bytes, pointer_size: int = 8, *, ansi_encoding: str = "cp1252") -> DecodedEvent:
    """Decode every property of ``user_data`` now (the fast way, when nothing is wanted lazily)."""
    if pointer_size not in (4, 8):
        raise InvalidArgument(f"pointer_size must be 4 or 8, not {pointer_size!r}")
    data = user_data if type(user_data) is bytes else bytes(user_data)
    if schema.properties:
        reader = (_compiled_lookup or _load_compiled_lookup())(schema, pointer_size, ansi_encoding)
        result = reader(data) if reader is not None else None
        if result is not None:
            return DecodedEvent._completed(schema, data, pointer_size, ansi_encoding, result[0], result[1])
    return DecodedEvent(schema, data, pointer_size, ansi_encoding).decode_all(compiled=False)


# openetw.tdh.compiled.compiled_reader, once imported.
_ReaderLookup = Callable[[Schema, int, str], Callable[[bytes], "tuple[dict[str, Any], int] | None"] | None]
_compiled_lookup: _ReaderLookup | None = None


def _load_compiled_lookup() -> _ReaderLookup:
    global _compiled_lookup
    from openetw.tdh.compiled import compiled_reader  # builds on this module, hence imported late

    _compiled_lookup = compiled_reader
    return compiled_reader

