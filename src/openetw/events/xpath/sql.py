"""The XPath's SQL back end: a query's ``Condition`` as a ``WHERE`` clause over the log store's
columns (SQLite), its values as parameters.

Pure: text and parameters out; the store runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openetw.events.xpath.conditions import AllOf, ColumnTest, Condition, KeywordsAny, Lowered

__all__ = ["SqlFilter", "condition_sql", "lowered_sql"]



@dataclass(frozen=True)
class SqlFilter:
    """``where`` over the store's columns (``1`` selects all); ``exact``: no test left to make."""

    where: str
    params: tuple[Any, ...]
    exact: bool


def _signed64(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def condition_sql(condition: Condition, params: list[Any]) -> str:
    """``condition`` as a SQLite expression over the store's columns, its values added to ``params``."""
    if isinstance(condition, ColumnTest):
        params.append(condition.value)
        return f"{condition.column} {condition.op} ?"
    if isinstance(condition, KeywordsAny):
        params.append(_signed64(condition.mask))
        return "(keywords & ?) != 0"
    if not condition.items:
        return "1" if isinstance(condition, AllOf) else "0"
    joiner = " AND " if isinstance(condition, AllOf) else " OR "
    return "(" + joiner.join(condition_sql(item, params) for item in condition.items) + ")"



def lowered_sql(lowered: Lowered) -> SqlFilter:
    """What the columns answer of a query, as SQL (``exact`` as the lowering says)."""
    params: list[Any] = []
    where = condition_sql(lowered.condition, params)
    return SqlFilter(where, tuple(params), lowered.exact)
