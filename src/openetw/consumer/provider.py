"""``Provider`` and ``EventFilter``: which events a trace wants, and who gets them.

A provider carries what a session asks of it (EnableTraceEx2: level, MatchAnyKeyword,
MatchAllKeyword, enable properties, event id / process id / executable filters) and the
consumer side (callbacks, filters). On a live session the enable rule goes to the trace service;
on a file the trace applies the same rule itself, so a provider sees the same events either way.

Kernel records (SYSTEM/PERFINFO headers) carry no provider GUID: they belong to the event class
GUID of their kernel group (``3d6fa8d0-...`` for Process), as krabsetw's kernel providers do.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from openetw.consumer.predicates import Predicate, any_event, as_predicate
from openetw.errors import InvalidArgument
from openetw.provider_names import parse_provider_guid
from openetw.session.enable import EnableProperty, EnableRule, EventFilters
from openetw.tdh.mof_kernel import GROUP_GUIDS, HOOK_ALIASES

__all__ = ["EventCallback", "EventFilter", "Provider", "kernel_group_guid", "match_guid"]

EventCallback = Callable[[Any, Any], Any]
"""``callback(record, context)``; what it returns is ignored."""

_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_GROUP_KEYS: dict[int, bytes] = {group: guid.bytes_le for group, guid in GROUP_GUIDS.items()}


def kernel_group_guid(hook_id: int) -> uuid.UUID | None:
    """The event class GUID of a kernel hook id (``group << 8 | type``), aliases applied."""
    group, kind = hook_id >> 8, hook_id & 0xFF
    group = HOOK_ALIASES.get((group, kind), (group, kind))[0]
    return GROUP_GUIDS.get(group)


def match_guid(record: Any) -> bytes | None:
    """The GUID (Windows byte order) a record is matched to providers by (not ``events.decoded.provider_key``, the record's source as text)."""
    if record.kind in _KERNEL_KINDS:
        hook = record.hook_id or 0
        group = hook >> 8
        if (group, hook & 0xFF) in HOOK_ALIASES:
            group = HOOK_ALIASES[(group, hook & 0xFF)][0]
        return _GROUP_KEYS.get(group)
    return record.provider_guid_bytes  # type: ignore[no-any-return]


def _ints(values: Iterable[int] | int, what: str) -> frozenset[int]:
    items = [values] if isinstance(values, int) else list(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise InvalidArgument(f"{what} must be integers, not {items!r}")
    return frozenset(items)


class IndexRows(Protocol):
    """Index rows seen by column name: a structured array of them, or a view of its columns."""

    def __len__(self) -> int: ...

    def __getitem__(self, name: str) -> np.ndarray: ...


class EventFilter:
    """Events of a provider that an id list and/or a predicate accept, with their own callbacks.

    ``EventFilter(predicate)``, ``EventFilter([ids])`` or ``EventFilter([ids], predicate)``:
    an event passes when its id is listed (if ids are given) and the predicate accepts it.
    """

    def __init__(self, ids_or_predicate: Any = None, predicate: Any = None) -> None:
        ids: frozenset[int] | None = None
        if ids_or_predicate is not None and not callable(ids_or_predicate):
            ids = _ints(ids_or_predicate, "event filter ids")
        elif ids_or_predicate is not None:
            if predicate is not None:
                raise InvalidArgument("EventFilter takes (ids, predicate): the first argument is the id list")
            predicate = ids_or_predicate
        self.ids = ids
        self.predicate: Predicate = as_predicate(predicate) if predicate is not None else any_event
        self.callbacks: list[EventCallback] = []

    def add_on_event_callback(self, callback: EventCallback) -> EventFilter:
        if not callable(callback):
            raise InvalidArgument(f"a callback must be callable, not {callback!r}")
        self.callbacks.append(callback)
        return self

    def matches(self, record: Any, context: Any) -> bool:
        if self.ids is not None and record.id not in self.ids:
            return False
        return self.predicate(record, context)

    def mask(self, rows: np.ndarray) -> np.ndarray | None:
        """Which index rows may pass (``None``: the predicate must see each record)."""
        predicate_mask = self.predicate.mask(rows)
        if self.ids is None:
            return predicate_mask
        ids_mask = np.isin(rows["id"], np.fromiter(self.ids, dtype=np.int64))
        return ids_mask if predicate_mask is None else ids_mask & predicate_mask

    def __repr__(self) -> str:
        ids = sorted(self.ids) if self.ids is not None else "any id"
        return f"<EventFilter {ids} {self.predicate.description} callbacks={len(self.callbacks)}>"


class Provider:
    """A provider to enable: ``Provider("Microsoft-Windows-Kernel-Process")`` or by GUID.

    A name is resolved when the trace opens, in ``openetw.provider_names``' order: the trace's
    manifests, then the installed ones, then ETW's name hash (announced with a
    ``ProviderNameWarning``; write ``"*Name"`` to mean the hash of a TraceLogging or EventSource
    provider). A malformed GUID is an ``InvalidArgument`` here.
    """

    def __init__(self, name_or_guid: str | uuid.UUID) -> None:
        self.name: str | None = None
        self.guid: uuid.UUID | None = None
        if isinstance(name_or_guid, uuid.UUID):
            self.guid = name_or_guid
        elif isinstance(name_or_guid, str) and name_or_guid.strip():
            self.guid = parse_provider_guid(name_or_guid)
            if self.guid is None:
                self.name = name_or_guid.strip()
        else:
            raise InvalidArgument(f"a provider needs a name or a GUID, not {name_or_guid!r}")
        self._level = 0
        self._any = 0
        self._all = 0
        self._properties = 0
        self._event_ids: frozenset[int] = frozenset()
        self._event_ids_include = True
        self._pids: frozenset[int] = frozenset()
        self._exe_names: frozenset[str] = frozenset()
        self._rule: EnableRule | None = None
        self.callbacks: list[EventCallback] = []
        self.filters: list[EventFilter] = []

    # -- what the session is asked for --------------------------------------------------------
    def any(self, mask: int) -> Provider:
        """MatchAnyKeyword: an event with a keyword needs one of these bits (0: any keyword)."""
        self._any = int(mask)
        return self._changed()

    def all(self, mask: int) -> Provider:
        """MatchAllKeyword: an event with a keyword needs all of these bits too."""
        self._all = int(mask)
        return self._changed()

    def level(self, level: int) -> Provider:
        """The most verbose level wanted (0: every level)."""
        self._level = int(level)
        return self._changed()

    def trace_flags(self, flags: int | EnableProperty) -> Provider:
        """Enable properties (``EnableProperty``: SID, STACK_TRACE, IGNORE_KEYWORD_0, ...)."""
        self._properties = int(flags)
        return self._changed()

    enable_property = trace_flags

    def event_ids(self, ids: Iterable[int] | int, *, include: bool = True) -> Provider:
        """Only these event ids (``include=False``: all but these), filtered where events are written."""
        self._event_ids = _ints(ids, "event ids")
        self._event_ids_include = include
        return self._changed()

    def process_ids(self, pids: Iterable[int] | int) -> Provider:
        """Only events of these processes."""
        self._pids = _ints(pids, "process ids")
        return self._changed()

    def exe_names(self, names: Iterable[str] | str) -> Provider:
        """Only events of processes running these executables (file names, without case)."""
        items = [names] if isinstance(names, str) else list(names)
        self._exe_names = frozenset(str(name) for name in items)
        return self._changed()

    def _changed(self) -> Provider:
        self._rule = None
        return self

    @property
    def enable_rule(self) -> EnableRule:
        """The rule a session applies (``InvalidSessionConfig`` when a setting is out of range)."""
        if self._rule is None:
            filters = EventFilters(self._event_ids, self._event_ids_include, self._pids, self._exe_names)
            self._rule = EnableRule(self._level, self._any, self._all, self._properties, filters)
        return self._rule

    # -- the consumer side --------------------------------------------------------------------
    def add_on_event_callback(self, callback: EventCallback) -> Provider:
        """``callback(record, context)`` for every event of this provider the session delivers."""
        if not callable(callback):
            raise InvalidArgument(f"a callback must be callable, not {callback!r}")
        self.callbacks.append(callback)
        return self

    def add_filter(self, event_filter: EventFilter) -> Provider:
        if not isinstance(event_filter, EventFilter):
            raise InvalidArgument(f"add_filter takes an EventFilter, not {event_filter!r}")
        self.filters.append(event_filter)
        return self

    # -- applying the rule --------------------------------------------------------------------
    @property
    def needs_process_name(self) -> bool:
        return bool(self._exe_names)

    def admits(self, record: Any, exe: str | None = None) -> bool:
        """Whether the session would deliver ``record`` (``exe``: its process's executable).

        When the executable is not known (no process event named it), the executable filter is
        left to whoever wrote the event: a live session applies it where events are written.
        """
        rule = self.enable_rule
        filters = rule.filters
        if exe is None and filters.exe_names:
            return (
                rule.admits_level(record.level) and rule.admits_keyword(record.keyword)
                and filters.admits_event_id(record.id) and (not filters.pids or record.pid in filters.pids)
            )
        return rule.admits(record.level, record.keyword, record.id, record.pid, exe)

    def rule_mask(self, rows: IndexRows) -> np.ndarray:
        """The rule over index rows, the executable filter aside (it needs process names)."""
        rule = self.enable_rule
        mask = np.ones(len(rows), dtype=bool)
        if rule.level:
            mask &= rows["level"] <= rule.level
        keyword = rows["keyword"]
        zero = keyword == 0
        if rule.match_any:
            wanted = ((keyword & np.uint64(rule.match_any)) != 0) & ((keyword & np.uint64(rule.match_all)) == np.uint64(rule.match_all))
        else:
            wanted = np.ones(len(rows), dtype=bool)
        keyword_ok = np.where(zero, not rule.properties & EnableProperty.IGNORE_KEYWORD_0, wanted)
        mask &= keyword_ok
        filters = rule.filters
        if filters.event_ids:
            listed = np.isin(rows["id"], np.fromiter(filters.event_ids, dtype=np.int64))
            mask &= listed if filters.event_ids_include else ~listed
        if filters.pids:
            mask &= np.isin(rows["pid"], np.fromiter(filters.pids, dtype=np.int64))
        return mask

    @property
    def label(self) -> str:
        return self.name or str(self.guid)

    def __repr__(self) -> str:
        guid = self.guid if self.guid is not None else "unresolved"
        return f"<Provider {self.name or ''} {guid} callbacks={len(self.callbacks)} filters={len(self.filters)}>"
