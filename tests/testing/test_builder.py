"""The test kit: records built as providers write them decode back to what was put in, and pushed
records go through a trace's real providers, filters and callbacks."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P
from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.guids import provider_guid_from_name
from openetw.manifest import load_manifest
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import REST, PropertyInfo, Schema
from openetw.testing import EventRecordBuilder, manifest_schema, pack_template, push_record, push_records
from tests.conftest import corpus_path


def test_tracelogging_record_header_and_metadata() -> None:
    record = (
        EventRecordBuilder("Contoso.Kit", 9, version=1, opcode=2, level=4, keyword=0x10, pid=5, tid=6, timestamp=77, cpu=1)
        .add_property("Name", "x")
        .pack_tracelogging("Thing")
    )
    assert record.kind == "event" and record.provider_id == provider_guid_from_name("Contoso.Kit")
    assert (record.id, record.version, record.opcode, record.level, record.keyword) == (9, 1, 2, 4, 0x10)
    assert (record.pid, record.tid, record.timestamp, record.cpu, record.channel) == (5, 6, 77, 1, 11)
    assert record.tracelogging_schema is not None and record.provider_traits is not None
    schema = UserTrace(manifests=[]).context.schema_for(record)
    assert (schema.provider_name, schema.event_name, schema.decoding_source) == ("Contoso.Kit", "Thing", "tracelogging")


def test_builder_refuses_what_it_cannot_write() -> None:
    builder = EventRecordBuilder("Contoso.Kit").add_property("a", 1)
    with pytest.raises(InvalidArgument):
        builder.add_property("a", 2)
    with pytest.raises(InvalidArgument):
        builder.add_property("b", object())
    with pytest.raises(InvalidArgument):
        builder.with_header(colour=1)


def test_manifest_records_from_a_real_manifest() -> None:
    manifest = load_manifest(corpus_path("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml")).manifest
    schema = manifest_schema(manifest, "ProcessStop/Stop", version=1)
    values = {
        "ProcessID": 10, "CreateTime": datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC), "ExitTime": datetime(2020, 1, 2, 3, 4, 6, tzinfo=UTC),
        "ExitCode": 0, "TokenElevationType": 1, "HandleCount": 2, "CommitCharge": 3, "CommitPeak": 4, "CPUCycleCount": 5,
        "ReadOperationCount": 6, "WriteOperationCount": 7, "ReadTransferKiloBytes": 8, "WriteTransferKiloBytes": 9,
        "HardFaultCount": 10, "ImageName": "notepad.exe",
    }  # fmt: skip
    record = EventRecordBuilder(schema.provider_id, pid=3).add_properties(values).pack_manifest(schema)
    assert (record.id, record.version, record.task, record.opcode) == (schema.event_id, schema.version, schema.task, schema.opcode)
    decoded = decode_properties(schema, record.user_data, record.pointer_size)
    assert dict(decoded) == values and decoded.ok
    with pytest.raises(InvalidArgument, match="no property"):
        EventRecordBuilder(schema.provider_id).add_properties(values, Extra=1).pack_manifest(schema)


def test_classic_records() -> None:
    guid = uuid.UUID("9b79ee91-b5fd-41c0-a243-4248e266e9d0")
    builder = EventRecordBuilder(guid, version=3, opcode=33, pid=4).add_property("SystemDirectory", "C:\\Windows\\system32")
    record = builder.add_property("SystemWindowsDirectory", "C:\\Windows").pack_classic()
    assert record.kind == "classic" and record.provider_id == guid and record.opcode == 33 and record.version == 3
    schema = UserTrace(manifests=[]).context.schema_for(record)  # SysConfig/SystemPaths, a kernel MOF class
    assert schema.event_name == "SysConfig/SystemPaths"
    assert UserTrace(manifests=[]).context.parser_for(record).parse("SystemWindowsDirectory") == "C:\\Windows"


def test_counts_lengths_arrays_and_structs_are_packed_as_the_template_says() -> None:
    point = (PropertyInfo("x", InType.INT32), PropertyInfo("y", InType.INT32))
    schema = Schema(
        uuid.uuid4(),
        properties=(
            PropertyInfo("Count", InType.UINT16),
            PropertyInfo("Values", InType.UINT32, count="Count"),
            PropertyInfo("Fixed", InType.UINT8, count=3),
            PropertyInfo("Size", InType.UINT32),
            PropertyInfo("Blob", InType.BINARY, length="Size"),
            PropertyInfo("Chars", InType.UINT16),
            PropertyInfo("Text", InType.UNICODESTRING, length="Chars"),
            PropertyInfo("Padded", InType.ANSISTRING, length=6),
            PropertyInfo("Points", InType.UINT8, count=2, members=point),
            PropertyInfo("Counted", InType.MANIFEST_COUNTEDSTRING),
            PropertyInfo("Port", InType.UINT16, OutType.PORT),
            PropertyInfo("Rest", InType.UINT16, count=REST),
        ),
    )
    values = {
        "Values": [1, 2, 3], "Fixed": [7, 8, 9], "Blob": b"\x01\x02\x03\x04", "Text": "héllo", "Padded": "ab",
        "Points": [{"x": 1, "y": -1}, {"x": 2, "y": -2}], "Counted": "c", "Port": 443, "Rest": [5, 6, 7],
    }  # fmt: skip
    data = pack_template(schema, values)
    decoded = decode_properties(schema, data)
    assert decoded.ok, decoded.errors
    assert dict(decoded) == {**values, "Count": 3, "Size": 4, "Chars": 5}
    with pytest.raises(InvalidArgument):
        pack_template(schema, {**values, "Fixed": [1]})
    with pytest.raises(InvalidArgument):
        pack_template(schema, {"Count": 1})


_SCALAR_VALUES = {
    InType.INT8: st.integers(-128, 127), InType.UINT16: st.integers(0, 0xFFFF), InType.INT32: st.integers(-(2**31), 2**31 - 1),
    InType.UINT64: st.integers(0, 2**64 - 1), InType.DOUBLE: st.floats(allow_nan=False), InType.BOOLEAN: st.booleans(),
    InType.UNICODESTRING: st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=8),
    InType.ANSISTRING: st.text(alphabet="abcXYZ-_ 09", max_size=8), InType.GUID: st.uuids(),
    InType.POINTER: st.integers(0, 2**32 - 1), InType.HEXINT32: st.integers(0, 2**32 - 1),
}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(_SCALAR_VALUES)), min_size=1, max_size=8).flatmap(
    lambda types: st.tuples(st.just(types), st.tuples(*(_SCALAR_VALUES[t] for t in types)), st.sampled_from([4, 8]))))
def test_packed_values_decode_back(case: tuple[list[InType], tuple[Any, ...], int]) -> None:
    types, values, pointer_size = case
    schema = Schema(uuid.uuid4(), properties=tuple(PropertyInfo(f"p{n}", t) for n, t in enumerate(types)))
    named = {f"p{n}": value for n, value in enumerate(values)}
    decoded = decode_properties(schema, pack_template(schema, named, pointer_size), pointer_size)
    assert dict(decoded) == named


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,8}", fullmatch=True), st.one_of(
    st.integers(-(2**63), 2**64 - 1), st.booleans(), st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=10),
    st.binary(max_size=10), st.uuids(), st.floats(allow_nan=False)), min_size=1, max_size=6))
def test_tracelogging_values_decode_back(values: dict[str, Any]) -> None:
    record = EventRecordBuilder("Contoso.Round", 1).add_properties(values).pack_tracelogging("Round")
    # TDH reports a binary field's size as a "<name>.Length" property before it.
    lengths = {f"{name}.Length": len(value) for name, value in values.items() if isinstance(value, bytes)}
    assert UserTrace(manifests=[]).context.parser_for(record).as_dict() == {**lengths, **values}


def test_push_records_uses_the_traces_real_delivery() -> None:
    trace = UserTrace(manifests=[], start_time=100, end_time=200)
    provider = Provider("Contoso.Push")
    seen: list[int] = []
    wanted = EventFilter(P.property_is("n", 2))
    wanted.add_on_event_callback(lambda r, c: seen.append(r.timestamp))
    provider.add_filter(wanted)
    trace.enable(provider)

    def at(ts: int, n: int) -> Any:
        return EventRecordBuilder("Contoso.Push", 1, timestamp=ts).add_property("n", n).pack_tracelogging()

    stats = push_records(trace, [at(50, 2), at(100, 2), at(150, 1), at(200, 2), at(250, 2)])
    assert seen == [100, 200]
    assert stats["events_outside_window"] == 2 and stats["events_handled"] == 3
    assert push_record(trace, at(120, 2))["events_read"] == 6 and seen == [100, 200, 120]


def test_32_bit_records() -> None:
    schema = Schema(uuid.uuid4(), event_id=4, properties=(PropertyInfo("p", InType.POINTER), PropertyInfo("n", InType.UINT16)))
    record = EventRecordBuilder(schema.provider_id, pointer_size=4).add_properties(p=0x1234, n=7).pack_manifest(schema)
    assert record.header_type == L.HEADER_TYPE_EVENT_HEADER32 and record.pointer_size == 4 and len(record.user_data) == 6
    registry = SchemaRegistry()
    registry.add_schema(schema)
    parser = UserTrace(manifests=registry).context.parser_for(record)
    assert (parser.parse("p"), parser.parse("n")) == (0x1234, 7)
