"""Reports over decoded traces: CSV, tracerpt-style XML, JSON lines, a summary, PerfView's text.

Everything here but ``sources`` is pure: records and a ``SchemaRegistry`` (plus a
``DecodeContext`` for process names and what the trace itself describes) in, text or plain data
out. ``decode_records`` gives one ``ReportEvent`` per record; the writers take those.
``sources.build_registry`` is the edge that reads manifest files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.report.csv_format import CSV_COLUMNS, event_row, write_csv
    from openetw.report.events import ReportEvent, decode_record, decode_records, provider_key
    from openetw.report.json_format import event_to_json, record_fields, write_json
    from openetw.report.perfview import PerfViewReport, perfview_lines
    from openetw.report.summary import Summary, summarize
    from openetw.report.values import json_properties, json_value
    from openetw.report.xml_format import EVENT_NAMESPACE, event_xml, write_xml

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
    "CSV_COLUMNS": "openetw.report.csv_format",
    "event_row": "openetw.report.csv_format",
    "write_csv": "openetw.report.csv_format",
    "ReportEvent": "openetw.report.events",
    "decode_record": "openetw.report.events",
    "decode_records": "openetw.report.events",
    "provider_key": "openetw.report.events",
    "event_to_json": "openetw.report.json_format",
    "record_fields": "openetw.report.json_format",
    "write_json": "openetw.report.json_format",
    "PerfViewReport": "openetw.report.perfview",
    "perfview_lines": "openetw.report.perfview",
    "Summary": "openetw.report.summary",
    "summarize": "openetw.report.summary",
    "json_properties": "openetw.report.values",
    "json_value": "openetw.report.values",
    "EVENT_NAMESPACE": "openetw.report.xml_format",
    "event_xml": "openetw.report.xml_format",
    "write_xml": "openetw.report.xml_format",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
