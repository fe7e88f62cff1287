"""Instrumentation manifest XML → ``Manifest``.

Reads the plain ``instrumentationManifest`` root and Windows' ``<assembly>`` component wrapper,
whatever prefixes the file binds, and the defects regenerated manifests carry (non-winmeta type
names, ``win:Always``, providers placed outside ``<events>``): each accepted oddity becomes a
warning in the ``ParseResult``. Rule checks that do not change the model are ``validate``'s job.
Values the model cannot hold (a non-numeric event id, a malformed GUID) raise ``ManifestError``
naming the file, line and element.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from openetw.errors import ManifestError
from openetw.manifest import winmeta
from openetw.manifest.diagnostics import Diagnostic, Severity
from openetw.manifest.model import (
    Channel,
    ChannelType,
    Event,
    Field,
    Keyword,
    Level,
    Manifest,
    Map,
    MapEntry,
    MapKind,
    Opcode,
    Provider,
    SizeRef,
    StringTable,
    Task,
    Template,
)
from openetw.manifest.winmeta import InType, OutType
from openetw.manifest.xmlread import MAX_INPUT_BYTES, Element, read_xml
from openetw.safeio import read_regular_file

WINMETA_NAMESPACE = "http://manifests.microsoft.com/win/2004/08/windows/events"
XML_SCHEMA_NAMESPACE = "http://www.w3.org/2001/XMLSchema"
_CANONICAL_PREFIXES = {WINMETA_NAMESPACE: "win", XML_SCHEMA_NAMESPACE: "xs"}
_STRING_REF = re.compile(r"^\$\(string\.(.*)\)$", re.DOTALL)
_REGENERATED_TASK = re.compile(r"^task_(\d{1,5})$")
_FIRST_CUSTOM_CHANNEL = 16
DEFAULT_CULTURE = "en-US"


@dataclass(frozen=True, slots=True)
class ParseResult:
    manifest: Manifest
    warnings: list[Diagnostic] = field(default_factory=list)


def parse_manifest(source: bytes | str, path: str | None = None) -> ParseResult:
    """Parse manifest XML (bytes in any XML encoding, or text); ``path`` only names it in messages."""
    root = read_xml(source, path)
    return _ManifestReader(path).read(root)


def load_manifest(path: str | Path) -> ParseResult:
    """Read and parse the manifest file at ``path``."""
    name = str(path)
    try:
        data = read_regular_file(Path(path), MAX_INPUT_BYTES)
    except OSError as error:
        raise ManifestError(f"cannot read manifest: {error.strerror or error}", path=name) from None
    return parse_manifest(data, name)


def parse_int(text: str) -> int:
    """A manifest number: decimal or ``0x`` hex. Raises ``ValueError``."""
    text = text.strip()
    if text[:2] in ("0x", "0X"):
        return int(text[2:], 16)
    if not text.isdigit():
        raise ValueError(text)
    return int(text, 10)


def string_ref(text: str | None) -> str | None:
    """The id inside a ``$(string.ID)`` reference, else ``None``."""
    if text is None:
        return None
    found = _STRING_REF.match(text)
    return found.group(1) if found else None


class _ManifestReader:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.warnings: list[Diagnostic] = []
        self.strings: dict[str, str] = {}

    # -- plumbing ------------------------------------------------------------------------------

    def error(self, message: str, element: Element) -> ManifestError:
        return ManifestError(message, path=self.path, line=element.line, element=element.tag)

    def warn(self, code: str, message: str, element: Element) -> None:
        self.warnings.append(Diagnostic(Severity.WARNING, code, message, self.path, element.line, element.tag))

    def required(self, element: Element, name: str) -> str:
        value = element.get(name)
        if value is None or not value.strip():
            raise self.error(f"missing required attribute {name!r}", element)
        return value.strip()

    def number(self, element: Element, name: str, default: int | None = None) -> int:
        text = element.get(name)
        if text is None or not text.strip():
            if default is None:
                raise self.error(f"missing required attribute {name!r}", element)
            return default
        try:
            return parse_int(text)
        except ValueError:
            raise self.error(f"attribute {name}={text!r} is not a number", element) from None

    def message(self, element: Element, name: str = "message") -> tuple[str | None, str | None]:
        """(string id, resolved text) for a message attribute; literal text has no id."""
        text = element.get(name)
        if text is None:
            return None, None
        ref = string_ref(text)
        if ref is None:
            return None, text
        return ref, self.strings.get(ref)

    @staticmethod
    def qname(element: Element, value: str | None) -> str | None:
        """A QName value with winmeta / XML Schema prefixes rewritten to ``win:`` / ``xs:``."""
        if value is None:
            return None
        value = value.strip()
        prefix, colon, local = value.partition(":")
        if colon:
            canonical = _CANONICAL_PREFIXES.get(element.prefixes.get(prefix, ""))
            if canonical and canonical != prefix:
                return f"{canonical}:{local}"
        return value

    # -- document ------------------------------------------------------------------------------

    def read(self, root: Element) -> ParseResult:
        if root.tag not in ("instrumentationManifest", "assembly"):
            raise self.error("not an instrumentation manifest (root must be instrumentationManifest or assembly)", root)
        tables = self.read_string_tables(root)
        default_culture = _pick_default_culture(tables)
        if default_culture is not None:
            self.strings = dict(next(t.strings for t in tables if t.culture == default_culture))
        providers: list[Provider] = []
        for instrumentation in root.children_named("instrumentation"):
            for child in instrumentation.children:
                if child.tag == "events":
                    providers.extend(self.read_provider(item) for item in child.children_named("provider"))
                elif child.tag == "provider":
                    self.warn("provider-placement", "provider is not inside <events>", child)
                    providers.append(self.read_provider(child))
        manifest = Manifest(self.path, tuple(providers), tuple(tables), default_culture)
        return ParseResult(manifest, self.warnings)

    def read_string_tables(self, root: Element) -> list[StringTable]:
        tables: list[StringTable] = []
        for localization in root.children_named("localization"):
            for resources in localization.children_named("resources"):
                culture = (resources.get("culture") or "").strip()
                strings: dict[str, str] = {}
                for table in resources.children_named("stringTable"):
                    for item in table.children_named("string"):
                        self.read_string(item, strings)
                existing = next((t for t in tables if t.culture == culture), None)
                if existing is not None:
                    self.warn("duplicate-culture", f"culture {culture!r} appears twice; merged", resources)
                    merged = {**strings, **existing.strings}
                    tables[tables.index(existing)] = StringTable(culture, merged, existing.line)
                else:
                    tables.append(StringTable(culture, strings, resources.line))
        return tables

    def read_string(self, item: Element, strings: dict[str, str]) -> None:
        string_id = item.get("id")
        if not string_id:
            self.warn("string-without-id", "string has no id; ignored", item)
            return
        value = item.get("value")
        if value is None:
            self.warn("string-without-value", f"string {string_id!r} has no value", item)
            value = ""
        if string_id in strings:
            self.warn("duplicate-string", f"string id {string_id!r} defined twice; the first wins", item)
            return
        strings[string_id] = value

    # -- provider ------------------------------------------------------------------------------

    def read_provider(self, element: Element) -> Provider:
        name = (element.get("name") or "").strip()
        guid_text = element.get("guid")
        guid = None
        if guid_text is not None and guid_text.strip():
            try:
                guid = uuid.UUID(guid_text.strip().strip("{}"))
            except ValueError:
                raise self.error(f"provider GUID {guid_text!r} is not a GUID", element) from None
        sections: dict[str, list[Element]] = {}
        for child in element.children:
            sections.setdefault(child.tag, []).append(child)

        def items(section: str, *tags: str) -> list[Element]:
            return [item for block in sections.get(section, ()) for item in block.children if item.tag in tags]

        stray_maps = sections.get("valueMap", []) + sections.get("bitMap", [])
        for item in stray_maps:
            self.warn("map-placement", f"{item.tag} {item.get('name')!r} is not inside <maps>", item)
        message_ref, message = self.message(element)
        definitions = Provider(
            name=name,
            guid=guid,
            symbol=element.get("symbol"),
            resource_file=element.get("resourceFileName"),
            message_file=element.get("messageFileName"),
            parameter_file=element.get("parameterFileName"),
            message_ref=message_ref,
            message=message,
            channels=self.read_channels(items("channels", "channel", "importChannel")),
            levels=tuple(self.read_level(item) for item in items("levels", "level")),
            tasks=tuple(self.read_task(item) for item in items("tasks", "task")),
            opcodes=tuple(self.read_opcode(item, None) for item in items("opcodes", "opcode")),
            keywords=tuple(self.read_keyword(item) for item in items("keywords", "keyword")),
            maps=tuple(self.read_map(item) for item in items("maps", "valueMap", "bitMap") + stray_maps),
            templates=tuple(self.read_template(item) for item in items("templates", "template")),
            line=element.line,
        )
        events = tuple(self.read_event(item, definitions) for item in items("events", "event"))
        return _with_events(definitions, events)

    def read_channels(self, elements: list[Element]) -> tuple[Channel, ...]:
        drafts = [self.read_channel(item) for item in elements]
        used = {channel.value for channel in drafts if channel.value is not None}
        next_value = _FIRST_CUSTOM_CHANNEL
        channels = []
        for channel in drafts:
            if channel.value is None:
                while next_value in used:
                    next_value += 1
                used.add(next_value)
                channel = _replace_channel_value(channel, next_value)
            channels.append(channel)
        return tuple(channels)

    def read_channel(self, element: Element) -> Channel:
        name = self.required(element, "name")
        imported = element.tag == "importChannel"
        standard = winmeta.standard_channel(name) if imported else None
        value: int | None = None
        if (element.get("value") or "").strip():
            value = self.number(element, "value")
        elif standard is not None:
            value = standard.value
        channel_type = None
        type_text = element.get("type")
        if type_text is not None:
            channel_type = _channel_type(type_text)
            if channel_type is None:
                raise self.error(f"channel type {type_text!r} is not Admin, Operational, Analytic or Debug", element)
        elif not imported:
            raise self.error("missing required attribute 'type'", element)
        message_ref, message = self.message(element)
        return Channel(
            name=name,
            chid=element.get("chid"),
            type=channel_type,
            value=value,
            symbol=element.get("symbol"),
            enabled=(element.get("enabled") or "").strip().lower() in ("true", "1"),
            imported=imported,
            isolation=element.get("isolation"),
            message_ref=message_ref,
            message=message,
            standard=standard is not None,
            line=element.line,
        )

    def read_level(self, element: Element) -> Level:
        message_ref, message = self.message(element)
        return Level(
            self.required(element, "name"), self.number(element, "value"), element.get("symbol"),
            message_ref, message, line=element.line,
        )

    def read_opcode(self, element: Element, task: str | None) -> Opcode:
        message_ref, message = self.message(element)
        return Opcode(
            self.required(element, "name"), self.number(element, "value"), element.get("symbol"),
            message_ref, message, task=task, line=element.line,
        )

    def read_task(self, element: Element) -> Task:
        name = self.required(element, "name")
        guid_text = element.get("eventGUID")
        event_guid = None
        if guid_text is not None and guid_text.strip():
            try:
                event_guid = uuid.UUID(guid_text.strip().strip("{}"))
            except ValueError:
                raise self.error(f"eventGUID {guid_text!r} is not a GUID", element) from None
        opcodes = tuple(
            self.read_opcode(item, name)
            for block in element.children_named("opcodes")
            for item in block.children_named("opcode")
        )
        message_ref, message = self.message(element)
        return Task(
            name, self.number(element, "value"), element.get("symbol"), event_guid,
            message_ref, message, opcodes, line=element.line,
        )

    def read_keyword(self, element: Element) -> Keyword:
        message_ref, message = self.message(element)
        return Keyword(
            self.required(element, "name"), self.number(element, "mask"), element.get("symbol"),
            message_ref, message, line=element.line,
        )

    def read_map(self, element: Element) -> Map:
        kind = MapKind.VALUE_MAP if element.tag == "valueMap" else MapKind.BIT_MAP
        entries = []
        for item in element.children_named("map"):
            message_ref, message = self.message(item)
            entries.append(MapEntry(self.number(item, "value"), message_ref, message, line=item.line))
        return Map(self.required(element, "name"), kind, tuple(entries), line=element.line)

    def read_template(self, element: Element) -> Template:
        fields = tuple(self.read_field(item) for item in element.children if item.tag in ("data", "struct"))
        return Template(self.required(element, "tid"), fields, element.get("name"), line=element.line)

    def read_field(self, element: Element) -> Field:
        name = element.get("name") or ""
        count = self.size_ref(element, "count")
        length = self.size_ref(element, "length")
        if element.tag == "struct":
            members = tuple(self.read_field(item) for item in element.children if item.tag in ("data", "struct"))
            return Field(name, count=count, length=length, is_struct=True, members=members, line=element.line)
        in_type_name = self.qname(element, element.get("inType")) or ""
        if not in_type_name:
            raise self.error(f"data {name!r} has no inType", element)
        resolved = winmeta.resolve_in_type(in_type_name)
        if resolved is None:
            self.warn("unknown-in-type", f"data {name!r}: unknown inType {in_type_name!r}; payload is opaque", element)
            in_type = InType.NULL
        else:
            in_type = InType(resolved.code)
            if resolved.note:
                self.warn("nonstandard-in-type", f"data {name!r}: {resolved.note}", element)
        out_type_name = self.qname(element, element.get("outType"))
        out_type = OutType.NULL
        if out_type_name:
            resolved_out = winmeta.resolve_out_type(out_type_name)
            if resolved_out is None:
                self.warn("unknown-out-type", f"data {name!r}: unknown outType {out_type_name!r}; default used", element)
            else:
                out_type = OutType(resolved_out.code)
                if resolved_out.note:
                    self.warn("nonstandard-out-type", f"data {name!r}: {resolved_out.note}", element)
        return Field(
            name, in_type, in_type_name, out_type, out_type_name or None, count, length,
            element.get("map"), line=element.line,
        )

    def size_ref(self, element: Element, name: str) -> SizeRef:
        text = element.get(name)
        if text is None or not text.strip():
            return None
        text = text.strip()
        try:
            return parse_int(text)
        except ValueError:
            return text

    # -- events --------------------------------------------------------------------------------

    def read_event(self, element: Element, provider: Provider) -> Event:
        value = self.number(element, "value")
        version = self.number(element, "version", 0)
        level = self.qname(element, element.get("level"))
        if level in winmeta.LEVEL_ALIASES and not any(item.name == level for item in provider.levels):
            alias = winmeta.LEVEL_ALIASES[level]
            self.warn("nonstandard-level", f"level {level!r} is not a winmeta name; read as {alias!r}", element)
        task = self.qname(element, element.get("task"))
        opcode = self.qname(element, element.get("opcode"))
        task_value = _task_value(provider, task)
        keywords = tuple(self.qname(element, word) or word for word in (element.get("keywords") or "").split())
        channel = element.get("channel")
        channel = channel.strip() if channel else None
        message_ref, message = self.message(element)
        return Event(
            value=value,
            version=version,
            symbol=element.get("symbol"),
            level=level,
            opcode=opcode,
            task=task,
            keywords=keywords,
            keyword_mask=_keyword_mask(provider, keywords),
            channel=channel,
            template=element.get("template"),
            message_ref=message_ref,
            message=message,
            level_value=_value_of(provider.level, level),
            opcode_value=_value_of(lambda name: provider.opcode(name, task, task_value), opcode),
            task_value=task_value,
            channel_value=_value_of(provider.channel, channel),
            line=element.line,
        )


def _value_of(lookup: Callable[[str], object], name: str | None) -> int:
    if name is None:
        return 0
    found = lookup(name)
    value = getattr(found, "value", None)
    return value if isinstance(value, int) else 0


def _task_value(provider: Provider, name: str | None) -> int:
    """The task's value; TraceEvent writes ``task_<n>`` for unnamed tasks, so that means n."""
    if name is None:
        return 0
    found = provider.task(name)
    if found is not None:
        return found.value
    regenerated = _REGENERATED_TASK.match(name)
    return int(regenerated.group(1)) if regenerated else 0


def _keyword_mask(provider: Provider, names: tuple[str, ...]) -> int:
    mask = 0
    for name in names:
        found = provider.keyword(name)
        if found is not None:
            mask |= found.mask
    return mask


def _channel_type(text: str) -> ChannelType | None:
    wanted = text.strip().lower()
    return next((kind for kind in ChannelType if kind.value.lower() == wanted), None)


def _replace_channel_value(channel: Channel, value: int) -> Channel:
    return replace(channel, value=value)


def _with_events(provider: Provider, events: tuple[Event, ...]) -> Provider:
    return replace(provider, events=events)


def _pick_default_culture(tables: list[StringTable]) -> str | None:
    for table in tables:
        if table.culture.lower() == DEFAULT_CULTURE.lower():
            return table.culture
    return tables[0].culture if tables else None
