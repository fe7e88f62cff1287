"""Predicates for event filters, in krabsetw's style: callables on ``(record, context)``.

``context`` is what callbacks receive (``TraceContext``): predicates on properties ask it for the
record's parser, so the payload is decoded only when a predicate needs a property, and at most
once per record. Header predicates (``id_is``, ``opcode_is``, ``version_is``,
``process_id_is``) and their combinations also work on whole index columns at once
(``Predicate.mask``), which lets an indexed file skip the records no filter can match without
building them.

Predicates combine with ``and_``/``or_``/``not_``, ``all_of``/``any_of``/``none_of`` or the
operators ``&``, ``|``, ``~``. Plain functions of ``(record, context)`` are accepted wherever a
predicate is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = [
    "Predicate",
    "all_of",
    "and_",
    "any_event",
    "any_of",
    "as_predicate",
    "id_is",
    "no_event",
    "none_of",
    "not_",
    "opcode_is",
    "or_",
    "process_id_is",
    "property_contains",
    "property_ends_with",
    "property_equals",
    "property_icontains",
    "property_iends_with",
    "property_iequals",
    "property_is",
    "property_istarts_with",
    "property_starts_with",
    "version_is",
]

_MISSING: Any = object()
_Mask = Callable[[np.ndarray], "np.ndarray | None"]


class Predicate:
    """A test on one record; ``mask`` tests index rows at once when the test needs no payload."""

    __slots__ = ("_test", "_mask", "description")

    def __init__(self, test: Callable[[Any, Any], bool], mask: _Mask | None = None, description: str = "predicate") -> None:
        self._test = test
        self._mask = mask
        self.description = description

    def __call__(self, record: Any, context: Any = None) -> bool:
        return bool(self._test(record, context))

    def mask(self, rows: np.ndarray) -> np.ndarray | None:
        """A boolean array over index rows (a structured array), or ``None`` when the
        predicate needs the decoded payload and can only be tested record by record."""
        return None if self._mask is None else self._mask(rows)

    def __and__(self, other: Any) -> Predicate:
        return and_(self, other)

    def __or__(self, other: Any) -> Predicate:
        return or_(self, other)

    def __invert__(self) -> Predicate:
        return not_(self)

    def __repr__(self) -> str:
        return f"<Predicate {self.description}>"


def as_predicate(value: Any) -> Predicate:
    """A ``Predicate`` as is; a callable of ``(record, context)`` wrapped (record by record only)."""
    if isinstance(value, Predicate):
        return value
    if not callable(value):
        raise TypeError(f"a predicate must be callable with (record, context), not {value!r}")
    return Predicate(value, None, getattr(value, "__name__", "callable"))


# -- constants ----------------------------------------------------------------------------------

any_event = Predicate(lambda record, context: True, lambda rows: np.ones(len(rows), dtype=bool), "any_event")
"""Accepts every event."""

no_event = Predicate(lambda record, context: False, lambda rows: np.zeros(len(rows), dtype=bool), "no_event")
"""Accepts no event."""


# -- header fields ------------------------------------------------------------------------------

def _field_is(attribute: str, column: str, value: int, name: str) -> Predicate:
    def test(record: Any, context: Any) -> bool:
        return getattr(record, attribute) == value  # type: ignore[no-any-return]

    def mask(rows: np.ndarray) -> np.ndarray:
        return rows[column] == value  # type: ignore[no-any-return]

    return Predicate(test, mask, f"{name}({value})")


def id_is(event_id: int) -> Predicate:
    """The event id (EVENT_DESCRIPTOR.Id) equals ``event_id``."""
    return _field_is("id", "id", int(event_id), "id_is")


def opcode_is(opcode: int) -> Predicate:
    """The opcode equals ``opcode`` (a classic event's type, a kernel event's hook type)."""
    return _field_is("opcode", "opcode", int(opcode), "opcode_is")


def version_is(version: int) -> Predicate:
    """The event version equals ``version``."""
    return _field_is("version", "version", int(version), "version_is")


def process_id_is(pid: int) -> Predicate:
    """The process id in the event header equals ``pid``."""
    return _field_is("pid", "pid", int(pid), "process_id_is")


# -- properties ---------------------------------------------------------------------------------

def _parsed(record: Any, context: Any, name: str) -> Any:
    if context is None:
        raise TypeError("property predicates need the trace context (callbacks get it as their second argument)")
    return context.parser_for(record).try_parse(name, _MISSING)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _on_text(name: str, value: str, compare: Callable[[str, str], bool], what: str) -> Predicate:
    def test(record: Any, context: Any) -> bool:
        parsed = _parsed(record, context, name)
        return parsed is not _MISSING and parsed is not None and compare(_text(parsed), value)

    return Predicate(test, None, f"{what}({name!r}, {value!r})")


def property_is(name: str, value: Any) -> Predicate:
    """The property decodes to ``value`` with the same type (``1`` does not match ``True``)."""

    def test(record: Any, context: Any) -> bool:
        parsed = _parsed(record, context, name)
        return parsed is not _MISSING and type(parsed) is type(value) and parsed == value

    return Predicate(test, None, f"property_is({name!r}, {value!r})")


def property_equals(name: str, value: Any) -> Predicate:
    """The property equals ``value``; a text ``value`` is compared with the value's text form."""
    if not isinstance(value, str):

        def test(record: Any, context: Any) -> bool:
            parsed = _parsed(record, context, name)
            return parsed is not _MISSING and parsed == value

        return Predicate(test, None, f"property_equals({name!r}, {value!r})")
    return _on_text(name, value, str.__eq__, "property_equals")


def property_iequals(name: str, value: str) -> Predicate:
    """The property's text equals ``value``, ignoring case."""
    folded = value.casefold()
    return _on_text(name, folded, lambda text, wanted: text.casefold() == wanted, "property_iequals")


def property_contains(name: str, value: str) -> Predicate:
    return _on_text(name, value, lambda text, wanted: wanted in text, "property_contains")


def property_icontains(name: str, value: str) -> Predicate:
    folded = value.casefold()
    return _on_text(name, folded, lambda text, wanted: wanted in text.casefold(), "property_icontains")


def property_starts_with(name: str, value: str) -> Predicate:
    return _on_text(name, value, str.startswith, "property_starts_with")


def property_istarts_with(name: str, value: str) -> Predicate:
    folded = value.casefold()
    return _on_text(name, folded, lambda text, wanted: text.casefold().startswith(wanted), "property_istarts_with")


def property_ends_with(name: str, value: str) -> Predicate:
    return _on_text(name, value, str.endswith, "property_ends_with")


def property_iends_with(name: str, value: str) -> Predicate:
    folded = value.casefold()
    return _on_text(name, folded, lambda text, wanted: text.casefold().endswith(wanted), "property_iends_with")


# -- combinators --------------------------------------------------------------------------------

def _combined_mask(parts: list[Predicate], combine: Callable[[np.ndarray, np.ndarray], np.ndarray], empty: bool) -> _Mask | None:
    if any(part._mask is None for part in parts):
        return None

    def mask(rows: np.ndarray) -> np.ndarray:
        result = np.full(len(rows), empty, dtype=bool)
        for part in parts:
            result = combine(result, part.mask(rows))  # type: ignore[arg-type]
        return result

    return mask


def all_of(predicates: Iterable[Any]) -> Predicate:
    """Every predicate accepts (true for an empty list); stops at the first that does not."""
    parts = [as_predicate(p) for p in predicates]
    tests = tuple(part._test for part in parts)

    def test(record: Any, context: Any) -> bool:
        for each in tests:  # noqa: SIM110 - a plain loop: all() over a generator costs a frame per record
            if not each(record, context):
                return False
        return True

    return Predicate(test, _combined_mask(parts, np.logical_and, True), "all_of(" + ", ".join(p.description for p in parts) + ")")


def any_of(predicates: Iterable[Any]) -> Predicate:
    """Some predicate accepts (false for an empty list); stops at the first that does."""
    parts = [as_predicate(p) for p in predicates]
    tests = tuple(part._test for part in parts)

    def test(record: Any, context: Any) -> bool:
        for each in tests:  # noqa: SIM110 - a plain loop: any() over a generator costs a frame per record
            if each(record, context):
                return True
        return False

    return Predicate(test, _combined_mask(parts, np.logical_or, False), "any_of(" + ", ".join(p.description for p in parts) + ")")


def none_of(predicates: Iterable[Any]) -> Predicate:
    """No predicate accepts."""
    return not_(any_of(predicates))


def and_(*predicates: Any) -> Predicate:
    return all_of(predicates)


def or_(*predicates: Any) -> Predicate:
    return any_of(predicates)


def not_(predicate: Any) -> Predicate:
    inner = as_predicate(predicate)
    test_inner = inner._test
    inner_mask = inner._mask
    mask: _Mask | None = None
    if inner_mask is not None:

        def mask(rows: np.ndarray) -> np.ndarray:
            return ~inner.mask(rows)  # type: ignore[operator]

    return Predicate(lambda record, context: not test_inner(record, context), mask, f"not_({inner.description})")
