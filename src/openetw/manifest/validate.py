"""mc.exe's rules, checked on a parsed ``Manifest``.

Everything mc rejects is reported. A few rule breaks are everywhere in regenerated manifests
(TraceEvent's output, the Windows 10 build corpus) and leave the model usable; they are warnings
unless ``strict=True``, where they are errors as mc would make them. They are listed in
``TOLERATED`` with the reason each is harmless to a decoder.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol, TypeVar

from openetw.manifest import winmeta
from openetw.manifest.diagnostics import Diagnostic, Severity
from openetw.manifest.messages import MAX_INSERT_WIDTH, inserts_used, wide_specs
from openetw.manifest.model import (
    Channel,
    ChannelType,
    Event,
    Field,
    Manifest,
    Opcode,
    Provider,
    SizeRef,
    Template,
)
from openetw.manifest.winmeta import InType, OutType

MAX_CHANNELS = 8
MAX_INSERTS = 100
_SYMBOL = re.compile(r"^[_a-zA-Z][_0-9a-zA-Z]*$")
_FORBIDDEN_NAME_CHARS = set('><&"|\\:\'?*')
_ADMIN_LEVELS = range(1, 5)

class _HasLine(Protocol):
    @property
    def line(self) -> int | None: ...


_Located = TypeVar("_Located", bound=_HasLine)

# Rule breaks that real (regenerated) manifests carry and that a decoder survives.
TOLERATED: dict[str, str] = {
    "size-ref-not-earlier": "count/length names a field that is not an earlier one; decoders resolve by name",
    "duplicate-event": "two events share (id, version); the first definition is used",
    "task-value-zero": "task value 0 is no task; the descriptor still carries it",
    "opcode-value-range": "custom opcode outside 10..239; the descriptor still carries it",
    "undefined-task": "the event's task is undefined; its descriptor task is 0",
    "undefined-opcode": "the event's opcode is undefined; its descriptor opcode is 0",
    "undefined-string": "a $(string.X) reference has no string; no text is shown",
    "binary-without-length": "win:Binary without length; only the rest of the payload can be shown",
    "event-value-zero": "event id 0",
    "duplicate-provider": "two providers with one GUID in one file",
    "field-name": "data names that are not identifiers",
    "duplicate-field-name": "two fields of one template share a name",
    "duplicate-name": "two items of one kind share a name; the first is used",
    "opaque-type": "a struct whose members were not written; its bytes cannot be split",
    "symbol": "symbols only name generated code; generators derive valid ones from names",
    "duplicate-symbol": "two events share a symbol; generated code must then rename one of them",
}


def validate(manifest: Manifest, *, strict: bool = False) -> list[Diagnostic]:
    """Every rule break in ``manifest``, errors and warnings, in document order per provider."""
    checker = _Checker(manifest.path, strict)
    guids = Counter(p.guid for p in manifest.providers if p.guid is not None)
    seen: set[object] = set()
    for provider in manifest.providers:
        if provider.guid is not None and guids[provider.guid] > 1 and provider.guid in seen:
            checker.add("duplicate-provider", f"provider GUID {provider.guid} defined twice in this file", provider.line, "provider")
        seen.add(provider.guid)
        _check_provider(checker, provider)
    return checker.found


class _Checker:
    def __init__(self, path: str | None, strict: bool) -> None:
        self.path = path
        self.strict = strict
        self.found: list[Diagnostic] = []

    def add(self, code: str, message: str, line: int | None, element: str, *, warning: bool = False) -> None:
        """Record a finding; ``warning`` marks advice mc itself does not enforce."""
        if warning or (code in TOLERATED and not self.strict):
            severity = Severity.WARNING
        else:
            severity = Severity.ERROR
        self.found.append(Diagnostic(severity, code, message, self.path, line, element))

    def symbol(self, symbol: str | None, line: int | None, element: str) -> None:
        if symbol is not None and symbol != "" and not _SYMBOL.match(symbol):
            self.add("symbol", f"symbol {symbol!r} is not a C identifier", line, element)

    def string(self, ref: str | None, text: str | None, line: int | None, element: str) -> None:
        if ref is not None and text is None:
            self.add("undefined-string", f"string {ref!r} is not defined", line, element)


def _check_provider(check: _Checker, provider: Provider) -> None:
    line = provider.line
    if not provider.name:
        check.add("provider-name", "provider has no name", line, "provider")
    elif len(provider.name) > 255 or any(ch in _FORBIDDEN_NAME_CHARS or ord(ch) < 32 for ch in provider.name):
        check.add("provider-name", f"provider name {provider.name!r} is too long or has forbidden characters", line, "provider")
    if provider.guid is None:
        check.add("provider-guid", "provider has no GUID", line, "provider")
    check.symbol(provider.symbol, line, "provider")
    check.string(provider.message_ref, provider.message, line, "provider")
    _check_channels(check, provider)
    _check_definitions(check, provider)
    _check_maps(check, provider)
    for template in _unique(check, provider.templates, lambda t: t.tid, "template", "template id"):
        _check_template(check, provider, template)
    keys: Counter[tuple[int, int]] = Counter()
    symbols: set[str] = set()
    for event in provider.events:
        keys[event.key] += 1
        if keys[event.key] == 2:
            check.add("duplicate-event", f"event {event.value} version {event.version} is defined more than once", event.line, "event")
        if event.symbol and event.symbol in symbols:
            check.add("duplicate-symbol", f"symbol {event.symbol!r} names another event too", event.line, "event")
        symbols.add(event.symbol or "")
        _check_event(check, provider, event)


def _unique(
    check: _Checker, items: Iterable[_Located], key: Callable[[_Located], Hashable], element: str, what: str
) -> Iterator[_Located]:
    """``items`` after reporting duplicate keys; yields every item."""
    seen: set[object] = set()
    for item in items:
        value = key(item)
        if value in seen:
            code = "duplicate-name" if what.endswith("name") else "duplicate-" + element
            check.add(code, f"{what} {value!r} is defined twice", item.line, element)
        seen.add(value)
        yield item


def _check_channels(check: _Checker, provider: Provider) -> None:
    if len(provider.channels) > MAX_CHANNELS:
        check.add("too-many-channels", f"{len(provider.channels)} channels; at most {MAX_CHANNELS}", provider.line, "channels")
    for channel in _unique(check, provider.channels, lambda c: c.reference, "channel", "channel id"):
        element = "importChannel" if channel.imported else "channel"
        check.symbol(channel.symbol, channel.line, element)
        check.string(channel.message_ref, channel.message, channel.line, element)
        if channel.value is not None and not 0 <= channel.value <= 255:
            check.add("channel-value", f"channel value {channel.value} is not 0..255", channel.line, element)
        if channel.imported and not channel.standard and "/" not in channel.name:
            check.add("import-channel", f"imported channel {channel.name!r} is neither a winmeta nor a named channel", channel.line, element, warning=True)


def _check_definitions(check: _Checker, provider: Provider) -> None:
    for level in _unique(check, provider.levels, lambda x: x.name, "level", "level name"):
        check.symbol(level.symbol, level.line, "level")
        check.string(level.message_ref, level.message, level.line, "level")
        if level.value not in winmeta.CUSTOM_LEVEL_RANGE:
            check.add("level-value-range", f"level {level.name!r} value {level.value} is not 16..255", level.line, "level")
    for task in _unique(check, provider.tasks, lambda x: x.name, "task", "task name"):
        check.symbol(task.symbol, task.line, "task")
        check.string(task.message_ref, task.message, task.line, "task")
        if not 0 <= task.value <= 0xFFFF:
            check.add("task-value", f"task {task.name!r} value {task.value} does not fit 16 bits", task.line, "task")
        elif task.value == 0:
            check.add("task-value-zero", f"task {task.name!r} has value 0 (reserved for no task)", task.line, "task")
        for opcode in _unique(check, task.opcodes, lambda x: x.name, "opcode", "opcode name"):
            _check_opcode(check, opcode)
    for opcode in _unique(check, provider.opcodes, lambda x: x.name, "opcode", "opcode name"):
        _check_opcode(check, opcode)
    masks: set[int] = set()
    for keyword in _unique(check, provider.keywords, lambda x: x.name, "keyword", "keyword name"):
        check.symbol(keyword.symbol, keyword.line, "keyword")
        check.string(keyword.message_ref, keyword.message, keyword.line, "keyword")
        mask = keyword.mask
        if mask <= 0 or mask & (mask - 1) or mask >= 1 << 64:
            check.add("keyword-mask", f"keyword {keyword.name!r} mask 0x{mask:x} is not a single bit", keyword.line, "keyword")
        elif mask & winmeta.RESERVED_KEYWORD_BITS:
            check.add("keyword-reserved", f"keyword {keyword.name!r} mask 0x{mask:x} is in the reserved bits 48..63", keyword.line, "keyword")
        elif mask in masks:
            check.add("keyword-mask-reused", f"keyword {keyword.name!r} mask 0x{mask:x} is used twice", keyword.line, "keyword")
        masks.add(mask)


def _check_opcode(check: _Checker, opcode: Opcode) -> None:
    check.symbol(opcode.symbol, opcode.line, "opcode")
    check.string(opcode.message_ref, opcode.message, opcode.line, "opcode")
    if not 0 <= opcode.value <= 255:
        check.add("opcode-value", f"opcode {opcode.name!r} value {opcode.value} does not fit 8 bits", opcode.line, "opcode")
    elif opcode.value not in winmeta.CUSTOM_OPCODE_RANGE:
        check.add("opcode-value-range", f"opcode {opcode.name!r} value {opcode.value} is not 10..239", opcode.line, "opcode")


def _check_maps(check: _Checker, provider: Provider) -> None:
    for item in _unique(check, provider.maps, lambda m: m.name, "map", "map name"):
        element = item.kind.value
        values: set[int] = set()
        for entry in item.entries:
            check.string(entry.message_ref, entry.message, entry.line, "map")
            if entry.value in values:
                check.add("duplicate-map-value", f"map {item.name!r} lists value {entry.value} twice", entry.line, "map", warning=True)
            values.add(entry.value)
        if not item.entries:
            check.add("empty-map", f"map {item.name!r} has no entries", item.line, element, warning=True)


_INTEGER_TYPES = frozenset(
    {InType.INT8, InType.UINT8, InType.INT16, InType.UINT16, InType.INT32, InType.UINT32,
     InType.INT64, InType.UINT64, InType.HEXINT32, InType.HEXINT64}
)
_LENGTH_TYPES = frozenset(
    {InType.UNICODESTRING, InType.ANSISTRING, InType.BINARY, InType.NULL}
)


def _check_template(check: _Checker, provider: Provider, template: Template) -> None:
    _check_fields(check, provider, template, template.fields, earlier=[])


def _check_fields(
    check: _Checker, provider: Provider, template: Template, fields: tuple[Field, ...], earlier: list[Field]
) -> None:
    names: set[str] = set()
    for item in fields:
        element = "struct" if item.is_struct else "data"
        where = f"template {template.tid!r} field {item.name!r}"
        if item.name in names:
            check.add("duplicate-field-name", f"{where} is defined twice", item.line, element)
        names.add(item.name)
        if item.name and not _SYMBOL.match(item.name):
            check.add("field-name", f"{where}: name is not an identifier", item.line, element)
        for attribute in ("count", "length"):
            _check_size_ref(check, template, item, attribute, getattr(item, attribute), earlier)
        if item.is_struct:
            # A struct member's count may name a field outside the struct.
            _check_fields(check, provider, template, item.members, list(earlier))
        else:
            _check_data(check, provider, where, item)
        earlier.append(item)


def _check_size_ref(
    check: _Checker, template: Template, item: Field, attribute: str, ref: SizeRef, earlier: list[Field]
) -> None:
    element = "struct" if item.is_struct else "data"
    where = f"template {template.tid!r} field {item.name!r}"
    if isinstance(ref, int):
        if not 0 <= ref <= 0xFFFF:
            check.add("size-value", f"{where}: {attribute} {ref} does not fit 16 bits", item.line, element)
        return
    if ref is None:
        return
    target = next((f for f in earlier if f.name == ref), None)
    if target is None:
        later = template.field(ref) is not None
        detail = "a later field" if later else "no field of the template"
        check.add("size-ref-not-earlier", f"{where}: {attribute}={ref!r} names {detail}", item.line, element)
    elif target.is_struct or target.in_type not in _INTEGER_TYPES:
        check.add("size-ref-type", f"{where}: {attribute}={ref!r} names a field that is not an integer", item.line, element)


def _check_data(check: _Checker, provider: Provider, where: str, item: Field) -> None:
    if item.in_type is InType.NULL:
        if winmeta.resolve_in_type(item.in_type_name) is None:
            check.add("unknown-in-type", f"{where}: unknown inType {item.in_type_name!r}", item.line, "data")
        else:
            check.add("opaque-type", f"{where}: inType {item.in_type_name!r} describes no layout", item.line, "data")
        return
    if item.length is not None and item.in_type in winmeta.FIXED_SIZES:
        check.add("length-on-fixed-type", f"{where}: length on fixed-size {item.in_type_name}", item.line, "data")
    if item.in_type is InType.BINARY and item.length is None and item.out_type is not OutType.IPV6:
        check.add("binary-without-length", f"{where}: win:Binary needs a length", item.line, "data")
    allowed = winmeta.OUT_TYPES_FOR.get(item.in_type, ())
    if item.out_type is not OutType.NULL and allowed and item.out_type not in allowed:
        check.add("out-type", f"{where}: outType {item.out_type_name!r} does not apply to {item.in_type_name}; default used", item.line, "data", warning=True)
    if item.map is not None:
        if provider.map(item.map) is None:
            check.add("undefined-map", f"{where}: map {item.map!r} is not defined", item.line, "data")
        if item.in_type not in winmeta.MAPPABLE_IN_TYPES:
            check.add("map-type", f"{where}: maps apply only to win:UInt8/16/32 fields", item.line, "data")


def _check_event(check: _Checker, provider: Provider, event: Event) -> None:
    line, what = event.line, f"event {event.value} version {event.version}"
    if not 0 <= event.value <= 0xFFFF:
        check.add("event-value", f"{what}: id does not fit 16 bits", line, "event")
    elif event.value == 0:
        check.add("event-value-zero", f"{what}: id 0", line, "event")
    if not 0 <= event.version <= 255:
        check.add("event-version", f"{what}: version does not fit 8 bits", line, "event")
    check.symbol(event.symbol, line, "event")
    check.string(event.message_ref, event.message, line, "event")
    template = provider.template(event.template)
    if event.template is not None and template is None:
        check.add("undefined-template", f"{what}: template {event.template!r} is not defined", line, "event")
    level = provider.level(event.level) if event.level is not None else None
    if event.level is not None and level is None:
        check.add("undefined-level", f"{what}: level {event.level!r} is not defined", line, "event")
    task = provider.task(event.task) if event.task is not None else None
    if event.task is not None and task is None and event.task != winmeta.TASK_NONE.name:
        check.add("undefined-task", f"{what}: task {event.task!r} is not defined", line, "event")
    if event.opcode is not None:
        _check_event_opcode(check, provider, event, what)
    for name in event.keywords:
        if provider.keyword(name) is None:
            check.add("undefined-keyword", f"{what}: keyword {name!r} is not defined", line, "event")
    channel = provider.channel(event.channel) if event.channel is not None else None
    if event.channel is not None and channel is None:
        check.add("undefined-channel", f"{what}: channel {event.channel!r} is not defined", line, "event")
    if channel is not None:
        _check_admin_event(check, channel, event, what)
    if event.message is not None:
        _check_inserts(check, event, template, what)


def _check_event_opcode(check: _Checker, provider: Provider, event: Event, what: str) -> None:
    name = event.opcode or ""
    opcode = provider.opcode(name, event.task, event.task_value)
    if opcode is None:
        owner = next((t for t in provider.tasks if t.opcode(name) is not None), None)
        if owner is not None:
            check.add("opcode-task", f"{what}: opcode {name!r} belongs to task {owner.name!r}, not {event.task!r}", event.line, "event")
        else:
            check.add("undefined-opcode", f"{what}: opcode {name!r} is not defined", event.line, "event")
        return
    task = provider.task_for(event)
    if task is not None and opcode.task is None and any(op.value == opcode.value for op in task.opcodes):
        check.add("opcode-clash", f"{what}: opcode {name!r} has the value of one of task {task.name!r}'s opcodes", event.line, "event")


def _check_admin_event(check: _Checker, channel: Channel, event: Event, what: str) -> None:
    if channel.type is not ChannelType.ADMIN:
        return
    if event.message_ref is None and event.message is None:
        check.add("admin-message", f"{what}: events in Admin channel {channel.name!r} need a message", event.line, "event")
    if event.level_value not in _ADMIN_LEVELS:
        check.add("admin-level", f"{what}: events in Admin channel {channel.name!r} need level Critical..Informational", event.line, "event")


def _check_inserts(check: _Checker, event: Event, template: Template | None, what: str) -> None:
    for number, spec in wide_specs(event.message or ""):
        check.add(
            "insert-width", f"{what}: %{number}!{spec}! asks for a width or precision above {MAX_INSERT_WIDTH} (rendered clamped)",
            event.line, "event", warning=True,
        )  # fmt: skip
    inserts = set(inserts_used(event.message or ""))
    if not inserts:
        return
    if max(inserts) > MAX_INSERTS:
        check.add("too-many-inserts", f"{what}: message insert %{max(inserts)} is above %{MAX_INSERTS}", event.line, "event")
    available = len(template.fields) if template is not None else 0
    if max(inserts) > available:
        check.add("insert-range", f"{what}: message uses %{max(inserts)} but the template has {available} fields", event.line, "event", warning=True)
