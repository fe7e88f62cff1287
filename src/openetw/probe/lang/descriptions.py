"""Probe descriptions (``provider:module:function:name``) and how they match events.

``etw`` probes are named as Windows DTrace names them: module = provider GUID (lower case) or
provider name, function = ``<level>_<keyword>`` (``0x05_0x0000000000000001``; ``0xff_0xffffffffffffffff``
for all), name = event id, event name or ``generic_event``. Empty fields and ``*``/``?``
wildcards match anything. A literal level/keyword admits an event as an ETW session enabled
with them would: level 0 events and levels up to the given one; keyword 0 events and those
sharing a bit with the given keyword (keyword 0 admits all).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

__all__ = ["DEFAULT_PROVIDERS", "Description", "EventIdentity", "parse_description", "timer_period"]

_LEVEL_KEYWORD = re.compile(r"^0x([0-9a-fA-F]{1,2})_0x([0-9a-fA-F]{1,16})$")
_TICK = re.compile(r"^(tick|profile)-(\d+)(ns|nsec|us|usec|ms|msec|s|sec|m|min|h|hour|d|day|hz)?$")
_UNITS = {"ns": 1, "nsec": 1, "us": 1000, "usec": 1000, "ms": 10**6, "msec": 10**6, "s": 10**9, "sec": 10**9,
          "m": 60 * 10**9, "min": 60 * 10**9, "h": 3600 * 10**9, "hour": 3600 * 10**9, "d": 86400 * 10**9, "day": 86400 * 10**9}  # fmt: skip
_SPECIAL = frozenset({"BEGIN", "END", "ERROR"})


@dataclass(frozen=True, slots=True)
class EventIdentity:
    """What a description is matched against: one kind of event of one provider."""

    guid: str
    provider_name: str | None
    level: int
    keyword: int
    id: int
    event_name: str | None

    @property
    def function(self) -> str:
        return f"0x{self.level:02x}_0x{self.keyword:016x}"


def _wild(text: str) -> bool:
    return any(c in text for c in "*?[")


@dataclass(frozen=True)
class Description:
    provider: str
    module: str
    function: str
    name: str
    text: str
    period: int | None = None  # timers: nanoseconds of trace time

    @property
    def special(self) -> str | None:
        """``BEGIN``, ``END``, ``ERROR``, ``timer`` or ``None`` (an event probe)."""
        if self.period is not None:
            return "timer"
        if self.provider in ("", "dtrace") and not self.module and not self.function and self.name in _SPECIAL:
            return self.name
        return None

    def match(self, event: EventIdentity) -> tuple[str, str, str, str] | None:
        """The probe (provider, module, function, name) this description gives ``event``, or None."""
        if self.provider and not fnmatch.fnmatchcase("etw", self.provider):
            return None
        module = self.module
        if module and module != "*" and not fnmatch.fnmatchcase(event.guid, module.lower()) and not (
            event.provider_name is not None and fnmatch.fnmatchcase(event.provider_name.lower(), module.lower())
        ):
            return None
        function = self.function or event.function
        if self.function and self.function != "*":
            literal = _LEVEL_KEYWORD.match(self.function)
            if literal is not None and not _wild(self.function):
                level, keyword = int(literal.group(1), 16), int(literal.group(2), 16)
                if event.level and level and event.level > level:
                    return None
                if event.keyword and keyword and not event.keyword & keyword:
                    return None
            elif not fnmatch.fnmatchcase(event.function, self.function.lower()):
                return None
            else:
                function = event.function
        name = self.name
        if name and name not in ("*", "generic_event"):
            if name.isdigit():
                if int(name) != event.id:
                    return None
            elif not (fnmatch.fnmatchcase(str(event.id), name) or (event.event_name is not None and fnmatch.fnmatchcase(event.event_name, name))):
                return None
            if _wild(name):
                name = str(event.id)
        elif not name or name == "*":
            name = str(event.id)
        return ("etw", event.guid, function if not _wild(function) else event.function, name)


DEFAULT_PROVIDERS = frozenset({"etw", "dtrace", "profile", "interval"})


def parse_description(text: str, providers: frozenset[str] | set[str] = DEFAULT_PROVIDERS) -> Description:
    """A description as written; fewer than four fields fill from the right (``BEGIN`` is a name).
    ``providers`` are the probe providers that exist (the runner's registry)."""
    if text.startswith("interval:"):
        parts = text.split(":")
        if len(parts) != 3 or parts[1] not in _UNITS or not parts[2].isdigit() or int(parts[2]) == 0:
            raise ValueError(f"interval probes are written interval:<unit>:<count> (interval:s:1), not {text!r}")
        return Description("interval", "", "", text, text, int(parts[2]) * _UNITS[parts[1]])
    parts = text.split(":")
    if len(parts) > 4:
        raise ValueError(f"a probe description has at most four fields (provider:module:function:name), not {text!r}")
    parts = [""] * (4 - len(parts)) + parts
    provider, module, function, name = parts
    if not provider and not module and not function:
        period = timer_period(name)
        if period is not None:
            return Description("profile", "", "", name, text, period)
    if provider and not _wild(provider) and provider not in providers:
        raise ValueError(f"unknown probe provider {provider!r} (providers: {', '.join(sorted(providers))})")
    return Description(provider, module, function, name, text)


def timer_period(name: str) -> int | None:
    match = _TICK.match(name)
    if match is None:
        return None
    count, unit = int(match.group(2)), match.group(3) or "hz"
    if count == 0:
        raise ValueError(f"a timer needs a period above zero: {name!r}")
    if unit == "hz":
        return max(1, 10**9 // count)
    return count * _UNITS[unit]
