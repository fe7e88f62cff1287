"""Reports over decoded traces: CSV, tracerpt-style XML, JSON lines, a summary, PerfView's text.

Everything here but ``sources`` is pure: records and a ``SchemaRegistry`` (plus a
``DecodeContext`` for process names and what the trace itself describes) in, text or plain data
out. ``decode_records`` gives one ``ReportEvent`` per record; the writers take those.
``sources.build_registry`` is the edge that reads manifest files.
"""

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
