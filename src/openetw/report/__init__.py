"""Reports over decoded traces: tracerpt's summary and PerfView's text.

Records and a ``SchemaRegistry`` (plus a ``DecodeContext`` for process names and what the trace
itself describes) in, text or plain data out. The decoded event and its CSV, XML and JSON forms
are the read model's (``openetw.events``); their names stay here, and the modules ``events``,
``values``, ``csv_format``, ``json_format``, ``xml_format`` and ``sources`` re-export them, for
one release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.events.as_csv import CSV_COLUMNS, event_row, write_csv
    from openetw.events.as_json import event_to_json, record_fields, write_json
    from openetw.events.as_xml import EVENT_NAMESPACE, event_xml, write_xml
    from openetw.events.decoded import decode_record, decode_records, provider_key
    from openetw.events.text import json_properties, json_value
    from openetw.report.events import ReportEvent
    from openetw.report.perfview import PerfViewReport, perfview_lines
    from openetw.report.summary import Summary, summarize

__all__ = [
    "CSV_COLUMNS",
    "EVENT_NAMESPACE",
    "PerfViewReport",
    "ReportEvent",
    "Summary",
    "decode_record",
    "decode_records",
    "event_row",
    "event_to_json",
    "event_xml",
    "json_properties",
    "json_value",
    "perfview_lines",
    "provider_key",
    "record_fields",
    "summarize",
    "write_csv",
    "write_json",
    "write_xml",
]

# Each name loads its module on first use, so that importing one module of the package (or the
# package) loads nothing else: a command pays at start-up for the modules it uses only.
_LAZY: dict[str, str] = {
    "CSV_COLUMNS": "openetw.events.as_csv",
    "event_row": "openetw.events.as_csv",
    "write_csv": "openetw.events.as_csv",
    "ReportEvent": "openetw.report.events",
    "decode_record": "openetw.events.decoded",
    "decode_records": "openetw.events.decoded",
    "provider_key": "openetw.events.decoded",
    "event_to_json": "openetw.events.as_json",
    "record_fields": "openetw.events.as_json",
    "write_json": "openetw.events.as_json",
    "PerfViewReport": "openetw.report.perfview",
    "perfview_lines": "openetw.report.perfview",
    "Summary": "openetw.report.summary",
    "summarize": "openetw.report.summary",
    "json_properties": "openetw.events.text",
    "json_value": "openetw.events.text",
    "EVENT_NAMESPACE": "openetw.events.as_xml",
    "event_xml": "openetw.events.as_xml",
    "write_xml": "openetw.events.as_xml",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
