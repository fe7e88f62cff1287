"""Events as the Event Log shows them, pure: the ``<Event>`` tree queries test, the XML ``log
query --format xml`` prints, and ``NewEvent``s made from ETW records and ``.evtx`` records.

``event_node`` builds the tree from a stored event's columns and fields (``System`` with
Provider, EventID, Version, Level, Task, Opcode, Keywords, TimeCreated, EventRecordID,
Correlation, Execution, Channel, Computer, Security; ``EventData`` with one ``Data`` per field);
an ``.evtx`` record's own tree is used as it is (``evtx_node``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.eventlog.model import NewEvent, StoredEvent
from openetw.events.text import filetime_text
from openetw.events.xpath import XmlElement
from openetw.evtx.record import EvtxRecord, event_element
from openetw.evtx.render import XmlNode, escape_attribute, escape_text, leaf_text

__all__ = ["event_node", "event_xml", "evtx_node", "from_etw_record", "from_evtx_record", "value_text"]

_NO_PROCESS = 0xFFFFFFFF


def value_text(value: Any) -> str:
    """A field's value as the event's XML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex().upper()
    if isinstance(value, uuid.UUID):
        return "{" + str(value).upper() + "}"
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _time_text(filetime: int) -> str:
    return filetime_text(filetime, 9, undated="1601-01-01T00:00:00.000000000Z")


def event_node(event: StoredEvent) -> XmlElement:
    """The ``Event`` element queries see for one stored event."""
    if event.format == "evtx" and event.xml:
        parsed = _node_from_xml(event.xml)
        if parsed is not None:
            return parsed
    provider = {"Name": event.provider}
    if event.provider_guid:
        provider["Guid"] = "{" + event.provider_guid.upper() + "}"
    system = [
        XmlElement("Provider", provider),
        XmlElement("EventID", text=str(event.event_id)),
        XmlElement("Version", text=str(event.version)),
        XmlElement("Level", text=str(event.level)),
        XmlElement("Task", text=str(event.task)),
        XmlElement("Opcode", text=str(event.opcode)),
        XmlElement("Keywords", text=f"0x{event.keywords:x}"),
        XmlElement("TimeCreated", {"SystemTime": _time_text(event.time_created)}),
        XmlElement("EventRecordID", text=str(event.record_id)),
        XmlElement("Correlation", {"ActivityID": "{" + event.activity_id.upper() + "}"} if event.activity_id else {}),
        XmlElement("Execution", {"ProcessID": str(event.pid), "ThreadID": str(event.tid)}),
        XmlElement("Channel", text=event.channel),
        XmlElement("Computer", text=event.computer),
        XmlElement("Security", {"UserID": event.user_sid} if event.user_sid else {}),
    ]
    data = [XmlElement("Data", {"Name": name}, value_text(value)) for name, value in (event.fields or {}).items()]
    return XmlElement("Event", children=[XmlElement("System", children=system), XmlElement("EventData", children=data)])


def _node_from_xml(text: str) -> XmlElement | None:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None

    def convert(element: ET.Element) -> XmlElement:
        name = element.tag.rsplit("}", 1)[-1]
        return XmlElement(name, dict(element.attrib), (element.text or "").strip(), [convert(c) for c in element])

    return convert(root)


def evtx_node(record: EvtxRecord) -> XmlElement | None:
    """The ``Event`` element of an ``.evtx`` record (``None`` when it has none)."""
    event = event_element(record.tree())
    return None if event is None else _from_xml_node(event)


def _from_xml_node(node: XmlNode) -> XmlElement:
    attributes = {name: "".join(leaf_text(leaf) for leaf in leaves) for name, leaves in node.attributes.items()}
    return XmlElement(node.name, attributes, node.text(), [_from_xml_node(child) for child in node.elements()])


def _element_xml(element: XmlElement, out: list[str]) -> None:
    attributes = "".join(f' {name}="{escape_attribute(value)}"' for name, value in element.attributes.items())
    if not element.children and not element.text:
        out.append(f"<{element.name}{attributes}/>")
        return
    out.append(f"<{element.name}{attributes}>{escape_text(element.text)}")
    for child in element.children:
        _element_xml(child, out)
    out.append(f"</{element.name}>")


def event_xml(event: StoredEvent, *, rendering: bool = False) -> str:
    """The event as ``wevtutil qe /f:xml`` prints it (``rendering``: with ``RenderingInfo`` and
    its message, as ``/f:RenderedXml``)."""
    if event.format == "evtx" and event.xml and not rendering:
        return event.xml
    node = event_node(event)
    node.attributes = {}
    out = ["<Event xmlns='http://schemas.microsoft.com/win/2004/08/events/event'>"]
    for child in node.children:
        _element_xml(child, out)
    if rendering:
        out.append(f"<RenderingInfo Culture='en-US'><Message>{escape_text(event.message or '')}</Message></RenderingInfo>")
    out.append("</Event>")
    return "".join(out)


def from_etw_record(
    record: EventRecord,
    *,
    provider_name: str | None,
    channel: str,
    fields: Mapping[str, Any] | None = None,
    message: str | None = None,
    computer: str = "",
    uid: int | None = None,
    user_sid: str | None = None,
) -> NewEvent:
    """A ``NewEvent`` holding an ETW record's whole bytes and its rendered fields and message."""
    guid = record.provider_id if record.provider_guid_bytes is not None else None
    activity = record.activity_id
    try:
        when = max(0, record.filetime)
    except (OverflowError, ValueError):
        when = 0
    return NewEvent(
        time_created=when, provider=provider_name or (str(guid).upper() if guid else record.kind), event_id=record.id,
        record=bytes(record.raw), format="etw", provider_guid=str(guid) if guid else None, version=record.version,
        level=record.level, task=record.task, opcode=record.opcode, keywords=record.keyword, channel=channel,
        computer=computer, pid=0 if record.pid == _NO_PROCESS else record.pid, tid=0 if record.tid == _NO_PROCESS else record.tid,
        user_sid=user_sid, uid=uid, activity_id=str(activity) if activity is not None and activity.int else None,
        fields=dict(fields) if fields is not None else None, message=message,
    )  # fmt: skip


def from_evtx_record(record: EvtxRecord, *, uid: int | None = None) -> NewEvent:
    """A ``NewEvent`` holding an ``.evtx`` record's bytes, fields and XML."""
    header = record.header
    try:
        fields: dict[str, Any] | None = record.properties()
        xml: str | None = record.xml()
    except Exception:  # noqa: BLE001 - a damaged record keeps its System facts
        fields, xml = None, None
    return NewEvent(
        time_created=header.time_created, provider=header.provider_name, event_id=header.event_id, record=bytes(record.raw),
        format="evtx", provider_guid=str(header.provider_guid) if header.provider_guid else None, version=header.version,
        level=header.level, task=header.task, opcode=header.opcode, keywords=header.keywords, channel=header.channel,
        computer=header.computer, pid=header.process_id, tid=header.thread_id, user_sid=header.user_id, uid=uid,
        activity_id=str(header.activity_id) if header.activity_id else None, fields=fields, xml=xml,
    )  # fmt: skip
