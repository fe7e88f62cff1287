"""The Event Log's XPath in the viewer: a thin adapter from the viewer's ``Columns`` and events to
the read model's XPath (``events.xpath``), answered on the columns where they hold the facts,
and event by event where they do not.

A query on the header facts (``*[System[Level<=3 and band(Keywords,16)]]``, the filters Event
Viewer writes) is one vectorised pass over the columns. A query on what the columns lack
(``EventData``, ``Version``, ``Computer``) narrows the rows by its header part first, then
builds the ``Event`` tree of each remaining row and tests it, as ``log query`` does over a file.
``<QueryList>`` XML is taken too (its Suppress elements are tested event by event).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError, XPathError
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.events.xpath import Query, QueryList, XmlElement, parse_filter
from openetw.events.xpath.columns import EventColumns, EventNodes, select_events
from openetw.viewer.model import Columns

if TYPE_CHECKING:
    from openetw.events.decoded import DecodedRecord

__all__ = ["event_columns", "parse_viewer_filter", "report_event_node", "xpath_mask", "xpath_rows"]


def event_columns(columns: Columns) -> EventColumns:
    """The viewer's columns under the names the Event Log's XPath lowers to."""
    labels = columns.labels
    return EventColumns(
        len(columns),
        numbers={"event_id": columns.id, "level": columns.level, "task": columns.task, "opcode": columns.opcode,
                 "keywords": columns.keyword, "time_created": columns.time, "pid": columns.process, "tid": columns.thread},
        texts={"provider": (columns.provider, labels.get("provider", [])), "channel": (columns.channel, labels.get("channel", [])),
               "user_sid": (columns.user, labels.get("user", []))},
    )  # fmt: skip


def report_event_node(event: DecodedRecord, row: int, columns: Columns) -> XmlElement | None:
    """The ``Event`` tree of a row: an ``.evtx`` record's own; an ETW record's as the Event Log
    renders it, named as the row's columns name it (so a query sees one provider name)."""
    from openetw.eventlog.model import StoredEvent
    from openetw.eventlog.render import event_node, evtx_node, from_etw_record

    record = event.record
    try:
        if record.kind == "evtx":
            return evtx_node(record)  # type: ignore[arg-type]
        if record.kind == "unknown":
            return None
        fields = event.text_properties() or None
    except OpenEtwError:  # a record that does not render: no query selects it by its fields
        return None
    new = from_etw_record(
        record, provider_name=columns.label("provider", int(columns.provider[row])), channel=columns.label("channel", int(columns.channel[row])),
        fields=fields, user_sid=columns.label("user", int(columns.user[row])) or None,
    )  # fmt: skip
    return event_node(StoredEvent(**vars(new), record_id=row + 1))


def parse_viewer_filter(text: str) -> Query | QueryList:
    """A selector or a ``<QueryList>``; a malformed one is the page's error (HTTP 400)."""
    try:
        return parse_filter(text)
    except OpenEtwError as error:
        raise InvalidArgument(f"XPath: {error}") from None


def _now(now: int | None) -> int:
    return time.time_ns() // 100 + UNIX_EPOCH_FILETIME if now is None else now


def xpath_rows(text: str, columns: Columns, nodes: EventNodes | None, now: int | None = None) -> np.ndarray:
    """The rows an Event Log XPath query (or ``<QueryList>``) selects (``events.xpath.select_events``):
    on the columns, then each remaining row's ``Event`` tree from ``nodes``; ``now`` (FILETIME,
    default the clock) is what ``timediff`` measures from."""
    query = parse_viewer_filter(text)
    try:
        return select_events(query, event_columns(columns), nodes, _now(now))
    except XPathError as error:
        raise InvalidArgument(f"XPath: {error}") from None


def xpath_mask(text: str, columns: Columns, now: int | None = None) -> np.ndarray:
    """The rows a query on header facts selects, from the columns alone."""
    return xpath_rows(text, columns, None, now)
