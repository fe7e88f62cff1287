"""Column-wise decoding: a batch of same-schema payloads read into numpy columns at once.

A schema has a *fixed layout* when every property is a scalar of a fixed size whose decoded
value is a number or a boolean: integers (their width and sign; an out-type of BOOLEAN makes
them booleans, PORT makes a 16-bit one big-endian), pointers and SIZE_T at the producer's
width, FLOAT, DOUBLE and BOOLEAN. Every property then sits at the same offset in every
payload, so a batch of payloads at least the layout's size is one ``numpy`` structured array
(``frombuffer`` over the payloads joined, each cut to that size), and each column is a field
of it, handed to Arrow without a Python object per value. This gives exactly what the schema's
compiled reader gives payload by payload (bytes past the layout are ignored by both); batches
with a shorter payload, and schemas of any other layout, are decoded payload by payload.

A fixed layout may end in NUL-terminated UTF-16 strings (an image's file name): the numbers
are read as above and the strings payload by payload after them, as the compiled reader reads
them (a string without its NUL runs to the end of the payload; a batch where one would start at
the very end is decoded payload by payload, which reports it).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.compiled import CompiledSchema
from openetw.tdh.schema import PropertyInfo, Schema

__all__ = ["FixedLayout", "fixed_layout"]

_INTEGERS: dict[int, str] = {
    InType.INT8: "i1", InType.UINT8: "u1", InType.INT16: "i2", InType.UINT16: "u2", InType.INT32: "i4",
    InType.UINT32: "u4", InType.INT64: "i8", InType.UINT64: "u8", InType.HEXINT32: "u4", InType.HEXINT64: "u8",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    dtype: str  # numpy type code with its byte order ("<u4", ">u2", ...)
    boolean: bool  # the decoded value is ``value != 0``


def _field(prop: PropertyInfo, pointer_size: int) -> _Field | None:
    if (
        prop.members is not None or prop.custom_schema is not None or prop.problem is not None or prop.optional
        or prop.count is not None or prop.count_in_data
    ):  # fmt: skip
        return None
    in_type, out = prop.in_type, prop.out_type
    code = _INTEGERS.get(in_type)
    if code is not None:
        if out == OutType.BOOLEAN:
            return _Field(prop.name, "<" + code, True)
        if out == OutType.PORT and code[1] == "2":
            return _Field(prop.name, ">u2", False)
        if out == OutType.IPV4 and code[1] == "4":
            return None  # an address: text
        return _Field(prop.name, "<" + code, False)
    if in_type in (InType.POINTER, InType.SIZET):
        return _Field(prop.name, "<u8" if pointer_size == 8 else "<u4", False)
    if in_type == InType.FLOAT:
        return _Field(prop.name, "<f4", False)
    if in_type == InType.DOUBLE:
        return _Field(prop.name, "<f8", False)
    if in_type == InType.BOOLEAN:
        return _Field(prop.name, "<u4", True)
    return None


class FixedLayout:
    """How to read payloads of one schema (at one pointer size) column-wise."""

    __slots__ = ("fields", "strings", "dtype", "size")

    def __init__(self, fields: Sequence[_Field], strings: Sequence[str] = ()) -> None:
        self.fields = tuple(fields)
        self.strings = tuple(strings)  # names of the trailing NUL-terminated UTF-16 strings
        self.dtype = np.dtype({
            "names": [f"f{index}" for index in range(len(fields))],
            "formats": [item.dtype for item in fields],
        })  # packed: each field right after the previous one, as the payload lays them out
        self.size = self.dtype.itemsize

    def read(self, payloads: Sequence[bytes]) -> dict[str, Any] | None:
        """Each property's values over ``payloads`` (numbers as numpy arrays, strings as lists), or
        ``None`` if a payload is too short for the layout."""
        size = self.size
        if not payloads:
            return {item.name: np.zeros(0, dtype=item.dtype) for item in self.fields} | {name: [] for name in self.strings}
        lengths = set(map(len, payloads))
        if min(lengths) < size:
            return None
        columns: dict[str, Any] = {}
        if self.strings:
            texts = _strings(payloads, size, len(self.strings))
            if texts is None:
                return None
            columns.update(zip(self.strings, texts, strict=True))
        if size == 0:
            return columns
        joined = b"".join(payloads) if lengths == {size} else b"".join(data[:size] for data in payloads)
        rows = np.frombuffer(joined, dtype=self.dtype)
        for index, item in enumerate(self.fields):
            column = rows[f"f{index}"]
            columns[item.name] = column != 0 if item.boolean else column
        return columns

    @staticmethod
    def arrow(column: np.ndarray, arrow_type: Any, pa: Any) -> Any:
        """``column`` as an Arrow array of ``arrow_type`` (pointers widen to 64 bits, byte order made native)."""
        return pa.array(np.ascontiguousarray(column, dtype=arrow_type.to_pandas_dtype()), type=arrow_type)


def _strings(payloads: Sequence[bytes], start: int, count: int) -> list[list[str]] | None:
    """``count`` NUL-terminated UTF-16 strings from offset ``start`` of every payload."""
    decode = codecs.utf_16_le_decode
    columns: list[list[str]] = [[] for _ in range(count)]
    appends = [column.append for column in columns]
    for data in payloads:
        if type(data) is not bytes:
            data = bytes(data)  # a memoryview or bytearray: find as on bytes
        pos, total = start, len(data)
        for append in appends:
            end = data.find(b"\0\0", pos)
            while end >= 0 and (end - pos) & 1:
                end = data.find(b"\0\0", end + 1)
            if end >= 0:
                append(decode(data[pos:end], "replace", True)[0])
                pos = end + 2
            elif pos < total:
                append(decode(data[pos : total - ((total - pos) & 1)], "replace", True)[0])
                pos = total
            else:
                return None
    return columns


def _string_tail(props: Sequence[PropertyInfo]) -> bool:
    """Whether ``props`` are all NUL-terminated UTF-16 strings (scalars, no length)."""
    return all(
        prop.in_type == InType.UNICODESTRING and prop.length is None and prop.count is None and not prop.count_in_data
        and not prop.optional and prop.members is None and prop.custom_schema is None and prop.problem is None
        for prop in props
    )  # fmt: skip


_layouts: dict[tuple[int, int], tuple[Schema, FixedLayout | None]] = {}


def fixed_layout(decoder: Any) -> FixedLayout | None:
    """The fixed layout of a ``CompiledSchema``'s schema at its pointer size, or ``None``.

    Only schemas with a compiled reader qualify (their values are the reader's); names must be
    unique, as a layout's columns are named by property.
    """
    if not isinstance(decoder, CompiledSchema) or not decoder.fast:
        return None
    schema = decoder.schema
    key = (id(schema), decoder.pointer_size)
    found = _layouts.get(key)
    if found is not None and found[0] is schema:
        return found[1]
    layout: FixedLayout | None = None
    properties = schema.properties
    fields = [_field(prop, decoder.pointer_size) for prop in properties]
    prefix = next((index for index, item in enumerate(fields) if item is None), len(fields))
    names = [prop.name for prop in properties]
    if _string_tail(properties[prefix:]) and len(set(names)) == len(names):
        layout = FixedLayout(fields[:prefix], names[prefix:])  # type: ignore[arg-type]
    if len(_layouts) >= 4096:
        _layouts.clear()
    _layouts[key] = (schema, layout)
    return layout
