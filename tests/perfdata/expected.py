"""Comparing decoded events with what LinuxTracepoints' ``perf-decode`` printed for the same file.

The reference JSON (``*.linux.json`` in the corpus) is the decoder's own text rendering; openetw
decodes an EventHeader event to the TraceLogging record it describes and its fields to typed
Python values. ``same_value`` is the normalisation between the two, type by type of the
openetw value (everything else must be equal as it is):

* bytes: the JSON's lowercase hex dump (``"01 02"``); an empty binary also matches ``null`` (a
  counted field of 0 bytes whose format reads values: the JSON prints null);
* IPv4/IPv6 addresses, GUIDs: their text;
* integers: a JSON number, or ``"0x…"`` (hex formats; the kernel's ``pid_t`` fields), or the
  number in ``"NAME(n)"`` (errno: ``"EPERM(1)"``), or ``"TIME(n)"`` / a date (time values
  outside FILETIME stay the seconds since 1970);
* ``datetime``: the JSON date read as seconds since 1970 (JSON dates have whole seconds);
* floats: equal as float32 when the JSON prints a float32 (``3.14``), ``"-nan"``/``"-inf"``;
* booleans: a JSON boolean;
* strings: equal, or, for an invalid code unit (a UTF-32 value past U+10FFFF), openetw's U+FFFD
  against the bytes the JSON wrote (not UTF-8: read back as surrogate escapes);
* structs (dicts) against the JSON's objects, field by field in order; arrays element by element.

Event names: ``"Provider:Event"`` (the interceptor's JSON appends ``;tag=0x…`` to tagged field
names: stripped). Meta: ``time`` to openetw's 100 ns (the JSON has ns: truncated), cpu, pid,
tid, and level, keyword, opcode, id, version, activity, related activity (absent in the JSON: 0).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import struct
import uuid
from datetime import UTC, datetime
from typing import Any

_NAMED_NUMBER = re.compile(r"^[A-Z0-9_]+\((-?\d+)\)$")
_DATE = re.compile(r"^(-?\d+)-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)$")


def load_reference(text: str) -> list[list[tuple[str, Any]]]:
    """The events of a ``*.linux.json`` file (``"name": [events]`` without braces), each as
    its (key, value) pairs in order (names may repeat)."""
    document = json.loads("{" + text.lstrip("\ufeff") + "}", object_pairs_hook=lambda pairs: pairs)
    (_, events) = document[0]
    return events


def _days_from_civil(year: int, month: int, day: int) -> int:
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def date_seconds(text: str) -> int | None:
    match = _DATE.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups())
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second


def _json_int(expected: Any) -> int | None:
    if isinstance(expected, bool):
        return int(expected)
    if isinstance(expected, int):
        return expected
    if isinstance(expected, str):
        if expected.startswith("0x"):
            return int(expected, 16)
        named = _NAMED_NUMBER.match(expected)
        if named:
            return int(named.group(1))
        return date_seconds(expected)
    return None


def _invalid(text: str) -> bool:
    """Text the reference wrote as bytes that are no UTF-8 (read back as surrogate escapes) or U+FFFD."""
    return any(0xDC80 <= ord(c) <= 0xDCFF or c == "\ufffd" for c in text)


def same_value(expected: Any, mine: Any) -> bool:
    if isinstance(mine, (bytes, bytearray)):
        return (expected is None and not mine) or expected == bytes(mine).hex(" ")
    if isinstance(mine, (ipaddress.IPv4Address, ipaddress.IPv6Address, uuid.UUID)):
        return str(expected).lower() == str(mine)
    if isinstance(mine, bool):
        return expected is mine or (isinstance(expected, int) and bool(expected) == mine)
    if isinstance(mine, datetime):
        seconds = (mine.replace(tzinfo=UTC) if mine.tzinfo is None else mine) - datetime(1970, 1, 1, tzinfo=UTC)
        return isinstance(expected, str) and date_seconds(expected) == int(seconds.total_seconds() // 1)
    if isinstance(mine, int):
        return _json_int(expected) == mine
    if isinstance(mine, float):
        if isinstance(expected, str):
            return (math.isnan(mine) and "nan" in expected) or (
                math.isinf(mine) and expected.endswith("inf") and (mine < 0) == expected.startswith("-")
            )
        if not isinstance(expected, (int, float)):
            return False
        if float(expected) == mine:
            return True
        try:
            return struct.unpack("<f", struct.pack("<f", float(expected)))[0] == mine
        except OverflowError:
            return False
    if isinstance(mine, str):
        return expected == mine or (isinstance(expected, str) and _invalid(expected) and "\ufffd" in mine)
    if isinstance(mine, list):
        return (
            isinstance(expected, list)
            and len(expected) == len(mine)
            and all(same_value(e, m) for e, m in zip(expected, mine, strict=True))
        )
    if isinstance(mine, dict):
        return isinstance(expected, list) and same_fields(expected, list(mine.items())) == []
    if mine is None:
        return expected in (None, "")
    return bool(expected == mine)


def field_name(key: str) -> str:
    return key.split(";tag=", 1)[0]


def same_fields(expected: list[tuple[str, Any]], mine: list[tuple[str, Any]]) -> list[str]:
    """What differs between the JSON's fields and openetw's, in order."""
    problems = []
    if [field_name(key) for key, _ in expected] != [name for name, _ in mine]:
        return [f"field names {[field_name(key) for key, _ in expected]} != {[name for name, _ in mine]}"]
    for (_key, want), (name, got) in zip(expected, mine, strict=True):
        if not same_value(want, got):
            problems.append(f"{name}: expected {want!r}, decoded {got!r}")
    return problems
