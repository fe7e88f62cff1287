"""The viewer's questions over a source's columns: filters, facet counts, pages and the timeline.

A source (``viewer.sources``) describes its events as ``Columns``: one numpy array per header
field, a row per event in the source's order, and label tables for the categorical ones. Every
question the page asks is answered here on those arrays, so a page, a facet count or a
histogram over a million events costs a few vectorised passes and never builds an event.
This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument
from openetw.events.text import LEVEL_TEXT as LEVEL_NAMES
from openetw.events.text import level_name

__all__ = [
    "FACETS", "LEVEL_NAMES", "Columns", "Query", "facet_counts", "histogram", "level_name", "matching_rows", "parse_query",
]  # fmt: skip

FACETS = ("level", "provider", "event", "task", "opcode", "keyword", "process", "channel", "user")
"""The facets the page shows, each a column of ``Columns`` (``keyword`` counts each bit)."""
_CODED = ("provider", "event", "channel", "user")  # columns of codes into a label table
_ARRAYS = ("time", "level", "provider", "event", "id", "task", "opcode", "keyword", "process", "thread", "cpu", "channel", "user")


@dataclass
class Columns:
    """A source's events as columns (all of one length). ``time`` is FILETIME; ``provider``,
    ``event``, ``channel`` and ``user`` are codes into ``labels[name]``."""

    time: np.ndarray
    level: np.ndarray
    provider: np.ndarray
    event: np.ndarray
    id: np.ndarray
    task: np.ndarray
    opcode: np.ndarray
    keyword: np.ndarray
    process: np.ndarray
    thread: np.ndarray
    cpu: np.ndarray
    channel: np.ndarray
    user: np.ndarray
    labels: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.time)

    @classmethod
    def empty(cls) -> Columns:
        z64, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return cls(z64, z32, z32, z32, z32, z32, z32, np.zeros(0, dtype=np.uint64), z32, z32, z32, z32, z32,
                   {name: [] for name in _CODED})  # fmt: skip

    def part(self, start: int, stop: int) -> Columns:
        """Rows ``start`` to ``stop`` (views, not copies)."""
        arrays = {name: getattr(self, name)[start:stop] for name in _ARRAYS}
        return Columns(**arrays, labels=self.labels)

    def label(self, column: str, code: int) -> str:
        if column in _CODED:
            table = self.labels.get(column, [])
            return table[code] if 0 <= code < len(table) else ""
        if column == "level":
            return level_name(code)
        if column == "process":
            return f"pid {code}"
        return str(code)


@dataclass
class Query:
    """What the page asks for: the values wanted per facet (``None``: any), a time range
    (FILETIME, inclusive), text to find in each event's text, and keyword bits (any of them)."""

    wanted: dict[str, set[int]] = field(default_factory=dict)
    keyword_bits: int | None = None
    start: int | None = None
    end: int | None = None
    text: str = ""
    xpath: str = ""

    def without(self, facet: str) -> Query:
        """The same query without its condition on ``facet`` (a facet counts over the others)."""
        wanted = {name: values for name, values in self.wanted.items() if name != facet}
        bits = None if facet == "keyword" else self.keyword_bits
        return Query(wanted, bits, self.start, self.end, self.text, self.xpath)


_INT64 = (-(1 << 63), (1 << 63) - 1)
_MAX_VALUES = 4096  # values of one facet condition


def _int_list(text: str, name: str, low: int = _INT64[0], high: int = _INT64[1]) -> set[int]:
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part, 0) if len(part) <= 40 else None
        except ValueError:
            value = None
        if value is None:
            raise InvalidArgument(f"{name}: {part[:40]!r} is not a number") from None
        if not low <= value <= high:
            raise InvalidArgument(f"{name}: {value} is out of range")
        values.add(value)
        if len(values) > _MAX_VALUES:
            raise InvalidArgument(f"{name}: more than {_MAX_VALUES} values")
    return values


def parse_query(params: Mapping[str, str]) -> Query:
    """A ``Query`` from the page's parameters: ``level=2,3``, ``provider=0,4`` (codes), ``event``,
    ``task``, ``opcode``, ``process``, ``channel``, ``user``, ``keyword=0x10`` (any of these bits),
    ``start``/``end`` (FILETIME), ``q`` (text) and ``xpath`` (the Event Log's XPath)."""
    query = Query()
    for name in FACETS:
        if name == "keyword":
            continue
        text = params.get(name)
        if text:
            query.wanted[name] = _int_list(text, name)
    if params.get("keyword"):
        bits = 0
        for value in _int_list(params["keyword"], "keyword", 0, (1 << 64) - 1):
            bits |= value
        query.keyword_bits = bits
    for bound in ("start", "end"):
        text = params.get(bound)
        if text:
            try:
                value = int(text) if len(text) <= 24 else -1
            except ValueError:
                value = -1
            if not 0 <= value < 1 << 64:
                raise InvalidArgument(f"{bound}: {text[:40]!r} is not a FILETIME") from None
            setattr(query, bound, min(value, _INT64[1]))  # the columns hold FILETIMEs as int64
    query.text = params.get("q", "").strip()
    query.xpath = params.get("xpath", "").strip()
    return query


TextSearch = Callable[[str], np.ndarray]
"""Rows whose text holds a needle (case-insensitive), as a boolean array."""


def matching_rows(columns: Columns, query: Query, search: TextSearch | None = None, xpath: TextSearch | None = None) -> np.ndarray:
    """Boolean mask of the rows the query selects; ``search`` finds text, ``xpath`` evaluates the
    Event Log XPath (default: ``viewer.xpath`` on the columns)."""
    mask = np.ones(len(columns), dtype=bool)
    for name, values in query.wanted.items():
        column: np.ndarray = getattr(columns, name)
        mask &= np.isin(column, np.fromiter(values, dtype=np.int64, count=len(values)))
    if query.keyword_bits is not None:
        mask &= (columns.keyword & np.uint64(query.keyword_bits)) != 0
    if query.start is not None:
        mask &= columns.time >= query.start
    if query.end is not None:
        mask &= columns.time <= query.end
    if query.text:
        if search is None:
            raise InvalidArgument("this source has no text index yet")
        mask &= search(query.text)
    if query.xpath:
        if xpath is None:
            from openetw.viewer.xpath import xpath_mask

            mask &= xpath_mask(query.xpath, columns)
        else:
            mask &= xpath(query.xpath)
    return mask


def _counts(column: np.ndarray, mask: np.ndarray | None) -> list[tuple[int, int]]:
    chosen = column if mask is None else column[mask]
    if len(chosen) and chosen.dtype.kind in "iu" and chosen.dtype.itemsize <= 4 and 0 <= chosen.min() and chosen.max() < 1 << 20:
        tally = np.bincount(chosen)  # small codes: one pass instead of a sort
        values = np.flatnonzero(tally)
        counts = tally[values]
    else:
        values, counts = np.unique(chosen, return_counts=True)
    pairs = sorted(zip(values.tolist(), counts.tolist(), strict=True), key=lambda pair: (-pair[1], pair[0]))
    return [(int(value), int(count)) for value, count in pairs]


def facet_counts(
    columns: Columns, query: Query, search: TextSearch | None = None, limit: int = 200, xpath: TextSearch | None = None,
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Per facet, each value with its count over the rows the query selects without its own
    condition on that facet (so the other values of a facet stay in view), most first."""
    out: dict[str, list[dict[str, Any]]] = {}
    masks: dict[tuple[Any, ...], np.ndarray] = {}
    alls: dict[tuple[Any, ...], bool] = {}
    for name in FACETS:
        other = query.without(name)
        key = (tuple(sorted((k, tuple(sorted(v))) for k, v in other.wanted.items())), other.keyword_bits)
        mask = masks.get(key)
        if mask is None:
            mask = masks[key] = matching_rows(columns, other, search, xpath)
        everything = alls.get(key)
        if everything is None:
            everything = alls[key] = bool(mask.all())
        chosen = None if everything else mask  # every row: count the columns as they are
        if name == "keyword":
            values, counts = np.unique(columns.keyword if chosen is None else columns.keyword[chosen], return_counts=True)
            bits: dict[int, int] = {}
            for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                for bit in range(64):
                    if value >> bit & 1:
                        bits[1 << bit] = bits.get(1 << bit, 0) + int(count)
            entries = [{"value": bit, "label": f"0x{bit:x}", "count": count} for bit, count in sorted(bits.items(), key=lambda p: -p[1])]
        else:
            column: np.ndarray = getattr(columns, name)
            entries = [{"value": value, "label": columns.label(name, value), "count": count} for value, count in _counts(column, chosen)]
            if name in ("channel", "user"):
                entries = [entry for entry in entries if entry["label"]]
        out[name] = entries[:limit]
    return out


def histogram(columns: Columns, mask: np.ndarray, bins: int, by: str = "level", start: int | None = None, end: int | None = None) -> dict[str, Any]:
    """Events per time bin over the selected rows, stacked by ``by`` (``level`` or ``provider``):
    ``start``/``end`` (FILETIME; default: the source's span), ``width`` (FILETIME units per bin),
    ``series`` ([{value, label, counts}])."""
    if by not in ("level", "provider"):
        raise InvalidArgument("the timeline stacks by level or provider")
    bins = max(1, min(int(bins), 2000))
    times = columns.time
    if start is None or end is None:
        if not len(times):
            return {"start": 0, "end": 0, "width": 1, "bins": bins, "series": []}
        start = int(times.min()) if start is None else start
        end = int(times.max()) if end is None else end
    width = max(1, -(-(end - start + 1) // bins))
    selected = mask & (times >= start) & (times <= end)
    every = bool(selected.all())  # every row: no copies
    column: np.ndarray = getattr(columns, by) if every else getattr(columns, by)[selected]
    chosen_times = times if every else times[selected]
    top = [value for value, _count in _counts(column, None)[:12]]
    series = []
    if top:
        # one pass: each row's (series, bin) as one number, counted by bincount
        lookup = np.full(max(top) + 1, -1, dtype=np.int64)
        lookup[np.asarray(top, dtype=np.int64)] = np.arange(len(top))
        inside = column <= max(top)
        which = np.full(len(column), -1, dtype=np.int64)
        which[inside] = lookup[column[inside]]
        kept = which >= 0
        slots = (chosen_times[kept] - start) // width
        counts = np.bincount(which[kept] * bins + slots, minlength=len(top) * bins).reshape(len(top), bins)
        for number, value in enumerate(top):
            series.append({"value": value, "label": columns.label(by, value), "counts": counts[number].tolist()})
    return {"start": start, "end": end, "width": width, "bins": bins, "series": series}
