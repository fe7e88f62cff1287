"""Retention decisions (``wevtutil sl /rt /ab /ms``), pure: given a log's size and its bound,
what the store does next. The store measures; this module decides.

A log's size is all its files together. Writing stops at ``budget(max_size)``: the bound less
the write-ahead file's most and one growth step, so the files stay within one 64 KiB growth
step over the bound.
"""

from __future__ import annotations

from enum import Enum

from openetw.eventlog.model import Retention

__all__ = ["GROWTH_STEP", "Decision", "budget", "decide", "wal_pages"]

GROWTH_STEP = 64 << 10


class Decision(Enum):
    WRITE = "write"  # room left: store
    OVERWRITE = "overwrite"  # circular: drop the oldest, then store
    REFUSE = "refuse"  # retain: refuse and count
    ARCHIVE = "archive"  # autobackup: archive the full log, begin a new one, store there


def wal_pages(max_size: int, page_size: int) -> int:
    """Pages the write-ahead file may hold before it is folded into the log (at most 4096: 16 MiB of 4 KiB pages)."""
    return max(4, min(4096, max_size // page_size // 16))


def budget(max_size: int, page_size: int) -> int:
    """Bytes the log's database may use so that database + write-ahead file stay in bound."""
    return max(page_size * 8, max_size - wal_pages(max_size, page_size) * page_size - GROWTH_STEP // 2)


def decide(retention: Retention, used: int, limit: int) -> Decision:
    """What to do when the log uses ``used`` bytes of ``limit``."""
    if used <= limit:
        return Decision.WRITE
    return {"circular": Decision.OVERWRITE, "retain": Decision.REFUSE, "autobackup": Decision.ARCHIVE}[retention]
