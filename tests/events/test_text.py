"""The read model's text of an event: one FILETIME formatter, one epoch number, one level table."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

import openetw
from openetw.etl.intypes import datetime_to_filetime
from openetw.events.text import LEVEL_TEXT, UNIX_EPOCH_FILETIME, filetime_text, level_name

SRC = Path(openetw.__file__).parent
WHEN = datetime_to_filetime(datetime(2026, 11, 29, 8, 0, tzinfo=UTC)) + 1_234_567


@pytest.mark.parametrize(
    ("digits", "text"),
    [(7, "2026-11-29T08:00:00.1234567Z"), (9, "2026-11-29T08:00:00.123456700Z"), (3, "2026-11-29T08:00:00.123Z")],
)
def test_a_filetime_in_windows_precisions(digits: int, text: str) -> None:
    assert filetime_text(WHEN, digits) == text


def test_a_filetime_no_calendar_holds_is_named_not_raised() -> None:
    assert filetime_text(2**63) == f"FILETIME({2**63})"
    assert filetime_text(-(2**62), 9, undated="never") == "never"
    with pytest.raises(ValueError, match="fractional digits"):
        filetime_text(WHEN, 6)


def test_the_engines_forms_are_the_same_text() -> None:
    from openetw.etl.clock import filetime_to_iso
    from openetw.evtx.values import filetime_text as xml_text

    assert filetime_to_iso(WHEN) == filetime_text(WHEN)
    assert xml_text(WHEN) == filetime_text(WHEN, 9)


def test_the_epoch_number_is_1970_and_written_once() -> None:
    assert UNIX_EPOCH_FILETIME == datetime_to_filetime(datetime(1970, 1, 1, tzinfo=UTC))
    homes = [
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if re.search(r"\b116_?444_?736_?000_?000_?000\b", path.read_text(encoding="utf-8"))
    ]
    assert homes == ["etl/intypes.py"]


def test_level_names_are_winmetas() -> None:
    assert LEVEL_TEXT == {0: "Log Always", 1: "Critical", 2: "Error", 3: "Warning", 4: "Information", 5: "Verbose"}
    assert level_name(4) == "Information" and level_name(17) == "Level 17"


def test_no_other_level_table() -> None:
    """A dict literal mapping 1..5 to level names outside winmeta is a second table."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(v, ast.Constant) and v.value == "Verbose" for v in node.values):
                found.append(path.relative_to(SRC).as_posix())
    assert found == []
