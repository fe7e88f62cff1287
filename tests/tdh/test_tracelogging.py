"""TraceLogging metadata and provider traits: parsing, type translation, encoding, caching."""

from __future__ import annotations

import uuid

import pytest

from openetw.errors import DecodeError, InvalidArgument
from openetw.guids import provider_guid_from_name
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.schema import PropertyInfo
from openetw.tdh.tracelogging import (
    encode_event_metadata,
    encode_provider_traits,
    pack_values,
    parse_event_metadata,
    parse_provider_traits,
    read_tags,
    schema_from_record,
    schema_from_tracelogging,
    tdh_out_type,
    tl_field,
)

PROVIDER = provider_guid_from_name("solar_system")
GROUP = uuid.UUID("4f50731a-89cf-4782-b3e0-dce8c90476ba")

# Real blobs from primitive-types.etl and lxcore_kernel.etl.
PRIMITIVE_METADATA = bytes.fromhex(
    "b600005072696d697469766554797065735465737400737472696e675f747970650002626f6f6c65616e5f7479706500"
    "8403636861725f74797065008402696e7431365f747970650005696e7433325f74797065000775696e7431365f747970"
    "650006" "75696e7433325f747970650008696e7436345f74797065000a75696e7436345f74797065000a677569645f74"
    "797065000f66696c655f74696d655f74797065001173797374656d5f74696d655f747970650012"
)
LXCORE_TRAITS = bytes.fromhex(
    "38004d6963726f736f66742e57696e646f77732e53756273797374656d2e4c78436f7265001300011a73504fcf898247b3e0dce8c90476ba"
)


def test_real_metadata_parses() -> None:
    name, tags, props = parse_event_metadata(PRIMITIVE_METADATA)
    assert name == "PrimitiveTypesTest" and tags == 0
    assert [p.name for p in props][:3] == ["string_type", "boolean_type", "char_type"]
    assert props[1].in_type == InType.UINT8 and props[1].out_type == OutType.BOOLEAN and props[1].source_out_type == 3
    assert props[2].out_type == OutType.STRING  # TlgOut 2 is TDH 1
    assert props[7].in_type == InType.UINT64  # "int64_type" really is declared unsigned
    assert props[-1].in_type == InType.SYSTEMTIME


def test_real_provider_traits_parse() -> None:
    traits = parse_provider_traits(LXCORE_TRAITS)
    assert traits.name == "Microsoft.Windows.Subsystem.LxCore"
    assert traits.group == GROUP
    assert encode_provider_traits(traits.name, traits.group) == LXCORE_TRAITS


def test_provider_traits_errors_and_unknown_traits() -> None:
    with pytest.raises(DecodeError):
        parse_provider_traits(b"\x02")
    with pytest.raises(DecodeError):
        parse_provider_traits(b"\x05\x00abc")
    assert parse_provider_traits(encode_provider_traits("p", decode_guid=GROUP)).decode_guid == GROUP
    odd = b"\x0a\x00p\x00" + b"\x06\x00\x81xyz"
    assert parse_provider_traits(odd).other == ((0x81, b"xyz"),)


@pytest.mark.parametrize("tags", [0, 1 << 21, 0x0FE00000, 1 << 14, 0x0FFFC000, 1, 0x0FFFFFFF, 0x1234567])
def test_tags_round_trip_in_1_2_or_4_bytes(tags: int) -> None:
    blob = encode_event_metadata("E", [], tags=tags)
    assert parse_event_metadata(blob)[1] == tags
    expected_size = 1 if tags & 0x0FE00000 == tags else 2 if tags & 0x0FFFC000 == tags else 4
    assert len(blob) == 2 + expected_size + 2


def test_tag_chains_longer_than_four_bytes_are_skipped() -> None:
    assert read_tags(b"\x81\x80\x80\x80\x80\x00", 0, 6) == (1 << 21, 6)
    with pytest.raises(DecodeError):
        read_tags(b"\x81\x80", 0, 2)


def test_out_type_translation_depends_on_in_type_for_hex_and_sign() -> None:
    assert tdh_out_type(4, InType.UINT8) == OutType.HEXINT8
    assert tdh_out_type(4, InType.INT64) == OutType.HEXINT64
    assert tdh_out_type(12, InType.ANSISTRING) == OutType.JSON  # TlgOut JSON is 12, TDH JSON is 34
    assert tdh_out_type(17, InType.INT16) == OutType.SHORT
    assert tdh_out_type(35, InType.ANSISTRING) == OutType.UTF8
    assert tdh_out_type(99, InType.UINT8) is None


def test_binary_gets_a_synthesized_length_property() -> None:
    blob = encode_event_metadata("E", [("blob", InType.BINARY), ("after", InType.UINT8)])
    _, _, props = parse_event_metadata(blob)
    assert [p.name for p in props] == ["blob.Length", "blob", "after"]
    assert props[1].length == "blob.Length"
    schema = schema_from_tracelogging(PROVIDER, blob)
    data = pack_values([("blob", InType.BINARY), ("after", InType.UINT8)], {"blob": b"xyz", "after": 9})
    assert dict(decode_properties(schema, data, 8)) == {"blob.Length": 3, "blob": b"xyz", "after": 9}


def test_binary_arrays_decode_as_counted_binary_elements() -> None:
    # Hand-built: TDH cannot decode them, writers should not emit them, but they parse.
    blob = b"\x00\x00\x00E\x00b\x00" + bytes([InType.BINARY | 0x40])
    blob = len(blob).to_bytes(2, "little") + blob[2:]
    schema = schema_from_tracelogging(PROVIDER, blob)
    assert schema.properties[0].in_type == InType.MANIFEST_COUNTEDBINARY
    assert dict(decode_properties(schema, b"\x02\x00\x01\x00a\x00\x00", 8)) == {"b": [b"a", b""]}
    with pytest.raises(InvalidArgument):
        encode_event_metadata("E", [tl_field("b", InType.BINARY, count="variable")])


def test_structs_arities_and_custom_fields() -> None:
    point = tl_field("pt", 24, members=[tl_field("x", InType.INT32), tl_field("y", InType.INT32)], count="variable")
    fields = [
        tl_field("fixed", InType.UINT16, count=3),
        point,
        PropertyInfo("bond", InType.UINT8, custom_schema=b"\x01\x02", tags=7),
    ]
    blob = encode_event_metadata("Shapes", fields)
    schema = schema_from_tracelogging(PROVIDER, blob)
    assert schema.properties[0].count == 3
    assert schema.properties[1].count_in_data and [m.name for m in schema.properties[1].members or ()] == ["x", "y"]
    assert schema.properties[2].custom_schema == b"\x01\x02"
    values = {"fixed": [1, 2, 3], "pt": [{"x": 1, "y": -1}, {"x": 2, "y": -2}], "bond": b"\xde\xad"}
    decoded = decode_properties(schema, pack_values(fields, values), 8)
    assert dict(decoded) == values


def test_malformed_metadata_becomes_property_problems() -> None:
    cases = {
        b"\x01": "shorter than its size field",
        b"\x04\x00\x80\x80": "tag bytes run past",
        b"\x05\x00\x00Ev": "no NUL terminator",
        b"\x08\x00\x00E\x00fi": "has no NUL terminator",
        b"\x07\x00\x00E\x00f\x00": "InMeta byte missing",
        b"\x08\x00\x00E\x00f\x00\x84": "OutMeta byte missing",
        b"\x09\x00\x00E\x00f\x00\x24\x01": "u16 after the field types missing",
        b"\x08\x00\x00E\x00f\x00\x00": "in-type NULL",
        b"\x08\x00\x00E\x00f\x00\x1f": "unknown TraceLogging in-type 31",
        b"\x09\x00\x00E\x00s\x00\x98\x03": "declares 3 members",
    }
    for blob, message in cases.items():
        schema = schema_from_tracelogging(PROVIDER, blob)
        decoded = decode_properties(schema, b"\x00" * 4, 8)
        assert any(message in error.message for error in decoded.errors.values()), (blob, decoded.errors)


def test_deeply_nested_structs_are_cut_off() -> None:
    body = b"\x00E\x00" + b"s\x00\x98\x01" * 200 + b"x\x00\x04"
    blob = (len(body) + 2).to_bytes(2, "little") + body
    decoded = decode_properties(schema_from_tracelogging(PROVIDER, blob), b"\x01", 8)
    assert "nested deeper" in next(iter(decoded.errors.values())).message


def test_schema_cache_is_keyed_by_metadata_not_event_id() -> None:
    first = schema_from_tracelogging(PROVIDER, encode_event_metadata("A", [("x", InType.UINT8)]))
    second = schema_from_tracelogging(PROVIDER, encode_event_metadata("A", [("x", InType.UINT32)]))
    assert first.properties[0].in_type == InType.UINT8 and second.properties[0].in_type == InType.UINT32
    other_provider = schema_from_tracelogging(uuid.UUID(int=1), encode_event_metadata("A", [("x", InType.UINT8)]))
    assert other_provider.provider_id == uuid.UUID(int=1)
    assert schema_from_tracelogging(PROVIDER, encode_event_metadata("A", [("x", InType.UINT8)])) is first


def test_schema_carries_descriptor_and_traits() -> None:
    schema = schema_from_tracelogging(
        PROVIDER, PRIMITIVE_METADATA, LXCORE_TRAITS, event_id=7, version=1, level=5, keyword=0x40, opcode=1, task=3
    )
    assert (schema.event_id, schema.version, schema.level, schema.keyword, schema.opcode, schema.task) == (7, 1, 5, 0x40, 1, 3)
    assert schema.channel == 11 and schema.source == "tracelogging"
    assert schema.provider_name == "Microsoft.Windows.Subsystem.LxCore" and schema.provider_group == GROUP


class _Item:
    def __init__(self, ext_type: int, data: bytes) -> None:
        self.ext_type, self.data = ext_type, data


class _Record:
    provider_id = PROVIDER
    id = version = opcode = task = keyword = 0
    level, channel = 5, 11

    def __init__(self, extended: tuple[_Item, ...]) -> None:
        self.extended = extended


def test_schema_from_record_uses_extended_items() -> None:
    assert schema_from_record(_Record((_Item(1, bytes(16)),))) is None
    schema = schema_from_record(_Record((_Item(12, encode_provider_traits("solar_system")), _Item(11, PRIMITIVE_METADATA))))
    assert schema is not None and schema.event_name == "PrimitiveTypesTest" and schema.provider_name == "solar_system"


@pytest.mark.parametrize(
    ("field", "values"),
    [
        (tl_field("s", InType.UNICODESTRING), {"s": "a\0b"}),
        (tl_field("a", InType.UINT8, count=2), {"a": [1]}),
        (tl_field("i", InType.UINT8), {"i": 256}),
        (tl_field("i", InType.UINT8), {}),
        (tl_field("g", InType.GUID), {"g": "not a guid"}),
        (tl_field("s", InType.ANSISTRING), {"s": "€ ok, ☃ not cp1252"}),
    ],
)
def test_pack_values_rejects_misuse(field: object, values: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        pack_values([field], values)  # type: ignore[list-item]


@pytest.mark.parametrize(
    "field",
    [
        tl_field("p", InType.POINTER),
        tl_field("w", InType.WBEMSID),
        tl_field("r", InType.UINT8, count="other"),
        tl_field("s", 24, members=[]),
        tl_field("x", InType.UINT8, OutType.GUID),
        tl_field("n\0", InType.UINT8),
    ],
)
def test_encode_rejects_what_tracelogging_cannot_express(field: object) -> None:
    with pytest.raises(InvalidArgument):
        encode_event_metadata("E", [field])  # type: ignore[list-item]


def test_tuple_fields_and_sequence_values() -> None:
    fields = [("a", InType.UINT8), ("b", InType.UINT32, OutType.HEXINT32), ("c", InType.INT16, None, "variable")]
    schema = schema_from_tracelogging(PROVIDER, encode_event_metadata("E", fields))
    assert schema.properties[1].out_type == OutType.HEXINT32
    assert dict(decode_properties(schema, pack_values(fields, [1, 2, [3, -4]]), 8)) == {"a": 1, "b": 2, "c": [3, -4]}
