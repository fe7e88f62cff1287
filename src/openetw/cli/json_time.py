"""Times in ``--json`` output take one form: ISO 8601 in UTC, ending in ``Z``, with the precision
the source has. A FILETIME (100 ns ticks: records, logs) has 7 fractional digits, as Windows'
``SystemTime`` attributes; a POSIX time the service took (``time.time()``) has 6; a time kept to
the second has none. Where Windows keeps a FILETIME (an event's ``TimeCreated``), the FILETIME
stays beside it under its own key (``time_created_filetime``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["POSIX_TIME_KEYS", "datetime_iso", "filetime_iso", "posix_time_iso", "with_iso_times"]

# Keys whose numbers are POSIX times (seconds since 1970) in what the trace service answers.
POSIX_TIME_KEYS = frozenset({"created_at", "started_at", "stopped_at"})
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def filetime_iso(filetime: int) -> str:
    """``2020-07-29T00:07:10.6912345Z``; a FILETIME no calendar date holds is ``FILETIME(n)``."""
    from openetw.events.text import filetime_text

    return filetime_text(filetime)


def posix_time_iso(seconds: float) -> str:
    """``2026-11-29T06:03:21.611442Z``: a POSIX time to the microsecond."""
    micro = round(seconds * 1_000_000)
    return datetime_iso(_UNIX_EPOCH + timedelta(microseconds=micro))


def datetime_iso(value: datetime, digits: int = 6) -> str:
    """A datetime (naive ones are UTC) with ``digits`` fractional digits (0, 3 or 6)."""
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    text = f"{utc:%Y-%m-%dT%H:%M:%S}"
    if digits:
        text += "." + f"{utc.microsecond:06d}"[:digits]
    return text + "Z"


def with_iso_times(value: Any) -> Any:
    """``value`` with every number under a ``POSIX_TIME_KEYS`` key, at any depth, as ISO text."""
    if isinstance(value, dict):
        return {
            key: posix_time_iso(item)
            if key in POSIX_TIME_KEYS and isinstance(item, int | float) and not isinstance(item, bool)
            else with_iso_times(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [with_iso_times(item) for item in value]
    return value
