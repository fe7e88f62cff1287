"""The ``-p`` provider spec of ``session start/update``, ``trace`` and ``kernel probe``, and the
filter and enable-property options that apply to every ``-p`` of a command.

Grammar (also in ``--help`` and docs/cli.md)::

    SPEC     := PROVIDER [":" ANY [":" LEVEL [":" ALL]]] { ";" OPTION }
    PROVIDER := a GUID, *NAME (the name hash) or a NAME (see `openetw --help` for the order)
    ANY, ALL := keyword masks, decimal or 0x hex (empty: 0)
    LEVEL    := 0..255 or critical | error | warning | info | verbose
    OPTION   := "event-ids=" IDS | "exclude-event-ids=" IDS | "pids=" IDS | "exe=" NAMES
              | "stack" | "sid" | "ts"
    IDS      := NUMBER { "," NUMBER };  NAMES := NAME { "," NAME }

An option inside a spec replaces the command's option of the same kind for that provider
(``event-ids`` and ``exclude-event-ids`` are one kind: ETW's event id filter); ``stack``, ``sid``
and ``ts`` add to the command's ``--stack``, ``--sid`` and ``--ts``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import click

from openetw.cli.option_group import option_group
from openetw.errors import InvalidArgument
from openetw.provider_names import resolve_provider_name
from openetw.session import EventFilters
from openetw.session.enable import EnableProperty

__all__ = [
    "LEVEL_NAMES",
    "SPEC_HELP",
    "EnableOptions",
    "enable_options",
    "filter_options",
    "parse_number_list",
    "parse_provider_spec",
]

LEVEL_NAMES = {"critical": 1, "error": 2, "warning": 3, "info": 4, "informational": 4, "verbose": 5}
PROPERTY_WORDS = {"stack": EnableProperty.STACK_TRACE, "sid": EnableProperty.SID, "ts": EnableProperty.TS_ID}
SPEC_HELP = (
    "A provider to enable (repeatable): NAME_OR_GUID[:ANY[:LEVEL[:ALL]]][;OPTION...], OPTION one of"
    " event-ids=1,2  exclude-event-ids=3  pids=10,11  exe=app,tool  stack  sid  ts"
    " (these replace the command's --event-ids, --pids, ... for this provider)."
)


def _number(text: str, what: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise InvalidArgument(f"{what} {text!r} is not a number (decimal or 0x hex)") from None


def parse_number_list(text: str, what: str) -> frozenset[int]:
    """``1,2,0x10`` as a set of numbers; an empty item is an error."""
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise InvalidArgument(f"{what} {text!r} is not a comma-separated list of numbers")
    return frozenset(_number(item, what.rstrip("s")) for item in items)


@dataclass(frozen=True)
class EnableOptions:
    """Filters and enable properties: a command's (``filter_options``) or one spec's."""

    event_ids: frozenset[int] | None = None
    event_ids_include: bool = True
    pids: frozenset[int] | None = None
    exe_names: frozenset[str] | None = None
    properties: int = 0

    def over(self, common: EnableOptions) -> EnableOptions:
        """These options where set, ``common``'s elsewhere; properties added up."""
        ids_set = self.event_ids is not None
        return EnableOptions(
            self.event_ids if ids_set else common.event_ids,
            self.event_ids_include if ids_set else common.event_ids_include,
            self.pids if self.pids is not None else common.pids,
            self.exe_names if self.exe_names is not None else common.exe_names,
            self.properties | common.properties,
        )

    def filters(self) -> EventFilters:
        return EventFilters(
            self.event_ids or frozenset(), self.event_ids_include, self.pids or frozenset(), self.exe_names or frozenset()
        )


@dataclass(frozen=True)
class _Parsed:
    name: str
    masks: dict[str, int] = field(default_factory=dict)
    options: EnableOptions = EnableOptions()


def _spec_option(options: EnableOptions, item: str, spec: str) -> EnableOptions:
    key, sep, value = item.partition("=")
    key = key.strip().lower()
    if not sep:
        if key in PROPERTY_WORDS:
            return replace(options, properties=options.properties | int(PROPERTY_WORDS[key]))
        raise InvalidArgument(f"provider {spec!r}: unknown option {item!r} (stack, sid, ts or KEY=VALUE)")
    if key in ("event-ids", "exclude-event-ids"):
        if options.event_ids is not None:
            raise InvalidArgument(f"provider {spec!r}: one event id filter per provider (event-ids or exclude-event-ids)")
        return replace(options, event_ids=parse_number_list(value, "event ids"), event_ids_include=key == "event-ids")
    if key == "pids":
        return replace(options, pids=parse_number_list(value, "process ids"))
    if key == "exe":
        names = frozenset(name.strip() for name in value.split(","))
        if not value.strip() or "" in names:
            raise InvalidArgument(f"provider {spec!r}: exe= needs executable names")
        return replace(options, exe_names=names)
    raise InvalidArgument(f"provider {spec!r}: unknown option {key!r} (event-ids, exclude-event-ids, pids, exe)")


def _parse(spec: str) -> _Parsed:
    head, *items = spec.split(";")
    parts = head.split(":")
    if not parts[0].strip() or len(parts) > 4:
        raise InvalidArgument(f"provider {spec!r} is not NAME_OR_GUID[:ANY[:LEVEL[:ALL]]][;OPTION...]")
    masks: dict[str, int] = {}
    if len(parts) > 1 and parts[1]:
        masks["any"] = _number(parts[1], "keyword mask")
    if len(parts) > 2 and parts[2]:
        level = parts[2].strip().lower()
        masks["level"] = LEVEL_NAMES[level] if level in LEVEL_NAMES else _number(level, "level")
        if not 0 <= masks["level"] <= 255:
            raise InvalidArgument(f"provider {spec!r}: level {masks['level']} is not 0..255")
    if len(parts) > 3 and parts[3]:
        masks["all"] = _number(parts[3], "keyword mask")
    resolve_provider_name(parts[0])  # a malformed GUID or a bare '*' is refused here, before any service
    options = EnableOptions()
    for item in items:
        if item.strip():
            options = _spec_option(options, item.strip(), spec)
    return _Parsed(parts[0].strip(), masks, options)


def parse_provider_spec(spec: str, common: EnableOptions | None = None) -> tuple[str, dict[str, Any]]:
    """``(provider, options)`` for ``Session.start(providers=...)``/``Session.enable``: ``any``,
    ``level``, ``all`` when given, and ``properties``/``filters`` when the spec or ``common`` set any."""
    parsed = _parse(spec)
    options: dict[str, Any] = dict(parsed.masks)
    merged = parsed.options.over(common or EnableOptions())
    if merged.properties:
        options["properties"] = merged.properties
    filters = merged.filters()
    if not filters.empty:
        options["filters"] = filters
    return parsed.name, options


def enable_options(
    event_ids: str | None, exclude_event_ids: str | None, pids: str | None, exes: Iterable[str], stack: bool, sid: bool, ts: bool
) -> EnableOptions:
    """The command-wide options as ``EnableOptions`` (``InvalidArgument`` for a malformed list)."""
    if event_ids is not None and exclude_event_ids is not None:
        raise InvalidArgument("--event-ids and --exclude-event-ids exclude each other (ETW has one event id filter)")
    ids_text = event_ids if event_ids is not None else exclude_event_ids
    names = frozenset(name.strip() for text in exes for name in text.split(",") if name.strip())
    properties = (
        (int(EnableProperty.STACK_TRACE) if stack else 0) | (int(EnableProperty.SID) if sid else 0) | (int(EnableProperty.TS_ID) if ts else 0)
    )
    return EnableOptions(
        parse_number_list(ids_text, "event ids") if ids_text is not None else None,
        event_ids is not None or exclude_event_ids is None,
        parse_number_list(pids, "process ids") if pids is not None else None,
        names or None,
        properties,
    )


_FILTER_OPTIONS = (
    click.option("--event-ids", default=None, metavar="ID[,ID...]", help="Only these event ids (every -p)."),
    click.option("--exclude-event-ids", default=None, metavar="ID[,ID...]", help="All but these event ids (every -p)."),
    click.option("--pids", default=None, metavar="PID[,PID...]", help="Only events of these processes (at most 8)."),
    click.option("--exe", "exes", multiple=True, metavar="NAME", help="Only events of processes running this executable (repeatable)."),
    click.option("--stack", is_flag=True, help="Ask for a call stack with each event, where providers support it."),
    click.option("--sid", is_flag=True, help="Ask for the user's SID with each event, where providers support it."),
    click.option("--ts", is_flag=True, help="Ask for the terminal session id with each event, where providers support it."),
)


filter_options = option_group(
    _FILTER_OPTIONS, ("event_ids", "exclude_event_ids", "pids", "exes", "stack", "sid", "ts"), "enable", enable_options
)
filter_options.__doc__ = "The filter and enable-property options; the command gets them as ``enable`` (``EnableOptions``)."
