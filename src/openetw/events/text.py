"""An event's text: its time, its level's name, its decoded values as JSON-safe data.

``filetime_text`` is the one way an application writes a FILETIME (Windows' two precisions: the
100 ns ISO form ETW's tools print, the Event Log XML's nanosecond digits, or SYSTEMTIME's
milliseconds), ``UNIX_EPOCH_FILETIME`` the one number between the two epochs, ``level_name``
the names winmeta gives the standard levels (as Event Viewer shows them).

``json_value`` keeps the structure (lists for arrays, objects for structs) and turns GUIDs into
their lower-case text, date-times into ISO 8601 (``Z`` when UTC), bytes into lower-case hex and
IP addresses into their usual text. Floats that JSON cannot hold (NaN, infinities) become text.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openetw.etl.intypes import UNIX_EPOCH_FILETIME, filetime_iso
from openetw.manifest.winmeta import LEVEL_TEXT

__all__ = ["LEVEL_TEXT", "UNIX_EPOCH_FILETIME", "filetime_text", "json_properties", "json_value", "level_name"]


def filetime_text(filetime: int, digits: int = 7, *, undated: str | None = None) -> str:
    """``2026-11-29T08:00:00.1234567Z`` (``digits`` 7; 9 for the Event Log XML's nanosecond
    form, 3 for milliseconds); a FILETIME no calendar date holds is ``undated``, by default
    ``FILETIME(n)``."""
    try:
        return filetime_iso(int(filetime), digits)
    except (OverflowError, ValueError):
        if digits not in (3, 7, 9):
            raise
        return f"FILETIME({int(filetime)})" if undated is None else undated


def level_name(level: int) -> str:
    """A level's name as Event Viewer shows it (winmeta's text), else ``Level n``."""
    return LEVEL_TEXT.get(int(level), f"Level {int(level)}")


def json_value(value: Any) -> Any:
    """One decoded value (scalar, list or struct) as something ``json.dumps`` accepts."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return value.isoformat(timespec="microseconds")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return str(value)


def json_properties(decoded: Mapping[str, Any]) -> dict[str, Any]:
    """Every decoded property (name -> JSON-safe value), in schema order."""
    return {name: json_value(value) for name, value in decoded.items()}
