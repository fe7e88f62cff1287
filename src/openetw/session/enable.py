"""Enable rules (EnableTraceEx2) and the compact enable state a provider process keeps.

An event goes to a session iff

* the session's level is 0 or the event's level is at most that level;
* the event's keyword is 0 (unless ``IGNORE_KEYWORD_0`` is set), or the session's MatchAnyKeyword
  is 0, or ``keyword & any != 0 and keyword & all == all``;
* the session's filters admit the event id, the process id and the executable name.

``EnableState`` folds the rules of every session that enables a provider in one process into one
over-approximating check (``is_enabled``) that is a single comparison and a single AND on the hot
path, plus the exact per-session rules for choosing the pools to write to.
"""

from __future__ import annotations

import enum
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field

from openetw.session.errors import InvalidSessionConfig

__all__ = [
    "ALL_KEYWORDS",
    "DISABLED",
    "EnableProperty",
    "EnableRule",
    "EnableState",
    "EventFilters",
    "MAX_FILTER_EVENT_IDS",
    "MAX_FILTER_EXE_NAMES",
    "MAX_FILTER_PIDS",
    "SessionEnable",
]

ALL_KEYWORDS = (1 << 64) - 1
MAX_LEVEL = 255
# ETW's MAX_EVENT_FILTER_EVENT_ID_COUNT and MAX_EVENT_FILTER_PID_COUNT.
MAX_FILTER_EVENT_IDS = 64
MAX_FILTER_PIDS = 8
MAX_FILTER_EXE_NAMES = 64


class EnableProperty(enum.IntFlag):
    """ENABLE_TRACE_PARAMETERS.EnableProperty bits (``EVENT_ENABLE_PROPERTY_*``), same values as ETW."""

    SID = 0x001
    TS_ID = 0x002
    STACK_TRACE = 0x004
    PSM_KEY = 0x008
    IGNORE_KEYWORD_0 = 0x010
    PROVIDER_GROUP = 0x020
    ENABLE_KEYWORD_0 = 0x040
    PROCESS_START_KEY = 0x080
    EVENT_KEY = 0x100
    EXCLUDE_INPRIVATE = 0x200


def _exe_key(name: str) -> str:
    """Executable filters compare the file name only, without case (as ETW's EXECUTABLE_NAME filter)."""
    return posixpath.basename(name.replace("\\", "/")).lower()


@dataclass(frozen=True)
class EventFilters:
    """EVENT_FILTER_DESCRIPTOR equivalents: event ids (include or exclude), process ids, executables.

    An empty collection means "no filter of that type". ``event_ids_include`` chooses between
    EVENT_FILTER_TYPE_EVENT_ID with FilterIn true (only these ids) and false (all but these).
    """

    event_ids: frozenset[int] = frozenset()
    event_ids_include: bool = True
    pids: frozenset[int] = frozenset()
    exe_names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        ids = frozenset(self.event_ids)
        pids = frozenset(self.pids)
        exes = frozenset(_exe_key(name) for name in self.exe_names)
        if len(ids) > MAX_FILTER_EVENT_IDS:
            raise InvalidSessionConfig(f"event id filter holds {len(ids)} ids, at most {MAX_FILTER_EVENT_IDS}")
        if any(not 0 <= i <= 0xFFFF for i in ids):
            raise InvalidSessionConfig("event ids in a filter must be 0..65535")
        if len(pids) > MAX_FILTER_PIDS:
            raise InvalidSessionConfig(f"process id filter holds {len(pids)} ids, at most {MAX_FILTER_PIDS}")
        if any(not 0 <= p <= 0xFFFFFFFF for p in pids):
            raise InvalidSessionConfig("process ids in a filter must be 0..2**32-1")
        if len(exes) > MAX_FILTER_EXE_NAMES or any(not name for name in exes):
            raise InvalidSessionConfig(f"executable filter needs 1..{MAX_FILTER_EXE_NAMES} non-empty names")
        object.__setattr__(self, "event_ids", ids)
        object.__setattr__(self, "pids", pids)
        object.__setattr__(self, "exe_names", exes)

    @property
    def empty(self) -> bool:
        return not (self.event_ids or self.pids or self.exe_names)

    def admits_event_id(self, event_id: int) -> bool:
        if not self.event_ids:
            return True
        return (event_id in self.event_ids) == self.event_ids_include

    def admits_process(self, pid: int | None, exe: str | None) -> bool:
        if self.pids and pid not in self.pids:
            return False
        return not (self.exe_names and (exe is None or _exe_key(exe) not in self.exe_names))

    def admits(self, event_id: int, pid: int | None, exe: str | None) -> bool:
        return self.admits_event_id(event_id) and self.admits_process(pid, exe)


NO_FILTERS = EventFilters()


@dataclass(frozen=True)
class EnableRule:
    """What one session asked of one provider: level, keywords, enable properties, filters."""

    level: int = 0
    match_any: int = 0
    match_all: int = 0
    properties: int = 0
    filters: EventFilters = field(default=NO_FILTERS)

    def __post_init__(self) -> None:
        if not 0 <= self.level <= MAX_LEVEL:
            raise InvalidSessionConfig(f"level {self.level} is outside 0..255")
        for name in ("match_any", "match_all"):
            if not 0 <= getattr(self, name) <= ALL_KEYWORDS:
                raise InvalidSessionConfig(f"{name} must be an unsigned 64-bit keyword mask")
        if not 0 <= self.properties <= 0xFFFFFFFF:
            raise InvalidSessionConfig("enable properties must be an unsigned 32-bit mask")
        object.__setattr__(self, "properties", int(self.properties))

    def admits_level(self, level: int) -> bool:
        return self.level == 0 or level <= self.level

    def admits_keyword(self, keyword: int) -> bool:
        if keyword == 0:
            return not self.properties & EnableProperty.IGNORE_KEYWORD_0
        if self.match_any == 0:
            return True
        return keyword & self.match_any != 0 and keyword & self.match_all == self.match_all

    def admits(self, level: int, keyword: int, event_id: int, pid: int | None, exe: str | None) -> bool:
        return self.admits_level(level) and self.admits_keyword(keyword) and self.filters.admits(event_id, pid, exe)


@dataclass(frozen=True)
class SessionEnable:
    """One session's rule as a provider process sees it: which pool (logger id) and what to send."""

    session_id: int
    logger_id: int
    rule: EnableRule

    @property
    def level(self) -> int:
        return self.rule.level

    @property
    def match_any(self) -> int:
        return self.rule.match_any

    @property
    def match_all(self) -> int:
        return self.rule.match_all

    @property
    def properties(self) -> int:
        return self.rule.properties

    @property
    def filters(self) -> EventFilters:
        return self.rule.filters


@dataclass(frozen=True)
class EnableState:
    """Everything a provider needs to know about who listens, for one registration.

    ``enabled``, ``max_level`` and ``any_keyword`` combine all sessions: a session at level 0 makes
    ``max_level`` 255, a session with MatchAnyKeyword 0 makes ``any_keyword`` all ones. So
    ``is_enabled`` never says no to an event some session wants; ``sessions_for`` is exact.
    """

    sessions: tuple[SessionEnable, ...] = ()
    enabled: bool = False
    max_level: int = 0
    any_keyword: int = 0

    @classmethod
    def from_sessions(cls, sessions: Iterable[SessionEnable]) -> EnableState:
        entries = tuple(sessions)
        if not entries:
            return DISABLED
        max_level = max(MAX_LEVEL if e.level == 0 else e.level for e in entries)
        any_keyword = 0
        for entry in entries:
            any_keyword |= entry.match_any or ALL_KEYWORDS
        return cls(entries, True, max_level, any_keyword)

    def is_enabled(self, level: int = 0, keyword: int = 0) -> bool:
        """EventProviderEnabled: the one cheap check before building an event."""
        return self.enabled and level <= self.max_level and (keyword == 0 or keyword & self.any_keyword != 0)

    def sessions_for(
        self, level: int, keyword: int, event_id: int, pid: int | None = None, exe: str | None = None
    ) -> tuple[SessionEnable, ...]:
        """The sessions (and so the pools) that take this event."""
        return tuple(e for e in self.sessions if e.rule.admits(level, keyword, event_id, pid, exe))

    @property
    def session_ids(self) -> frozenset[int]:
        return frozenset(e.session_id for e in self.sessions)


DISABLED = EnableState()
