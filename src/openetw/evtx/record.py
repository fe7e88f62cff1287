"""``EvtxRecord``: an ``.evtx`` event record as the ``EventRecord`` the rest of openetw sees.

Its header comes from the rendered ``<System>`` element (provider name and GUID, EventID,
Version, Level, Task, Opcode, Keywords, TimeCreated, EventRecordID, Execution, Channel,
Computer, Security UserID); its decoded properties are the ``EventData`` / ``UserData`` values.
An Event Log record carries no ETW user-data bytes: ``user_data`` is empty and
``has_user_data`` says so. ``raw`` is the event record as stored in its chunk.
"""

from __future__ import annotations

import struct
import uuid
from datetime import UTC
from typing import TYPE_CHECKING, Any

from openetw.errors import EvtxFormatError
from openetw.etl.clock import SYSTEM_TIME_CLOCK, datetime_to_filetime
from openetw.etl.record import EventRecord, RecordContext
from openetw.evtx import values as V
from openetw.evtx.binxml import BinXmlError
from openetw.evtx.render import Value, XmlNode

if TYPE_CHECKING:
    from openetw.evtx.reader import ChunkState

EVTX_CONTEXT = RecordContext(SYSTEM_TIME_CLOCK, source="<evtx>")

_TIME_STRUCT = struct.Struct("<Q")

NATIVE_PARSED: Any = object()
"""The nodes of a record the compiled twin accepted: the pure parser reads them when asked."""

__all__ = ["EVTX_CONTEXT", "NATIVE_PARSED", "EvtxHeader", "EvtxRecord", "header_from_tree", "properties_from_tree"]


class EvtxHeader:
    """The ``<System>`` facts of one event (absent ones are 0, ``None`` or empty)."""

    __slots__ = (
        "provider_name", "provider_guid", "event_source_name", "event_id", "qualifiers", "version",
        "level", "task", "opcode", "keywords", "time_created", "record_id", "activity_id",
        "related_activity_id", "process_id", "thread_id", "channel", "computer", "user_id",
    )  # fmt: skip

    def __init__(self) -> None:
        self.provider_name = ""
        self.provider_guid: uuid.UUID | None = None
        self.event_source_name: str | None = None
        self.event_id = 0
        self.qualifiers: int | None = None
        self.version = 0
        self.level = 0
        self.task = 0
        self.opcode = 0
        self.keywords = 0
        self.time_created = 0  # FILETIME
        self.record_id = 0
        self.activity_id: uuid.UUID | None = None
        self.related_activity_id: uuid.UUID | None = None
        self.process_id = 0
        self.thread_id = 0
        self.channel = ""
        self.computer = ""
        self.user_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _int(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 0)
    except ValueError:
        try:
            return int(str(value))
        except ValueError:
            return 0


def _guid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip("{}"))
    except ValueError:
        return None


def _filetime(node: XmlNode | None) -> int:
    if node is None:
        return 0
    parts = node.attributes.get("SystemTime")
    if not parts:
        return 0
    leaf = parts[0]
    if isinstance(leaf, Value):
        if leaf.value_type == V.FILETIME and len(leaf.raw) == 8:
            filetime: int = _TIME_STRUCT.unpack(leaf.raw)[0]
            return filetime
        if leaf.value_type == V.SYSTEMTIME and len(leaf.raw) == 16:
            try:
                return _datetime_filetime(V.systemtime_datetime(leaf.raw))
            except V.ValueError_:
                return 0
        leaf_text = leaf.text
    else:
        leaf_text = leaf
    return _iso_filetime(leaf_text)


def _datetime_filetime(value: Any) -> int:
    return datetime_to_filetime(value)


def _iso_filetime(text: str) -> int:
    from datetime import datetime

    text = text.strip().rstrip("Z")
    fraction = 0
    if "." in text:
        text, digits = text.split(".", 1)
        digits = (digits + "0000000")[:7]
        if not (digits.isascii() and digits.isdigit()):
            return 0  # not a time (the record's written time stands in)
        fraction = int(digits)
    try:
        base = datetime.strptime(text.replace(" ", "T"), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return 0
    return _datetime_filetime(base) + fraction


def event_element(tree: list[Any]) -> XmlNode | None:
    for node in tree:
        if isinstance(node, XmlNode):
            return node
    return None


def header_from_tree(tree: list[Any]) -> EvtxHeader:
    """The ``<System>`` facts of a resolved record tree."""
    header = EvtxHeader()
    event = event_element(tree)
    system = event.find("System") if event is not None else None
    if system is None:
        return header
    for child in system.elements():
        name = child.name
        if name == "Provider":
            header.provider_name = str(child.attribute_value("Name") or "")
            header.provider_guid = _guid(child.attribute_value("Guid"))
            source = child.attribute_value("EventSourceName")
            header.event_source_name = None if source is None else str(source)
        elif name == "EventID":
            header.event_id = _int(child.value())
            qualifiers = child.attribute_value("Qualifiers")
            header.qualifiers = None if qualifiers in (None, "") else _int(qualifiers)
        elif name == "Version":
            header.version = _int(child.value())
        elif name == "Level":
            header.level = _int(child.value())
        elif name == "Task":
            header.task = _int(child.value())
        elif name == "Opcode":
            header.opcode = _int(child.value())
        elif name == "Keywords":
            header.keywords = _int(child.value())
        elif name == "TimeCreated":
            header.time_created = _filetime(child)
        elif name == "EventRecordID":
            header.record_id = _int(child.value())
        elif name == "Correlation":
            header.activity_id = _guid(child.attribute_value("ActivityID"))
            header.related_activity_id = _guid(child.attribute_value("RelatedActivityID"))
        elif name == "Execution":
            header.process_id = _int(child.attribute_value("ProcessID"))
            header.thread_id = _int(child.attribute_value("ThreadID"))
        elif name == "Channel":
            header.channel = child.text()
        elif name == "Computer":
            header.computer = child.text()
        elif name == "Security":
            user = child.attribute_value("UserID")
            header.user_id = None if user in (None, "") else str(user)
    return header


def properties_from_tree(tree: list[Any], *, text: bool = False) -> dict[str, Any]:
    """The ``EventData`` (``<Data Name=...>``) or ``UserData`` values, by name, in order.

    Unnamed ``Data`` elements are named ``Data1``, ``Data2``...; ``Binary`` keeps its name; a
    ``UserData`` element's children give their names (nested elements become dicts).
    ``text=True``: each value as the XML shows it (``0x3e7``, ``{GUID}``, ISO times).
    """
    event = event_element(tree)
    if event is None:
        return {}
    content = XmlNode.text if text else XmlNode.value
    section = event.find("EventData")
    if section is None:
        user = event.find("UserData")
        inner = user.elements() if user is not None else []
        return _element_dict(inner[0], content) if inner else {}
    result: dict[str, Any] = {}
    unnamed = 0
    for child in section.elements():
        if child.name == "Data":
            name = child.attribute_value("Name")
            if name in (None, ""):
                unnamed += 1
                name = f"Data{unnamed}"
            result[str(name)] = content(child)
        else:
            result[child.name] = content(child) if not child.elements() else _element_dict(child, content)
    return result


def _element_dict(node: XmlNode, content: Any = XmlNode.value) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for child in node.elements():
        result[child.name] = _element_dict(child, content) if child.elements() else content(child)
    return result


class EvtxRecord(EventRecord):
    """One event record of an ``.evtx`` file (kind ``evtx``)."""

    __slots__ = ("_chunk", "_parsed", "_xml", "record_id", "written_time", "_tree", "_header", "_path", "damage", "_facts")

    kind = "evtx"
    has_user_data = False

    def __init__(
        self,
        chunk: ChunkState,
        pos: int,
        size: int,
        record_id: int,
        written_time: int,
        nodes: list[Any] | None,
        path: str | None = None,
        damage: EvtxFormatError | None = None,
        xml: str | None = None,
    ) -> None:
        super().__init__((), chunk.data, pos, size, 0, EVTX_CONTEXT, chunk.index)
        self._chunk = chunk
        self._parsed = nodes
        self._xml = xml  # rendered by the compiled twin
        self.record_id = record_id
        self.written_time = written_time
        self._tree: list[Any] | None = None
        self._header: EvtxHeader | None = None
        self._path = path
        self.damage = damage  # set on a record whose BinXml could not be parsed
        self._facts: Any = None  # (RecordBatch, row) of the compiled walk's <System> and EventData columns

    # -- content -------------------------------------------------------------------------------
    @property
    def _nodes(self) -> list[Any] | None:
        """The parsed BinXml (``None`` when damaged); the pure parser reads what the twin accepted."""
        if self._parsed is NATIVE_PARSED:
            self._parsed = self._chunk.nodes_at(self._pos)
        return self._parsed

    @property
    def chunk_index(self) -> int:
        return self._chunk.index

    @property
    def torn(self) -> bool:
        """The record's size is not repeated at its end: it was being written when the file was copied."""
        end = self._pos + self._size
        return self._raw[end - 4 : end] != self._size.to_bytes(4, "little")

    @property
    def file_offset(self) -> int:
        """Where the record starts in the file."""
        return self._chunk.offset + self._pos

    def _failure(self, error: Exception) -> EvtxFormatError:
        pos = error.pos if isinstance(error, BinXmlError) else self._pos
        message = error.message if isinstance(error, BinXmlError) else f"{type(error).__name__}: {error}"
        return EvtxFormatError(
            message, offset=self._chunk.offset + pos, chunk_index=self._chunk.index, structure="BinXml", record_id=self.record_id, path=self._path
        )

    def xml(self) -> str:
        """The record as ``wevtutil qe /f:xml`` prints it; ``EvtxFormatError`` when its values are damaged."""
        if self._xml is not None:
            return self._xml
        if self._nodes is None:
            raise self.damage or EvtxFormatError("record has no content", record_id=self.record_id)
        renderer = self._chunk.renderer
        renderer.parser.work = 0
        try:
            return renderer.xml(self._nodes)
        except (BinXmlError, struct.error, IndexError, ValueError, OverflowError, UnicodeError) as error:
            raise self._failure(error) from None

    def tree(self) -> list[Any]:
        """The record's content resolved: ``XmlNode`` elements with typed ``Value`` leaves."""
        if self._tree is None:
            if self._nodes is None:
                raise self.damage or EvtxFormatError("record has no content", record_id=self.record_id)
            renderer = self._chunk.renderer
            renderer.parser.work = 0
            try:
                self._tree = renderer.resolve(self._nodes)
            except (BinXmlError, struct.error, IndexError, ValueError, OverflowError, UnicodeError) as error:
                raise self._failure(error) from None
        return self._tree

    @property
    def header(self) -> EvtxHeader:
        """The ``<System>`` facts (an event whose content is damaged has an empty header)."""
        if self._header is None and self._facts is not None:
            batch, row = self._facts
            if batch.system_flags[row] & 1:  # the walk read the facts
                self._header = batch.header(row)
        if self._header is None:
            try:
                self._header = header_from_tree(self.tree())
            except EvtxFormatError:
                self._header = EvtxHeader()
            if not self._header.time_created:
                self._header.time_created = self.written_time
            if not self._header.record_id:
                self._header.record_id = self.record_id
        return self._header

    def properties(self) -> dict[str, Any]:
        """The decoded ``EventData`` / ``UserData`` values by name."""
        facts = self._facts
        if facts is not None and facts[0].has_data(facts[1]):
            values: dict[str, Any] = facts[0].event_data(facts[1])  # the walk's fields: no tree
            return values
        return properties_from_tree(self.tree())

    def text_properties(self) -> dict[str, Any]:
        """The ``EventData`` / ``UserData`` values by name as the XML (and Windows) shows them."""
        facts = self._facts
        if facts is not None and facts[0].has_data(facts[1]):
            texts: dict[str, Any] = facts[0].event_data(facts[1], text=True)
            return texts
        return properties_from_tree(self.tree(), text=True)

    # -- EventRecord header ------------------------------------------------------------------
    @property
    def provider_guid_bytes(self) -> bytes | None:  # type: ignore[override]
        guid = self.header.provider_guid
        return None if guid is None else guid.bytes_le

    @property
    def provider_name(self) -> str:
        return self.header.provider_name

    @property
    def id(self) -> int:  # type: ignore[override]
        return self.header.event_id

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.header.version

    @property
    def level(self) -> int:  # type: ignore[override]
        return self.header.level

    @property
    def task(self) -> int:  # type: ignore[override]
        return self.header.task

    @property
    def opcode(self) -> int:  # type: ignore[override]
        return self.header.opcode

    @property
    def keyword(self) -> int:  # type: ignore[override]
        return self.header.keywords

    @property
    def pid(self) -> int:  # type: ignore[override]
        return self.header.process_id

    @property
    def tid(self) -> int:  # type: ignore[override]
        return self.header.thread_id

    @property
    def timestamp(self) -> int:  # type: ignore[override]
        return self.header.time_created

    @property
    def activity_guid_bytes(self) -> bytes | None:  # type: ignore[override]
        guid = self.header.activity_id
        return None if guid is None else guid.bytes_le

    @property
    def related_activity_id(self) -> uuid.UUID | None:
        return self.header.related_activity_id

    @property
    def channel_name(self) -> str:
        return self.header.channel

    @property
    def computer(self) -> str:
        return self.header.computer

    @property
    def user_sid(self) -> str | None:
        return self.header.user_id

    @property
    def user_data_offset(self) -> int:
        return self._size

    def with_context(self, ctx: RecordContext) -> EventRecord:
        return self

    def with_timestamp(self, timestamp: int) -> EventRecord:
        return self

    def header_fields(self) -> dict[str, Any]:
        return self.header.as_dict()

    def same_as(self, other: EventRecord) -> bool:
        return isinstance(other, EvtxRecord) and self.raw == other.raw

    def __repr__(self) -> str:
        h = self.header
        return f"<EvtxRecord {self.record_id} {h.provider_name} id={h.event_id} v{h.version} chunk={self._chunk.index}>"
