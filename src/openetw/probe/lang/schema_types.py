"""Event fields as D types: what ``args->Field`` is, from a decoding schema's properties."""

from __future__ import annotations

from typing import Any

from openetw.manifest.winmeta import InType
from openetw.probe.lang.types import STRING, IntType, Type

__all__ = ["fields_of_properties", "fields_of_values", "merge_fields"]

_INTS = {
    InType.INT8: IntType("int8_t", 1, True), InType.UINT8: IntType("uint8_t", 1, False),
    InType.INT16: IntType("int16_t", 2, True), InType.UINT16: IntType("uint16_t", 2, False),
    InType.INT32: IntType("int32_t", 4, True), InType.UINT32: IntType("uint32_t", 4, False),
    InType.INT64: IntType("int64_t", 8, True), InType.UINT64: IntType("uint64_t", 8, False),
    InType.HEXINT32: IntType("uint32_t", 4, False), InType.HEXINT64: IntType("uint64_t", 8, False),
    InType.BOOLEAN: IntType("int32_t", 4, True), InType.POINTER: IntType("uintptr_t", 8, False),
    InType.SIZET: IntType("size_t", 8, False), InType.FILETIME: IntType("int64_t", 8, True),
}  # fmt: skip
_INT64, _UINT64 = IntType("int64_t", 8, True), IntType("uint64_t", 8, False)
_INT64_MAX = (1 << 63) - 1


def fields_of_properties(properties: Any) -> dict[str, Any]:
    """name -> D type (integers by size and sign; strings, GUIDs, SIDs, binary and floats as
    strings); structs as nested dicts. Arrays are left out (not addressable as scalars)."""
    out: dict[str, Any] = {}
    for prop in properties:
        if prop.count is not None or prop.count_in_data:
            continue
        if prop.members is not None:
            out[prop.name] = fields_of_properties(prop.members)
            continue
        out[prop.name] = _INTS.get(prop.in_type, STRING)
    return out


def fields_of_values(values: dict[str, Any]) -> dict[str, Any]:
    """name -> D type from already decoded values (an Event Log record's ``EventData``): integers
    as 64-bit (unsigned past ``INT64_MAX``), nested dicts as structs, everything else as strings;
    lists and absent values (``None``: no type to give) are left out."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            out[name] = fields_of_values(value)
        elif isinstance(value, (list, tuple)):
            continue
        elif isinstance(value, int):
            out[name] = _UINT64 if value > _INT64_MAX else _INT64
        else:
            out[name] = STRING
    return out


def merge_fields(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Fields of two event kinds one clause may see: a field typed two ways becomes ``None``."""
    out = dict(a)
    for name, ty in b.items():
        if name not in out:
            out[name] = ty
        elif isinstance(out[name], dict) and isinstance(ty, dict):
            out[name] = merge_fields(out[name], ty)
        elif _kind(out[name]) != _kind(ty):
            out[name] = None
        elif isinstance(ty, IntType) and isinstance(out[name], IntType) and ty != out[name]:
            out[name] = IntType("int64_t", 8, True)
    return out


def _kind(ty: Type | dict[str, Any] | None) -> str:
    if isinstance(ty, dict):
        return "struct"
    if ty is None:
        return "conflict"
    return "int" if ty.is_int() else "string"
