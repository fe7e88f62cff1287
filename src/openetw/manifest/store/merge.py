"""Several manifests describing one provider, merged into one view (pure: manifests in, views out).

Sources come in precedence order, lowest first: an installed system manifest, then the user's,
then files given on the command line. For one provider GUID:

* events are keyed by ``(id, version)``; when two sources define the same key the later source
  wins and the loser is recorded in ``overrides``. Inside one provider definition the first of
  two duplicates wins, as ``Provider.event`` does;
* a lookup by id alone (``MergedProvider.event(id)``) answers the newest version, whichever
  source defined it;
* every event keeps the ``Provider`` it came from, so its template, maps and names resolve
  against its own file and never against a look-alike in another one;
* keywords, levels, opcodes, tasks, channels and maps are merged by name, the later source
  winning; the provider's name and message are the last source's.

A provider without a GUID is keyed by ETW's name hash of its name (the GUID an EventSource or
TraceLogging provider of that name would have).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from openetw.guids import parse_guid, provider_guid_from_name
from openetw.manifest.model import Channel, Event, Keyword, Level, Manifest, Map, Opcode, Provider, Task, Template

EventKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class SourcedEvent:
    """An event and where its schema comes from: the defining provider and the source file."""

    event: Event
    provider: Provider
    source: str

    @property
    def template(self) -> Template | None:
        return self.provider.template_for(self.event)


@dataclass(frozen=True, slots=True)
class Override:
    """An event definition that a later source replaced."""

    key: EventKey
    replaced_source: str
    winning_source: str


@dataclass(frozen=True, slots=True)
class MergedProvider:
    guid: uuid.UUID
    name: str
    provider: Provider  # the last source's definition (symbol, message, resource files)
    sources: tuple[str, ...]
    events: Mapping[EventKey, SourcedEvent]  # sorted by (id, version)
    keywords: tuple[Keyword, ...] = ()
    levels: tuple[Level, ...] = ()
    opcodes: tuple[Opcode, ...] = ()
    tasks: tuple[Task, ...] = ()
    channels: tuple[Channel, ...] = ()
    maps: tuple[Map, ...] = ()
    overrides: tuple[Override, ...] = ()

    def event(self, event_id: int, version: int | None = None) -> SourcedEvent | None:
        """The event with this id and version; the newest version when ``version`` is None."""
        if version is not None:
            return self.events.get((event_id, version))
        versions = [key for key in self.events if key[0] == event_id]
        return self.events[max(versions)] if versions else None


def merge_guid(provider: Provider) -> uuid.UUID:
    """The GUID a provider is merged under (its own, else the name hash of its name)."""
    return provider.guid if provider.guid is not None else provider_guid_from_name(provider.name)


class _Builder:
    def __init__(self, guid: uuid.UUID) -> None:
        self.guid = guid
        self.latest: Provider | None = None
        self.sources: list[str] = []
        self.events: dict[EventKey, SourcedEvent] = {}
        self.overrides: list[Override] = []
        self.keywords: dict[Hashable, Keyword] = {}
        self.levels: dict[Hashable, Level] = {}
        self.opcodes: dict[Hashable, Opcode] = {}
        self.tasks: dict[Hashable, Task] = {}
        self.channels: dict[Hashable, Channel] = {}
        self.maps: dict[Hashable, Map] = {}

    def add(self, source: str, provider: Provider) -> None:
        self.latest = provider
        if source not in self.sources:
            self.sources.append(source)
        defined_here: set[EventKey] = set()
        for event in provider.events:
            if event.key in defined_here:
                continue
            defined_here.add(event.key)
            previous = self.events.get(event.key)
            if previous is not None:
                self.overrides.append(Override(event.key, previous.source, source))
            self.events[event.key] = SourcedEvent(event, provider, source)
        _merge_by(self.keywords, provider.keywords, lambda item: item.name)
        _merge_by(self.levels, provider.levels, lambda item: item.name)
        _merge_by(self.opcodes, provider.all_opcodes(), lambda item: (item.task, item.name))
        _merge_by(self.tasks, provider.tasks, lambda item: item.name)
        _merge_by(self.channels, provider.channels, lambda item: item.reference)
        _merge_by(self.maps, provider.maps, lambda item: item.name)

    def build(self) -> MergedProvider:
        assert self.latest is not None
        return MergedProvider(
            guid=self.guid,
            name=self.latest.name,
            provider=self.latest,
            sources=tuple(self.sources),
            events={key: self.events[key] for key in sorted(self.events)},
            keywords=tuple(self.keywords.values()),
            levels=tuple(self.levels.values()),
            opcodes=tuple(self.opcodes.values()),
            tasks=tuple(self.tasks.values()),
            channels=tuple(self.channels.values()),
            maps=tuple(self.maps.values()),
            overrides=tuple(self.overrides),
        )


_Item = TypeVar("_Item")


def _merge_by(into: dict[Hashable, _Item], items: Iterable[_Item], key: Callable[[_Item], Hashable]) -> None:
    """Later items replace earlier ones with the same key (keeping the first one's position)."""
    seen_here: set[Hashable] = set()
    for item in items:
        value = key(item)
        if value in seen_here:  # a duplicate inside one provider: the first one wins there
            continue
        seen_here.add(value)
        into[value] = item


def merge_manifests(sources: Iterable[tuple[str, Manifest]]) -> dict[uuid.UUID, MergedProvider]:
    """Per provider GUID, the merged view of every source defining it (lowest precedence first).

    The result is ordered by each provider's first appearance.
    """
    builders: dict[uuid.UUID, _Builder] = {}
    for source, manifest in sources:
        for provider in manifest.providers:
            guid = merge_guid(provider)
            builder = builders.get(guid)
            if builder is None:
                builder = builders[guid] = _Builder(guid)
            builder.add(source, provider)
    return {guid: builder.build() for guid, builder in builders.items()}


def find_merged(merged: Mapping[uuid.UUID, MergedProvider], key: str | uuid.UUID) -> list[MergedProvider]:
    """The providers a GUID or a (case-insensitive) name selects; several when a name is shared."""
    guid: uuid.UUID | None
    try:
        guid = parse_guid(key)
    except ValueError:
        guid = None
    if guid is not None and guid in merged:
        return [merged[guid]]
    if isinstance(key, uuid.UUID):
        return []
    wanted = key.strip().casefold()
    return [item for item in merged.values() if item.name.casefold() == wanted]


__all__ = ["EventKey", "MergedProvider", "Override", "SourcedEvent", "find_merged", "merge_manifests", "merge_guid"]
