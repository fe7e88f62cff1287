"""Per-session statistics (the counters of EVENT_TRACE_PROPERTIES, plus events written).

``buffers`` and ``free_buffers`` are gauges: the current number of buffers in the session's
pools and how many of them are free. The other five are counters: they only ever grow, and a
request to count a negative amount is refused, so the books always balance::

    events written by producers = events_written + events_lost

(plus ``events_rejected``: records a producer forged or framed wrongly, which the service
dropped; they were never events. ``events_truncated`` counts events whose fields were cut to
ETW's limits: they are in ``events_written`` too.)
"""

from __future__ import annotations

from dataclasses import dataclass

from openetw.errors import InvalidArgument

__all__ = ["COUNTER_KEYS", "GAUGE_KEYS", "STATISTICS_KEYS", "SessionStatistics"]

GAUGE_KEYS = ("buffers", "free_buffers")
COUNTER_KEYS = (
    "events_written", "events_lost", "buffers_written", "log_buffers_lost", "realtime_buffers_lost", "events_rejected",
    "events_truncated",
)  # fmt: skip
STATISTICS_KEYS = GAUGE_KEYS + COUNTER_KEYS


def _count(amount: int, what: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, not {amount!r}")
    return amount


@dataclass
class SessionStatistics:
    buffers: int = 0
    free_buffers: int = 0
    events_written: int = 0
    events_lost: int = 0
    buffers_written: int = 0
    log_buffers_lost: int = 0
    realtime_buffers_lost: int = 0
    events_rejected: int = 0
    events_truncated: int = 0

    def buffer_written(self, events: int) -> None:
        """One buffer holding ``events`` events reached its destination."""
        self.events_written += _count(events, "events in a buffer")
        self.buffers_written += 1

    def add_events_lost(self, count: int) -> None:
        self.events_lost += _count(count, "events lost")

    def add_events_rejected(self, count: int) -> None:
        self.events_rejected += _count(count, "events rejected")

    def add_events_truncated(self, count: int) -> None:
        self.events_truncated += _count(count, "events truncated")

    def add_log_buffers_lost(self, count: int = 1) -> None:
        self.log_buffers_lost += _count(count, "log buffers lost")

    def add_realtime_buffers_lost(self, count: int = 1) -> None:
        self.realtime_buffers_lost += _count(count, "real-time buffers lost")

    def set_buffer_counts(self, buffers: int, free_buffers: int) -> None:
        _count(buffers, "buffers")
        _count(free_buffers, "free buffers")
        if free_buffers > buffers:
            raise InvalidArgument(f"{free_buffers} free buffers out of only {buffers}")
        self.buffers = buffers
        self.free_buffers = free_buffers

    def as_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in STATISTICS_KEYS}
