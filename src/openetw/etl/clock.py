"""Time as an ETL file keeps it: raw timestamps in the session's clock, converted through the logfile header."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from openetw.etl.intypes import (
    FILETIME_EPOCH,
    UNIX_EPOCH_FILETIME,
    datetime_to_filetime,
    filetime_iso,
    filetime_to_datetime,
)
from openetw.etl.layouts import CLOCK_CPU_CYCLE, CLOCK_QPC, CLOCK_SYSTEM_TIME

__all__ = ["FILETIME_EPOCH", "SYSTEM_TIME_CLOCK", "TraceClock", "datetime_to_filetime", "filetime_to_datetime", "filetime_to_iso", "unix_ns_to_filetime"]



def unix_ns_to_filetime(ns: int) -> int:
    return ns // 100 + UNIX_EPOCH_FILETIME


def filetime_to_iso(filetime: int) -> str:
    """ISO 8601 UTC with the file's full 100 ns precision: ``2020-07-29T00:07:10.6912345Z``."""
    return filetime_iso(filetime)


@dataclass(frozen=True, slots=True)
class TraceClock:
    """Converts a record's raw timestamp to FILETIME, as ETW consumers do.

    ``FILETIME = start_time + (timestamp - reference_timestamp) * scale`` where the reference is
    the logfile header record's own timestamp and the scale follows the clock type.
    """

    clock_type: int
    start_time: int  # FILETIME
    reference_timestamp: int
    perf_freq: int
    cpu_speed_mhz: int = 0

    def to_filetime(self, timestamp: int) -> int:
        delta = timestamp - self.reference_timestamp
        if self.clock_type == CLOCK_QPC and self.perf_freq > 0:
            return self.start_time + delta * 10_000_000 // self.perf_freq
        if self.clock_type == CLOCK_CPU_CYCLE and self.cpu_speed_mhz > 0:
            return self.start_time + delta * 10 // self.cpu_speed_mhz
        if self.clock_type == CLOCK_SYSTEM_TIME:
            return self.start_time + delta
        # Unknown clock: treat timestamps as FILETIME-like ticks, the least surprising reading.
        return self.start_time + delta

    def linear(self) -> tuple[int, int, int, int]:
        """``(start, reference, multiply, divide)``: ``to_filetime(t)`` is ``start + (t - reference)
        * multiply // divide``, for a caller that converts many timestamps without a call each."""
        if self.clock_type == CLOCK_QPC and self.perf_freq > 0:
            return self.start_time, self.reference_timestamp, 10_000_000, self.perf_freq
        if self.clock_type == CLOCK_CPU_CYCLE and self.cpu_speed_mhz > 0:
            return self.start_time, self.reference_timestamp, 10, self.cpu_speed_mhz
        return self.start_time, self.reference_timestamp, 1, 1

    def from_filetime(self, filetime: int) -> int:
        delta = filetime - self.start_time
        if self.clock_type == CLOCK_QPC and self.perf_freq > 0:
            return self.reference_timestamp + delta * self.perf_freq // 10_000_000
        if self.clock_type == CLOCK_CPU_CYCLE and self.cpu_speed_mhz > 0:
            return self.reference_timestamp + delta * self.cpu_speed_mhz // 10
        return self.reference_timestamp + delta

    def to_datetime(self, timestamp: int) -> datetime:
        return filetime_to_datetime(self.to_filetime(timestamp))


SYSTEM_TIME_CLOCK = TraceClock(CLOCK_SYSTEM_TIME, 0, 0, 10_000_000)
