"""TraceLogging types from Python values: the one inference, used by providers and the test kit.

bool -> BOOL32, int -> INT64 (UINT64 from 2**63), float -> DOUBLE, str -> UNICODESTRING (UTF-16:
every decoder, old TDH included, reads it without guessing a code page), bytes -> BINARY, UUID ->
GUID, datetime -> FILETIME, IPv4Address -> UINT32/IPV4, IPv6Address -> BINARY/IPV6, dict ->
struct, list or tuple -> variable-count array of the element type (bytes elements as counted
binary).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.intypes import InType, OutType
from openetw.etl.payload import InvalidFieldValue
from openetw.etl.schema import PropertyInfo
from openetw.etl.tracelogging import is_ip_address, tl_field

__all__ = ["field_for_value", "fields_of", "infer_fields"]


# -- TraceLogging types from Python values -----------------------------------------------------

_INT64_RANGE = range(-(1 << 63), 1 << 63)
_UINT64_LIMIT = 1 << 64


def _element_field(name: str, items: Sequence[Any]) -> PropertyInfo:
    """The element type of a list: one type for all items (ints with floats make doubles)."""
    if not items:
        return tl_field(name, InType.INT64, count="variable")
    if all(isinstance(item, Mapping) for item in items):
        first = field_for_value(name, items[0])
        if any(field_for_value(name, item) != first for item in items[1:]):
            raise InvalidFieldValue(name, "the structs of an array must all have the same members and types")
        return tl_field(name, InType.NULL, count="variable", members=first.members)
    kinds = {field_for_value(name, item) if not _real(item) or isinstance(item, bool) else None for item in items}
    if kinds == {None}:  # numbers, no bool
        if all(_integral(item) for item in items):
            low, high = min(int(item) for item in items), max(int(item) for item in items)
            if low < 0 and high >= 1 << 63:
                raise InvalidFieldValue(name, "an integer array mixes negative values and values from 2**63")
            in_type = InType.INT64 if high < 1 << 63 else InType.UINT64
            if high >= _UINT64_LIMIT:
                raise InvalidFieldValue(name, f"{high} does not fit 64 bits")
            return tl_field(name, in_type, count="variable")
        return tl_field(name, InType.DOUBLE, count="variable")
    if len(kinds) != 1 or None in kinds:
        raise InvalidFieldValue(name, "a list's items must all have one type")
    (kind,) = kinds
    assert kind is not None  # excluded just above
    if kind.is_array:
        raise InvalidFieldValue(name, "arrays of arrays cannot be written")
    # Arrays of BINARY do not decode; counted binary is the same bytes, one value per element.
    element: InType | int = InType.MANIFEST_COUNTEDBINARY if kind.in_type == InType.BINARY else kind.in_type
    return tl_field(name, element, kind.out_type, count="variable")


def field_for_value(name: str, value: Any) -> PropertyInfo:
    """The TraceLogging field a Python value is written as (see the module's documentation)."""
    if isinstance(value, bool):
        return tl_field(name, InType.BOOLEAN)
    if _integral(value):
        number = int(value)
        if number in _INT64_RANGE:
            return tl_field(name, InType.INT64)
        if 0 <= number < _UINT64_LIMIT:
            return tl_field(name, InType.UINT64)
        raise InvalidFieldValue(name, f"{number} does not fit 64 bits")
    if _real(value):
        return tl_field(name, InType.DOUBLE)
    if isinstance(value, str):
        return tl_field(name, InType.UNICODESTRING)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return tl_field(name, InType.BINARY)
    if isinstance(value, uuid.UUID):
        return tl_field(name, InType.GUID)
    if isinstance(value, datetime):
        return tl_field(name, InType.FILETIME)
    if is_ip_address(value, "IPv4Address"):
        return tl_field(name, InType.UINT32, OutType.IPV4)
    if is_ip_address(value, "IPv6Address"):
        return tl_field(name, InType.BINARY, OutType.IPV6)
    if isinstance(value, Mapping):
        if not 1 <= len(value) <= 127 or not all(isinstance(key, str) for key in value):
            raise InvalidFieldValue(name, "a struct is a dict of 1 to 127 members named by strings")
        members = [field_for_value(key, item) for key, item in value.items()]
        return tl_field(name, InType.NULL, members=members)
    if isinstance(value, (list, tuple)):
        return _element_field(name, value)
    raise InvalidFieldValue(name, f"no TraceLogging type for a {type(value).__name__} value")


def infer_fields(**values: Any) -> tuple[PropertyInfo, ...]:
    """The TraceLogging fields of ``values``, in their order."""
    return fields_of(values)


def fields_of(values: Mapping[Any, Any]) -> tuple[PropertyInfo, ...]:
    """The TraceLogging fields of ``values`` (a mapping from field names, checked to be strings)."""
    if not all(isinstance(name, str) for name in values):
        raise InvalidArgument(f"field names are strings, not {[name for name in values if not isinstance(name, str)]!r}")
    return tuple(field_for_value(name, value) for name, value in values.items())


# Only int and float are numbers until someone imports ``numbers`` (Decimal, Fraction and numpy
# register theirs by importing it), so a writer never needs to load it.
def _integral(value: object) -> bool:
    module = sys.modules.get("numbers")
    return isinstance(value, int) or (module is not None and isinstance(value, module.Integral))


def _real(value: object) -> bool:
    module = sys.modules.get("numbers")
    return isinstance(value, (int, float)) or (module is not None and isinstance(value, module.Real))
