"""One integer event field of many payloads at once, as the per-record clauses would read it.

``field_reader(schema, pointer_size, name)`` plans the read of top-level property ``name``: the
schema's column plan (``openetw.tdh.columns.column_plan_upto``) for the properties up to it, so
that the compiled core (``_read.c columns()``) walks each payload to the field, strings before it
included, and gives the field as a column of the plan's type. Payloads the core leaves to the
Python decoder (a string it would read differently, a payload too short) are decoded by the
schema's ``CompiledSchema``, as the per-record path decodes them.

A reader is made for one pointer size: ``pointer_dependent`` says whether payloads of the other
size would read differently (the caller checks the records' header types then).

Only fields the per-record path reads as plain integers are planned: integer and hex integer
properties, pointers and sizes (booleans, ports, FILETIMEs and everything else are read record
by record). Where a value cannot be given exactly as the per-record path would give it (the
property does not decode in some payload, a 64-bit unsigned value read as signed), ``read``
raises ``ColumnsUnreadable``: the caller reads the events record by record instead.

Without the compiled core (the pure engine), a field after properties of fixed widths only is
gathered at its offset with numpy, and any other by the Python decoder payload by payload.

Pure: the caller hands in the bytes (a file's mapping) and the payloads' places.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.errors import OpenEtwError
from openetw.etl.intypes import InType
from openetw.tdh.columns import STEPS, column_plan_upto
from openetw.tdh.compiled import CompiledSchema

__all__ = ["ColumnsUnreadable", "FieldReader", "TextReader", "field_reader", "text_reader"]

_NATIVE = native_module("_read")
_POINTER_TYPES = frozenset({InType.POINTER, InType.SIZET})
_OBJECT = np.dtype(object)
_TEXT_STEPS = frozenset({STEPS["utf16z"], STEPS["ansiz"], STEPS["counted_utf16"]})
_INTEGER_STEPS = frozenset({STEPS["copy"], STEPS["widen"]})
_FIXED_WIDTH_STEPS = frozenset({STEPS["copy"], STEPS["widen"], STEPS["bool"], STEPS["be16"], STEPS["guid"], STEPS["filetime"]})
_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")}


class ColumnsUnreadable(OpenEtwError):
    """Some payload's field cannot be given column-wise exactly as record by record."""


@dataclass(frozen=True)
class FieldReader:
    """How to read property ``name`` of ``schema``'s payloads (at ``pointer_size``)."""

    schema: Any
    pointer_size: int
    name: str
    steps: bytes  # the column plan's steps up to and including the field
    dtype: np.dtype[Any]  # the column's values (little-endian)
    width: int  # bytes the field has in the payload
    offset: int | None  # where it starts when every property before it has a fixed width
    pointer_dependent: bool = False  # whether a pointer or size before it (or it) sets where or what it is

    def read(self, blob: Any, starts: np.ndarray, lengths: np.ndarray, *, pure: bool = False) -> np.ndarray:
        """The field of the payloads ``blob[starts[i]:starts[i] + lengths[i]]`` in the plan's type
        (``pure``: without the compiled core, as on the pure engine)."""
        native = None if pure else _NATIVE
        starts, lengths = _places(blob, starts, lengths)
        if self.offset is not None:  # at one place in every payload: gathered (faster than the core's walk)
            values = self._gathered(blob, starts, lengths)
            fallback = np.flatnonzero(lengths < self.offset + self.width)
        elif native is not None:
            raw, bad = native.columns(blob, starts, lengths, self.steps)
            fallback = np.flatnonzero(np.frombuffer(bad, dtype=np.uint8))
            values = np.frombuffer(raw[-1], dtype=self.dtype)
            if len(fallback):
                values = values.copy()  # (the core's bytes are read-only)
        else:
            values = np.zeros(len(starts), dtype=self.dtype)
            fallback = np.arange(len(starts))
        if len(fallback):
            self._decode_rows(blob, starts, lengths, fallback, values)
        return values

    def _gathered(self, blob: Any, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The field at ``offset`` of each payload long enough to hold it (0 in the others)."""
        assert self.offset is not None
        data = np.frombuffer(blob, dtype=np.uint8) if not isinstance(blob, np.ndarray) else blob.view(np.uint8).reshape(-1)
        width = self.width
        places = starts + self.offset
        short = lengths < self.offset + width
        if short.any():
            places = np.where(short, 0, places)  # read anything in the bytes: replaced by the decoder's value
        if len(data) < width:
            return np.zeros(len(starts), dtype=self.dtype)
        # Every byte offset viewed as the start of a value (stride 1): one gather reads them.
        starting = np.ndarray(shape=(len(data) - width + 1,), dtype=f"<{'u' if self.dtype.kind == 'u' else 'i'}{width}", buffer=data,
                              strides=(data.strides[0],))  # fmt: skip
        values: np.ndarray = starting[places].astype(self.dtype, copy=False)  # (a fresh array: the gathered values)
        if short.any():
            values[short] = 0
        return values

    def _decode_rows(self, blob: Any, starts: np.ndarray, lengths: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        decoder = CompiledSchema(self.schema, self.pointer_size)
        view = memoryview(blob).cast("B")
        info = np.iinfo(self.dtype)
        for row in rows.tolist():
            start = int(starts[row])
            found, problems = decoder(bytes(view[start : start + int(lengths[row])]))
            value = found.get(self.name)
            if self.name in problems or type(value) is not int or not info.min <= value <= info.max:
                raise ColumnsUnreadable(f"args->{self.name}: a payload's value is not an integer the columns hold")
            values[row] = value


def _places(blob: Any, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` and ``lengths`` as int64; ``ColumnsUnreadable`` when a payload lies outside ``blob``."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if len(starts) and (int(starts.min()) < 0 or int(lengths.min()) < 0 or int((starts + lengths).max()) > len(memoryview(blob).cast("B"))):
        raise ColumnsUnreadable("an event's payload lies outside its file (the file changed since it was indexed?)")
    return starts, lengths


_readers: dict[tuple[int, int, str], tuple[Any, FieldReader | None]] = {}


def field_reader(schema: Any, pointer_size: int, name: str) -> FieldReader | None:
    """The reader of integer property ``name`` of ``schema`` (cached), or ``None`` when it is
    not one this module reads (see the module doc)."""
    key = (id(schema), pointer_size, name)
    found = _readers.get(key)
    if found is not None and found[0] is schema:
        return found[1]
    reader = None
    plan = column_plan_upto(schema, pointer_size, name)
    if plan is not None and plan.steps[-2] in _INTEGER_STEPS and plan.types[-1] in _DTYPES:
        offset: int | None = 0
        for k in range(len(plan.names) - 1):
            step, width = plan.steps[2 * k], plan.steps[2 * k + 1]
            if step not in _FIXED_WIDTH_STEPS or offset is None:
                offset = None
                break
            offset += width
        dependent = any(prop.in_type in _POINTER_TYPES for prop in schema.properties[: len(plan.names)])
        reader = FieldReader(schema, pointer_size, name, plan.steps, _DTYPES[plan.types[-1]], plan.steps[-1], offset, dependent)
    if len(_readers) >= 4096:
        _readers.clear()
    _readers[key] = (schema, reader)
    return reader


@dataclass(frozen=True)
class TextReader:
    """How to read string property ``name`` of ``schema``'s payloads (at ``pointer_size``): the
    text the per-record path gives (``""`` where the property decoded to nothing)."""

    schema: Any
    pointer_size: int
    name: str
    steps: bytes
    pointer_dependent: bool = False
    dtype: np.dtype[Any] = _OBJECT

    def read(self, blob: Any, starts: np.ndarray, lengths: np.ndarray, *, pure: bool = False) -> np.ndarray:
        """The text of each payload, as an array of ``str``."""
        starts, lengths = _places(blob, starts, lengths)
        out = np.empty(len(starts), dtype=object)
        native = None if pure else _NATIVE
        if native is not None:
            raw, bad = native.columns(blob, starts, lengths, self.steps)
            offsets, data = raw[-1]
            bounds = np.frombuffer(offsets, dtype="<i4").tolist()
            if data.isascii():  # byte offsets are character offsets
                text = data.decode("ascii")
                out[:] = [text[a:b] for a, b in itertools.pairwise(bounds)]
            else:
                out[:] = [data[a:b].decode("utf-8") for a, b in itertools.pairwise(bounds)]
            fallback = np.flatnonzero(np.frombuffer(bad, dtype=np.uint8))
        else:
            fallback = np.arange(len(starts))
        if len(fallback):
            decoder = CompiledSchema(self.schema, self.pointer_size)
            view = memoryview(blob).cast("B")
            for row in fallback.tolist():
                start = int(starts[row])
                found, problems = decoder(bytes(view[start : start + int(lengths[row])]))
                value = found.get(self.name)
                if self.name in problems or not (value is None or isinstance(value, str)):
                    raise ColumnsUnreadable(f"args->{self.name}: a payload's value is not text the columns hold")
                out[row] = "" if value is None else value
        return out


def text_reader(schema: Any, pointer_size: int, name: str) -> TextReader | None:
    """The reader of string property ``name`` (UTF-16 or ANSI text, NUL-terminated or counted)
    of ``schema``, or ``None``."""
    plan = column_plan_upto(schema, pointer_size, name)
    if plan is None or plan.steps[-2] not in _TEXT_STEPS:
        return None
    dependent = any(prop.in_type in _POINTER_TYPES for prop in schema.properties[: len(plan.names)])
    return TextReader(schema, pointer_size, name, plan.steps, dependent)
