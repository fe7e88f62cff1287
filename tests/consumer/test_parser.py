"""Schemas and parsers: names, typed values, errors, and the fixed-offset reads against full decoding."""

from __future__ import annotations

import ipaddress
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.consumer import Parser, PropertyNotFound, PropertyTypeMismatch, Provider, Schema, UserTrace
from openetw.errors import DecodeError, PropertyDecodeError
from openetw.etl import EtlReader
from openetw.manifest import load_manifest
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.schema import PropertyInfo
from openetw.tdh.schema import Schema as TdhSchema
from openetw.testing import EventRecordBuilder, manifest_schema, push_records
from tests.conftest import corpus_path
from tests.consumer.helpers import KERNEL_PROCESS_MANIFEST, PROCESS_ETL, corpus_etl


@pytest.fixture(scope="module")
def manifest() -> Any:
    return load_manifest(corpus_path(*KERNEL_PROCESS_MANIFEST)).manifest


def test_tracelogging_events_with_the_same_id_but_different_fields_decode_apart() -> None:
    first = EventRecordBuilder("Contoso.One", 5).add_property("Path", "a.txt").add_property("Size", 7).pack_tracelogging("Opened")
    second = EventRecordBuilder("Contoso.Two", 5).add_property("Size", 1 << 40).add_property("Ok", True).pack_tracelogging("Closed")
    third = EventRecordBuilder("Contoso.One", 5).add_property("Other", 2.5).pack_tracelogging("Opened")  # same id, provider and name
    trace = UserTrace(manifests=[])
    seen: list[tuple[str | None, str | None, dict[str, Any]]] = []
    for name in ("Contoso.One", "Contoso.Two"):
        provider = Provider(name)
        provider.add_on_event_callback(lambda r, c: seen.append((c.schema_for(r).provider_name, c.schema_for(r).event_name, c.parser_for(r).as_dict())))
        trace.enable(provider)
    push_records(trace, [first, second, third, second, first])
    assert seen == [
        ("Contoso.One", "Opened", {"Path": "a.txt", "Size": 7}),
        ("Contoso.Two", "Closed", {"Size": 1 << 40, "Ok": True}),
        ("Contoso.One", "Opened", {"Other": 2.5}),
        ("Contoso.Two", "Closed", {"Size": 1 << 40, "Ok": True}),
        ("Contoso.One", "Opened", {"Path": "a.txt", "Size": 7}),
    ]


def test_typed_values() -> None:
    guid = uuid.uuid4()
    when = datetime(2021, 5, 4, 3, 2, 1, 123450, tzinfo=UTC)
    record = (
        EventRecordBuilder("Contoso.Types", 1)
        .add_property("i", -5, InType.INT16)
        .add_property("u", 2**40, InType.UINT64)
        .add_property("s", "text")
        .add_property("a", "ansi", InType.ANSISTRING)
        .add_property("g", guid)
        .add_property("t", when)
        .add_property("ip4", ipaddress.IPv4Address("10.1.2.3"))
        .add_property("ip6", ipaddress.IPv6Address("fe80::1"))
        .add_property("sid", "S-1-5-21-1-2-3-500", InType.SID)
        .add_property("blob", b"\x00\x01\x02")
        .add_property("b", True)
        .add_property("f", 1.5)
        .pack_tracelogging("Types")
    )
    context = UserTrace(manifests=[]).context
    parser = context.parser_for(record)
    assert parser.parse("i", int) == -5 and parser.parse("u") == 2**40
    assert parser.parse("s", str) == "text" and parser.parse("a") == "ansi"
    assert parser.parse("g", uuid.UUID) == guid
    assert parser.parse("t", datetime) == when
    assert parser.parse("ip4") == ipaddress.IPv4Address("10.1.2.3")
    assert parser.parse("ip6") == ipaddress.IPv6Address("fe80::1")
    assert parser.parse("sid") == "S-1-5-21-1-2-3-500"
    assert parser.parse("blob", bytes) == b"\x00\x01\x02"
    assert parser.parse("b", bool) is True and parser.parse("f", float) == 1.5
    with pytest.raises(PropertyTypeMismatch):
        parser.parse("b", int)  # a bool is not taken for an int
    with pytest.raises(PropertyTypeMismatch):
        parser.parse("s", int)
    with pytest.raises(PropertyNotFound):
        parser.parse("nope")
    assert parser.try_parse("nope", "default") == "default"
    assert parser.try_parse("s", 0, int) == 0
    names = [prop.name for prop in parser.properties()]
    assert names[:3] == ["i", "u", "s"] and all(prop.error is None for prop in parser.properties())
    assert context.parser_for(record) is parser  # one parser per record being delivered


def test_schema_names_from_a_manifest(manifest: Any) -> None:
    schema = manifest_schema(manifest, 1, version=0)
    builder = EventRecordBuilder(schema.provider_id).add_properties(
        ProcessID=5, CreateTime=datetime(2020, 1, 1, tzinfo=UTC), ParentProcessID=4, SessionID=1, ImageName="\\a.exe"
    )
    record = builder.pack_manifest(schema)
    trace = UserTrace(manifests=[manifest])
    found = trace.context.schema_for(record)
    assert isinstance(found, Schema)
    names = (found.provider_name, found.event_name, found.task_name, found.opcode_name)
    assert names == ("Microsoft-Windows-Kernel-Process", "ProcessStart/Start", "ProcessStart", "Start")
    assert found.decoding_source == "manifest" and found.found
    assert found.event_id == 1 and found.property_names[0] == "ProcessID"
    assert Parser(found).parse("ImageName") == "\\a.exe"


def test_no_schema_means_header_facts_only() -> None:
    record = EventRecordBuilder("Contoso.Raw", 3).pack(b"\x01\x02")
    schema = UserTrace(manifests=[]).context.schema_for(record)
    assert not schema.found and schema.event_name is None and schema.event_id == 3
    parser = Parser(schema)
    with pytest.raises(PropertyNotFound):
        parser.parse("x")
    assert parser.properties() == [] and parser.as_dict() == {}


def test_damaged_payload_is_a_property_decode_error() -> None:
    fields = EventRecordBuilder("Contoso.Short", 1).add_property("a", 1).add_property("b", 1 << 40)
    record = fields.pack_tracelogging("Short")
    cut = EventRecordBuilder("Contoso.Short", 1, extended=record.extended).pack(record.user_data[:10])  # a takes 8 bytes, b needs 8
    parser = UserTrace(manifests=[]).context.parser_for(cut)
    assert parser.parse("a") == 1
    with pytest.raises(PropertyDecodeError):
        parser.parse("b")
    with pytest.raises(DecodeError):
        parser.parse("b")
    assert parser.try_parse("b") is None
    assert "b" in parser.errors


def test_fixed_offset_reads_equal_full_decoding_on_a_corpus_file(manifest: Any) -> None:
    trace = UserTrace(manifests=[manifest])
    context = trace.context
    checked = 0
    with EtlReader(corpus_etl(*PROCESS_ETL)) as reader:
        for record in reader:
            tdh = context.tdh_schema_for(record)
            if tdh is None:
                continue
            full = decode_properties(tdh, record.user_data, record.pointer_size)
            parser = Parser(Schema(record, context))
            for prop in tdh.properties:
                if prop.name in full:
                    assert parser.parse(prop.name) == full[prop.name]
                    checked += 1
    assert checked > 50_000


_SCALARS = [InType.INT8, InType.UINT8, InType.INT16, InType.UINT16, InType.INT32, InType.UINT32, InType.INT64,
            InType.UINT64, InType.HEXINT32, InType.HEXINT64, InType.FLOAT, InType.DOUBLE, InType.BOOLEAN,
            InType.POINTER, InType.GUID, InType.FILETIME, InType.UNICODESTRING]  # fmt: skip
_OUT = {InType.UINT16: [None, OutType.PORT], InType.UINT32: [None, OutType.IPV4, OutType.HEXINT32], InType.UINT8: [None, OutType.BOOLEAN]}


@settings(max_examples=60, deadline=None)
@given(
    types=st.lists(st.sampled_from(_SCALARS), min_size=1, max_size=6),
    outs=st.lists(st.integers(0, 2), min_size=6, max_size=6),
    data=st.binary(min_size=0, max_size=80),
    pointer_size=st.sampled_from([4, 8]),
)
def test_fixed_offset_reads_equal_full_decoding(types: list[InType], outs: list[int], data: bytes, pointer_size: int) -> None:
    props = []
    for n, in_type in enumerate(types):
        choices = _OUT.get(in_type, [None])
        props.append(PropertyInfo(f"p{n}", in_type, choices[outs[n] % len(choices)]))
    tdh = TdhSchema(uuid.UUID(int=1), properties=tuple(props))
    full = decode_properties(tdh, data, pointer_size)
    record = EventRecordBuilder(uuid.UUID(int=1), pointer_size=pointer_size).pack(data)
    parser = Parser(Schema(record, tdh=tdh))
    for prop in props:
        if prop.name in full:
            got, expected = parser.parse(prop.name), full[prop.name]
            assert got == expected or (got != got and expected != expected)  # random bytes may make a NaN
        else:
            with pytest.raises(DecodeError):
                parser.parse(prop.name)


@pytest.mark.parametrize("pointer_size", [4, 8])
def test_the_delivery_primes_the_readers_of_the_records_pointer_size(pointer_size: int) -> None:
    # What the delivery primes a record with (and the benchmarks' empty loops too): no choice of
    # pointer size left to each read, which would unpack the record's header to make it.
    props = (PropertyInfo("base", InType.POINTER), PropertyInfo("size", InType.UINT32))
    tdh = TdhSchema(uuid.UUID(int=3), properties=props)
    record = EventRecordBuilder(uuid.UUID(int=3), pointer_size=pointer_size).pack(bytes(range(12)))
    context = UserTrace(manifests=[]).context
    context._lookup = lambda record: tdh  # type: ignore[method-assign]
    schema, plans = context.delivery_entry(record)
    assert schema is tdh and plans is not None and plans[3]
    _, every_size = context.entry_of(record)
    assert every_size is not None and not every_size[3]
    assert plans[1] is (every_size[1] if pointer_size == 8 else every_size[2])
    parser = Parser.of(record, schema, plans, context)
    assert parser.parse("size") == int.from_bytes(bytes(range(pointer_size, pointer_size + 4)), "little")
