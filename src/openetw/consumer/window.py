"""Time windows (ProcessTrace's StartTime/EndTime): which events reach event callbacks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from openetw.errors import InvalidArgument
from openetw.etl.clock import datetime_to_filetime

__all__ = ["TimeWindow", "to_filetime"]

_EARLIEST = -(1 << 63)
_LATEST = (1 << 63) - 1


def to_filetime(value: datetime | int | None, what: str) -> int | None:
    """A FILETIME (100 ns ticks since 1601, UTC) from a datetime (naive: UTC) or an int."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return datetime_to_filetime(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidArgument(f"{what} must be a datetime or a FILETIME int, not {value!r}")


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """``start <= filetime <= end``; either bound may be open (``None``)."""

    start: int | None = None
    end: int | None = None

    @classmethod
    def of(cls, start: datetime | int | None, end: datetime | int | None) -> TimeWindow:
        window = cls(to_filetime(start, "start_time"), to_filetime(end, "end_time"))
        if window.start is not None and window.end is not None and window.start > window.end:
            raise InvalidArgument("start_time is after end_time")
        return window

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    @property
    def low(self) -> int:
        return _EARLIEST if self.start is None else self.start

    @property
    def high(self) -> int:
        return _LATEST if self.end is None else self.end

    def contains(self, filetime: int) -> bool:
        return self.low <= filetime <= self.high
