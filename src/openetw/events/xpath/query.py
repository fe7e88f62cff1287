"""Parsed queries: a ``Query`` (one selector) and a ``QueryList`` (``<QueryList>`` XML), each
answering through every back end: ``matches`` (records), ``lowered`` (conditions, for columns)
and ``sql`` (the log store).

Pure.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from openetw.errors import XPathError
from openetw.events.xpath import records
from openetw.events.xpath.conditions import AnyOf, Condition, Lowered, lower
from openetw.events.xpath.sql import SqlFilter, lowered_sql
from openetw.events.xpath.tree import Path, XmlElement, parse_path

__all__ = ["Query", "QueryList", "parse_filter", "parse_query", "parse_query_list"]



@dataclass(frozen=True)
class Query:
    """One parsed selector (``*[System[Level=2]]``)."""

    text: str
    path: Path

    def matches(self, event: XmlElement, now: int) -> bool:
        """Whether the selector selects ``event`` (an ``Event`` element) at ``now`` (FILETIME)."""
        return records.matches(self.path, event, now)

    def lowered(self, now: int) -> Lowered:
        """The conditions the store's columns can answer (see ``Lowered``)."""
        return lower(self.path, now)

    def sql(self, now: int) -> SqlFilter:
        return lowered_sql(self.lowered(now))


def parse_query(text: str) -> Query:
    """Parse one selector; ``XPathError`` names what is outside the subset and where."""
    if not text.strip():
        raise XPathError("an empty query", 1)
    return Query(text, parse_path(text))


@dataclass(frozen=True)
class QueryList:
    """``<QueryList>``: an event is selected when, in some Query, a Select whose path names the
    log (or names none) selects it and no Suppress of that Query for the log does."""

    # per Query: its Selects and its Suppresses, each with the log path it applies to
    queries: tuple[tuple[tuple[tuple[str | None, Query], ...], tuple[tuple[str | None, Query], ...]], ...]

    def for_log(self, log: str | None) -> list[tuple[list[Query], list[Query]]]:
        def applies(path: str | None) -> bool:
            return log is None or path is None or path.lower() == log.lower()

        found = []
        for selects, suppresses in self.queries:
            chosen = [q for path, q in selects if applies(path)]
            if chosen:
                found.append((chosen, [q for path, q in suppresses if applies(path)]))
        return found

    def paths(self) -> list[str]:
        """The logs its Selects name, in order of first mention (``wevtutil qe /sq`` reads these)."""
        found: dict[str, str] = {}
        for selects, suppresses in self.queries:
            for path, _ in (*selects, *suppresses):
                if path and path.lower() not in found:
                    found[path.lower()] = path
        return list(found.values())

    def lowered(self, now: int, log: str | None = None) -> Lowered:
        """What the columns answer: any Select for ``log``; exact when every Select is and
        nothing is suppressed (a Suppress is tested event by event)."""
        conditions: list[Condition] = []
        exact = True
        for selects, suppresses in self.for_log(log):
            for query in selects:
                lowered = query.lowered(now)
                conditions.append(lowered.condition)
                exact = exact and lowered.exact
            exact = exact and not suppresses
        return Lowered(AnyOf(tuple(conditions)), exact)

    def matches(self, event: XmlElement, now: int, log: str | None = None) -> bool:
        for selects, suppresses in self.for_log(log):
            if any(q.matches(event, now) for q in selects) and not any(q.matches(event, now) for q in suppresses):
                return True
        return False


def parse_query_list(text: str) -> QueryList:
    """Parse ``<QueryList><Query Id= Path=><Select Path=>...</Select><Suppress>...`` XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise XPathError(f"the query list is not well-formed XML: {exc}") from None
    if root.tag != "QueryList":
        raise XPathError(f"a query list's root element is QueryList, not {root.tag}")
    queries = []
    for query in root:
        if query.tag != "Query":
            raise XPathError(f"QueryList holds Query elements, not {query.tag}")
        selects: list[tuple[str | None, Query]] = []
        suppresses: list[tuple[str | None, Query]] = []
        for item in query:
            if item.tag not in ("Select", "Suppress"):
                raise XPathError(f"a Query holds Select and Suppress elements, not {item.tag}")
            parsed = parse_query((item.text or "").strip())
            (selects if item.tag == "Select" else suppresses).append((item.get("Path") or query.get("Path"), parsed))
        if not selects:
            raise XPathError(f"Query {query.get('Id', '?')} has no Select")
        queries.append((tuple(selects), tuple(suppresses)))
    if not queries:
        raise XPathError("the query list holds no Query")
    return QueryList(tuple(queries))


def parse_filter(text: str) -> Query | QueryList:
    """A selector, or a ``<QueryList>`` (what Event Viewer's filter dialog shows on its XML tab)."""
    return parse_query_list(text) if text.lstrip().startswith("<") else parse_query(text)
