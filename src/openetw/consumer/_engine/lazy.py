"""Records whose header is unpacked on first use.

A consumer that filters on the index and hands records to callbacks often reads one property of
the payload and no header field at all; unpacking a 20-field header per record is then the
largest cost of delivering it. ``LAZY_CLASSES[header_type]`` is, for every record class of
``openetw.etl.record``, a subclass that differs only in when the header tuple is made: the
first time a field is read, and in that the user data's offset (which the index found) is kept
in a slot named ``user_data_offset`` (a plain attribute read), not worked out again from the
extended items. Instances are made with ``new_lazy_record`` (no ``__init__`` call; one made
through ``__init__``, as ``with_context`` does, works its offset out); everything else —
fields, ``raw``, ``with_context``, ``repr`` — is the parent class's.

The header is a property over a slot of its own, and each header field reads it in one call:
no ``__getattr__`` fallback, which would send every attribute read of a record down the
interpreter's slow path.
"""

from __future__ import annotations

from typing import Any

from openetw.etl.record import RECORD_CLASSES, EventRecord, RecordContext, tuple_field_index

__all__ = ["LAZY_CLASSES", "lazy_record", "new_lazy_record", "reuse_lazy_record"]



def _lazy_subclass(parent: type[EventRecord]) -> type[EventRecord]:
    layout = parent.layout
    assert layout is not None
    unpack_from = layout.unpack_from

    def header(self: Any) -> tuple[Any, ...]:
        try:
            unpacked = self._header
        except AttributeError:  # the first read: unpack it
            unpacked = None
        if unpacked is None:  # (None: the record was taken over for another event)
            unpacked = self._header = unpack_from(self._raw, self._pos)
        return unpacked  # type: ignore[no-any-return]

    def set_header(self: Any, value: tuple[Any, ...]) -> None:
        self._header = value

    def field(index: int, doc: str | None) -> property:
        def getter(self: Any) -> Any:
            try:
                return self._header[index]
            except (AttributeError, TypeError):
                return header(self)[index]

        return property(getter, doc=doc)

    # The parent's header fields (``self._h[i]`` properties), read here without going through
    # ``_h``: one call per field read, as for an eager record.
    fields = {}
    for klass in reversed(parent.__mro__):
        for name, attr in vars(klass).items():
            index = tuple_field_index(attr)
            if index is not None:
                fields[name] = field(index, attr.__doc__)
            elif name in fields:
                del fields[name]  # overridden by something else further down

    parent_init, parent_user_data_offset = parent.__init__, parent.user_data_offset.fget  # type: ignore[attr-defined]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Made the eager way (``with_context``, ``with_timestamp``): the offset is worked out.
        parent_init(self, *args, **kwargs)
        self.user_data_offset = parent_user_data_offset(self)

    def user_data(self: Any) -> bytes:
        pos = self._pos
        return self._raw[pos + self.user_data_offset : pos + self._size]  # type: ignore[no-any-return]

    members = {
        "__slots__": ("user_data_offset", "_header"), "__init__": __init__, "_h": property(header, set_header),
        "__qualname__": parent.__qualname__, "__module__": parent.__module__,
        "user_data": property(user_data, doc=parent.user_data.__doc__), **fields,
    }
    return type(parent.__name__, (parent,), members)


LAZY_CLASSES: dict[int, type[EventRecord]] = {header_type: _lazy_subclass(cls) for header_type, cls in RECORD_CLASSES.items() if cls.layout is not None}

_new = object.__new__


def new_lazy_record(
    header_type: int, raw: bytes, pos: int, size: int, cpu: int, context: RecordContext, buffer_index: int, user_data_offset: int,
) -> EventRecord:  # fmt: skip
    """The record of ``header_type`` at ``raw[pos:]`` (its header read when first needed), its
    user data ``user_data_offset`` bytes into it (as the index found it)."""
    return lazy_record(LAZY_CLASSES[header_type], raw, pos, size, cpu, context, buffer_index, user_data_offset)


def lazy_record(
    cls: type[EventRecord], raw: bytes, pos: int, size: int, cpu: int, context: RecordContext, buffer_index: int, user_data_offset: int,
) -> EventRecord:  # fmt: skip
    """A record of the lazy class ``cls`` (one of ``LAZY_CLASSES``): ``new_lazy_record`` by class."""
    made: EventRecord = _new(cls)
    record: Any = made  # the lazy class's private slots, which EventRecord does not declare
    record._raw, record._pos, record._size, record.cpu, record._ctx, record.buffer_index = raw, pos, size, cpu, context, buffer_index
    record.user_data_offset = user_data_offset
    return made


def reuse_lazy_record(record: Any, pos: int, size: int, user_data_offset: int) -> None:
    """Point a lazy record nothing else holds at another record of the same buffer and kind
    (its header is unpacked again when read)."""
    record._pos = pos
    record._size = size
    record.user_data_offset = user_data_offset
    record._header = None
