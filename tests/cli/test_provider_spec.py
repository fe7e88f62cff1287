"""The ``-p`` grammar and the command-wide filter options, table-driven."""

from __future__ import annotations

import pytest

from openetw.cli.provider_spec import EnableOptions, enable_options, parse_provider_spec
from openetw.errors import InvalidArgument
from openetw.session import EventFilters

GUID = "{5eadbeef-0000-4000-8000-000000000001}"
NONE = EnableOptions()
COMMON = enable_options("1,2", None, "10", ("app",), False, True, False)


@pytest.mark.parametrize(
    ("spec", "common", "expected"),
    [
        ("P", NONE, ("P", {})),
        ("P:0x10:info", NONE, ("P", {"any": 0x10, "level": 4})),
        (f"{GUID}:3:2:0x1", NONE, (GUID, {"any": 3, "level": 2, "all": 1})),
        ("P;event-ids=1,2", NONE, ("P", {"filters": EventFilters(frozenset({1, 2}))})),
        ("P;exclude-event-ids=0x3", NONE, ("P", {"filters": EventFilters(frozenset({3}), False)})),
        ("P::verbose;pids=10,11;exe=a,b", NONE,
         ("P", {"level": 5, "filters": EventFilters(pids=frozenset({10, 11}), exe_names=frozenset({"a", "b"}))})),
        ("P;stack;sid;ts", NONE, ("P", {"properties": 0x7})),
        ("P", COMMON, ("P", {"properties": 0x1, "filters": EventFilters(frozenset({1, 2}), True, frozenset({10}), frozenset({"app"}))})),
        ("P;exclude-event-ids=5;stack", COMMON,
         ("P", {"properties": 0x5, "filters": EventFilters(frozenset({5}), False, frozenset({10}), frozenset({"app"}))})),
        ("P;pids=7;exe=tool", COMMON, ("P", {"properties": 0x1, "filters": EventFilters(frozenset({1, 2}), True, frozenset({7}), frozenset({"tool"}))})),
        ("Some Name; event-ids=4 ", NONE, ("Some Name", {"filters": EventFilters(frozenset({4}))})),
    ],
)
def test_specs(spec: str, common: EnableOptions, expected: tuple) -> None:
    assert parse_provider_spec(spec, common) == expected


@pytest.mark.parametrize(
    "spec",
    ["", ":1", "a:b", "a:1:loud", "a:1:2:3:4", "a:1:300", "a;bogus", "a;color=red", "a;event-ids=", "a;event-ids=1,,2",
     "a;event-ids=x", "a;pids=1;pids=", "a;event-ids=1;exclude-event-ids=2", "a;exe=", "a;event-ids=" + ",".join(map(str, range(70)))],
)
def test_bad_specs(spec: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_provider_spec(spec)


@pytest.mark.parametrize(
    "args",
    [("1", "2", None, (), False, False, False), ("x", None, None, (), False, False, False), (None, None, "1,a", (), False, False, False)],
)
def test_bad_command_options(args: tuple) -> None:
    with pytest.raises(InvalidArgument):
        enable_options(*args)
