"""Records whose header is unpacked on first use.

A consumer that filters on the index and hands records to callbacks often reads one property of
the payload and no header field at all; unpacking a 20-field header per record is then the
largest cost of delivering it. ``LAZY_CLASSES[header_type]`` is, for every record class of
``openetw.etl.record``, a subclass that differs only in when the header tuple is made: the
first time a field is read, and in that the user data's offset (which the index found) is kept,
not worked out again from the extended items. Instances are made with ``new_lazy_record`` (no
``__init__`` call); everything else — fields, ``raw``, ``with_context``, ``repr`` — is the
parent class's.
"""

from __future__ import annotations

from typing import Any

from openetw.etl.record import RECORD_CLASSES, EventRecord, RecordContext

__all__ = ["LAZY_CLASSES", "new_lazy_record"]


def _lazy_subclass(parent: type[EventRecord]) -> type[EventRecord]:
    layout = parent.layout
    assert layout is not None
    unpack_from = layout.unpack_from

    def __getattr__(self: EventRecord, name: str) -> Any:
        # Only reached for attributes not found otherwise: the unset ``_h`` slot included.
        if name == "_h":
            header = unpack_from(self._raw, self._pos)
            self._h = header
            return header
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def user_data_offset(self: Any) -> int:
        return self._udo  # type: ignore[no-any-return]

    def user_data(self: Any) -> bytes:
        pos = self._pos
        return self._raw[pos + self._udo : pos + self._size]  # type: ignore[no-any-return]

    members = {
        "__slots__": ("_udo",), "__getattr__": __getattr__, "__qualname__": parent.__qualname__, "__module__": parent.__module__,
        "user_data_offset": property(user_data_offset, doc=parent.user_data_offset.__doc__),
        "user_data": property(user_data, doc=parent.user_data.__doc__),
    }  # fmt: skip
    return type(parent.__name__, (parent,), members)


LAZY_CLASSES: dict[int, type[EventRecord]] = {header_type: _lazy_subclass(cls) for header_type, cls in RECORD_CLASSES.items() if cls.layout is not None}

_new = object.__new__


def new_lazy_record(
    header_type: int, raw: bytes, pos: int, size: int, cpu: int, context: RecordContext, buffer_index: int, user_data_offset: int,
) -> EventRecord:  # fmt: skip
    """The record of ``header_type`` at ``raw[pos:]`` (its header read when first needed), its
    user data ``user_data_offset`` bytes into it (as the index found it)."""
    record: Any = _new(LAZY_CLASSES[header_type])
    record._raw, record._pos, record._size, record.cpu, record._ctx, record.buffer_index = raw, pos, size, cpu, context, buffer_index
    record._udo = user_data_offset
    return record  # type: ignore[no-any-return]
