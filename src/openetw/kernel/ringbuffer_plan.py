"""What the compiled page decoder (``openetw._native._tracefs``) is given of an
:class:`~openetw.kernel.event_decoder.EventDecoder` and a
:class:`~openetw.kernel.ringbuffer_batch.FixedLayouts` — pure.

:func:`decoder_plan` lists, per event type, how the C decodes its payload: each field the pure
``_CompiledFormat`` would give, in the same order (integers, byte areas, char strings, integer
arrays, ``__data_loc``/``__rel_loc`` fields and the dynamic tail), or ``None`` for a format the
C leaves to the pure ``decode_at`` event by event (overlapping fields). :func:`fixed_plan` is the
column-wise events' table. Both are built once per decoder and layouts, then cached on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openetw.kernel.tracefs_format import (
    BYTES,
    DATA_LOC,
    DYNAMIC_TAIL,
    INT_ARRAY,
    INTEGER,
    REL_LOC,
    STRING,
    FieldFormat,
)

if TYPE_CHECKING:
    from openetw.kernel.event_decoder import EventDecoder, _CompiledFormat
    from openetw.kernel.ringbuffer_batch import FixedLayouts

__all__ = ["OPS", "decoder_plan", "fixed_plan", "page_params"]

# The C's number of each field kind: gen_tracefs.py renders the same table into its header.
OPS = {INTEGER: 0, BYTES: 1, STRING: 2, INT_ARRAY: 3, DATA_LOC: 4, REL_LOC: 5, DYNAMIC_TAIL: 6}

Op = tuple[int, str, int, int, bool, int]


def _op(f: FieldFormat) -> Op | None:
    kind = f.kind
    if kind == INTEGER:
        return (OPS[kind], f.name, f.offset, f.size, f.signed, 0) if f.struct_code else None
    if kind == INT_ARRAY:
        count = f.array_length or 0
        return (OPS[kind], f.name, f.offset, f.element_size, f.signed, count) if count > 0 and f.struct_code else None
    if kind in (DATA_LOC, REL_LOC, DYNAMIC_TAIL):
        return (OPS[kind], f.name, f.offset, f.size, f.text, 0)
    if kind in (STRING, BYTES):
        return (OPS[kind], f.name, f.offset, f.size, False, 0)
    return None


def _ops(compiled: _CompiledFormat) -> tuple[Op, ...] | None:
    """The fields of ``compiled`` in the order its dict gets them, or ``None`` (left to Python)."""
    by_name = compiled.format.by_name
    ops: list[Op] = []
    for name in compiled.names:
        f = by_name.get(name)
        op = None if f is None or f.kind == DYNAMIC_TAIL else _op(f)
        if op is None:
            return None
        ops.append(op)
    for index, f in compiled.fixups:
        if index >= 0:
            continue
        if f.kind != DYNAMIC_TAIL:  # an overlapping field: the pure decoder's own business
            return None
        op = _op(f)
        if op is None:
            return None
        ops.append(op)
    if len({op[1] for op in ops}) != len(ops):
        return None
    return tuple(ops)


def decoder_plan(decoder: EventDecoder) -> list[Any]:
    """Per event type (list index): ``None`` or ``(name, min_payload, ops or None, decode_at)``."""
    plan: list[Any] | None = getattr(decoder, "_native_plan", None)
    if plan is None:
        compiled = decoder._compiled
        plan = [None] * (max(compiled, default=-1) + 1)
        for event_type, c in compiled.items():
            plan[event_type] = (c.name, c.min_payload, _ops(c), c.decode_at)
        decoder._native_plan = plan
    return plan


def fixed_plan(fixed: FixedLayouts | None) -> tuple[bytes, bytes, tuple[tuple[tuple[int, int, int, bool], ...], ...], int] | None:
    """``(table, min_payloads, fields per kind, column count)``, or ``None`` without fixed events."""
    if not fixed:
        return None
    assert fixed is not None
    plan: Any = getattr(fixed, "_native_plan", None)
    if plan is None:
        column = {name: index for index, name in enumerate(fixed.field_names)}
        fields = tuple(
            tuple((column[name], offset, size, signed) for name, offset, size, signed in kind.fields) for kind in fixed.kinds
        )
        plan = (fixed._table.astype("<i8").tobytes(), fixed._min_payload.astype("<i8").tobytes(), fields, len(column))
        fixed._native_plan = plan
    return plan  # type: ignore[no-any-return]


def page_params(parser: Any, decoder: EventDecoder) -> tuple[int, ...]:
    """The page and event header numbers the C walks pages with (see ``_tracefs.c``)."""
    hp, he = parser.header_page, parser.header_event
    reader = decoder._type_reader
    type_offset, type_size = (0, 0) if reader is None else (reader[1], reader[0].size)
    return (
        hp.data_offset, hp.timestamp_offset, hp.commit_offset, 8 if hp.commit_size == 8 else 4, parser._delta_bits,
        parser._type_mask, he.data_max_type_len, he.padding, he.time_extend, he.time_stamp, type_offset, type_size,
    )  # fmt: skip
