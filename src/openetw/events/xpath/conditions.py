"""The XPath's conditions: the part of a query a store's columns answer (``lower``), the one
input of the SQL and the column back ends.

Pure. A ``Condition`` names the log store's columns (``QUERY_COLUMNS``); ``Lowered`` says whether
it selects exactly the query's events or a superset (the rest is tested event by event).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openetw.events.xpath.tree import Call, Compare, Literal, Logical, Path, Step, filetime_from_text, number_value

__all__ = ["EVERYTHING", "QUERY_COLUMNS", "TEXT_COLUMNS", "AllOf", "AnyOf", "ColumnTest", "Condition", "KeywordsAny", "Lowered", "lower"]


# System child elements -> the log store's columns (see store.SCHEMA); every back end (SQL for the
# store, numpy masks for the viewer's columns) answers conditions on these names.
QUERY_COLUMNS = {
    "EventID": "event_id",
    "Version": "version",
    "Level": "level",
    "Task": "task",
    "Opcode": "opcode",
    "EventRecordID": "record_id",
    "Channel": "channel",
    "Computer": "computer",
}
_ATTRIBUTE_COLUMNS = {
    ("Provider", "Name"): "provider",
    ("Execution", "ProcessID"): "pid",
    ("Execution", "ThreadID"): "tid",
    ("Security", "UserID"): "user_sid",
    ("TimeCreated", "SystemTime"): "time_created",
}
TEXT_COLUMNS = frozenset({"channel", "computer", "provider", "user_sid"})
"""Columns compared as text: exactly, as XPath 1.0 compares strings (case matters)."""
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


@dataclass(frozen=True)
class ColumnTest:
    """``column op value``: a number, or text for ``TEXT_COLUMNS`` (``=``/``!=`` only)."""

    column: str
    op: str
    value: int | float | str


@dataclass(frozen=True)
class KeywordsAny:
    """``Band(Keywords, mask)``: some bit of ``mask`` is set."""

    mask: int


@dataclass(frozen=True)
class AllOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Condition, ...]


Condition = ColumnTest | KeywordsAny | AllOf | AnyOf
"""A query's conditions over the store's columns; ``AllOf(())`` selects every event."""


@dataclass(frozen=True)
class Lowered:
    """What the columns can answer of a query: ``condition`` selects exactly the query's events when
    ``exact``, else a superset of them (the rest is tested event by event with ``matches``)."""

    condition: Condition
    exact: bool


EVERYTHING: Condition = AllOf(())


class _Lowering:
    def __init__(self, now: int) -> None:
        self.now = now

    def conjuncts(self, expr: Any, context: str) -> tuple[list[Condition], bool]:
        """The conditions implied by ``expr`` in ``context``, and whether they are all of it."""
        if isinstance(expr, Logical) and expr.op == "and":
            parts: list[Condition] = []
            exact = True
            for item in expr.items:
                more, item_exact = self.conjuncts(item, context)
                parts += more
                exact = exact and item_exact
            return parts, exact
        whole = self.exact(expr, context)
        if whole is not None:
            return [whole], True
        return [], False

    def exact(self, expr: Any, context: str) -> Condition | None:
        """One condition equivalent to ``expr`` in ``context``, or None."""
        if isinstance(expr, Logical):
            parts = []
            for item in expr.items:
                part = self.exact(item, context)
                if part is None:
                    return None
                parts.append(part)
            return AllOf(tuple(parts)) if expr.op == "and" else AnyOf(tuple(parts))
        if isinstance(expr, Path) and len(expr.steps) == 1 and not expr.steps[0].attribute:
            step = expr.steps[0]
            if context == "Event" and step.name == "System":
                return self._all(step, "System", empty=EVERYTHING)
            if context == "System" and step.name in ("Provider", "TimeCreated", "Execution", "Security"):
                return self._all(step, step.name, empty=None)
            return None
        if isinstance(expr, Call) and expr.name == "Band" and context == "System":
            return self._keywords_and_mask(expr)
        if isinstance(expr, Compare):
            return self._compare(expr, context)
        return None

    def _all(self, step: Step, context: str, empty: Condition | None) -> Condition | None:
        if any(_is_position(p) for p in step.predicates):
            return None
        parts = [self.exact(pred, context) for pred in step.predicates]
        if any(p is None for p in parts):
            return None
        if not parts:
            return empty
        return AllOf(tuple(p for p in parts if p is not None))

    @staticmethod
    def _keywords_and_mask(call: Call) -> Condition | None:
        a, b = call.args
        if isinstance(b, Path) and isinstance(a, Literal):
            a, b = b, a
        if _is_child(a, "Keywords") and isinstance(b, Literal) and isinstance(b.value, int):
            return KeywordsAny(b.value & 0xFFFFFFFFFFFFFFFF)
        return None

    def _compare(self, expr: Compare, context: str) -> Condition | None:
        op, left, right = expr.op, expr.left, expr.right
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right, op = right, left, _FLIP[op]
        if not isinstance(right, Literal):
            return None
        value = right.value
        if isinstance(left, Call) and left.name == "timediff" and len(left.args) == 1 and context == "TimeCreated":
            if _is_attribute(left.args[0], "SystemTime") and isinstance(value, (int, float)) and op in ("<", "<=", ">", ">="):
                # now - time OP value  <=>  time FLIP(OP) now - value*10000
                return ColumnTest("time_created", _FLIP[op], self.now - int(value * 10_000))
            return None
        if isinstance(left, Call) and left.name == "Band" and context == "System" and op in ("!=", ">") and value == 0:
            return self._keywords_and_mask(left)
        column: str | None = None
        if context == "System" and isinstance(left, Path) and len(left.steps) == 1 and not left.steps[0].attribute:
            if left.steps[0].predicates:
                return None
            column = QUERY_COLUMNS.get(left.steps[0].name)
        elif context in ("Provider", "Execution", "Security", "TimeCreated") and isinstance(left, Path) and len(left.steps) == 1 and left.steps[0].attribute:
            column = _ATTRIBUTE_COLUMNS.get((context, left.steps[0].name))
        if column is None:
            return None
        if column == "time_created":
            moment = filetime_from_text(value) if isinstance(value, str) else None
            return None if moment is None else ColumnTest(column, op, moment)
        if column in TEXT_COLUMNS:
            if op not in ("=", "!="):
                return None
            text = str(value) if not isinstance(value, float) or not value.is_integer() else str(int(value))
            return ColumnTest(column, op, text)
        if isinstance(value, str):
            number = number_value(value)
            if isinstance(number, float):
                return None  # compares as NaN: left to the evaluator
            value = number
        return ColumnTest(column, op, value)


def lower(path: Path, now: int) -> Lowered:
    """The conditions of a selector's ``Event`` predicates that the store's columns answer."""
    predicates = list(path.steps[0].predicates)
    if len(path.steps) == 2 and path.steps[1].name == "System" and not path.steps[1].attribute:
        predicates.append(Path(path.steps[1:]))  # Event/System[...] selects what *[System[...]] does
    elif len(path.steps) != 1:
        return Lowered(EVERYTHING, False)
    lowering = _Lowering(now)
    parts: list[Condition] = []
    exact = True
    for predicate in predicates:
        if _is_position(predicate):
            return Lowered(EVERYTHING, False)
        more, predicate_exact = lowering.conjuncts(predicate, "Event")
        parts += more
        exact = exact and predicate_exact
    return Lowered(AllOf(tuple(parts)) if parts else EVERYTHING, exact)



def _is_position(expr: Any) -> bool:
    return (isinstance(expr, Literal) and isinstance(expr.value, (int, float))) or (isinstance(expr, Call) and expr.name == "position")


def _is_child(expr: Any, name: str) -> bool:
    return isinstance(expr, Path) and len(expr.steps) == 1 and not expr.steps[0].attribute and expr.steps[0].name == name and not expr.steps[0].predicates


def _is_attribute(expr: Any, name: str) -> bool:
    return isinstance(expr, Path) and len(expr.steps) == 1 and expr.steps[0].attribute and expr.steps[0].name == name
