"""Rendering decoded values as TDH (TdhFormatProperty / tracerpt) renders them, and message inserts.

Decoding keeps values typed; this module turns them into text only when asked:

* integers in decimal, or ``0x%X`` (upper case, no padding) for hex out-types, pointers, error codes;
* ``true`` / ``false`` for booleans, ``{GUID}`` upper case in braces;
* ISO 8601 date-times (``Z`` when the value is UTC; SYSTEMTIME carries no zone);
* value maps as their message, bit maps as the set bits' messages joined by ``" | "``;
* binary as ``0x`` followed by two upper-case hex digits per byte.
"""

from __future__ import annotations

import ipaddress
import re
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NamedTuple

from openetw.etl.intypes import InType, OutType
from openetw.manifest.messages import MAX_INSERT_WIDTH, MAX_MESSAGE_CHARS, BoundedText
from openetw.tdh.schema import EventMap, PropertyInfo, Schema

__all__ = ["format_value", "format_property", "format_properties", "format_message", "format_event_message", "error_name", "fill_plan",
           "int_as_str", "message_plan"]

_INT_WIDTH: dict[int, int] = {  # keyed by InType; an unknown in-type is a plain int
    InType.INT8: 1, InType.UINT8: 1, InType.INT16: 2, InType.UINT16: 2, InType.INT32: 4, InType.UINT32: 4,
    InType.INT64: 8, InType.UINT64: 8, InType.HEXINT32: 4, InType.HEXINT64: 8,
}  # fmt: skip
_HEX_OUT = frozenset({OutType.HEXINT8, OutType.HEXINT16, OutType.HEXINT32, OutType.HEXINT64, OutType.CODE_POINTER, OutType.ERRORCODE})
_HEX_IN = frozenset({InType.HEXINT32, InType.HEXINT64, InType.POINTER, InType.SIZET})
_AF_INET, _AF_INET6 = 2, 23  # Windows values (AF_INET6 is 10 on Linux)

# Names of common status codes, shown after the hex code.
_WIN32_ERRORS = {
    0: "ERROR_SUCCESS", 1: "ERROR_INVALID_FUNCTION", 2: "ERROR_FILE_NOT_FOUND", 3: "ERROR_PATH_NOT_FOUND",
    5: "ERROR_ACCESS_DENIED", 6: "ERROR_INVALID_HANDLE", 8: "ERROR_NOT_ENOUGH_MEMORY", 14: "ERROR_OUTOFMEMORY",
    32: "ERROR_SHARING_VIOLATION", 50: "ERROR_NOT_SUPPORTED", 53: "ERROR_BAD_NETPATH", 87: "ERROR_INVALID_PARAMETER",
    122: "ERROR_INSUFFICIENT_BUFFER", 183: "ERROR_ALREADY_EXISTS", 234: "ERROR_MORE_DATA", 258: "WAIT_TIMEOUT",
    259: "ERROR_NO_MORE_ITEMS", 534: "ERROR_ARITHMETIC_OVERFLOW", 995: "ERROR_OPERATION_ABORTED",
    997: "ERROR_IO_PENDING", 1168: "ERROR_NOT_FOUND", 1223: "ERROR_CANCELLED", 1460: "ERROR_TIMEOUT",
}  # fmt: skip
_NTSTATUS = {
    0x00000000: "STATUS_SUCCESS", 0x00000103: "STATUS_PENDING", 0x80000005: "STATUS_BUFFER_OVERFLOW",
    0xC0000001: "STATUS_UNSUCCESSFUL", 0xC0000005: "STATUS_ACCESS_VIOLATION", 0xC0000008: "STATUS_INVALID_HANDLE",
    0xC000000D: "STATUS_INVALID_PARAMETER", 0xC000000F: "STATUS_NO_SUCH_FILE", 0xC0000017: "STATUS_NO_MEMORY",
    0xC0000022: "STATUS_ACCESS_DENIED", 0xC0000023: "STATUS_BUFFER_TOO_SMALL", 0xC0000034: "STATUS_OBJECT_NAME_NOT_FOUND",
    0xC0000035: "STATUS_OBJECT_NAME_COLLISION", 0xC000003A: "STATUS_OBJECT_PATH_NOT_FOUND",
    0xC0000043: "STATUS_SHARING_VIOLATION", 0xC00000BB: "STATUS_NOT_SUPPORTED", 0xC0000120: "STATUS_CANCELLED",
    0xC0000225: "STATUS_NOT_FOUND",
}  # fmt: skip
_HRESULTS = {
    0x00000000: "S_OK", 0x00000001: "S_FALSE", 0x80004001: "E_NOTIMPL", 0x80004002: "E_NOINTERFACE",
    0x80004003: "E_POINTER", 0x80004004: "E_ABORT", 0x80004005: "E_FAIL", 0x8000FFFF: "E_UNEXPECTED",
    0x80070005: "E_ACCESSDENIED", 0x80070006: "E_HANDLE", 0x8007000E: "E_OUTOFMEMORY", 0x80070057: "E_INVALIDARG",
}  # fmt: skip


def error_name(out_type: OutType | int, code: int) -> str | None:
    """The symbolic name of a Win32 error, NTSTATUS or HRESULT code, if it is a common one."""
    code &= 0xFFFFFFFF
    if out_type == OutType.WIN32ERROR:
        return _WIN32_ERRORS.get(code)
    if out_type == OutType.NTSTATUS:
        return _NTSTATUS.get(code)
    if out_type == OutType.HRESULT:
        name = _HRESULTS.get(code)
        if name is None and code & 0xFFFF0000 == 0x80070000 and code & 0xFFFF in _WIN32_ERRORS:
            name = f"HRESULT_FROM_WIN32({_WIN32_ERRORS[code & 0xFFFF]})"
        return name
    return None


def _unsigned(value: int, prop: PropertyInfo | None) -> int:
    if value >= 0:
        return value
    width = _INT_WIDTH.get(prop.in_type, 8) if prop is not None else 8
    return value & ((1 << (8 * width)) - 1)


def _format_float(value: float, prop: PropertyInfo | None) -> str:
    if prop is not None and prop.in_type == InType.FLOAT and value == value and abs(value) != float("inf"):
        # Shortest text that reads back as the same 32-bit float.
        single = struct.pack("<f", value)
        for digits in range(6, 10):
            text = f"{value:.{digits}g}"
            if struct.pack("<f", float(text)) == single:
                return text
    return repr(value)


def _format_datetime(value: datetime) -> str:
    if value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return value.isoformat(timespec="microseconds")


def _format_socket_address(raw: bytes) -> str | None:
    if len(raw) >= 8 and int.from_bytes(raw[0:2], "little") == _AF_INET:
        return f"{ipaddress.IPv4Address(raw[4:8])}:{int.from_bytes(raw[2:4], 'big')}"
    if len(raw) >= 24 and int.from_bytes(raw[0:2], "little") == _AF_INET6:
        address = str(ipaddress.IPv6Address(raw[8:24]))
        scope = int.from_bytes(raw[24:28], "little") if len(raw) >= 28 else 0
        if scope:
            address += f"%{scope}"
        return f"[{address}]:{int.from_bytes(raw[2:4], 'big')}"
    return None


def _format_map(value: int, event_map: EventMap) -> str:
    if event_map.kind == "value":
        found = event_map.lookup(value)
        return found if found is not None else str(value)
    names, unnamed = event_map.bit_names(value)
    if unnamed:
        names.append(f"0x{unnamed:X}")
    return " | ".join(names) if names else str(value)


def _format_int(value: int, prop: PropertyInfo | None) -> str:
    out = prop.out_type if prop is not None else None
    in_type = prop.in_type if prop is not None else None
    if out == OutType.STRING and 0 <= value <= 0x10FFFF:
        return chr(value)
    if out in (OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HRESULT):
        code = _unsigned(value, prop)
        name = error_name(out, code)
        return f"0x{code:X} ({name})" if name else f"0x{code:X}"
    if out in _HEX_OUT or (out in (None, OutType.NULL) and in_type in _HEX_IN):
        return f"0x{_unsigned(value, prop):X}"
    return str(value)


def int_as_str(prop: PropertyInfo | None, maps: Mapping[str, EventMap] | None = None) -> bool:
    """Whether ``format_value`` gives an ``int`` (not a bool) of this property as ``str(value)``:
    no map, out-type or hexadecimal in-type changes its text."""
    if prop is None:
        return True
    if prop.map_name and maps and prop.map_name in maps:
        return False
    out = prop.out_type
    if out in (OutType.STRING, OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HRESULT) or out in _HEX_OUT:
        return False
    return not (out in (None, OutType.NULL) and prop.in_type in _HEX_IN)


def format_value(value: Any, prop: PropertyInfo | None = None, maps: Mapping[str, EventMap] | None = None) -> str:
    """One decoded value (scalar, list or struct dict) as text; ``prop`` supplies out-type and map."""
    if value is None:
        return ""
    if isinstance(value, list):
        if prop is not None and prop.out_type == OutType.STRING and all(isinstance(item, int) for item in value):
            return "".join(chr(item) for item in value if 0 <= item <= 0x10FFFF).split("\0", 1)[0]
        return "[" + ", ".join(format_value(item, prop, maps) for item in value) + "]"
    if isinstance(value, dict):
        members = {member.name: member for member in (prop.members or ())} if prop is not None else {}
        return "{" + ", ".join(f"{name}={format_value(item, members.get(name), maps)}" for name, item in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if prop is not None and prop.map_name and maps and prop.map_name in maps:
            return _format_map(value, maps[prop.map_name])
        return _format_int(value, prop)
    if isinstance(value, float):
        return _format_float(value, prop)
    if isinstance(value, uuid.UUID):
        return "{" + str(value).upper() + "}"
    if isinstance(value, datetime):
        return _format_datetime(value)
    if isinstance(value, (bytes, bytearray)):
        if prop is not None and prop.out_type == OutType.SOCKETADDRESS:
            text = _format_socket_address(bytes(value))
            if text is not None:
                return text
        return "0x" + bytes(value).hex().upper()
    return str(value)


def format_property(decoded: Any, name: str) -> str:
    """The text of one property of a ``DecodedEvent`` (empty if it did not decode)."""
    schema: Schema = decoded.schema
    prop = schema.property_named(name)
    value = decoded.get(name)
    return format_value(value, prop, schema.maps)


def format_properties(decoded: Any) -> dict[str, str]:
    """Every decoded property of a ``DecodedEvent`` as text, in schema order."""
    schema: Schema = decoded.schema
    return {name: format_value(value, schema.property_named(name), schema.maps) for name, value in decoded.items()}


_INSERT = re.compile(r"%(?:(%)(\d{1,2})?|([1-9]\d?)(?:!([^!]*)!)?|(.)|$)", re.DOTALL)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": " ", " ": " ", ".": ".", "!": "!", "%": "%"}
_PRINTF = re.compile(r"^([-+ #0]*)(\d*)(?:\.(\d+))?(?:hh|h|ll|l|I64|I32|I|L|z|j|t|w)?([diouxXcsSeEfgGp])$")


def _printf(spec: str, value: Any, text: str) -> str:
    """Apply a FormatMessage ``!spec!`` to ``value``; fall back to ``text`` when it does not fit."""
    match = _PRINTF.match(spec)
    if match is None:
        return text
    flags, width, precision, conversion = match.groups()
    if width and (len(width) > 6 or int(width) > MAX_INSERT_WIDTH):
        width = str(MAX_INSERT_WIDTH)
    if precision and (len(precision) > 6 or int(precision) > MAX_INSERT_WIDTH):
        precision = str(MAX_INSERT_WIDTH)
    if conversion in "sS":
        return f"%{flags}{width}s" % text
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return text
    if conversion == "u":
        conversion = "d"
        value = _unsigned(int(value), None) if isinstance(value, int) else value
    if conversion in "xXop" and isinstance(value, int):
        value = _unsigned(value, None) if value < 0 else value
        conversion = "X" if conversion == "p" else conversion
    python_spec = f"%{flags}{width}" + (f".{precision}" if precision else "") + conversion
    try:
        formatted: str = python_spec % value
        return formatted
    except (TypeError, ValueError, OverflowError):
        return text


def format_message(message: str, values: Sequence[Any], parameters: Mapping[int, str] | None = None) -> str:
    """Fill a message string's inserts as FormatMessage does.

    ``%1``..``%99`` take ``values[0]``..; ``%1!x!`` applies the printf spec to the raw value;
    ``%n`` newline, ``%t`` tab, ``%r`` CR, ``%b`` / ``%space`` space, ``%.`` / ``%!`` / ``%%``
    literal, ``%0`` ends the text; ``%%N`` is parameter string N when ``parameters`` has it.
    Values that are not strings are rendered with ``format_value``; an insert with no value
    stays as written.
    """
    return _fill(message, values, lambda index: _as_text(values[index]), parameters)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else format_value(value)


class _Insert(NamedTuple):
    number: int  # 1-based
    spec: str | None
    written: str  # the insert as written, kept when there is no value for it


class _Parameter(NamedTuple):
    number: int | None
    written: str


@lru_cache(maxsize=4096)
def _template(message: str) -> tuple[str | _Insert | _Parameter, ...]:
    """A message split once into literal text, inserts and parameter references (up to ``%0``)."""
    pieces: list[str | _Insert | _Parameter] = []
    position = 0
    for match in _INSERT.finditer(message):
        pieces.append(message[position : match.start()])
        position = match.end()
        percent, parameter, index, spec, escape = match.groups()
        if percent:
            pieces.append(_Parameter(int(parameter) if parameter else None, "%" + (parameter or "")))
        elif index:
            pieces.append(_Insert(int(index), spec, match.group(0)))
        elif escape == "0":
            return tuple(piece for piece in pieces if piece != "")
        elif escape is not None:
            pieces.append(_ESCAPES.get(escape, escape))
        else:
            pieces.append("%")  # a lone % at the very end
    pieces.append(message[position:])
    return tuple(piece for piece in pieces if piece != "")


def _fill(message: str, values: Sequence[Any], text: Callable[[int], str], parameters: Mapping[int, str] | None) -> str:
    """``message`` with its inserts filled; ``text(i)`` renders ``values[i]`` (only those used,
    each once however often it is used); bounded as ``BoundedText`` bounds it."""
    out = BoundedText()
    formatted: dict[tuple[int, str | None], str] = {}
    for piece in _template(message):
        if type(piece) is str:
            out.add(piece)
        elif type(piece) is _Insert:
            if piece.number > len(values):
                out.add(piece.written)
            else:
                key = (piece.number, piece.spec)
                filled = formatted.get(key)
                if filled is None:
                    rendered = text(piece.number - 1)
                    filled = _printf(piece.spec, values[piece.number - 1], rendered) if piece.spec else rendered
                    formatted[key] = filled
                out.add(filled)
        else:
            number = piece.number  # type: ignore[union-attr]
            found = parameters.get(number) if parameters is not None and number is not None else None
            out.add(found if found is not None else piece.written)  # type: ignore[union-attr]
    return out.text()


def message_plan(message: str, count: int) -> tuple[str | int, ...] | None:
    """``message`` for events of ``count`` properties and no parameter table, as literal texts and
    the 0-based places of the properties its inserts take (``fill_plan``); ``None`` when an
    insert has a ``!spec!`` (formatted by ``format_event_message`` only)."""
    plan: list[str | int] = []
    for piece in _template(message):
        if type(piece) is str:
            plan.append(piece)
        elif type(piece) is _Insert:
            if piece.spec:
                return None
            plan.append(piece.written if piece.number > count else piece.number - 1)
        else:  # a parameter reference, with no parameter table: as written
            plan.append(piece.written)  # type: ignore[union-attr]
    return tuple(plan)


def fill_plan(plan: tuple[str | int, ...], texts: Sequence[str]) -> str | None:
    """What ``format_event_message`` gives for a message planned by ``message_plan`` whose
    properties' texts are ``texts`` (schema order), when it is no longer than a message is kept
    whole; ``None`` otherwise (``format_event_message`` bounds it)."""
    text = "".join([piece if type(piece) is str else texts[piece] for piece in plan])  # type: ignore[index]
    return text if len(text) <= MAX_MESSAGE_CHARS else None


def format_event_message(decoded: Any, parameters: Mapping[int, str] | None = None, texts: Sequence[str] | None = None) -> str | None:
    """The schema's message with this event's properties inserted (``None`` without a message);
    ``texts``: the properties already rendered (``format_value`` of each, in schema order), used
    rather than rendered again."""
    schema: Schema = decoded.schema
    if schema.message is None:
        return None
    values = decoded.values_in_order()
    if texts is not None and len(texts) == len(values):
        return _fill(schema.message, values, texts.__getitem__, parameters)
    properties, maps = schema.properties, schema.maps
    return _fill(schema.message, values, lambda index: format_value(values[index], properties[index], maps), parameters)


# Control characters as escapes, so that one event stays one line of text output.
_LINE_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {10: "\\n", 13: "\\r", 9: "\\t", 0x7F: "\\x7f"}


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters escaped (``\\n``, ``\\x1b``, ...)."""
    return text.translate(_LINE_ESCAPES)
