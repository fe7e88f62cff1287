"""CSV, tracerpt XML, JSON lines and the summary: structure, escaping and counts."""

from __future__ import annotations

import csv
import io
import ipaddress
import json
import math
import uuid
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from openetw.etl import EtlReader
from openetw.etl.build import build_event_record
from openetw.etl.extended import ExtendedItem
from openetw.events.registry import build_registry
from openetw.manifest.winmeta import InType
from openetw.report import (
    CSV_COLUMNS,
    EVENT_NAMESPACE,
    decode_record,
    decode_records,
    event_to_json,
    json_value,
    summarize,
    write_csv,
    write_json,
    write_xml,
)
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import PropertyInfo, Schema
from openetw.tdh.tracelogging import encode_event_metadata, encode_provider_traits, pack_values, tl_field
from tests.conftest import corpus_path

NS = {"e": EVENT_NAMESPACE}
SYSTEM_ORDER = ["Provider", "EventID", "Version", "Level", "Task", "Opcode", "Keywords", "TimeCreated", "Execution", "Channel", "Computer"]
DUMP_KEYS = {"kind", "id", "version", "channel", "level", "opcode", "task", "keyword", "pid", "tid", "cpu", "timestamp", "time", "size"}


def http_events():  # type: ignore[no-untyped-def]
    registry = build_registry([corpus_path("etl", "manifests", "tx")], installed=False)
    context = DecodeContext(registry)
    with EtlReader(corpus_path("etl", "tx", "HTTP_Server.etl")) as reader:
        records = list(reader.records(time_order=True))
    context.learn(records)
    return list(decode_records(records, registry, context, observe=False))


def test_xml_parses_and_has_tracerpt_structure() -> None:
    events = http_events()
    out = io.StringIO()
    assert write_xml(events, out) == len(events)
    root = ET.fromstring(out.getvalue())
    assert root.tag == "Events"
    found = root.findall("e:Event", NS)
    assert len(found) == len(events) == 2042
    decoded = 0
    for element, event in zip(found, events, strict=True):
        system = element.find("e:System", NS)
        assert system is not None
        tags = [child.tag.split("}")[1] for child in system]
        assert [tag for tag in tags if tag != "Correlation"] == SYSTEM_ORDER
        assert int(system.findtext("e:EventID", namespaces=NS)) == event.record.id
        assert system.find("e:Keywords", NS).text.startswith("0x")
        execution = system.find("e:Execution", NS).attrib
        assert int(execution["ProcessID"]) == event.record.pid and int(execution["ThreadID"]) == event.record.tid
        rendering = element.find("e:RenderingInfo", NS)
        assert rendering is not None and rendering.attrib["Culture"] == "en-US"
        assert rendering.findtext("e:Provider", namespaces=NS) == event.provider_label
        data = element.find("e:EventData", NS)
        if event.decoded is not None:
            assert data is not None
            names = [item.attrib["Name"] for item in data.findall("e:Data", NS)]
            assert names == [prop.name for prop in event.schema.properties]
            decoded += 1
    assert decoded > 2000
    provider = found[-1].find("e:System/e:Provider", NS).attrib
    assert provider["Guid"] == "{dd5ef90a-6398-47a4-ad34-4dcecdef795f}" and provider["Name"] == "Microsoft-Windows-HttpService"


def test_csv_parses_with_a_header_and_a_row_per_event() -> None:
    events = http_events()
    out = io.StringIO()
    write_csv(events, out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(events) + 1
    for row, event in zip(rows[1:], events, strict=True):
        assert row[0] == event.record.time_iso
        assert row[1] == event.provider_label
        assert (int(row[3]), int(row[9]), int(row[10]), int(row[12])) == (event.record.id, event.record.pid, event.record.tid, event.record.cpu)
        for name in event.text_properties():
            assert f"{name}=" in row[13]


def test_json_lines_have_the_dump_keys_and_the_properties() -> None:
    events = http_events()
    out = io.StringIO()
    write_json(events, out)
    objects = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(objects) == len(events)
    for item, event in zip(objects, events, strict=True):
        assert DUMP_KEYS <= set(item)
        if event.decoded is None:
            assert "properties" not in item
        else:
            assert list(item["properties"]) == list(event.properties)
            assert ("errors" in item) == bool(event.errors)


def test_summary_json_counts_every_record_and_names_what_did_not_decode() -> None:
    events = http_events()
    data = summarize(events, events_lost=0).as_json()
    assert {"records", "decoded", "undecoded_providers", "events_lost", "providers"} <= set(data)
    assert data["records"] == 2042  # the logfile header record included
    assert data["decoded"] == sum(1 for event in events if event.is_decoded) == 2042
    assert data["undecoded_providers"] == {}
    without_schemas = summarize(decode_records([event.record for event in events], SchemaRegistry())).as_json()
    assert without_schemas["undecoded_providers"] == {"dd5ef90a-6398-47a4-ad34-4dcecdef795f": 2041}
    http = next(p for p in data["providers"] if p["provider"] == "Microsoft-Windows-HttpService")
    assert http["records"] == sum(item["count"] for item in http["events"])
    assert http["first_time"] <= http["last_time"]


def test_summary_reports_events_lost_and_lines() -> None:
    summary = summarize([], events_lost=3, buffers_lost=1)
    assert summary.as_json()["events_lost"] == 3
    assert any("3 events, 1 buffers" in line for line in summary.lines())


# -- escaping and odd values -----------------------------------------------------------------------
PROVIDER = uuid.UUID("12345678-1234-1234-1234-123456789abc")


def tracelogging_event(text: str):  # type: ignore[no-untyped-def]
    fields = [tl_field("text", InType.UNICODESTRING), tl_field("count", InType.INT32)]
    return build_event_record(
        provider_id=PROVIDER, id=1, timestamp=1000, pid=7, tid=8,
        extended=[ExtendedItem(12, encode_provider_traits("Odd<&>Provider")), ExtendedItem(11, encode_event_metadata("Say", fields))],
        user_data=pack_values(fields, {"text": text, "count": -5}),
    )


@pytest.mark.parametrize("text", ["a < b & c > \"d\" 'e'", "bell\x07 and nul-free\x01controls\x1f", "üñí©ødé ☃ 𝄞", "]]>"])
def test_xml_and_csv_carry_any_text(text: str) -> None:
    event = decode_record(tracelogging_event(text), SchemaRegistry())
    assert event.is_decoded
    out = io.StringIO()
    write_xml([event], out)
    root = ET.fromstring(out.getvalue())
    data = root.find("e:Event/e:EventData/e:Data", NS)
    assert data is not None and data.attrib["Name"] == "text"
    assert data.text == "".join(ch if ch >= " " else f"\\x{ord(ch):02x}" for ch in text)
    assert root.find("e:Event/e:System/e:Provider", NS).attrib["Name"] == "Odd<&>Provider"
    buffer = io.StringIO()
    write_csv([event], buffer)
    row = list(csv.reader(io.StringIO(buffer.getvalue())))[1]
    assert row[13] == f"text={text}; count=-5"


def test_undecoded_records_keep_their_payload() -> None:
    record = build_event_record(provider_id=uuid.uuid4(), id=3, user_data=b"\x01\x02")
    event = decode_record(record, SchemaRegistry())
    assert event.decoded is None and not event.is_decoded
    assert "properties" not in event_to_json(event)
    out = io.StringIO()
    write_xml([event], out)
    assert ET.fromstring(out.getvalue()).findtext("e:Event/e:BinaryEventData", namespaces=NS) == "0102"


def test_property_errors_are_reported_per_property() -> None:
    schema = Schema(PROVIDER, event_id=2, properties=(PropertyInfo("a", InType.UINT32), PropertyInfo("b", InType.UINT64)))
    registry = SchemaRegistry()
    registry.add_schema(schema)
    event = decode_record(build_event_record(provider_id=PROVIDER, id=2, user_data=b"\x05\0\0\0\x01"), registry)
    assert not event.is_decoded
    data = event_to_json(event)
    assert data["properties"] == {"a": 5}
    assert set(data["errors"]) == {"b"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (2**64 - 1, 2**64 - 1),
        (True, True),
        (1.5, 1.5),
        (math.inf, "inf"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "2020-01-02T03:04:05.000006Z"),
        (datetime(2020, 1, 2, 3, 4, 5), "2020-01-02T03:04:05.000000"),
        (b"\x00\xff", "00ff"),
        (ipaddress.IPv4Address("10.0.0.1"), "10.0.0.1"),
        ([1, {"x": b"\x01"}], [1, {"x": "01"}]),
    ],
)
def test_json_values(value: object, expected: object) -> None:
    assert json_value(value) == expected
    json.dumps(json_value(value))
