"""Field columns: the payloads of one schema decoded together, one typed column per property.

A schema whose properties are all scalars of the common kinds gets a *column plan*, made once:
one step per property (two bytes: what to do, how many bytes it reads) that the compiled core
(``openetw._native._read.columns``) runs over a whole batch of payloads without a Python object
per value. The steps:

* integers of 1 to 8 bytes as they are (their Arrow type keeps width and sign), pointers and
  SIZE_T widened to 64 bits, FLOAT and DOUBLE, booleans (BOOLEAN, and integers whose out-type is
  BOOLEAN) as one byte, a UINT16 PORT byte-swapped;
* GUIDs as their lower-case text, FILETIMEs as microseconds since 1970 (the ``timestamp[us, UTC]``
  the table layout uses, ticks that name no date included);
* NUL-terminated UTF-16 and ANSI strings and counted UTF-16 strings as UTF-8 text (Arrow's
  offsets and data).

Where the plan's reading would differ from the compiled reader's (a short payload, a string that
would start at the very end, ANSI text that is not ASCII, UTF-16 with a lone surrogate, a counted
string of an odd byte count), the payload is marked and decoded by the schema's Python decoder
(``CompiledSchema``), whose values then take its rows: the columns are always what the per-event
decoder gives, errors included. Schemas with anything else (arrays, structs, optional
properties, addresses, SYSTEMTIME, fixed-length text, binary) have no plan and are decoded
payload by payload. On the pure engine (``OPENETW_PURE=1``) every payload is decoded by the
Python decoder.

Why Arrow's layout: columns are handed to Parquet and DuckDB as they are (``pyarrow`` arrays
over the same buffers, no copy), text needs offsets and data anyway, and nulls (a property that
did not decode) have a place. ``FieldColumns.arrow`` builds them; without ``pyarrow`` the raw
buffers and the fallback values are still there.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.errors import InvalidArgument, PropertyDecodeError
from openetw.etl.intypes import InType, OutType
from openetw.tdh.compiled import CompiledSchema
from openetw.tdh.decode import _ascii_compatible
from openetw.tdh.schema import PropertyInfo, Schema

__all__ = [
    "FILETIME_TO_UNIX_MICROS", "STEPS", "ColumnPlan", "FieldColumns", "column_plan", "column_plan_upto", "core_columns",
    "decode_columns",
    "filetime_micros", "merge_rows",
    "numeric_array", "plan_type",
]  # fmt: skip

STEPS = {
    "copy": 1,
    "widen": 2,
    "bool": 3,
    "be16": 4,
    "guid": 5,
    "filetime": 6,
    "utf16z": 7,
    "ansiz": 8,
    "counted_utf16": 9,
}
"""The step codes ``_read.c`` reads (a test holds the two together)."""

_NATIVE = native_module("_read")
_TEXT_STEPS = frozenset({STEPS["guid"], STEPS["utf16z"], STEPS["ansiz"], STEPS["counted_utf16"]})
FILETIME_TO_UNIX_MICROS = 11_644_473_600_000_000
"""Microseconds from 1601-01-01 to 1970-01-01 (a FILETIME column counts from 1970)."""
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMESTAMP = "timestamp[us, UTC]"
_UTF8_OUT_TYPES = frozenset({OutType.UTF8, OutType.XML, OutType.JSON})

_INTEGERS: dict[int, tuple[str, int]] = {
    InType.INT8: ("int8", 1), InType.UINT8: ("uint8", 1), InType.INT16: ("int16", 2), InType.UINT16: ("uint16", 2),
    InType.INT32: ("int32", 4), InType.UINT32: ("uint32", 4), InType.INT64: ("int64", 8), InType.UINT64: ("uint64", 8),
    InType.HEXINT32: ("uint32", 4), InType.HEXINT64: ("uint64", 8),
}  # fmt: skip
_COUNTED_UTF16 = frozenset({InType.MANIFEST_COUNTEDSTRING, InType.COUNTEDSTRING})


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """How the core reads one schema's payloads at one pointer size: per property its name, its
    column type (an Arrow type name) and its step."""

    schema: Schema
    pointer_size: int
    names: tuple[str, ...]
    types: tuple[str, ...]
    steps: bytes


def _step(prop: PropertyInfo, pointer_size: int, ansi_encoding: str) -> tuple[str, int, int] | None:
    """(column type, step, width) of one property, or ``None`` when the plan cannot read it."""
    if (
        prop.members is not None or prop.custom_schema is not None or prop.problem is not None or prop.optional
        or prop.count is not None or prop.count_in_data
    ):  # fmt: skip
        return None
    in_type, out = prop.in_type, prop.out_type
    integer = _INTEGERS.get(in_type)
    if integer is not None:
        name, width = integer
        if out == OutType.BOOLEAN:
            return "bool", STEPS["bool"], width
        if out == OutType.PORT and width == 2:
            return (
                ("uint16", STEPS["be16"], 2) if in_type == InType.UINT16 else None
            )  # a signed port would not fit its column
        if out == OutType.IPV4 and width == 4:
            return None  # an address: text
        return name, STEPS["copy"], width
    if in_type in (InType.POINTER, InType.SIZET):
        return ("uint64", STEPS["copy"], 8) if pointer_size == 8 else ("uint64", STEPS["widen"], 4)
    if in_type == InType.FLOAT:
        return "float32", STEPS["copy"], 4
    if in_type == InType.DOUBLE:
        return "float64", STEPS["copy"], 8
    if in_type == InType.BOOLEAN:
        return "bool", STEPS["bool"], 4
    if in_type == InType.GUID:
        return "string", STEPS["guid"], 16
    if in_type == InType.FILETIME:
        return "timestamp[us, UTC]", STEPS["filetime"], 8
    if prop.length is not None:
        return None
    if in_type == InType.UNICODESTRING:
        return "string", STEPS["utf16z"], 0
    if in_type == InType.ANSISTRING and out not in _UTF8_OUT_TYPES and _ascii_compatible(ansi_encoding):
        return "string", STEPS["ansiz"], 0
    if in_type in _COUNTED_UTF16:
        return "string", STEPS["counted_utf16"], 0
    return None


_plans: dict[tuple[int, int, str], tuple[Schema, ColumnPlan | None]] = {}


def column_plan(schema: Schema, pointer_size: int, ansi_encoding: str = "cp1252") -> ColumnPlan | None:
    """The column plan of ``schema`` for payloads of this pointer size (cached), or ``None``."""
    key = (id(schema), pointer_size, ansi_encoding)
    found = _plans.get(key)
    if found is not None and found[0] is schema:
        return found[1]
    plan: ColumnPlan | None = None
    names = [prop.name for prop in schema.properties]
    if len(set(names)) == len(names) and len(names) <= 512:
        steps = [_step(prop, pointer_size, ansi_encoding) for prop in schema.properties]
        if all(step is not None for step in steps):
            plan = ColumnPlan(
                schema, pointer_size, tuple(names), tuple(step[0] for step in steps if step is not None),
                bytes(code for step in steps if step is not None for code in step[1:]),
            )  # fmt: skip
    if len(_plans) >= 4096:
        _plans.clear()
    _plans[key] = (schema, plan)
    return plan


def column_plan_upto(schema: Schema, pointer_size: int, name: str, ansi_encoding: str = "cp1252") -> ColumnPlan | None:
    """The plan of ``schema``'s properties up to and including the top-level property ``name`` (what
    the core must walk to reach it; the properties after it may be of any kind), or ``None``
    when there is no such property or the plan cannot read one of those."""
    names = [prop.name for prop in schema.properties]
    if name not in names or names.count(name) != 1:
        return None
    properties = schema.properties[: names.index(name) + 1]
    steps = [_step(prop, pointer_size, ansi_encoding) for prop in properties]
    if any(step is None for step in steps):
        return None
    return ColumnPlan(
        schema, pointer_size, tuple(prop.name for prop in properties), tuple(step[0] for step in steps if step is not None),
        bytes(code for step in steps if step is not None for code in step[1:]),
    )  # fmt: skip


def filetime_micros(value: datetime | int) -> int:
    """A decoded FILETIME as microseconds since 1970 (a ``datetime``, or the ticks that are no date)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - _UNIX_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value // 10 - FILETIME_TO_UNIX_MICROS


class FieldColumns:
    """A batch of one schema's payloads as columns.

    ``names``/``types``: one per property. ``raw[k]``: the core's column ``k`` (bytes of fixed
    values, or ``(int32 offsets, UTF-8 data)``), ``None`` when nothing was decoded by the core.
    ``fallback``: the rows the Python decoder decoded (indices, ascending), with their ``values``
    and ``errors`` dicts as ``CompiledSchema`` gives them.
    """

    __slots__ = ("plan", "names", "types", "count", "raw", "fallback", "values", "errors")

    def __init__(
        self, plan: ColumnPlan | None, names: Sequence[str], types: Sequence[str | None], count: int,
        raw: list[Any] | None, fallback: np.ndarray, values: list[dict[str, Any]],
        errors: list[dict[str, PropertyDecodeError]],
    ) -> None:  # fmt: skip
        self.plan = plan
        self.names = tuple(names)
        self.types = tuple(types)
        self.count = count
        self.raw = raw
        self.fallback = fallback
        self.values = values
        self.errors = errors

    def __len__(self) -> int:
        return self.count

    @property
    def rows_with_errors(self) -> int:
        return sum(1 for problems in self.errors if problems)

    def core_arrays(self, pa: Any) -> list[Any] | None:
        """The core's columns as Arrow arrays over its buffers (no copy; rows in ``fallback`` hold
        placeholders), or ``None`` when the core decoded nothing."""
        if self.raw is None or self.plan is None:
            return None
        arrays = []
        n = self.count
        steps = self.plan.steps
        for k, (kind, raw) in enumerate(zip(self.plan.types, self.raw, strict=True)):
            if steps[2 * k] in _TEXT_STEPS:
                offsets, data = raw
                arrays.append(pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]))
            elif kind == "bool":
                bits = np.packbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
                arrays.append(pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)]))
            else:
                arrays.append(pa.Array.from_buffers(_arrow_type(kind, pa), n, [None, pa.py_buffer(raw)]))
        return arrays

    def column(self, name: str) -> list[Any]:
        """One column's values as Python objects, as the column stores them (``None``: did not
        decode; a FILETIME as microseconds since 1970, which any tick count fits)."""
        k = self.names.index(name)
        kind = self.types[k]
        if self.raw is None or kind is None:
            return [_python_value(kind, found.get(name)) for found in self.values]
        import pyarrow as pa  # type: ignore[import-untyped]  # (an optional dependency)

        array = self.arrow(pa)[k]
        return list((array.cast(pa.int64()) if kind == _TIMESTAMP else array).to_pylist())

    def arrow(self, pa: Any) -> list[Any]:
        """Every column as an Arrow array (the Python decoder's rows merged in; a property that did
        not decode is null). Only schemas with a plan have typed columns."""
        if self.plan is None:
            raise InvalidArgument("this schema has no column plan: its payloads' values are in .values")
        types = [_arrow_type(kind, pa) for kind in self.plan.types]
        by_python = [
            _array(pa, [_python_value(kind, found.get(name)) for found in self.values], kind, arrow)
            for name, kind, arrow in zip(self.names, self.plan.types, types, strict=True)
        ]  # fmt: skip
        core = self.core_arrays(pa)
        if core is None:
            return by_python
        if not len(self.fallback):
            return core
        return [merge_rows(pa, mine, theirs, self.fallback) for mine, theirs in zip(core, by_python, strict=True)]


def merge_rows(pa: Any, core: Any, python: Any, fallback: np.ndarray) -> Any:
    """``core`` with the rows ``fallback`` (ascending) taken from ``python`` (one value per such row)."""
    n = len(core)
    order = np.arange(n, dtype=np.int64)
    order[fallback] = n + np.arange(len(fallback), dtype=np.int64)
    return pa.concat_arrays([core, python.cast(core.type)]).take(numeric_array(pa, order, pa.int64()))


def numeric_array(pa: Any, values: np.ndarray, arrow: Any, valid: np.ndarray | None = None) -> Any:
    """``values`` (numbers of ``arrow``'s width) as an Arrow array over a copy of their bytes, null
    where ``valid`` is false (``pa.array`` over numpy would import pandas, half a second)."""
    data = np.ascontiguousarray(values, dtype=arrow.to_pandas_dtype() if not pa.types.is_timestamp(arrow) else np.int64)
    validity = (
        None if valid is None else pa.py_buffer(np.packbits(np.asarray(valid, dtype=np.uint8), bitorder="little"))
    )
    nulls = -1 if valid is None else int(len(valid) - np.count_nonzero(valid))
    return pa.Array.from_buffers(arrow, len(data), [validity, pa.py_buffer(data)], null_count=nulls)


def _array(pa: Any, values: list[Any], kind: str, arrow: Any) -> Any:
    if kind == _TIMESTAMP:
        return pa.array(values, type=pa.int64()).cast(arrow)
    return pa.array(values, type=arrow)


def core_columns() -> bool:
    """Whether the compiled core decodes planned schemas here (else every payload is decoded in Python)."""
    return _NATIVE is not None


def plan_type(kind: str, pa: Any) -> Any:
    """The Arrow type of a plan's column type name (``pa``: the ``pyarrow`` module)."""
    return _arrow_type(kind, pa)


def _arrow_type(kind: str, pa: Any) -> Any:
    if kind == _TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if kind == "string":
        return pa.string()
    if kind == "bool":
        return pa.bool_()
    return getattr(pa, kind)()


def _python_value(kind: str | None, value: Any) -> Any:
    """A decoded value as the column of ``kind`` stores it (a FILETIME: microseconds since 1970)."""
    if value is None or kind is None:
        return None
    if kind == _TIMESTAMP:
        return filetime_micros(value)
    if kind == "string":
        if isinstance(value, uuid.UUID):
            return str(value)
        return (
            value if type(value) is str else bytes(value).hex() if isinstance(value, (bytes, bytearray)) else str(value)
        )
    return value


def decode_columns(
    decoder: CompiledSchema, blob: bytes | bytearray | memoryview, starts: np.ndarray, lengths: np.ndarray
) -> FieldColumns:
    """The payloads ``blob[starts[i]:starts[i] + lengths[i]]`` of ``decoder``'s schema as columns."""
    schema, pointer_size = decoder.schema, decoder.pointer_size
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    n = len(starts)
    plan = column_plan(schema, pointer_size, decoder.ansi_encoding) if decoder.fast else None
    native = _NATIVE
    names = [prop.name for prop in schema.properties]
    if plan is None or native is None:
        fallback = np.arange(n, dtype=np.int64)
        raw = None
    else:
        raw, bad = native.columns(blob, starts, lengths, plan.steps)
        fallback = np.flatnonzero(np.frombuffer(bad, dtype=np.uint8))
    view = memoryview(blob)
    values: list[dict[str, Any]] = []
    errors: list[dict[str, PropertyDecodeError]] = []
    for row in fallback.tolist():
        start = int(starts[row])
        found, problems = decoder(bytes(view[start : start + int(lengths[row])]))
        values.append(found)
        errors.append(problems)
    types = plan.types if plan is not None else [None] * len(names)
    return FieldColumns(plan, plan.names if plan is not None else names, types, n, raw, fallback, values, errors)
