"""Random values for a manifest event's fields, and the values decoding must give back.

``event_values(fields)`` draws, for a template's fields in order, the arguments of its
``write_<event>`` method and the decoded value each field must have. Fields that others refer
to as a count or a length get the size drawn for the fields that refer to them, so every drawn
event is writable. Decoding normalises a few values; the expected values follow it:
FILETIME to microseconds (an aware UTC ``datetime``), SYSTEMTIME to milliseconds, IPv4 out
types to ``ipaddress`` objects, mapped integers stay integers.
"""

from __future__ import annotations

import ipaddress
import math
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.schema import PropertyInfo

MAX_ELEMENTS = 6  # elements of an array whose count a field gives
TEXT_BUDGET = 6000  # characters shared by an event's free-length strings (events stay far below 64 KB)

_INTEGER_RANGES: dict[InType, tuple[int, int]] = {
    InType.INT8: (-(1 << 7), (1 << 7) - 1),
    InType.UINT8: (0, (1 << 8) - 1),
    InType.INT16: (-(1 << 15), (1 << 15) - 1),
    InType.UINT16: (0, (1 << 16) - 1),
    InType.INT32: (-(1 << 31), (1 << 31) - 1),
    InType.UINT32: (0, (1 << 32) - 1),
    InType.HEXINT32: (0, (1 << 32) - 1),
    InType.INT64: (-(1 << 63), (1 << 63) - 1),
    InType.UINT64: (0, (1 << 64) - 1),
    InType.HEXINT64: (0, (1 << 64) - 1),
    InType.POINTER: (0, (1 << 64) - 1),  # written and read in a 64-bit process
    InType.SIZET: (0, (1 << 64) - 1),
}
_UNICODE = (InType.UNICODESTRING, InType.MANIFEST_COUNTEDSTRING)
_ANSI = (InType.ANSISTRING, InType.MANIFEST_COUNTEDANSISTRING)
_BINARY = (InType.BINARY, InType.MANIFEST_COUNTEDBINARY)
_UTF8_OUT = (OutType.UTF8, OutType.XML, OutType.JSON)
_FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)

# Text a field can hold: no NUL (it would end the string); cp1252 lacks five byte values.
_CP1252_CHARS = "".join(bytes([b]).decode("cp1252") for b in range(1, 256) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D))
_WIDE_TEXT = st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))
_BMP_TEXT = st.characters(blacklist_characters="\0", blacklist_categories=("Cs",), max_codepoint=0xFFFF)
_ANSI_TEXT = st.sampled_from(_CP1252_CHARS)


class Unsupported(Exception):
    """A field type these strategies do not draw (the corpus has none yet)."""


def referenced_names(fields: tuple[PropertyInfo, ...]) -> set[str]:
    names: set[str] = set()
    for prop in fields:
        for ref in (prop.count, prop.length):
            if isinstance(ref, str):
                names.add(ref)
    return names


def check_supported(prop: PropertyInfo) -> None:
    if prop.members is not None:
        for member in prop.members:
            check_supported(member)
        return
    known = (*_INTEGER_RANGES, *_UNICODE, *_ANSI, *_BINARY, InType.BOOLEAN, InType.FLOAT, InType.DOUBLE, InType.GUID, InType.FILETIME, InType.SYSTEMTIME)
    if prop.in_type not in known:
        raise Unsupported(f"field {prop.name!r}: no values drawn for {prop.in_type!r}")


@st.composite
def event_values(draw: st.DrawFn, fields: tuple[PropertyInfo, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(arguments in template order, {field name: the value decoding must give})."""
    sizes = {name: draw(st.integers(0, MAX_ELEMENTS)) for name in referenced_names(fields)}
    free_text = sum(1 for prop in fields if prop.in_type in (*_UNICODE, *_ANSI) and prop.length is None) or 1
    text_limit = TEXT_BUDGET // free_text
    arguments: list[Any] = []
    expected: dict[str, Any] = {}
    for prop in fields:
        if prop.name in sizes:
            value, decoded = sizes[prop.name], sizes[prop.name]
        else:
            value, decoded = draw(_field(prop, sizes, text_limit))
        arguments.append(value)
        expected[prop.name] = decoded
    return tuple(arguments), expected


def _field(prop: PropertyInfo, sizes: dict[str, int], text_limit: int) -> st.SearchStrategy[tuple[Any, Any]]:
    if prop.count is None:
        return _element(prop, sizes, text_limit)
    count = sizes[prop.count] if isinstance(prop.count, str) else int(prop.count)
    pairs = st.lists(_element(prop, sizes, text_limit // max(count, 1)), min_size=count, max_size=count)
    return pairs.map(lambda items: ([v for v, _ in items], [d for _, d in items]))


def _element(prop: PropertyInfo, sizes: dict[str, int], text_limit: int) -> st.SearchStrategy[tuple[Any, Any]]:
    if prop.members is not None:
        members = [_field(member, sizes, text_limit) for member in prop.members]
        names = [member.name for member in prop.members]
        return st.tuples(*members).map(
            lambda items: ({n: v for n, (v, _) in zip(names, items, strict=True)}, {n: d for n, (_, d) in zip(names, items, strict=True)})
        )
    in_type = prop.in_type
    if in_type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[in_type]  # type: ignore[index]
        ints = st.integers(low, high)
        if prop.out_type == OutType.BOOLEAN:
            return ints.map(lambda v: (v, v != 0))
        if prop.out_type == OutType.IPV4 and in_type == InType.UINT32:
            return ints.map(lambda v: (v, ipaddress.IPv4Address(struct.pack("<I", v))))
        if prop.out_type == OutType.PORT and in_type == InType.UINT16:
            return ints.map(lambda v: (v, int.from_bytes(struct.pack("<H", v), "big")))
        return ints.map(lambda v: (v, v))
    if in_type == InType.BOOLEAN:
        return st.booleans().map(lambda v: (v, v))
    if in_type in (InType.FLOAT, InType.DOUBLE):
        return st.floats(width=32 if in_type == InType.FLOAT else 64).map(lambda v: (v, v))
    if in_type == InType.GUID:
        return st.uuids().map(lambda v: (v, v))
    if in_type == InType.FILETIME:
        # tick 0 is "not set" and decodes as the int 0; datetime keeps microseconds, as FILETIME
        start = _FILETIME_EPOCH + timedelta(microseconds=1)
        moments = st.datetimes(min_value=start.replace(tzinfo=None), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999))
        return moments.map(lambda v: (v.replace(tzinfo=UTC), v.replace(tzinfo=UTC)))
    if in_type == InType.SYSTEMTIME:
        utc = prop.out_type == OutType.DATETIME_UTC
        return st.datetimes().map(lambda v: (v, v.replace(microsecond=v.microsecond // 1000 * 1000, tzinfo=UTC if utc else None)))
    if in_type in _UNICODE or in_type in _ANSI:
        return _text(prop, sizes, text_limit)
    if in_type in _BINARY:
        size = _fixed_size(prop, sizes)
        if size is None:
            return st.binary(max_size=64).map(lambda v: (v, v))
        return st.binary(min_size=size, max_size=size).map(lambda v: (v, v))
    raise Unsupported(f"field {prop.name!r}: no values drawn for {in_type!r}")


def _fixed_size(prop: PropertyInfo, sizes: dict[str, int]) -> int | None:
    if prop.length is None:
        return None
    return sizes[prop.length] if isinstance(prop.length, str) else int(prop.length)


def _text(prop: PropertyInfo, sizes: dict[str, int], text_limit: int) -> st.SearchStrategy[tuple[Any, Any]]:
    wide = prop.in_type in _UNICODE
    utf8 = not wide and prop.out_type in _UTF8_OUT
    size = _fixed_size(prop, sizes)
    if size is None:
        alphabet = _WIDE_TEXT if wide or utf8 else _ANSI_TEXT
        # mostly short text, now and then a long one; empty strings come up as well
        lengths = st.one_of(st.integers(0, 16), st.integers(0, max(text_limit, 0)))
        return lengths.flatmap(lambda n: st.text(alphabet, min_size=0, max_size=n)).map(lambda v: (v, v))
    # A length counts code units: one per character in the BMP (UTF-16) or in cp1252.
    alphabet = _BMP_TEXT if wide else (_ANSI_TEXT if not utf8 else st.characters(min_codepoint=1, max_codepoint=0x7F))
    exact = isinstance(prop.length, str)
    return st.text(alphabet, min_size=size if exact else 0, max_size=size).map(lambda v: (v, v))


def same(decoded: Any, expected: Any) -> bool:
    """Equal, floats compared bit for bit (NaN payloads aside) and types kept apart (True is not 1)."""
    if isinstance(expected, float):
        if not isinstance(decoded, float):
            return False
        if math.isnan(expected):
            return math.isnan(decoded)
        return struct.pack("<d", decoded) == struct.pack("<d", expected)
    if isinstance(expected, list):
        return isinstance(decoded, list) and len(decoded) == len(expected) and all(same(d, e) for d, e in zip(decoded, expected, strict=True))
    if isinstance(expected, dict):
        return isinstance(decoded, dict) and decoded.keys() == expected.keys() and all(same(decoded[k], v) for k, v in expected.items())
    return type(decoded) is type(expected) and decoded == expected
