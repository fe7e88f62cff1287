"""The Event Log's XPath subset: a conformance table, and query results equal to plain Python filters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from openetw.errors import XPathError
from openetw.eventlog import LogStore, NewEvent, parse_query, parse_query_list
from openetw.eventlog.store import now_filetime
from tests.eventlog.events import BASE_TIME, made_events

ACCEPTED = [
    "*",
    "Event",
    "*[System[Level=2]]",
    "Event[System[EventID=4624]]",
    "Event/System[EventID=4624]",
    "*[System[Provider[@Name='Alpha'] and (Level=1 or Level=2)]]",
    "*[System[(EventID=1 or EventID=2) and Level<=3]]",
    "*[System[TimeCreated[timediff(@SystemTime) <= 86400000]]]",
    "*[System[TimeCreated[timediff(@SystemTime, '2025-01-01T00:00:00.000Z') >= 0]]]",
    "*[System[Band(Keywords, 9223372036854775808)]]",
    "*[System[EventRecordID!=7]]",
    "*[System/Level>2]",
    '*[EventData[Data[@Name="name"]="pear"]]',
    "*[EventData[Data='pear']]",
    "*[EventData[Data[2]='pear']]",
    "*[EventData[Data[position()=1]=3]]",
    "*[child::System[attribute::Foo]]",
    "*[System[Execution[@ProcessID=101]]]",
]
REFUSED = [
    ("//Event", 1, "the descendant axis '//'"),
    ("*[System//Level=2]", 9, "the descendant axis '//'"),
    ("/Event", 1, "an absolute path"),
    ("*[System/..]", 10, "the parent step '..'"),
    ("*[System[.=2]]", 10, "the self step '.'"),
    ("*[descendant::Level]", 3, "the descendant axis"),
    ("*[System/parent::Event]", 10, "the parent axis"),
    ("*[System[not(Level=2)]]", 10, "the function not()"),
    ("*[EventData[contains(Data,'x')]]", 13, "the function contains()"),
    ("*[System[Level=2] | System[Level=3]]", 19, "the union operator '|'"),
    ("*[System[Level+1=3]]", 15, "arithmetic ('+')"),
    ("*[System[Level mod 2=0]]", 16, "arithmetic ('mod')"),
    ("*[System/*]", 10, "a wildcard step '*' below the root"),
    ("*[$level]", 3, "variables ('$')"),
    ("*[System[frobnicate(Level)]]", 10, "unknown function frobnicate()"),
    ("System[Level=2]", 1, "a query starts with '*' or 'Event'"),
    ("*[System[Level=2]", 18, "expected ']'"),
    ("*[System[Band(Keywords)]]", 10, "Band() takes 2 argument(s), not 1"),
    ("*[System[Level=2=3]]", 17, "comparisons do not chain"),
    ("*[System[Level=#]]", 16, "unexpected character '#'"),
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_documented_constructs_are_accepted(text: str) -> None:
    query = parse_query(text)
    assert query.text == text


@pytest.mark.parametrize(("text", "column", "what"), REFUSED)
def test_constructs_outside_the_subset_are_refused_by_name_and_column(text: str, column: int, what: str) -> None:
    with pytest.raises(XPathError) as caught:
        parse_query(text)
    assert caught.value.column == column, str(caught.value)
    assert what in caught.value.message
    assert str(caught.value).startswith(f"column {column}: ")


NOW = BASE_TIME + 600 * 10_000_000  # ten minutes after the first event
FILTERS: list[tuple[str, Callable[[NewEvent], bool]]] = [
    ("*", lambda e: True),
    ("*[System[Level=2]]", lambda e: e.level == 2),
    ("*[System[Level<=3 and Provider[@Name='Beta']]]", lambda e: e.level <= 3 and e.provider == "Beta"),
    ("*[System[(EventID=3 or EventID=5) and Level!=4]]", lambda e: e.event_id in (3, 5) and e.level != 4),
    ("*[System[Band(Keywords, 16)]]", lambda e: bool(e.keywords & 16)),
    ("*[System[Band(Keywords, 9223372036854775808)]]", lambda e: bool(e.keywords >> 63)),
    ("*[System[TimeCreated[timediff(@SystemTime) <= 120000]]]", lambda e: NOW - e.time_created <= 120_000 * 10_000),
    ("*[System[TimeCreated[timediff(@SystemTime) > 500000]] and System[Level>=4]]", lambda e: NOW - e.time_created > 500_000 * 10_000 and e.level >= 4),
    ("*[System[Execution[@ProcessID=103 and @ThreadID>1005]]]", lambda e: e.pid == 103 and e.tid > 1005),
    ("*[EventData[Data[@Name='name']='pear']]", lambda e: (e.fields or {})["name"] == "pear"),
    ("*[EventData[Data[@Name='index']<10]]", lambda e: (e.fields or {})["index"] < 10),
    ("*[EventData[Data[2]='plum'] and System[Level=4]]", lambda e: (e.fields or {})["name"] == "plum" and e.level == 4),
    ("*[EventData[Data[@Name='flag']='true']]", lambda e: bool((e.fields or {})["flag"])),
    ("Event/System[Task=2]", lambda e: e.task == 2),
    ("*[System/Opcode=1]", lambda e: e.opcode == 1),
    ("*[System[EventRecordID>100 and EventRecordID<=110]]", lambda e: 100 < e.event_id * 0 + made_index(e) + 1 <= 110),
]


def made_index(event: NewEvent) -> int:
    return int((event.fields or {})["index"])


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[LogStore, list[NewEvent]]:
    store = LogStore(tmp_path_factory.mktemp("xpath"))
    store.create("Application")
    events = made_events(600, seed=4)
    store.append("Application", events)
    return store, events


@pytest.mark.parametrize(("text", "keep"), FILTERS, ids=[t for t, _ in FILTERS])
def test_results_equal_a_plain_python_filter(filled: tuple[LogStore, list[NewEvent]], text: str, keep: Callable[[NewEvent], bool]) -> None:
    store, events = filled
    expected = [index + 1 for index, event in enumerate(events) if keep(event)]
    assert expected, "the filter selects something"
    got = [e.record_id for e in store.query("Application", xpath=text, now=NOW)]
    assert got == expected
    # the evaluator alone (no SQL) agrees
    query = parse_query(text)
    from openetw.eventlog import event_node

    assert [e.record_id for e in store.query("Application", now=NOW) if query.matches(event_node(e), NOW)] == expected


def test_query_list_select_and_suppress(filled: tuple[LogStore, list[NewEvent]]) -> None:
    store, events = filled
    query_list = parse_query_list(
        "<QueryList><Query Id='0' Path='Application'>"
        "<Select Path='Application'>*[System[Level&lt;=2]]</Select>"
        "<Select Path='System'>*[System[Level=4]]</Select>"
        "<Suppress Path='Application'>*[System[Provider[@Name='Alpha']]]</Suppress>"
        "</Query></QueryList>"
    )
    expected = [i + 1 for i, e in enumerate(events) if e.level <= 2 and e.provider != "Alpha"]
    assert [e.record_id for e in store.query("Application", xpath=query_list, now=NOW)] == expected


@pytest.mark.parametrize(("text", "message"), [
    ("<Query/>", "root element is QueryList"),
    ("<QueryList><Query Id='1'/></QueryList>", "Query 1 has no Select"),
    ("<QueryList><Query><Select>//x</Select></Query></QueryList>", "column 1: the descendant axis"),
    ("<QueryList>", "not well-formed XML"),
])  # fmt: skip
def test_bad_query_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(XPathError, match=message):
        parse_query_list(text)


def test_timediff_uses_the_current_time_by_default(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.create("Application")
    recent = made_events(3, start_time=now_filetime() - 5 * 10_000_000)
    store.append("Application", made_events(3) + recent)
    got = [e.record_id for e in store.query("Application", xpath="*[System[TimeCreated[timediff(@SystemTime) <= 60000]]]")]
    assert got == [4, 5, 6]
