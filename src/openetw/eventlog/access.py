"""Who may read and write a log: the Linux form of a channel's ``channelAccess``. Pure.

A log has an owner, a group (the readers group, Windows' "Event Log Readers") and Unix mode
bits; ``writers`` is a group that may write besides the owner (the service accounts that write
System). Root may do anything. On an ``Application``-isolation log a user who may not read the
log may still read the events that user wrote (``READ_OWN``). Decisions take the peer's
credentials as the service reads them with ``SO_PEERCRED`` (uid and groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from openetw.eventlog.model import LogConfig

__all__ = ["Caller", "ReadAccess", "may_configure", "may_write", "read_access"]


@dataclass(frozen=True)
class Caller:
    uid: int
    gids: frozenset[int] = frozenset()


class ReadAccess(Enum):
    ALL = "all"
    READ_OWN = "own"  # only the events the caller wrote
    NONE = "none"


def _bits(config: LogConfig, caller: Caller) -> int:
    if caller.uid == config.owner:
        return (config.mode >> 6) & 7
    if config.group in caller.gids:
        return (config.mode >> 3) & 7
    return config.mode & 7


def read_access(config: LogConfig, caller: Caller) -> ReadAccess:
    if caller.uid == 0 or _bits(config, caller) & 4:
        return ReadAccess.ALL
    if config.isolation == "Application":
        return ReadAccess.READ_OWN
    return ReadAccess.NONE


def may_write(config: LogConfig, caller: Caller) -> bool:
    if caller.uid == 0 or _bits(config, caller) & 2:
        return True
    return config.writers is not None and config.writers in caller.gids


def may_configure(config: LogConfig, caller: Caller) -> bool:
    """Settings, clearing and import: root and the owner."""
    return caller.uid in (0, config.owner)
