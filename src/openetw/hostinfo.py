"""Facts about this machine that go into file headers (read once, at the edge)."""

from __future__ import annotations

import functools
import os


@functools.cache
def cpu_speed_mhz() -> int:
    """The processor clock in MHz as /proc/cpuinfo reports it; 1000 when the kernel does not say.

    ETL headers carry it (CpuSpeedInMHz) and some readers divide by it, so it is never 0.
    """
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.lower().startswith("cpu mhz"):
                    return max(1, int(float(line.split(":", 1)[1])))
    except (OSError, ValueError):
        pass
    return 1000


def processor_count() -> int:
    return os.cpu_count() or 1
