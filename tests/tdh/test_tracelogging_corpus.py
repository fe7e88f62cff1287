"""Real TraceLogging / self-describing events from the corpus, checked against PerfView's baseline."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from openetw.etl import EventRecord, read_records
from openetw.guids import provider_guid_from_name
from openetw.manifest.winmeta import InType
from openetw.tdh.decode import DecodedEvent, decode_properties
from openetw.tdh.format import format_properties
from openetw.tdh.schema import PropertyInfo, Schema
from openetw.tdh.tracelogging import encode_event_metadata, schema_from_record
from tests.conftest import corpus_path


def tracelogging_events(path: Path) -> Iterator[tuple[EventRecord, Schema, DecodedEvent]]:
    for record in read_records(path):
        if record.kind != "event":
            continue
        schema = schema_from_record(record)
        if schema is not None:
            yield record, schema, decode_properties(schema, record.user_data, record.pointer_size)


# -- primitive-types.etl against PerfView's baseline -----------------------------------------

_EVENT_LINE = re.compile(r"^EVENT [\d,.]+: solar_system/PrimitiveTypesTest .*?DataLen=(\d+); (.*)$")
_FIELD = re.compile(r"(\w+)=(.*?); ")
# PerfView reads UInt16/32/64 fields into short/int/long (RegisteredTraceEventParser), so it
# prints unsigned values that have the top bit set as negative numbers.
_PERFVIEW_SIGNED_BITS = {InType.UINT16: 16, InType.UINT32: 32, InType.UINT64: 64}
_EXPECTED_TYPES: dict[str, type] = {
    "string_type": str, "boolean_type": bool, "char_type": int, "int16_type": int, "int32_type": int,
    "uint16_type": int, "uint32_type": int, "int64_type": int, "uint64_type": int, "guid_type": uuid.UUID,
    "file_time_type": datetime, "system_time_type": datetime,
}  # fmt: skip


def perfview_text(value: Any, prop: PropertyInfo) -> str:
    """A value as GeneralParsing.cs prints it: en-US, dates ``yy/MM/dd HH:mm:ss.ffffff``, cut at 20 chars."""
    if isinstance(value, bool):
        text = str(value)
    elif isinstance(value, int):
        bits = _PERFVIEW_SIGNED_BITS.get(prop.in_type)  # type: ignore[call-overload]
        if bits and value >= 1 << (bits - 1):
            value -= 1 << bits
        text = f"{value:,}"
    elif isinstance(value, datetime):
        text = value.strftime("%y/%m/%d %H:%M:%S.%f")
    else:
        text = str(value)
    return text if len(text) <= 20 else text[:20] + "..."


def baseline_events() -> list[tuple[int, dict[str, str]]]:
    text = corpus_path("etl", "baselines", "perfview", "primitive-types.baseline.txt").read_text()
    found = []
    for line in text.splitlines():
        match = _EVENT_LINE.match(line)
        if match:
            found.append((int(match.group(1)), dict(_FIELD.findall(match.group(2) + " "))))
    return found


def test_primitive_types_match_the_perfview_baseline() -> None:
    expected = baseline_events()
    events = list(tracelogging_events(corpus_path("etl", "perfview", "primitive-types.etl")))
    assert len(events) == len(expected) == 5
    for (record, schema, decoded), (data_len, fields) in zip(events, expected, strict=True):
        assert (schema.provider_name, schema.event_name, schema.channel) == ("solar_system", "PrimitiveTypesTest", 11)
        assert len(record.user_data) == data_len
        assert decoded.ok and decoded.trailing == b""
        assert list(decoded) == list(fields) == list(_EXPECTED_TYPES)
        for name, baseline_text in fields.items():
            value = decoded[name]
            assert type(value) is _EXPECTED_TYPES[name], name
            ours = perfview_text(value, schema.property_named(name))  # type: ignore[arg-type]
            if name == "system_time_type":
                # PerfView prints ".03..." as the fraction of every SYSTEMTIME here although the
                # payload's milliseconds differ per event (799, 239, ...); they equal the FILETIME's
                # in the same event, which PerfView prints right. Compare to the second.
                assert ours[:17] == baseline_text[:17]
                file_time = decoded["file_time_type"]
                assert value == file_time.replace(tzinfo=None, microsecond=file_time.microsecond // 1000 * 1000)
            else:
                assert ours == baseline_text, name
        assert decoded["file_time_type"].tzinfo is UTC
        assert decoded["system_time_type"].tzinfo is None


def test_primitive_types_declares_int64_as_unsigned() -> None:
    # The producer wrote TlgIn UINT64 for "int64_type": TDH shows 2**64 - 204, PerfView -204.
    _, schema, decoded = next(tracelogging_events(corpus_path("etl", "perfview", "primitive-types.etl")))
    assert schema.property_named("int64_type").in_type == InType.UINT64  # type: ignore[union-attr]
    assert decoded["int64_type"] == 2**64 - 204


# -- other real self-describing events -----------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "count", "provider", "event"),
    [
        (("etl-parser", "AMSITrace.etl"), 19, "AmsiTrace", "AmsiScript"),
        (("etl-parser", "lxcore_kernel.etl"), 2, "Microsoft.Windows.Subsystem.LxCore", "BreakPoint"),
        (("perfview", "SelfDescribingSingleEvent.etl"), 1, "MySource", "TestEvent"),
        (("perfview", "primitive-types.etl"), 5, "solar_system", "PrimitiveTypesTest"),
    ],
)
def test_corpus_tracelogging_events_decode_without_errors(parts: tuple[str, str], count: int, provider: str, event: str) -> None:
    events = list(tracelogging_events(corpus_path("etl", *parts)))
    assert len(events) == count
    for record, schema, decoded in events:
        assert (schema.provider_name, schema.event_name) == (provider, event)
        assert decoded.ok, decoded.errors
        assert decoded.end_offset == len(record.user_data)
        format_properties(decoded)
        # Our encoder writes the same metadata the real producer wrote.
        metadata = next(item.data for item in record.extended if item.ext_type == 11)
        if metadata[2] != 0x80:  # lxcore's writer spent two bytes on a zero tag
            assert encode_event_metadata(schema.event_name or "", schema.properties, tags=schema.tags) == bytes(metadata)


def test_amsi_script_fields() -> None:
    _, _, decoded = next(tracelogging_events(corpus_path("etl", "etl-parser", "AMSITrace.etl")))
    assert decoded["Engine"].startswith("PowerShell_C:\\Windows\\System32\\WindowsPowerShell")
    raw_script = decoded["Raw Script"]  # UINT16 array with TlgOut STRING: the script's UTF-16 units
    assert "".join(map(chr, raw_script)) == decoded["Script"]
    assert format_properties(decoded)["Raw Script"] == decoded["Script"]


def test_lxcore_fields_and_provider_group() -> None:
    events = list(tracelogging_events(corpus_path("etl", "etl-parser", "lxcore_kernel.etl")))
    _, schema, decoded = events[0]
    assert schema.provider_group == uuid.UUID("4f50731a-89cf-4782-b3e0-dce8c90476ba")
    assert dict(decoded) == {
        "ErrorLevel": 2,
        "instanceId": uuid.UUID(int=0),
        "LxPid": -1,
        "LxTid": -1,
        "LxNs": 0,
        "ExecutablePath": "",
        "Function": "LxpInstanceStart",
        "Line": 2659,
        "Message": "[0xc0000034] LxpInstanceInitialize\n",
    }


def test_self_describing_event_source_struct() -> None:
    _, schema, decoded = next(tracelogging_events(corpus_path("etl", "perfview", "SelfDescribingSingleEvent.etl")))
    assert schema.provider_id == provider_guid_from_name("MySource")  # EventSource's name hash
    assert schema.provider_name == "MySource"
    assert dict(decoded) == {"a": {"b": "Hello", "c": "World!"}}
