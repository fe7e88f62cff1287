"""Events as tracerpt writes them: ``<Events><Event xmlns=...>`` with System, EventData, RenderingInfo.

Each event is written as soon as it is decoded (memory stays flat). Text is escaped for XML;
characters XML 1.0 cannot carry at all (most control characters) are written as ``\\xNN``.
Records without a schema carry their payload as ``<BinaryEventData>`` hex, as tracerpt does.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import TextIO
from xml.sax.saxutils import escape, quoteattr

from openetw.events.decoded import DecodedRecord
from openetw.events.text import LEVEL_TEXT

__all__ = ["EVENT_NAMESPACE", "write_xml", "event_xml"]

EVENT_NAMESPACE = "http://schemas.microsoft.com/win/2004/08/events/event"

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_OPCODES = {
    0: "Info", 1: "Start", 2: "Stop", 3: "DCStart", 4: "DCStop", 5: "Extension", 6: "Reply",
    7: "Resume", 8: "Suspend", 9: "Send", 240: "Receive",
}  # fmt: skip


def _clean(text: str) -> str:
    return _INVALID_XML.sub(lambda match: f"\\x{ord(match.group(0)):02x}", text)


def _text(text: str) -> str:
    return escape(_clean(text))


def _attr(text: str) -> str:
    return quoteattr(_clean(text))


def _provider_guid(event: DecodedRecord) -> uuid.UUID | None:
    record = event.record
    if record.provider_guid_bytes is not None:
        return record.provider_id
    if event.schema is not None:
        return event.schema.provider_id
    return None


def event_xml(event: DecodedRecord) -> str:
    """One ``<Event>`` element (indented with tabs, as tracerpt does); an Event Log record is
    written as ``wevtutil qe /f:xml`` prints it."""
    record, schema = event.record, event.schema
    if record.kind == "evtx":
        return record.xml()  # type: ignore[attr-defined, no-any-return]
    lines = [f"<Event xmlns={_attr(EVENT_NAMESPACE)}>", "\t<System>"]
    provider_attrs = ""
    if event.provider_name:
        provider_attrs += f" Name={_attr(event.provider_name)}"
    guid = _provider_guid(event)
    if guid is not None:
        provider_attrs += f' Guid="{{{guid}}}"'
    lines.append(f"\t\t<Provider{provider_attrs}/>")
    lines.append(f"\t\t<EventID>{record.id}</EventID>")
    lines.append(f"\t\t<Version>{record.version}</Version>")
    lines.append(f"\t\t<Level>{record.level}</Level>")
    lines.append(f"\t\t<Task>{record.task}</Task>")
    lines.append(f"\t\t<Opcode>{record.opcode}</Opcode>")
    lines.append(f"\t\t<Keywords>0x{record.keyword:X}</Keywords>")
    if record.kind != "unknown":
        lines.append(f'\t\t<TimeCreated SystemTime="{record.time_iso}"/>')
    if record.activity_guid_bytes is not None and any(record.activity_guid_bytes):
        related = record.related_activity_id
        related_attr = f' RelatedActivityID="{{{related}}}"' if related is not None else ""
        lines.append(f'\t\t<Correlation ActivityID="{{{record.activity_id}}}"{related_attr}/>')
    lines.append(
        f'\t\t<Execution ProcessID="{record.pid}" ThreadID="{record.tid}" ProcessorID="{record.cpu}"'
        f' KernelTime="{record.kernel_time}" UserTime="{record.user_time}"/>'
    )
    channel = schema.channel_name if schema is not None and schema.channel_name else None
    lines.append(f"\t\t<Channel>{_text(channel)}</Channel>" if channel else "\t\t<Channel/>")
    lines.append("\t\t<Computer/>")
    lines.append("\t</System>")
    if event.decoded is not None:
        values = event.text_properties()
        errors = event.errors
        lines.append("\t<EventData>")
        for prop in schema.properties if schema is not None else ():
            if prop.name in values:
                lines.append(f"\t\t<Data Name={_attr(prop.name)}>{_text(values[prop.name])}</Data>")
            elif prop.name in errors:
                lines.append(f"\t\t<Data Name={_attr(prop.name)}/>")
        lines.append("\t</EventData>")
    elif record.user_data_length:
        lines.append(f"\t<BinaryEventData>{record.user_data.hex().upper()}</BinaryEventData>")
    lines.append('\t<RenderingInfo Culture="en-US">')
    message = event.message
    if message is not None:
        lines.append(f"\t\t<Message>{_text(message)}</Message>")
    level = schema.level_name if schema is not None and schema.level_name else LEVEL_TEXT.get(record.level)
    if level:
        lines.append(f"\t\t<Level>{_text(level)}</Level>")
    task = schema.task_name if schema is not None else None
    if task:
        lines.append(f"\t\t<Task>{_text(task)}</Task>")
    opcode = schema.opcode_name if schema is not None and schema.opcode_name else _OPCODES.get(record.opcode)
    if opcode:
        lines.append(f"\t\t<Opcode>{_text(opcode)}</Opcode>")
    lines.append(f"\t\t<Provider>{_text(event.provider_label)}</Provider>")
    lines.append("\t</RenderingInfo>")
    lines.append("</Event>")
    return "\n".join(lines)


def write_xml(events: Iterable[DecodedRecord], out: TextIO) -> int:
    """The whole ``<Events>`` document; returns how many events were written."""
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n<Events>\n')
    count = 0
    for event in events:
        out.write(event_xml(event))
        out.write("\n")
        count += 1
    out.write("</Events>\n")
    return count
