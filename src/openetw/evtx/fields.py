"""EventData fields as the compiled walk reads them: (type, chunk offset, size) in, values out.

A field is one ``<Data>`` (or other) element of a record's ``EventData``: its value is the one
substitution value, literal text or nothing the element holds. ``field_value`` gives what
``record.properties()`` gives for it (``XmlNode.value``: the typed value, its bytes when they do
not fit the type, ``None`` when there is none), ``field_text`` what ``text_properties()`` gives
(``XmlNode.text``: the value as the XML shows it). ``column_values`` decodes one field of many
rows at a time, with the commonest fixed-size types unpacked without a value object.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from openetw.evtx import values as V
from openetw.evtx.render import value_text_lenient

__all__ = ["FIELD_ABSENT", "FIELD_LITERAL", "column_values", "field_text", "field_value"]

FIELD_ABSENT = 0xFF
"""The element holds no value (``None``; text ``""``)."""
FIELD_LITERAL = 0xFE
"""The element holds literal text (UTF-16 in the chunk, taken as it is)."""

# Integer types whose bytes fit their size: the value is the number (bool for BOOL).
_INTS: dict[tuple[int, int], Callable[..., tuple[Any, ...]]] = {
    (value_type, struct.calcsize("<" + code)): struct.Struct("<" + code).unpack_from
    for value_type, code in (
        (V.INT8, "b"), (V.UINT8, "B"), (V.INT16, "h"), (V.UINT16, "H"), (V.INT32, "i"), (V.UINT32, "I"),
        (V.INT64, "q"), (V.UINT64, "Q"), (V.HEX_INT32, "I"), (V.HEX_INT64, "Q"),
    )
}  # fmt: skip


def field_value(value_type: int, data: Any, offset: int, size: int) -> Any:
    """The field as ``XmlNode.value`` gives it."""
    if value_type == FIELD_ABSENT:
        return None
    raw = bytes(data[offset : offset + size])
    if value_type == FIELD_LITERAL:
        return raw.decode("utf-16-le", "replace")
    try:
        return V.python_value(value_type, raw)
    except V.ValueError_:
        return raw


def field_text(value_type: int, data: Any, offset: int, size: int) -> str:
    """The field as ``XmlNode.text`` gives it."""
    if value_type == FIELD_ABSENT:
        return ""
    raw = bytes(data[offset : offset + size])
    if value_type == FIELD_LITERAL:
        return raw.decode("utf-16-le", "replace")
    return value_text_lenient(value_type, raw)


def column_values(data: Any, fields: Sequence[int], at: Sequence[int], *, text: bool = False) -> list[Any]:
    """One field of many rows: ``at`` holds each row's field index into ``fields`` (u32 type,
    offset, size per field)."""
    if text:
        return [field_text(fields[3 * k], data, fields[3 * k + 1], fields[3 * k + 2]) for k in at]
    out: list[Any] = []
    append = out.append
    for k in at:
        value_type, offset, size = fields[3 * k], fields[3 * k + 1], fields[3 * k + 2]
        unpack = _INTS.get((value_type, size))
        if unpack is not None:
            append(unpack(data, offset)[0])
        elif value_type == V.STRING:
            append(data[offset : offset + size].decode("utf-16-le", "replace").rstrip("\x00"))
        else:
            append(field_value(value_type, data, offset, size))
    return out
