"""What a trace saw: ControlTrace's statistics for its sources, plus the consumer's own counts.

Nothing is lost silently: every record a source gives is handled, dropped by back-pressure,
filtered (outside the time window, refused by a provider's enable rule, matched by no provider
when there is no default callback) or stopped short of by ``stop()``; each has a counter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SourceStatistics", "TraceStatistics"]


@dataclass(slots=True)
class SourceStatistics:
    """One source's side (a file: its logfile header and what reading it saw)."""

    buffers: int = 0
    free_buffers: int = 0
    events_written: int = 0
    events_lost: int = 0
    buffers_written: int = 0
    log_buffers_lost: int = 0
    realtime_buffers_lost: int = 0
    records: int = 0
    unknown_records: int = 0
    skipped_bytes: int = 0
    buffers_with_events_lost_flag: int = 0
    format_errors: int = 0

    def add(self, other: SourceStatistics) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class TraceStatistics:
    """The consumer's counts (see the module doc)."""

    events_read: int = 0
    events_handled: int = 0
    events_dropped: int = 0
    events_filtered: int = 0
    events_unmatched: int = 0
    events_outside_window: int = 0
    state_events_before_window: int = 0
    events_not_processed: int = 0
    callback_errors: int = 0
    decode_errors: int = 0
    format_errors: int = 0
    sources: list[SourceStatistics] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """ControlTrace's names for the sources' totals, then the consumer's own counters."""
        total = SourceStatistics()
        for source in self.sources:
            total.add(source)
        out: dict[str, Any] = {
            "buffers": total.buffers,
            "free_buffers": total.free_buffers,
            "events_written": total.events_written,
            "events_lost": total.events_lost,
            "buffers_written": total.buffers_written,
            "log_buffers_lost": total.log_buffers_lost,
            "realtime_buffers_lost": total.realtime_buffers_lost,
            "unknown_records": total.unknown_records,
            "skipped_bytes": total.skipped_bytes,
            "buffers_with_events_lost_flag": total.buffers_with_events_lost_flag,
        }
        mine = asdict(self)
        mine.pop("sources")
        mine["format_errors"] += total.format_errors
        out.update(mine)
        return out
