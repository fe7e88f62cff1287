"""PerfView's value formatting: .NET number/date/address text, enums, manifest maps, typed properties."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.manifest.winmeta import InType, OutType
from openetw.report.perfview import dotnet
from openetw.report.perfview.render import enum_text, flags_text, render_map, render_property
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (999, "999"), (65536, "65,536"), (-1726546814, "-1,726,546,814")])
def test_n0(value: int, text: str) -> None:
    assert dotnet.n0(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0.000"), (2942.3057, "2,942.306"), (0.9285, "0.929"), (78.6839, "78.684"), (-0.0004, "0.000"), (1e6 / 3, "333,333.333")],
)
def test_n3_rounds_half_away_from_zero_with_separators(value: float, text: str) -> None:
    assert dotnet.n3(value) == text


def test_n3_of_an_exact_ratio() -> None:
    assert dotnet.n3_exact(Fraction(29423057 * 1000, 10_000_000)) == "2,942.306"


@pytest.mark.parametrize(("value", "text"), [(0, "0x00000000"), (0xFF, "0x000000ff"), (0x1B0F1000028, "0x1b0f1000028"), (-1, "0xffffffffffffffff")])
def test_address_is_at_least_eight_lower_case_digits(value: int, text: str) -> None:
    assert dotnet.address(value) == text


def test_date_time_is_utc_with_microseconds() -> None:
    value = datetime(2021, 9, 9, 14, 59, 35, 799000, tzinfo=UTC)
    assert dotnet.date_time(value) == "21/09/09 14:59:35.799000"


def test_truncate_cuts_at_twenty_and_escapes_newlines() -> None:
    assert dotnet.truncate("x" * 20) == "x" * 20
    assert dotnet.truncate("x" * 21) == "x" * 20 + "..."
    assert dotnet.truncate("a\nb\r") == "a\\nb\\r"


@given(st.integers(min_value=-(2**63), max_value=2**64))
@settings(max_examples=200)
def test_as_signed_round_trips(value: int) -> None:
    assert dotnet.as_signed(value, 64) & (2**64 - 1) == value & (2**64 - 1)
    assert -(2**63) <= dotnet.as_signed(value, 64) < 2**63


SHARE = {0: "None", 1: "Read", 2: "Write", 3: "ReadWrite", 4: "Delete"}


@pytest.mark.parametrize(("value", "text"), [(0, "None"), (7, "ReadWrite, Delete"), (5, "Read, Delete"), (8, "8"), (9, "9")])
def test_flags_enum_prints_as_dotnet_does(value: int, text: str) -> None:
    assert flags_text(value, SHARE) == text


def test_value_enum_prints_the_number_when_unnamed() -> None:
    assert enum_text(1, {1: "Induced"}) == "Induced"
    assert enum_text(3, {1: "Induced"}) == "3"


KEYWORDS = EventMap("Keywords", "bit", (MapEntry(0, "None"), MapEntry(1, "Process"), MapEntry(2, "Thread"), MapEntry(3, "Both"), MapEntry(4, "Image")))


def test_manifest_bit_map_in_the_manifest_parser_style() -> None:
    assert render_map(7, KEYWORDS, builtin=False) == "Process|Thread|Image"
    assert render_map(0x13, KEYWORDS, builtin=False) == "Process|Thread|0x10"
    assert render_map(0, KEYWORDS, builtin=False) == "0"
    assert render_map(3, KEYWORDS, builtin=True) == "Both"


def test_typed_properties() -> None:
    assert render_property(0xFFFFFFFF, PropertyInfo("x", InType.UINT32)) == "-1"
    assert render_property(65535, PropertyInfo("x", InType.UINT16)) == "65535"
    assert render_property(65535, PropertyInfo("x", InType.UINT16), builtin=True) == "65,535"
    assert render_property(0x70, PropertyInfo("k", InType.UINT64)) == "112"
    assert render_property(0x70, PropertyInfo("k", InType.UINT64), unsigned_64_as_address=True) == "0x00000070"
    assert render_property(0x70, PropertyInfo("p", InType.POINTER)) == "0x00000070"
    assert render_property(0x70, PropertyInfo("h", InType.UINT64, OutType.HEXINT64), builtin=True) == "112"
    assert render_property(True, PropertyInfo("b", InType.BOOLEAN)) == "True"
    guid = uuid.UUID("0ad614c4-0ef4-4225-8013-f44f37cb0397")
    assert render_property(guid, PropertyInfo("g", InType.GUID)) == "0ad614c4-0ef4-4225-8013-f44f37cb0397"
    assert render_property([1, 2], PropertyInfo("a", InType.UINT32, count=2)) == "[1,2]"


def test_systemtime_shows_its_seconds_as_milliseconds_too() -> None:
    value = datetime(2021, 9, 9, 14, 59, 35, 799000)
    assert render_property(value, PropertyInfo("t", InType.SYSTEMTIME)) == "21/09/09 14:59:35.035000"
    assert render_property(value.replace(tzinfo=UTC), PropertyInfo("t", InType.FILETIME)) == "21/09/09 14:59:35.799000"


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (bytes([2, 0, 0, 0, 10, 50, 10, 50]) + bytes(8), "10.50.10.50:0"),
        (bytes([23, 0, 0, 53]) + bytes(4) + bytes.fromhex("20014898000000000000000010501050") + bytes(4), "[2001:4898::1050:1050]:53"),
        (bytes(range(20)), "000102030405060708090A0B0C0D0E0F..."),
    ],
)
def test_binary_addresses_and_bytes(raw: bytes, text: str) -> None:
    assert render_property(raw, PropertyInfo("Address", InType.BINARY, length=len(raw))) == text
