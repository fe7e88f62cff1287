"""Retention decisions (``wevtutil sl /rt /ab /ms``), pure: given a log's size and its bound,
what the store does next. The store measures; this module decides.

A log's size is all its files together (database, write-ahead file, shared-memory index).
Writing stops at ``budget(max_size)``: the bound less the write-ahead file's most, the
shared-memory index and half a growth step, so that the files stay within the bound; after each
write the store folds the write-ahead file in and gives free pages back to the file system.

A shared log gives each writer (a user other than root and the log's owner) a share of it
(``writer_share``): a flood by one user cannot push out another's events.
"""

from __future__ import annotations

from enum import Enum

from openetw.eventlog.model import Retention

__all__ = ["GROWTH_STEP", "ROW_OVERHEAD", "SHM_BYTES", "WRITER_SHARE", "Decision", "budget", "decide", "event_cost", "wal_pages", "writer_share"]

GROWTH_STEP = 64 << 10
SHM_BYTES = 32 << 10  # the -shm file of an open WAL database: one 32 KiB region
WRITER_SHARE = 4  # a writer other than root and the owner may hold 1/4 of a log
ROW_OVERHEAD = 256  # bytes an event costs besides twice its record (columns, indexes), for the writers' shares


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
    return max(page_size * 8, max_size - wal_pages(max_size, page_size) * page_size - SHM_BYTES - GROWTH_STEP // 2)


def writer_share(max_size: int) -> int:
    """Bytes of a log one writer other than root and the log's owner may hold (``event_cost`` each)."""
    return max_size // WRITER_SHARE


def event_cost(record_bytes: int) -> int:
    """What an event counts against its writer's share: its record twice (the record, and its
    rendered fields, message and their full-text entries later) and ``ROW_OVERHEAD``."""
    return 2 * record_bytes + ROW_OVERHEAD


def decide(retention: Retention, used: int, limit: int) -> Decision:
    """What to do when the log uses ``used`` bytes of ``limit``."""
    if used <= limit:
        return Decision.WRITE
    return {"circular": Decision.OVERWRITE, "retain": Decision.REFUSE, "autobackup": Decision.ARCHIVE}[retention]
