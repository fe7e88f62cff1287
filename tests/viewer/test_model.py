"""The viewer's questions on columns: filters, facets with counts, the timeline."""

from __future__ import annotations

import numpy as np
import pytest

from openetw.errors import InvalidArgument
from openetw.viewer.model import Columns, Query, facet_counts, histogram, matching_rows, parse_query


def _columns() -> Columns:
    n = 10
    ints = lambda values: np.asarray(values, dtype=np.int32)  # noqa: E731
    return Columns(
        time=np.arange(n, dtype=np.int64) * 10 + 1000, level=ints([2, 4, 4, 3, 4, 2, 4, 4, 5, 4]), provider=ints([0, 0, 1, 1, 0, 1, 0, 0, 1, 1]),
        event=ints([0, 1, 2, 2, 1, 2, 0, 1, 3, 3]), id=ints([1, 2, 3, 3, 2, 3, 1, 2, 4, 4]), task=ints([0] * n), opcode=ints([0] * n),
        keyword=np.asarray([1, 2, 3, 0, 1, 2, 4, 8, 1, 0], dtype=np.uint64), process=ints([7] * 5 + [8] * 5), thread=ints([1] * n),
        cpu=ints([0] * n), channel=ints([0] * n), user=ints([0] * n),
        labels={"provider": ["A", "B"], "event": ["A/1", "A/2", "B/3", "B/4"], "channel": ["System"], "user": [""]},
    )  # fmt: skip


def test_filters_combine_within_a_facet_by_or_and_across_facets_by_and() -> None:
    columns = _columns()
    query = parse_query({"level": "2,3", "provider": "1"})
    assert np.flatnonzero(matching_rows(columns, query)).tolist() == [3, 5]
    assert np.flatnonzero(matching_rows(columns, parse_query({"keyword": "0x2"}))).tolist() == [1, 2, 5]
    assert np.flatnonzero(matching_rows(columns, parse_query({"start": "1020", "end": "1040"}))).tolist() == [2, 3, 4]


def test_a_facet_counts_over_the_other_facets_conditions_only() -> None:
    columns = _columns()
    facets = facet_counts(columns, parse_query({"level": "4", "provider": "0"}))
    assert {e["label"]: e["count"] for e in facets["level"]} == {"Error": 1, "Information": 4}
    assert {e["label"]: e["count"] for e in facets["provider"]} == {"A": 4, "B": 2}
    assert {e["label"]: e["count"] for e in facets["keyword"]} == {"0x1": 1, "0x2": 1, "0x4": 1, "0x8": 1}
    assert facets["user"] == []  # no user is not a value
    assert facets["process"] == [{"value": 7, "label": "pid 7", "count": 2}, {"value": 8, "label": "pid 8", "count": 2}]


def test_text_search_needs_a_text_index() -> None:
    columns = _columns()
    with pytest.raises(InvalidArgument, match="no text index"):
        matching_rows(columns, Query(text="x"))
    found = matching_rows(columns, Query(text="x"), lambda needle: np.arange(10) % 2 == 0)
    assert np.flatnonzero(found).tolist() == [0, 2, 4, 6, 8]


def test_the_timeline_bins_the_selected_rows_stacked_by_level() -> None:
    columns = _columns()
    hist = histogram(columns, np.ones(10, dtype=bool), 5)
    assert hist["start"] == 1000 and hist["end"] == 1090 and hist["width"] == 19
    assert sum(sum(s["counts"]) for s in hist["series"]) == 10
    info = next(s for s in hist["series"] if s["label"] == "Information")
    assert sum(info["counts"]) == 6
    by_provider = histogram(columns, matching_rows(columns, parse_query({"level": "4"})), 2, by="provider")
    assert {s["label"]: sum(s["counts"]) for s in by_provider["series"]} == {"A": 4, "B": 2}
    with pytest.raises(InvalidArgument, match="stacks by level or provider"):
        histogram(columns, np.ones(10, dtype=bool), 5, by="cpu")


@pytest.mark.parametrize(("params", "message"), [({"level": "x"}, "level: 'x' is not a number"), ({"start": "soon"}, "start: 'soon' is not a FILETIME")])
def test_bad_parameters_are_refused(params: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_query(params)


@pytest.mark.parametrize(
    ("xpath", "rows"),
    [
        ("*[System[(Level=2 or Level=3)]]", [0, 3, 5]),
        ("*[System[Provider[@Name='B'] and EventID=3]]", [2, 3, 5]),
        ("Event/System[Level>=4 and EventID!=2]", [2, 6, 8, 9]),
        ("*[System[band(Keywords, 0x2) and Execution[@ProcessID=8]]]", [5]),
        ("*[System[TimeCreated[timediff(@SystemTime) <= 0]]]", []),
        ("*[System[Channel='System']]", list(range(10))),
        ("*[System[Channel='system']]", []),  # strings compare exactly, as log query compares them
        ("*", list(range(10))),
    ],
)
def test_event_log_xpath_selects_rows(xpath: str, rows: list[int]) -> None:
    assert np.flatnonzero(matching_rows(_columns(), parse_query({"xpath": xpath}))).tolist() == rows


@pytest.mark.parametrize(("xpath", "message"), [("*[System[Level=", "column 16: expected a value"), ("*[System[not(Level=2)]]", "the function not()"),
                                                ("*[System[Level=2]] extra", "found 'extra'"), ("*[System[Level=2", "column 17: expected ']'")])
def test_bad_xpath_says_where(xpath: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        matching_rows(_columns(), parse_query({"xpath": xpath}))
