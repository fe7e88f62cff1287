"""EnableTraceEx2 semantics: level, MatchAny/MatchAll keywords, enable properties and filters."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.guids import provider_guid_from_name
from openetw.session import (
    ALL_KEYWORDS,
    EnableProperty,
    EnableRule,
    EnableState,
    EventFilters,
    InvalidSessionConfig,
    SessionEnable,
    SessionTable,
)
from tests.session.helpers import ALICE, PROVIDER, config

# A few bits, so that keyword masks collide often, plus the reserved top bits.
BITS = [1 << b for b in (0, 1, 2, 3, 40, 48, 63)]
masks = st.lists(st.sampled_from(BITS), max_size=4).map(lambda bits: sum(set(bits)))
levels = st.integers(0, 7)
event_ids = st.integers(0, 6)
pids = st.integers(1, 5)
exes = st.sampled_from(["app", "/usr/bin/App", "other", "C:\\bin\\tool.EXE", "tool.exe"])


@st.composite
def filters(draw: st.DrawFn) -> EventFilters:
    return EventFilters(
        event_ids=frozenset(draw(st.lists(event_ids, max_size=3))),
        event_ids_include=draw(st.booleans()),
        pids=frozenset(draw(st.lists(pids, max_size=2))),
        exe_names=frozenset(draw(st.lists(exes, max_size=2))),
    )


@st.composite
def rules(draw: st.DrawFn) -> EnableRule:
    properties = draw(st.sampled_from([0, EnableProperty.STACK_TRACE, EnableProperty.IGNORE_KEYWORD_0]))
    return EnableRule(draw(levels), draw(masks), draw(masks), int(properties), draw(filters()))


def reference_admits(rule: EnableRule, level: int, keyword: int, event_id: int, pid: int, exe: str) -> bool:
    """The rule as written in the documentation, spelled out with no shortcuts."""
    if not (rule.level == 0 or level <= rule.level):
        return False
    if keyword == 0 and rule.properties & EnableProperty.IGNORE_KEYWORD_0:
        return False
    if not (
        keyword == 0
        or rule.match_any == 0
        or ((keyword & rule.match_any) != 0 and (keyword & rule.match_all) == rule.match_all)
    ):
        return False
    f = rule.filters
    if f.event_ids:
        if f.event_ids_include and event_id not in f.event_ids:
            return False
        if not f.event_ids_include and event_id in f.event_ids:
            return False
    if f.pids and pid not in f.pids:
        return False
    if f.exe_names:
        name = exe.replace("\\", "/").rsplit("/", 1)[-1].lower()
        if name not in f.exe_names:
            return False
    return True


events = st.tuples(levels, masks, event_ids, pids, exes)


@settings(max_examples=300, deadline=None)
@given(st.lists(rules(), min_size=1, max_size=8), st.lists(events, min_size=1, max_size=20))
def test_routing_matches_the_reference(session_rules: list[EnableRule], sample: list[tuple]) -> None:
    table = SessionTable()
    ids = []
    for index, rule in enumerate(session_rules):
        session = table.create(config(f"S{index}"), ALICE)
        table.start(session.session_id)
        table.enable(session.session_id, PROVIDER, level=rule.level, match_any=rule.match_any,
                     match_all=rule.match_all, properties=rule.properties, filters=rule.filters)  # fmt: skip
        ids.append(session.session_id)
    for level, keyword, event_id, pid, exe in sample:
        expected = tuple(i for i, r in zip(ids, session_rules, strict=True) if reference_admits(r, level, keyword, event_id, pid, exe))
        assert table.sessions_for(PROVIDER, level, keyword, event_id, pid, exe) == expected
        # What the provider process sees agrees, and its cheap check never hides a wanted event.
        state = table.enable_state(PROVIDER, pid, exe)
        assert tuple(e.session_id for e in state.sessions_for(level, keyword, event_id, pid, exe)) == expected
        if expected:
            assert state.is_enabled(level, keyword)


@settings(max_examples=200, deadline=None)
@given(st.lists(rules(), max_size=8), levels, masks)
def test_is_enabled_checks_level_and_keyword_each_against_all_sessions(
    session_rules: list[EnableRule], level: int, keyword: int
) -> None:
    # The cheap check folds each dimension on its own: some session takes the level and some
    # session takes the keyword. It may say yes when no single session takes both (the exact
    # answer is ``sessions_for``), but it never says no to a wanted event.
    state = EnableState.from_sessions(SessionEnable(i, i, r) for i, r in enumerate(session_rules))
    some_level = any(r.level == 0 or level <= r.level for r in session_rules)
    some_keyword = keyword == 0 or any(r.match_any == 0 or keyword & r.match_any for r in session_rules)
    assert state.is_enabled(level, keyword) == (some_level and some_keyword)
    assert state.enabled == bool(session_rules)


def test_level_zero_means_everything() -> None:
    rule = EnableRule(level=0)
    assert all(rule.admits_level(level) for level in range(256))
    assert EnableRule(level=4).admits_level(4) and not EnableRule(level=4).admits_level(5)
    assert EnableRule(level=4).admits_level(0)  # LogAlways events pass any session level


def test_keywords() -> None:
    rule = EnableRule(match_any=0b0110, match_all=0b0010)
    assert rule.admits_keyword(0)  # keyword 0 always passes
    assert rule.admits_keyword(0b0010)
    assert rule.admits_keyword(0b0011)
    assert not rule.admits_keyword(0b0100)  # in any, but misses the all bit
    assert not rule.admits_keyword(0b1000)  # in neither
    assert EnableRule(match_any=0, match_all=0b1).admits_keyword(0b1000)  # all is ignored when any is 0
    assert EnableRule(match_any=ALL_KEYWORDS).admits_keyword(1 << 63)
    ignore_zero = EnableRule(properties=EnableProperty.IGNORE_KEYWORD_0)
    assert not ignore_zero.admits_keyword(0) and ignore_zero.admits_keyword(1)


def test_event_id_filters() -> None:
    only = EventFilters(event_ids=frozenset({1, 2}))
    but = EventFilters(event_ids=frozenset({1, 2}), event_ids_include=False)
    assert only.admits_event_id(1) and not only.admits_event_id(3)
    assert not but.admits_event_id(1) and but.admits_event_id(3)
    assert EventFilters().admits_event_id(12345)


def test_process_filters() -> None:
    f = EventFilters(pids=frozenset({10, 20}), exe_names=frozenset({"C:\\Windows\\App.EXE"}))
    assert f.exe_names == frozenset({"app.exe"})
    assert f.admits_process(10, "/opt/x/APP.exe")
    assert not f.admits_process(11, "app.exe")
    assert not f.admits_process(10, "other.exe")
    assert not f.admits_process(None, None)
    assert EventFilters().admits_process(None, None)


@pytest.mark.parametrize(
    "make",
    [
        lambda: EventFilters(event_ids=frozenset(range(65))),
        lambda: EventFilters(event_ids=frozenset({70000})),
        lambda: EventFilters(pids=frozenset(range(9))),
        lambda: EventFilters(exe_names=frozenset({""})),
        lambda: EnableRule(level=256),
        lambda: EnableRule(level=-1),
        lambda: EnableRule(match_any=1 << 64),
        lambda: EnableRule(match_all=-1),
        lambda: EnableRule(properties=1 << 32),
    ],
)
def test_out_of_range_rules_are_refused(make: object) -> None:
    with pytest.raises(InvalidSessionConfig):
        make()  # type: ignore[operator]


def test_enable_state_combines_sessions() -> None:
    state = EnableState.from_sessions(
        [SessionEnable(1, 1, EnableRule(level=3, match_any=0b01)), SessionEnable(2, 2, EnableRule(level=5, match_any=0b100))]
    )
    assert state.enabled and state.max_level == 5 and state.any_keyword == 0b101
    assert state.is_enabled(5, 0b100) and not state.is_enabled(6, 0b100) and not state.is_enabled(1, 0b10)
    everything = EnableState.from_sessions([SessionEnable(1, 1, EnableRule())])
    assert everything.max_level == 255 and everything.any_keyword == ALL_KEYWORDS
    assert not EnableState.from_sessions([]).is_enabled(0, 0)


def test_enable_by_name_and_by_guid_are_the_same_provider() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.start("A")
    table.enable("A", "MyCompany.MyComponent", level=4)
    guid = provider_guid_from_name("MyCompany.MyComponent")
    assert table.sessions_for(guid, 4, 0, 1) == (table.session("A").session_id,)
    assert table.query("A")["providers"][0]["name"] == "MyCompany.MyComponent"
    table.enable("A", "{" + str(guid).upper() + "}", level=2)  # same provider by GUID: an update
    assert table.sessions_for(guid, 4, 0, 1) == ()
    assert len(table.session("A").rules) == 1
    assert table.sessions_for(uuid.uuid4(), 0, 0, 0) == ()
