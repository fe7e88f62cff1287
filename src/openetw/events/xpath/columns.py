"""The Event Log XPath's column back end: a query's ``Condition`` evaluated on numpy columns.

Pure. The same parser and the same lowering as the store's SQL (``events.xpath.sql``); here the
columns are arrays, one row per event, named as the store names its columns (``event_id``,
``level``, ``keywords``, ``time_created`` as FILETIME, ``pid``, ...), with the text columns
(``provider``, ``channel``, ``user_sid``, ``computer``) given as codes into a label table. A
column a source does not have makes the conditions on it inexact: ``select_rows`` then returns
a superset, and the caller tests those rows event by event with ``matches``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from openetw.errors import XPathError
from openetw.events.xpath.conditions import TEXT_COLUMNS, AllOf, AnyOf, ColumnTest, Condition, KeywordsAny, Lowered
from openetw.events.xpath.query import Query, QueryList
from openetw.events.xpath.tree import XmlElement

__all__ = ["EventColumns", "EventNodes", "condition_mask", "select_events", "select_rows"]

EventNodes = Callable[[np.ndarray], Iterable[XmlElement | None]]
"""The ``Event`` trees of some rows (``None`` for a row that has none), in the rows' order."""


@dataclass(frozen=True)
class EventColumns:
    """Events as columns: ``numbers[column]`` an integer array per numeric column, ``texts[column]``
    a pair (codes, labels) per text column; every array has ``length`` rows."""

    length: int
    numbers: Mapping[str, np.ndarray] = field(default_factory=dict)
    texts: Mapping[str, tuple[np.ndarray, Sequence[str]]] = field(default_factory=dict)

    def has(self, column: str) -> bool:
        return column in self.texts if column in TEXT_COLUMNS else column in self.numbers


def _compare(column: np.ndarray, op: str, value: object) -> np.ndarray:
    if op == "=":
        return np.asarray(column == value)
    if op == "!=":
        return np.asarray(column != value)
    if op == "<":
        return np.asarray(column < value)
    if op == "<=":
        return np.asarray(column <= value)
    if op == ">":
        return np.asarray(column > value)
    return np.asarray(column >= value)


def _text_mask(codes: np.ndarray, labels: Sequence[str], op: str, value: str) -> np.ndarray:
    wanted = np.fromiter((code for code, label in enumerate(labels) if label == value), dtype=np.int64)
    found = np.isin(codes, wanted)
    return found if op == "=" else ~found


def _numeric_mask(column: np.ndarray, op: str, value: int | float) -> np.ndarray:
    if column.dtype.kind == "u":
        if isinstance(value, float) or value < 0 or value >= 1 << 64:  # out of the column's range: compare exactly
            return _compare(column.astype(np.float64) if isinstance(value, float) else column.astype(object), op, value)
        return _compare(column, op, np.uint64(value))
    if isinstance(value, int) and not -(1 << 63) <= value < 1 << 63:
        return _compare(column.astype(object), op, value)
    return _compare(column, op, value)


def condition_mask(condition: Condition, columns: EventColumns) -> np.ndarray | None:
    """The rows ``condition`` selects, or ``None`` when a column it needs is missing."""
    if isinstance(condition, ColumnTest):
        if not columns.has(condition.column):
            return None
        if condition.column in TEXT_COLUMNS:
            codes, labels = columns.texts[condition.column]
            return _text_mask(codes, labels, condition.op, str(condition.value))
        value = condition.value
        if isinstance(value, str):
            return None
        return _numeric_mask(columns.numbers[condition.column], condition.op, value)
    if isinstance(condition, KeywordsAny):
        if "keywords" not in columns.numbers:
            return None
        keywords = columns.numbers["keywords"].astype(np.uint64, copy=False)
        return np.asarray((keywords & np.uint64(condition.mask)) != 0)
    masks = [condition_mask(item, columns) for item in condition.items]
    if isinstance(condition, AllOf):
        known = [m for m in masks if m is not None]
        if len(known) < len(masks):
            return None
        result = np.ones(columns.length, dtype=bool)
        for mask in known:
            result &= mask
        return result
    either = np.zeros(columns.length, dtype=bool)
    for item_mask in masks:
        if item_mask is None:
            return None
        either |= item_mask
    return either


def _superset(condition: Condition, columns: EventColumns) -> tuple[np.ndarray, bool]:
    """The rows ``condition`` may select, and whether exactly (a missing column widens it)."""
    exact = condition_mask(condition, columns)
    if exact is not None:
        return exact, True
    if isinstance(condition, AllOf):  # keep what the known parts narrow
        result = np.ones(columns.length, dtype=bool)
        for item in condition.items:
            mask, _ = _superset(item, columns)
            result &= mask
        return result, False
    if isinstance(condition, AnyOf):
        result = np.zeros(columns.length, dtype=bool)
        for item in condition.items:
            mask, _ = _superset(item, columns)
            result |= mask
        return result, False
    return np.ones(columns.length, dtype=bool), False


def select_rows(query: Query | QueryList, columns: EventColumns, now: int, log: str | None = None) -> tuple[np.ndarray, bool]:
    """The rows ``query`` selects, from the columns alone, and whether that is exact; when it is
    not, the mask is a superset whose rows the caller tests with ``query.matches``."""
    lowered: Lowered = query.lowered(now, log) if isinstance(query, QueryList) else query.lowered(now)
    mask, exact = _superset(lowered.condition, columns)
    return mask, exact and lowered.exact


def select_events(query: Query | QueryList, columns: EventColumns, nodes: EventNodes | None, now: int, log: str | None = None) -> np.ndarray:
    """The rows ``query`` selects: on the columns, then, when they cannot answer it whole, on each
    remaining row's ``Event`` tree from ``nodes`` (the record back end). Without ``nodes`` such a
    query is an ``XPathError``."""
    mask, exact = select_rows(query, columns, now, log)
    if exact:
        return mask
    if nodes is None:
        raise XPathError("this query tests event fields, and this source cannot build its events")
    rows = np.flatnonzero(mask)
    if isinstance(query, QueryList):
        kept = (node is not None and query.matches(node, now, log) for node in nodes(rows))
    else:
        kept = (node is not None and query.matches(node, now) for node in nodes(rows))
    mask[rows] = np.fromiter(kept, dtype=bool, count=len(rows))
    return mask
