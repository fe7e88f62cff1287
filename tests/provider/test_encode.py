"""Encoders: every record is read back by ``openetw.etl`` and decoded by ``openetw.tdh`` to the values written.

Manifest events are decoded with a ``Schema`` built from the encoder's own field list;
TraceLogging events with the schema the record carries (``schema_from_record``). The generated
fast path and the general path give the same bytes, which are ``build_event_record``'s too.
"""

from __future__ import annotations

import io
import ipaddress
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import InvalidArgument
from openetw.etl import EventHeaderRecord, read_records
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.extended import ExtendedItem, related_activity_item
from openetw.etl.record import DEFAULT_CONTEXT
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.guids import NULL_GUID, provider_guid_from_name
from openetw.manifest.loader import load_manifests
from openetw.manifest.winmeta import InType, OutType
from openetw.provider.encode import (
    EventTooLarge,
    ManifestEventEncoder,
    TraceLoggingEncoderCache,
    TraceLoggingEventEncoder,
    encoder_source,
    field_for_value,
    infer_fields,
)
from openetw.provider.fields import InvalidFieldValue, PayloadPacker, manifest_field
from openetw.tdh import PropertyInfo, Schema, decode_properties, schema_from_record, schemas_from_manifest
from openetw.tdh.tracelogging import encode_event_metadata, encode_provider_traits, pack_values, tl_field
from tests.conftest import corpus_path

PROVIDER = uuid.UUID("6a2b9c3e-0b0e-4f6e-9a59-2f4b1c7d8e90")
IDS = dict(timestamp=123_456_789, pid=4242, tid=77)

# -- reading records back ----------------------------------------------------------------------


def parse(raw: bytes) -> EventHeaderRecord:
    return EventHeaderRecord(L.EVENT_HEADER.unpack_from(raw, 0), raw, 0, len(raw), 0, DEFAULT_CONTEXT)


def etl_file(records: list[bytes], pointer_size: int = 8) -> bytes:
    out = io.BytesIO()
    header = new_logfile_header(clock=linux_trace_clock(), buffer_size=64 * 1024, pointer_size=pointer_size)
    with EtlWriter(out, header=header) as writer:
        for number, raw in enumerate(records):
            assert writer.write_raw(raw, number % 2, parse(raw).timestamp)
    return out.getvalue()


def decode_manifest(encoder: ManifestEventEncoder, raw: bytes, ansi_encoding: str = "cp1252") -> dict[str, Any]:
    record = parse(raw)
    schema = Schema(PROVIDER, event_id=record.id, properties=encoder.fields)
    decoded = decode_properties(schema, record.user_data, record.pointer_size, ansi_encoding=ansi_encoding)
    assert decoded.errors == {} and decoded.trailing == b""
    return dict(decoded)


def decode_tracelogging(raw: bytes) -> dict[str, Any]:
    record = parse(raw)
    schema = schema_from_record(record)
    assert schema is not None
    decoded = decode_properties(schema, record.user_data, record.pointer_size)
    assert decoded.errors == {} and decoded.trailing == b""
    return dict(decoded)


class CountingManifestEncoder(ManifestEventEncoder):
    """Counts how often ``encode`` falls back to the general path."""

    general_calls = 0

    def _encode_general(self, *args: Any) -> bytes:
        self.general_calls += 1
        return super()._encode_general(*args)


class CountingTraceLoggingEncoder(TraceLoggingEventEncoder):
    general_calls = 0

    def _encode_general(self, *args: Any) -> bytes:
        self.general_calls += 1
        return super()._encode_general(*args)


def encode_or_too_large(encoder: CountingManifestEncoder | CountingTraceLoggingEncoder, values: tuple[Any, ...], ids: dict[str, Any]) -> bytes | None:
    """The record by both paths (which must agree), or ``None`` when it is too large for ETW.

    Valid values never leave the generated path: only a record too large comes back through
    the general one, which raises.
    """
    try:
        raw = encoder.encode(values, **ids)
    except EventTooLarge as too_large:
        assert too_large.size > 0xFFFF
        with pytest.raises(EventTooLarge):
            encoder.encode_general(values, **ids)
        return None
    assert encoder.general_calls == 0
    assert raw == encoder.encode_general(values, **ids)
    return raw


# -- values by type: (in-type, out-type, strategy, what the decoder gives back) ----------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)
LONG_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=300, max_size=1000)
CP1252 = st.text(st.characters(codec="cp1252", blacklist_characters="\0"), max_size=40)
SID = st.builds(
    lambda auth, subs: "-".join(["S-1", str(auth) if auth < 1 << 32 else f"0x{auth:012X}", *map(str, subs)]),
    st.integers(0, (1 << 48) - 1),
    st.lists(st.integers(0, 2**32 - 1), max_size=6),
)
FILETIMES = st.datetimes(min_value=datetime(1601, 1, 1, 0, 0, 1), timezones=st.sampled_from([UTC, None]))
SYSTEMTIMES = st.datetimes(min_value=datetime(1601, 1, 1)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


def _same(value: Any) -> Any:
    return value


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


Kind = tuple[InType, "OutType | None", "st.SearchStrategy[Any]", Callable[[Any], Any]]
INTEGERS: list[Kind] = [
    (t, None, st.integers(low, high), _same)
    for t, low, high in [
        (InType.INT8, -(2**7), 2**7 - 1), (InType.UINT8, 0, 2**8 - 1), (InType.INT16, -(2**15), 2**15 - 1),
        (InType.UINT16, 0, 2**16 - 1), (InType.INT32, -(2**31), 2**31 - 1), (InType.UINT32, 0, 2**32 - 1),
        (InType.INT64, -(2**63), 2**63 - 1), (InType.UINT64, 0, 2**64 - 1), (InType.HEXINT32, 0, 2**32 - 1),
        (InType.HEXINT64, 0, 2**64 - 1),
    ]
]  # fmt: skip
FIXED: list[Kind] = INTEGERS + [
    (InType.FLOAT, None, st.floats(width=32, allow_nan=False), _same),
    (InType.DOUBLE, None, st.floats(allow_nan=False), _same),
    (InType.BOOLEAN, None, st.booleans(), _same),
    (InType.UINT8, OutType.BOOLEAN, st.booleans(), _same),
    (InType.UINT16, OutType.PORT, st.integers(0, 65535), _same),
    (InType.UINT32, OutType.IPV4, st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address), _same),
    (InType.GUID, None, st.uuids(), _same),
    (InType.FILETIME, None, FILETIMES, _aware),
    (InType.SYSTEMTIME, None, SYSTEMTIMES, _same),
]
VARIABLE: list[Kind] = [
    (InType.UNICODESTRING, None, TEXT | LONG_TEXT, _same),
    (InType.ANSISTRING, None, CP1252, _same),
    (InType.ANSISTRING, OutType.UTF8, TEXT, _same),
    (InType.SID, None, SID, _same),
    (InType.MANIFEST_COUNTEDSTRING, None, st.text(st.characters(blacklist_categories=("Cs",)), max_size=30), _same),
    (InType.MANIFEST_COUNTEDANSISTRING, None, CP1252, _same),
    (InType.MANIFEST_COUNTEDBINARY, None, st.binary(max_size=40), _same),
]
MANIFEST_ONLY: list[Kind] = [(InType.BINARY, OutType.IPV6, st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address), _same)]


def pointer_kind(pointer_size: int) -> Kind:
    return (InType.POINTER, None, st.integers(0, 2 ** (8 * pointer_size) - 1), _same)


# -- random manifest events --------------------------------------------------------------------


@st.composite
def manifest_event(draw: st.DrawFn) -> tuple[int, list[PropertyInfo], tuple[Any, ...], dict[str, Any]]:
    """(pointer size, fields, values, the values the decoder must give) for a random template."""
    pointer_size = draw(st.sampled_from([4, 8]))
    scalars = FIXED + VARIABLE + MANIFEST_ONLY + [pointer_kind(pointer_size)]
    fields: list[PropertyInfo] = []
    values: list[Any] = []
    expected: dict[str, Any] = {}

    def add(prop: PropertyInfo, value: Any, decoded: Any) -> None:
        fields.append(prop)
        values.append(value)
        expected[prop.name] = decoded

    for index in range(draw(st.integers(0, 6))):
        name = f"f{index}"
        shape = draw(st.sampled_from(["scalar", "scalar", "const array", "counted array", "binary", "fixed text", "struct"]))
        in_type, out_type, values_of, decoded = draw(st.sampled_from(scalars))
        if shape == "scalar":
            value = draw(values_of)
            add(manifest_field(name, in_type, out_type), value, decoded(value))
        elif shape in ("const array", "counted array"):
            items = draw(st.lists(values_of, max_size=4))
            if shape == "const array":
                add(manifest_field(name, in_type, out_type, count=len(items)), items, [decoded(v) for v in items])
            else:
                counter = draw(st.sampled_from([InType.UINT8, InType.UINT16, InType.UINT32]))
                add(manifest_field(f"{name}_count", counter), len(items), len(items))
                add(manifest_field(name, in_type, out_type, count=f"{name}_count"), items, [decoded(v) for v in items])
        elif shape == "binary":
            blob = draw(st.binary(max_size=64))
            if draw(st.booleans()):
                add(manifest_field(name, InType.BINARY, length=len(blob)), blob, blob)
            else:
                add(manifest_field(f"{name}_size", InType.UINT16), len(blob), len(blob))
                add(manifest_field(name, InType.BINARY, length=f"{name}_size"), blob, blob)
        elif shape == "fixed text":
            wide = draw(st.booleans())
            text = draw(TEXT if wide else CP1252)
            units = len(text.encode("utf-16-le")) // 2 if wide else len(text.encode("cp1252"))
            length = units + draw(st.integers(0, 3))
            add(manifest_field(name, InType.UNICODESTRING if wide else InType.ANSISTRING, length=length), text, text)
        else:
            kinds = draw(st.lists(st.sampled_from(FIXED + VARIABLE), min_size=1, max_size=3))
            members = [manifest_field(f"m{i}", kind[0], kind[1]) for i, kind in enumerate(kinds)]
            count = draw(st.sampled_from([None, 0, 1, 2]))
            elements = [[draw(kind[2]) for kind in kinds] for _ in range(1 if count is None else count)]
            as_dicts = [{f"m{i}": kinds[i][3](v) for i, v in enumerate(element)} for element in elements]
            given_values = [draw(st.sampled_from([tuple(element), dict(as_dict_keys(element))])) for element in elements]
            prop = manifest_field(name, InType.NULL, count=count, members=members)
            add(prop, given_values if count is not None else given_values[0], as_dicts if count is not None else as_dicts[0])
    return pointer_size, fields, tuple(values), expected


def as_dict_keys(element: list[Any]) -> dict[str, Any]:
    return {f"m{i}": value for i, value in enumerate(element)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(manifest_event(), st.sampled_from([NULL_GUID, uuid.UUID(int=0x1234)]), st.sampled_from([None, uuid.UUID(int=0x99)]))
def test_manifest_events_decode_to_the_values_written(
    event: tuple[int, list[PropertyInfo], tuple[Any, ...], dict[str, Any]], activity_id: uuid.UUID, related: uuid.UUID | None
) -> None:
    pointer_size, fields, values, expected = event
    encoder = CountingManifestEncoder(PROVIDER, (9, 2, 16, 4, 1, 3, 0x8000_0000_0000_0001), fields)
    ids = dict(IDS, activity_id=activity_id, related_activity_id=related, pointer_size=pointer_size)
    raw = encode_or_too_large(encoder, values, ids)
    if raw is None:
        return
    record = parse(raw)
    assert (record.size, record.pointer_size, record.activity_id, record.related_activity_id) == (len(raw), pointer_size, activity_id, related)
    assert decode_manifest(encoder, raw) == expected
    extended = [related_activity_item(related)] if related else []
    reference = build_event_record(
        provider_id=PROVIDER, id=9, version=2, channel=16, level=4, opcode=1, task=3, keyword=0x8000_0000_0000_0001,
        activity_id=activity_id, extended=extended, user_data=record.user_data, pointer_size=pointer_size, **IDS,
    )  # fmt: skip
    assert raw == reference.raw


# -- random TraceLogging events ----------------------------------------------------------------

TL_SCALARS = FIXED + VARIABLE + [(InType.BINARY, None, st.binary(max_size=40), _same)]


@st.composite
def tracelogging_event(draw: st.DrawFn) -> tuple[list[PropertyInfo], tuple[Any, ...], dict[str, Any]]:
    fields: list[PropertyInfo] = []
    values: list[Any] = []
    expected: dict[str, Any] = {}
    for index in range(draw(st.integers(0, 6))):
        name = f"f{index}"
        in_type, out_type, values_of, decoded = draw(st.sampled_from(TL_SCALARS))
        shape = "scalar" if in_type == InType.BINARY else draw(st.sampled_from(["scalar", "const", "variable", "struct"]))
        if shape == "scalar":
            value = draw(values_of)
            fields.append(tl_field(name, in_type, out_type))
            if in_type == InType.BINARY:
                expected[f"{name}.Length"] = len(value)
            expected[name] = decoded(value)
        elif shape == "struct":
            member = tl_field("inner", in_type, out_type)
            items = draw(st.lists(values_of, max_size=3))
            fields.append(tl_field(name, InType.NULL, count="variable", members=[member]))
            value = [{"inner": item} for item in items]
            expected[name] = [{"inner": decoded(item)} for item in items]
        else:
            value = draw(st.lists(values_of, max_size=4))
            fields.append(tl_field(name, in_type, out_type, count=len(value) if shape == "const" else "variable"))
            expected[name] = [decoded(item) for item in value]
        values.append(value)
    return fields, tuple(values), expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tracelogging_event(), st.sampled_from([4, 8]), st.sampled_from([None, uuid.UUID(int=0x77)]), st.integers(0, 0x0FFFFFFF))
def test_tracelogging_events_decode_to_the_values_written(
    event: tuple[list[PropertyInfo], tuple[Any, ...], dict[str, Any]], pointer_size: int, related: uuid.UUID | None, tags: int
) -> None:
    fields, values, expected = event
    group = uuid.UUID(int=0xABCDEF)
    encoder = CountingTraceLoggingEncoder("Contoso.Widget", "Spun", fields, level=3, keyword=0x40, opcode=1, tags=tags, provider_group=group)
    ids = dict(IDS, related_activity_id=related, pointer_size=pointer_size)
    raw = encode_or_too_large(encoder, values, ids)
    if raw is None:
        return
    record = parse(raw)
    assert decode_tracelogging(raw) == expected
    schema = schema_from_record(record)
    assert schema is not None
    assert (schema.provider_name, schema.event_name, schema.tags, schema.provider_group) == ("Contoso.Widget", "Spun", tags, group)
    assert record.user_data == pack_values(fields, values)
    metadata, traits = encode_event_metadata("Spun", fields, tags), encode_provider_traits("Contoso.Widget", group)
    assert [item.ext_type for item in record.extended] == ([1] if related else []) + [12, 11]
    assert (record.provider_traits, record.tracelogging_schema, record.related_activity_id) == (traits, metadata, related)
    items = ([related_activity_item(related)] if related else []) + [ExtendedItem(12, traits), ExtendedItem(11, metadata)]
    reference = build_event_record(
        provider_id=provider_guid_from_name("Contoso.Widget"), channel=11, level=3, opcode=1, keyword=0x40,
        extended=items, user_data=record.user_data, pointer_size=pointer_size, **IDS,
    )  # fmt: skip
    assert raw == reference.raw


# -- the three-field event, header fields, files -----------------------------------------------

THREE_FIELDS = [("count", InType.UINT32), ("total", InType.UINT64), ("name", InType.UNICODESTRING)]
THREE_VALUES = (7, 2**40, "twenty characters..!")


@pytest.mark.parametrize("pointer_size", [4, 8])
@pytest.mark.parametrize("related", [None, uuid.UUID(int=5)])
def test_three_field_event_matches_build_event_record(pointer_size: int, related: uuid.UUID | None) -> None:
    activity_id = uuid.UUID(int=3)
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 16, 4, 0, 2, 0x10), THREE_FIELDS)
    raw = encoder.encode(THREE_VALUES, activity_id=activity_id, related_activity_id=related, pointer_size=pointer_size, **IDS)
    payload = (7).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + "twenty characters..!\0".encode("utf-16-le")
    reference = build_event_record(
        provider_id=PROVIDER, id=1, channel=16, level=4, task=2, keyword=0x10, activity_id=activity_id,
        extended=[related_activity_item(related)] if related else [], user_data=payload, pointer_size=pointer_size, **IDS,
    )  # fmt: skip
    assert raw == reference.raw
    header = reference.header_fields()
    assert header["HeaderType"] == (0x13 if pointer_size == 8 else 0x12)
    assert header["MarkerFlags"] == 0xC0
    assert header["Flags"] == (L.EVENT_HEADER_FLAG_EXTENDED_INFO if related else 0)
    assert header["ProcessorTime"] == 0 and header["Size"] == len(raw)


def test_each_run_of_fixed_size_fields_is_one_struct_call() -> None:
    """Header + first run in one pack, the run after the string in another, the string encoded inline."""
    fields = [("a", InType.UINT32), ("b", InType.UINT64), ("s", InType.UNICODESTRING), ("c", InType.UINT8), ("g", InType.GUID), ("d", InType.DOUBLE)]
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields)
    source, namespace = encoder_source(
        encoder.fields, PayloadPacker(encoder.fields, pointer_size=8), pointer_size=8, ansi_encoding="cp1252",
        tracelogging=False, constant=bytes(40), extended=b"",
    )  # fmt: skip
    returns = [line.strip() for line in source.splitlines() if line.strip().startswith("return H")]
    assert returns == [
        "return H0(size + 3222470656, tid, pid, timestamp, C, act, v0, v1) + b2 + R1(v3, v4.bytes_le, v5)",
        "return H1(size + 7517437976, tid, pid, timestamp, C, act, X, rel, v0, v1) + b2 + R1(v3, v4.bytes_le, v5)",
    ]
    assert namespace["H0"].__self__.format == "<QIIq40s16sIQ" and namespace["R1"].__self__.format == "<B16sd"
    assert "UTF16(v2 + '\\0', 'surrogatepass')" in source


def test_values_may_be_a_list_or_a_mapping_by_name() -> None:
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), THREE_FIELDS)
    expected = encoder.encode(THREE_VALUES, **IDS)
    assert encoder.encode(list(THREE_VALUES), **IDS) == expected
    assert encoder.encode({"name": THREE_VALUES[2], "total": 2**40, "count": 7}, **IDS) == expected


def test_an_event_without_fields_is_a_bare_header() -> None:
    encoder = ManifestEventEncoder(PROVIDER, (5, 0, 0, 4, 0, 0, 0))
    raw = encoder.encode((), **IDS)
    assert len(raw) == 0x50 and parse(raw).id == 5
    with pytest.raises(InvalidArgument, match="0 fields but 1 values"):
        encoder.encode((1,), **IDS)


def test_a_file_of_encoded_events_reads_back_in_openetw_and_dissect() -> None:
    manifest = ManifestEventEncoder(PROVIDER, (1, 0, 16, 4, 0, 0, 0), THREE_FIELDS)
    tracelogging = TraceLoggingEventEncoder("Contoso.Widget", "Spun", [tl_field(*f) for f in THREE_FIELDS])
    records = []
    for number in range(300):
        encoder = manifest if number % 2 else tracelogging
        related = uuid.UUID(int=number) if number % 7 == 0 else None
        records.append(encoder.encode((number, number * 3, f"event {number}"), timestamp=1000 + number, pid=1, tid=2, related_activity_id=related))
    data = etl_file(records)
    read = [r for r in read_records(data) if isinstance(r, EventHeaderRecord)]
    assert sorted(r.raw for r in read) == sorted(records)
    for record in read:
        number = record.timestamp - 1000
        decoded = decode_tracelogging(record.raw) if record.channel == 11 else decode_manifest(manifest, record.raw)
        assert decoded == {"count": number, "total": number * 3, "name": f"event {number}"}
    dissect_etl = pytest.importorskip("dissect.etl")
    theirs = list(dissect_etl.ETL(io.BytesIO(data)))
    assert len(theirs) == len(list(read_records(data)))
    assert sum(1 for event in theirs if bytes(getattr(event.header.header, "ProviderId", b"")) == PROVIDER.bytes_le) == 150


@pytest.mark.parametrize("name", ["primitive-types.etl", "SelfDescribingSingleEvent.etl"])
def test_windows_tracelogging_events_encode_to_the_same_bytes(name: str) -> None:
    """Each TraceLogging event of a Windows file, re-encoded from its decoded values, is byte-identical
    (ProcessorTime aside: Windows fills in the CPU times, the encoder writes 0)."""
    checked = 0
    for record in read_records(corpus_path("etl", "perfview", name)):
        schema = schema_from_record(record)
        if schema is None:
            continue
        decoded = decode_properties(schema, record.user_data, record.pointer_size)
        fields = [p for p in schema.properties if not p.name.endswith(".Length")]
        assert schema.provider_name is not None and schema.event_name is not None
        encoder = TraceLoggingEventEncoder(
            schema.provider_name, schema.event_name, fields, level=record.level, keyword=record.keyword,
            opcode=record.opcode, tags=schema.tags, provider_group=schema.provider_group, event_id=record.id,
            provider_id=record.provider_id,  # registered with a GUID of its own, not the name hash
        )  # fmt: skip
        raw = encoder.encode(
            tuple(decoded[p.name] for p in fields), timestamp=record.timestamp, pid=record.pid, tid=record.tid,
            activity_id=record.activity_id, related_activity_id=record.related_activity_id, pointer_size=record.pointer_size,
        )  # fmt: skip
        original = bytearray(record.raw)
        original[L.EVENT_HEADER.offset("ProcessorTime") : L.EVENT_HEADER.offset("ActivityId")] = bytes(8)
        assert raw == bytes(original)
        checked += 1
    assert checked > 0


SAMPLE_VALUES: dict[int, Any] = {
    InType.UNICODESTRING: "text é", InType.ANSISTRING: "ansi", InType.BOOLEAN: True, InType.FLOAT: 1.5,
    InType.DOUBLE: 2.25, InType.GUID: uuid.UUID(int=7), InType.POINTER: 0x1000, InType.FILETIME: datetime(2020, 1, 1),
    InType.SYSTEMTIME: datetime(2020, 1, 1, 1, 2, 3), InType.SID: "S-1-5-18", InType.MANIFEST_COUNTEDSTRING: "counted",
    InType.MANIFEST_COUNTEDANSISTRING: "ca", InType.MANIFEST_COUNTEDBINARY: b"cb", InType.SIZET: 12,
}  # fmt: skip


def sample_value(prop: PropertyInfo, integers: dict[str, int]) -> Any:
    """A value for any manifest field: integers are 2 (so counts and lengths referring to them hold)."""
    if prop.count is not None:
        count = prop.count if isinstance(prop.count, int) else integers[prop.count]
        return [sample_element(prop, integers) for _ in range(count)]
    value = sample_element(prop, integers)
    if isinstance(value, int):
        integers[prop.name] = int(value)
    return value


def sample_element(prop: PropertyInfo, integers: dict[str, int]) -> Any:
    if prop.members is not None:
        return {member.name: sample_value(member, integers) for member in prop.members}
    length = prop.length if not isinstance(prop.length, str) else integers[prop.length]
    if prop.out_type == OutType.IPV4:
        return ipaddress.IPv4Address("1.2.3.4")
    if prop.in_type == InType.BINARY:
        return ipaddress.IPv6Address("::1") if length is None else bytes(range(length))
    if prop.in_type in (InType.UNICODESTRING, InType.ANSISTRING) and length is not None:
        return "x" * length
    return SAMPLE_VALUES.get(int(prop.in_type), 2)


def test_every_event_of_real_manifests_encodes_and_decodes() -> None:
    """Every template of real manifests (the CLR's, PerfView's, authored samples) gets an encoder;
    its record decodes without error, and the decoded values encode to the same bytes."""
    paths = [corpus_path("manifests", "dotnet-runtime", "ClrEtwAll.man"), corpus_path("manifests", "perfview", "ETWClrProfiler.man")]
    paths += sorted(corpus_path("manifests", "authored-samples").glob("*.man")) + sorted(corpus_path("manifests", "perfview").glob("*.xml"))
    manifests, errors = load_manifests(paths)
    assert not errors
    checked = 0
    for manifest in manifests:
        for _, _, _, schema in schemas_from_manifest(manifest):
            encoder = ManifestEventEncoder.from_schema(schema)
            integers: dict[str, int] = {}
            values = tuple(sample_value(prop, integers) for prop in schema.properties)
            raw = encoder.encode(values, **IDS)
            record = parse(raw)
            assert (record.provider_id, record.id, record.version, record.keyword) == (schema.provider_id, schema.event_id, schema.version, schema.keyword)
            decoded = decode_properties(schema, record.user_data, 8)
            assert decoded.ok and decoded.trailing == b"", (schema.event_name, decoded.errors)
            assert encoder.encode(tuple(decoded.values_in_order()), **IDS) == raw
            checked += 1
    assert checked > 600


# -- strings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "é€Ž and 😀 and 中文", "x" * 30_000, "\ud800 lone surrogate"])
def test_unicode_strings_round_trip_in_both_encodings(text: str) -> None:
    manifest = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), [("s", InType.UNICODESTRING)])
    tracelogging = TraceLoggingEventEncoder("P", "E", [("s", InType.UNICODESTRING)])
    expected = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    assert decode_manifest(manifest, manifest.encode((text,), **IDS)) == {"s": expected}
    assert decode_tracelogging(tracelogging.encode((text,), **IDS)) == {"s": expected}


def test_ansi_strings_use_cp1252_unless_told_or_utf8_out_type() -> None:
    fields = [("a", InType.ANSISTRING), ("u", InType.ANSISTRING, OutType.UTF8)]
    cp1252 = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields)
    raw = cp1252.encode(("€uro", "€ 中"), **IDS)
    assert parse(raw).user_data == "€uro\0".encode("cp1252") + "€ 中\0".encode()
    with pytest.raises(InvalidFieldValue, match=r"'a'.*cp1252"):
        cp1252.encode(("中", ""), **IDS)
    utf8 = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields, ansi_encoding="utf-8")
    assert decode_manifest(utf8, utf8.encode(("中", "x"), **IDS), ansi_encoding="utf-8") == {"a": "中", "u": "x"}
    assert decode_manifest(cp1252, cp1252.encode((b"raw\xff", "x"), **IDS)) == {"a": "rawÿ", "u": "x"}


def test_filetime_takes_ticks_and_systemtime_converts_aware_times_to_utc() -> None:
    fields = [("f", InType.FILETIME), ("s", InType.SYSTEMTIME, OutType.DATETIME_UTC)]
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields)
    noon_paris = datetime(2024, 3, 1, 13, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    decoded = decode_manifest(encoder, encoder.encode((133_000_000_000_000_000, noon_paris), **IDS))
    assert decoded["f"] == datetime(1601, 1, 1, tzinfo=UTC) + timedelta(seconds=13_300_000_000)
    assert decoded["s"] == datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)


# -- wrong values: InvalidArgument naming the field --------------------------------------------

BAD_VALUES = [
    (InType.INT8, None, 128, "out of range"), (InType.UINT8, None, -1, "out of range"), (InType.INT16, None, "1", "integer"),
    (InType.UINT32, None, 2**32, "out of range"), (InType.UINT64, None, 1.0, "integer"), (InType.INT64, None, 2**63, "out of range"),
    (InType.HEXINT32, None, None, "integer"), (InType.FLOAT, None, 1e300, "too large"), (InType.DOUBLE, None, "x", "real number"),
    (InType.BOOLEAN, None, "yes", "integer"), (InType.GUID, None, "not-a-guid", "not a GUID"), (InType.GUID, None, 5, "uuid"),
    (InType.POINTER, None, -5, "out of range"), (InType.FILETIME, None, -1, "out of range"),
    (InType.FILETIME, None, datetime(1500, 1, 1), "before 1601"), (InType.SYSTEMTIME, None, 5, "datetime"),
    (InType.SID, None, "S-1-x", "not a SID"), (InType.SID, None, b"\x01\x02" + bytes(6), "sub-authority"),
    (InType.UNICODESTRING, None, "a\0b", "NUL"), (InType.UNICODESTRING, None, b"abc", "str"),
    (InType.ANSISTRING, None, 3, "str"), (InType.MANIFEST_COUNTEDBINARY, None, "text", "bytes"),
    (InType.MANIFEST_COUNTEDSTRING, None, "x" * 40_000, "u16"), (InType.UINT16, OutType.PORT, 70_000, "out of range"),
    (InType.UINT32, OutType.IPV4, "300.1.1.1", "300"), (InType.BINARY, OutType.IPV6, b"short", "16 bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("in_type", "out_type", "value", "message"), BAD_VALUES)
def test_a_bad_value_raises_naming_its_field(in_type: InType, out_type: OutType | None, value: Any, message: str) -> None:
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), [("ok", InType.UINT8), ("the_field", in_type, out_type)])
    with pytest.raises(InvalidFieldValue, match=message) as caught:
        encoder.encode((1, value), **IDS)
    assert caught.value.field == "the_field" and "'the_field'" in str(caught.value)
    assert isinstance(caught.value, InvalidArgument)


def test_paths_inside_arrays_and_structs_are_named() -> None:
    point = manifest_field("point", InType.NULL, count=2, members=[("x", InType.INT8), ("y", InType.INT8)])
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), [("n", InType.UINT8), ("list", InType.UINT16, None, "n"), point])
    with pytest.raises(InvalidFieldValue, match=r"'list\[1\]'"):
        encoder.encode((2, [1, -1], [(0, 0), (0, 0)]), **IDS)
    with pytest.raises(InvalidFieldValue, match=r"'point\[1\]\.y'.*out of range"):
        encoder.encode((0, [], [(0, 0), {"x": 1, "y": 300}]), **IDS)
    with pytest.raises(InvalidFieldValue, match=r"'point\[0\]'.*member"):
        encoder.encode((0, [], [{"x": 1}, (0, 0)]), **IDS)


def test_referenced_counts_and_lengths_must_match() -> None:
    fields = [("n", InType.UINT8), ("items", InType.UINT32, None, "n"), ("size", InType.UINT16), ("blob", InType.BINARY, None, None, "size"),
              ("fixed", InType.BINARY, None, None, 4), ("name", InType.UNICODESTRING, None, None, 3), ("pair", InType.INT8, None, 2)]  # fmt: skip
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields)
    good = (2, [1, 2], 3, b"abc", b"1234", "ab", [1, 2])
    assert decode_manifest(encoder, encoder.encode(good, **IDS)) == dict(zip([f[0] for f in fields], good, strict=True))
    for index, bad, message in [(0, 3, "'n' says 3"), (2, 2, "'size' says 2"), (4, b"123", "length is 4"), (5, "abcd", "length is 3"), (6, [1], "takes 2")]:
        values = list(good)
        values[index] = bad
        with pytest.raises(InvalidFieldValue, match=message):
            encoder.encode(tuple(values), **IDS)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("items", InType.UINT32, None, "n")], "not an earlier integer field"),
        ([("n", InType.UNICODESTRING), ("items", InType.UINT32, None, "n")], "not an earlier integer field"),
        ([("blob", InType.BINARY)], "BINARY needs a length"),
        ([("rest", InType.UINT8, None, "*")], "rest-of-payload"),
        ([("bad", 24)], "cannot be encoded"),
        ([manifest_field("empty", InType.NULL, members=[])], "at least one member"),
    ],
)
def test_field_lists_that_cannot_be_encoded_are_refused_up_front(fields: list[Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), fields)


def test_descriptor_and_header_values_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="level"):
        ManifestEventEncoder(PROVIDER, (1, 0, 0, 256, 0, 0, 0), [])
    with pytest.raises(InvalidArgument, match="POINTER"):
        TraceLoggingEventEncoder("P", "E", [("p", InType.POINTER)])
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), THREE_FIELDS)
    for bad, message in [(dict(IDS, pid=-1), "pid"), (dict(IDS, tid=2**32), "tid"), (dict(IDS, timestamp=2**63), "timestamp"),
                         (dict(IDS, activity_id="x"), "activity_id"), (dict(IDS, related_activity_id=1), "related_activity_id"),
                         (dict(IDS, pointer_size=2), "pointer_size")]:  # fmt: skip
        with pytest.raises(InvalidArgument, match=message):
            encoder.encode(THREE_VALUES, **bad)


@pytest.mark.parametrize("related", [None, uuid.UUID(int=1)])
def test_records_over_65535_bytes_raise_event_too_large(related: uuid.UUID | None) -> None:
    encoder = ManifestEventEncoder(PROVIDER, (1, 0, 0, 4, 0, 0, 0), [("blob", InType.MANIFEST_COUNTEDBINARY)])
    room = 0xFFFF - 0x50 - 2 - (24 if related else 0)
    assert len(encoder.encode((bytes(room),), related_activity_id=related, **IDS)) == 0xFFFF
    with pytest.raises(EventTooLarge) as caught:
        encoder.encode((bytes(room + 1),), related_activity_id=related, **IDS)
    assert caught.value.size == 0x10000 and isinstance(caught.value, InvalidArgument)


# -- TraceLogging types from Python values -----------------------------------------------------


def test_python_values_map_to_tracelogging_types() -> None:
    cases: list[tuple[Any, InType | int, OutType | None, bool]] = [
        (True, InType.BOOLEAN, None, False), (-5, InType.INT64, None, False), (2**63, InType.UINT64, None, False),
        (1.5, InType.DOUBLE, None, False), ("s", InType.UNICODESTRING, None, False), (b"b", InType.BINARY, None, False),
        (uuid.UUID(int=1), InType.GUID, None, False), (datetime(2020, 1, 1), InType.FILETIME, None, False),
        (ipaddress.IPv4Address("1.2.3.4"), InType.UINT32, OutType.IPV4, False),
        (ipaddress.IPv6Address("::1"), InType.BINARY, OutType.IPV6, False),
        ([1, 2], InType.INT64, None, True), ([1, 2.5], InType.DOUBLE, None, True), ([2**64 - 1], InType.UINT64, None, True),
        (["a"], InType.UNICODESTRING, None, True), ([b"x"], InType.MANIFEST_COUNTEDBINARY, None, True), ([], InType.INT64, None, True),
    ]  # fmt: skip
    for value, in_type, out_type, array in cases:
        prop = field_for_value("v", value)
        assert (prop.in_type, prop.out_type, prop.count_in_data) == (in_type, out_type, array), value
    for bad in [None, 2**64, -(2**63) - 1, [1, "a"], [[1]], [-1, 2**63], object(), {}, {1: 2}]:
        with pytest.raises(InvalidFieldValue, match="'v'"):
            field_for_value("v", bad)


def test_inferred_events_decode_to_the_values_written() -> None:
    values = dict(
        flag=True, small=-3, big=2**64 - 1, ratio=0.25, text="héllo", blob=b"\x00\x01", id=uuid.UUID(int=9),
        when=datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), numbers=[1, -2, 3], names=["a", ""],
        point={"x": 1, "y": 2.5}, points=[{"x": 1}, {"x": 2}], address=ipaddress.IPv4Address("10.0.0.1"),
    )  # fmt: skip
    encoder = TraceLoggingEventEncoder("P", "Inferred", infer_fields(**values))
    expected = dict(values, **{"blob.Length": 2})
    assert decode_tracelogging(encoder.encode(values, **IDS)) == expected


def test_the_cache_reuses_encoders_by_shape_and_widens_when_values_need_it() -> None:
    cache = TraceLoggingEncoderCache("Contoso.Cache")
    first = cache.encoder_for("E", {"n": 1, "s": "a"})
    assert cache.encoder_for("E", {"n": 2, "s": "b"}) is first
    assert cache.encoder_for("E", {"n": 2, "s": "b"}, level=2) is not first
    assert cache.encoder_for("E", {"n": True, "s": "b"}) is not first
    assert decode_tracelogging(cache.encode("E", {"n": 2**64 - 1, "s": "x"}, **IDS)) == {"n": 2**64 - 1, "s": "x"}
    assert decode_tracelogging(cache.encode("E", {"n": -1, "s": "y"}, **IDS)) == {"n": -1, "s": "y"}
    assert decode_tracelogging(cache.encode("L", {"v": [1, 2]}, **IDS)) == {"v": [1, 2]}
    assert decode_tracelogging(cache.encode("L", {"v": [1, 2.5]}, **IDS)) == {"v": [1.0, 2.5]}
    assert decode_tracelogging(cache.encode("L", {"v": [1.5, 2]}, **IDS)) == {"v": [1.5, 2.0]}
    record = parse(cache.encode("E", {"n": 1, "s": "z"}, **IDS))
    assert record.provider_id == provider_guid_from_name("Contoso.Cache") and record.channel == 11 and record.level == 5
    with pytest.raises(InvalidFieldValue, match=r"'s'.*NUL"):
        cache.encode("E", {"n": 1, "s": "a\0"}, **IDS)
    with pytest.raises(InvalidFieldValue, match="'v'"):
        cache.encode("L", {"v": [1, "a"]}, **IDS)
    with pytest.raises(InvalidArgument, match="field names are strings"):
        cache.encode("N", {1: 2}, **IDS)  # type: ignore[dict-item]
