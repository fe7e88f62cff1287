"""The Event Log's XPath under its former name: it is the read model's now (``openetw.events.xpath``:
the parser and checked tree, and the records, SQL and column back ends), kept here for one release."""

from __future__ import annotations

from openetw.etl.intypes import UNIX_EPOCH_FILETIME
from openetw.events.xpath import (
    EVERYTHING,
    QUERY_COLUMNS,
    TEXT_COLUMNS,
    AllOf,
    AnyOf,
    ColumnTest,
    Condition,
    KeywordsAny,
    Lowered,
    Query,
    QueryList,
    SqlFilter,
    XmlElement,
    condition_sql,
    filetime_from_text,
    lower,
    parse_filter,
    parse_query,
    parse_query_list,
)

__all__ = [
    "EVERYTHING", "FILETIME_EPOCH_OFFSET", "QUERY_COLUMNS", "TEXT_COLUMNS", "AllOf", "AnyOf", "ColumnTest", "Condition",
    "KeywordsAny", "Lowered", "Query", "QueryList", "SqlFilter", "XmlElement", "condition_sql", "filetime_from_text",
    "lower", "parse_filter", "parse_query", "parse_query_list",
]  # fmt: skip

FILETIME_EPOCH_OFFSET = UNIX_EPOCH_FILETIME  # its former name here
