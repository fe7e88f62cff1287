"""The EventManifest model: immutable objects for providers and everything they define.

References between items stay by name as the manifest writes them (an event's ``task`` is the
task's name, ``template`` the template's ``tid``), and the numbers an event descriptor carries
are resolved once at parse time (``Event.level_value``, ``task_value``, ...). Lookups on
``Provider`` follow mc's scoping: a task's own opcodes first, then the provider's, then winmeta.

Messages: ``message_ref`` is the string-table id of a ``$(string.ID)`` reference, ``message``
the text it resolved to in the manifest's default culture (``None`` when undefined).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from enum import Enum
from typing import Any, TypeVar

from openetw.manifest import winmeta
from openetw.manifest.winmeta import InType, OutType

# A field's count or length: absent, a constant, or the name of another field.
SizeRef = int | str | None


class ChannelType(str, Enum):
    ADMIN = "Admin"
    OPERATIONAL = "Operational"
    ANALYTIC = "Analytic"
    DEBUG = "Debug"


class MapKind(str, Enum):
    VALUE_MAP = "valueMap"
    BIT_MAP = "bitMap"


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    value: int
    symbol: str | None = None
    message_ref: str | None = None
    message: str | None = None
    standard: bool = False
    line: int | None = dc_field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Opcode:
    """A provider-wide opcode (``task`` is ``None``) or one scoped to the task named ``task``."""

    name: str
    value: int
    symbol: str | None = None
    message_ref: str | None = None
    message: str | None = None
    task: str | None = None
    standard: bool = False
    line: int | None = dc_field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    value: int
    symbol: str | None = None
    event_guid: uuid.UUID | None = None
    message_ref: str | None = None
    message: str | None = None
    opcodes: tuple[Opcode, ...] = ()
    line: int | None = dc_field(default=None, compare=False)

    def opcode(self, name: str) -> Opcode | None:
        return next((op for op in self.opcodes if op.name == name), None)


@dataclass(frozen=True, slots=True)
class Keyword:
    name: str
    mask: int
    symbol: str | None = None
    message_ref: str | None = None
    message: str | None = None
    standard: bool = False
    line: int | None = dc_field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Channel:
    """A channel the provider defines (``<channel>``) or imports (``<importChannel>``).

    ``value`` is the descriptor's channel byte: the declared value, winmeta's for imported
    standard channels, otherwise the number mc would assign (16 upwards in document order).
    """

    name: str
    chid: str | None = None
    type: ChannelType | None = None
    value: int | None = None
    symbol: str | None = None
    enabled: bool = False
    imported: bool = False
    isolation: str | None = None
    message_ref: str | None = None
    message: str | None = None
    standard: bool = False
    line: int | None = dc_field(default=None, compare=False)

    @property
    def reference(self) -> str:
        """The name events use to refer to this channel (chid, else name)."""
        return self.chid or self.name


@dataclass(frozen=True, slots=True)
class MapEntry:
    value: int
    message_ref: str | None = None
    message: str | None = None
    line: int | None = dc_field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Map:
    """A ``valueMap`` (whole value → text) or ``bitMap`` (each set bit → text)."""

    name: str
    kind: MapKind
    entries: tuple[MapEntry, ...] = ()
    line: int | None = dc_field(default=None, compare=False)

    def entry(self, value: int) -> MapEntry | None:
        return next((item for item in self.entries if item.value == value), None)

    def matching(self, value: int) -> tuple[MapEntry, ...]:
        """The entries a value selects: the equal one for a valueMap, the set bits for a bitMap."""
        if self.kind is MapKind.VALUE_MAP:
            found = self.entry(value)
            return (found,) if found else ()
        return tuple(item for item in self.entries if item.value and (value & item.value) == item.value)


@dataclass(frozen=True, slots=True)
class Field:
    """A template's ``<data>`` item, or a ``<struct>`` (``is_struct``, with ``members``).

    ``in_type`` is ``InType.NULL`` for structs and for types the manifest could not describe;
    ``in_type_name`` keeps the spelling the file used. ``out_type`` is ``OutType.NULL`` when the
    manifest names none (the decoder then uses the inType's default).
    """

    name: str
    in_type: InType = InType.NULL
    in_type_name: str = ""
    out_type: OutType = OutType.NULL
    out_type_name: str | None = None
    count: SizeRef = None
    length: SizeRef = None
    map: str | None = None
    is_struct: bool = False
    members: tuple[Field, ...] = ()
    line: int | None = dc_field(default=None, compare=False)

    @property
    def effective_out_type(self) -> OutType:
        return self.out_type if self.out_type is not OutType.NULL else winmeta.default_out_type(self.in_type)

    @property
    def is_array(self) -> bool:
        return self.count is not None


@dataclass(frozen=True, slots=True)
class Template:
    tid: str
    fields: tuple[Field, ...] = ()
    name: str | None = None
    line: int | None = dc_field(default=None, compare=False)

    def field(self, name: str) -> Field | None:
        return next((item for item in self.fields if item.name == name), None)

    def index_of(self, name: str) -> int | None:
        """Position of the top-level field called ``name`` (the 1-based insert is this + 1)."""
        return next((i for i, item in enumerate(self.fields) if item.name == name), None)


@dataclass(frozen=True, slots=True)
class Event:
    """An ``<event>``: names as written plus the resolved descriptor numbers."""

    value: int
    version: int = 0
    symbol: str | None = None
    level: str | None = None
    opcode: str | None = None
    task: str | None = None
    keywords: tuple[str, ...] = ()
    keyword_mask: int = 0
    channel: str | None = None
    template: str | None = None
    message_ref: str | None = None
    message: str | None = None
    level_value: int = 0
    opcode_value: int = 0
    task_value: int = 0
    channel_value: int = 0
    line: int | None = dc_field(default=None, compare=False)

    @property
    def key(self) -> tuple[int, int]:
        return (self.value, self.version)


def _standard_levels() -> dict[str, Level]:
    return {
        item.name: Level(item.name, item.value, item.symbol, message=item.name[4:], standard=True)
        for item in winmeta.LEVELS.values()
    }


def _standard_opcodes() -> dict[str, Opcode]:
    return {
        item.name: Opcode(item.name, item.value, item.symbol, message=item.name[4:], standard=True)
        for item in winmeta.OPCODES.values()
    }


def _standard_keywords() -> dict[str, Keyword]:
    return {
        item.name: Keyword(item.name, item.value, item.symbol, message=item.name[4:], standard=True)
        for item in winmeta.KEYWORDS.values()
    }


WINMETA_LEVELS: Mapping[str, Level] = _standard_levels()
WINMETA_OPCODES: Mapping[str, Opcode] = _standard_opcodes()
WINMETA_KEYWORDS: Mapping[str, Keyword] = _standard_keywords()


_Item = TypeVar("_Item")


def _first_by(items: Iterable[_Item], key: Callable[[_Item], Hashable]) -> dict[Hashable, _Item]:
    """Index ``items`` by ``key``; when two share a key the first wins (as lookups promise)."""
    index: dict[Hashable, _Item] = {}
    for item in items:
        index.setdefault(key(item), item)
    return index


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    guid: uuid.UUID | None
    symbol: str | None = None
    resource_file: str | None = None
    message_file: str | None = None
    parameter_file: str | None = None
    message_ref: str | None = None
    message: str | None = None
    channels: tuple[Channel, ...] = ()
    levels: tuple[Level, ...] = ()
    tasks: tuple[Task, ...] = ()
    opcodes: tuple[Opcode, ...] = ()
    keywords: tuple[Keyword, ...] = ()
    maps: tuple[Map, ...] = ()
    templates: tuple[Template, ...] = ()
    events: tuple[Event, ...] = ()
    line: int | None = dc_field(default=None, compare=False)
    _index: dict[str, dict[Any, Any]] = dc_field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        newest: dict[int, Event] = {}
        for event in self.events:
            current = newest.get(event.value)
            if current is None or event.version > current.version:
                newest[event.value] = event
        index = {
            "event": _first_by(self.events, lambda e: e.key),
            "newest": newest,
            "template": _first_by(self.templates, lambda t: t.tid),
            "level": _first_by(self.levels, lambda x: x.name),
            "level_value": _first_by(self.levels, lambda x: x.value),
            "task": _first_by(self.tasks, lambda x: x.name),
            "task_value": _first_by(self.tasks, lambda x: x.value),
            "opcode": _first_by(self.opcodes, lambda x: x.name),
            "opcode_value": _first_by(self.opcodes, lambda x: x.value),
            "keyword": _first_by(self.keywords, lambda x: x.name),
            "map": _first_by(self.maps, lambda x: x.name),
            "channel": {**_first_by(self.channels, lambda c: c.name), **_first_by(self.channels, lambda c: c.reference)},
            "channel_value": _first_by(self.channels, lambda c: c.value),
        }
        object.__setattr__(self, "_index", index)

    # -- events and templates ------------------------------------------------------------------

    def event(self, event_id: int, version: int | None = None) -> Event | None:
        """The event with this id and version; the newest version when ``version`` is None.

        When a (damaged) manifest defines the same (id, version) twice, the first one wins;
        ``events_with_id`` returns them all.
        """
        if version is None:
            return self._index["newest"].get(event_id)
        return self._index["event"].get((event_id, version))

    def events_with_id(self, event_id: int) -> tuple[Event, ...]:
        return tuple(event for event in self.events if event.value == event_id)

    def template(self, tid: str | None) -> Template | None:
        return None if tid is None else self._index["template"].get(tid)

    def template_for(self, event: Event) -> Template | None:
        return self.template(event.template)

    def task_for(self, event: Event) -> Task | None:
        """The event's task: by name, else by its descriptor value."""
        found = self.task(event.task) if event.task is not None else None
        return found if found is not None else self.task_by_value(event.task_value)

    def opcode_for(self, event: Event) -> Opcode | None:
        if event.opcode is None:
            return self.opcode_by_value(event.opcode_value, event.task_value)
        return self.opcode(event.opcode, event.task, event.task_value)

    def map(self, name: str | None) -> Map | None:
        return None if name is None else self._index["map"].get(name)

    # -- names (as events write them) ----------------------------------------------------------

    def level(self, name: str) -> Level | None:
        """A provider level, else winmeta's (``win:Always`` is read as ``win:LogAlways``)."""
        found = self._index["level"].get(name)
        if found is None:
            found = WINMETA_LEVELS.get(winmeta.LEVEL_ALIASES.get(name, name))
        return found

    def task(self, name: str) -> Task | None:
        return self._index["task"].get(name)

    def opcode(self, name: str, task: str | None = None, task_value: int | None = None) -> Opcode | None:
        """The task's own opcode first, then the provider's, then winmeta's.

        The task is the one named ``task``; when no task has that name, the one whose value is
        ``task_value`` (an event's resolved descriptor task).
        """
        owner = self.task(task) if task is not None else None
        if owner is None and task_value is not None:
            owner = self.task_by_value(task_value)
        if owner is not None:
            found = owner.opcode(name)
            if found is not None:
                return found
        found = self._index["opcode"].get(name)
        return found if found is not None else WINMETA_OPCODES.get(name)

    def keyword(self, name: str) -> Keyword | None:
        found = self._index["keyword"].get(name)
        return found if found is not None else WINMETA_KEYWORDS.get(name)

    def channel(self, reference: str) -> Channel | None:
        """A channel by the chid (or name) events use; winmeta's standard channels last."""
        found = self._index["channel"].get(reference)
        if found is None:
            standard = winmeta.standard_channel(reference)
            if standard is not None:
                found = Channel(standard.name, value=standard.value, symbol=standard.symbol, standard=True)
        return found

    # -- numbers (as event descriptors carry them) ---------------------------------------------

    def level_by_value(self, value: int) -> Level | None:
        found = self._index["level_value"].get(value)
        if found is None:
            found = next((lvl for lvl in WINMETA_LEVELS.values() if lvl.value == value), None)
        return found

    def task_by_value(self, value: int) -> Task | None:
        return self._index["task_value"].get(value)

    def opcode_by_value(self, value: int, task_value: int | None = None) -> Opcode | None:
        if task_value is not None:
            owner = self.task_by_value(task_value)
            if owner is not None:
                found = next((op for op in owner.opcodes if op.value == value), None)
                if found is not None:
                    return found
        found = self._index["opcode_value"].get(value)
        if found is None:
            found = next((op for op in WINMETA_OPCODES.values() if op.value == value), None)
        return found

    def keywords_for_mask(self, mask: int) -> tuple[Keyword, ...]:
        """Every keyword (provider's, then winmeta's) whose bits are all set in ``mask``."""
        found = [kw for kw in self.keywords if kw.mask and (mask & kw.mask) == kw.mask]
        found += [kw for kw in WINMETA_KEYWORDS.values() if kw.mask and (mask & kw.mask) == kw.mask]
        return tuple(found)

    def channel_by_value(self, value: int) -> Channel | None:
        found = self._index["channel_value"].get(value)
        if found is None:
            standard = next((c for c in winmeta.CHANNELS.values() if c.value == value), None)
            if standard is not None:
                found = Channel(standard.name, value=standard.value, symbol=standard.symbol, standard=True)
        return found

    def all_opcodes(self) -> tuple[Opcode, ...]:
        """Provider-wide opcodes followed by every task-scoped one."""
        return self.opcodes + tuple(op for task in self.tasks for op in task.opcodes)


@dataclass(frozen=True, slots=True)
class StringTable:
    culture: str
    strings: Mapping[str, str] = dc_field(default_factory=dict, hash=False)
    line: int | None = dc_field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Manifest:
    """One manifest file: its providers and its localized string tables.

    ``default_culture`` is en-US when the file has it, else its first culture; the ``message``
    texts in the model come from that culture.
    """

    path: str | None
    providers: tuple[Provider, ...] = ()
    string_tables: tuple[StringTable, ...] = ()
    default_culture: str | None = None

    def provider(self, key: str | uuid.UUID) -> Provider | None:
        """A provider by GUID (``uuid.UUID`` or text) or by name (case-insensitive)."""
        if isinstance(key, str):
            by_name = next((p for p in self.providers if p.name.lower() == key.lower()), None)
            if by_name is not None:
                return by_name
            try:
                key = uuid.UUID(key.strip().strip("{}"))
            except ValueError:
                return None
        return next((p for p in self.providers if p.guid == key), None)

    def string_table(self, culture: str | None = None) -> StringTable | None:
        wanted = culture or self.default_culture
        return next((t for t in self.string_tables if t.culture.lower() == (wanted or "").lower()), None)

    def string(self, string_id: str, culture: str | None = None) -> str | None:
        """A string by id in ``culture`` (default: the default culture)."""
        table = self.string_table(culture)
        return None if table is None else table.strings.get(string_id)

    @property
    def cultures(self) -> tuple[str, ...]:
        return tuple(table.culture for table in self.string_tables)
