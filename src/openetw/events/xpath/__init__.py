"""The Event Log's XPath, one for every reader: a parser and checked tree (``tree``), parsed
queries (``query``), and back ends that give the same events: ``records`` (an event's element
tree), ``sql`` (the log store), ``columns`` (numpy columns: the viewer, ``.etl`` indexes), all
fed by one lowering (``conditions``).

Pure. ``parse_filter`` takes a selector or ``<QueryList>`` XML; ``select_events`` answers it on
columns and, for what they lack, on each row's tree (it and the other column names load numpy,
on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openetw.events.xpath.conditions import (
    EVERYTHING,
    QUERY_COLUMNS,
    TEXT_COLUMNS,
    AllOf,
    AnyOf,
    ColumnTest,
    Condition,
    KeywordsAny,
    Lowered,
    lower,
)
from openetw.events.xpath.query import Query, QueryList, parse_filter, parse_query, parse_query_list
from openetw.events.xpath.sql import SqlFilter, condition_sql
from openetw.events.xpath.tree import XmlElement, filetime_from_text

if TYPE_CHECKING:
    from openetw.events.xpath.columns import EventColumns, EventNodes, condition_mask, select_events, select_rows

__all__ = [
    "EVERYTHING", "QUERY_COLUMNS", "TEXT_COLUMNS", "AllOf", "AnyOf", "ColumnTest", "Condition", "EventColumns",
    "EventNodes", "KeywordsAny", "Lowered", "Query", "QueryList", "SqlFilter", "XmlElement", "condition_mask",
    "condition_sql", "filetime_from_text", "lower", "parse_filter", "parse_query", "parse_query_list", "select_events",
    "select_rows",
]  # fmt: skip

_LAZY: dict[str, str] = dict.fromkeys(("EventColumns", "condition_mask", "select_rows"), "openetw.events.xpath.columns")


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
