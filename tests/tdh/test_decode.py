"""Property decoding on handcrafted payloads: every in-type, arrays, structs, references, errors."""

from __future__ import annotations

import ipaddress
import struct
import uuid
from datetime import UTC, datetime

import pytest

from openetw.errors import InvalidArgument, PropertyDecodeError
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties, sid_to_string
from openetw.tdh.schema import PropertyInfo, Schema

PROVIDER = uuid.UUID("d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615")
GUID = uuid.UUID("0ad614c4-0ef4-4225-8013-f44f37cb0397")
SYSTEM_SID = bytes([1, 1, 0, 0, 0, 0, 0, 5]) + struct.pack("<I", 18)


def schema(*properties: PropertyInfo) -> Schema:
    return Schema(PROVIDER, event_id=1, properties=properties)


def decode_one(prop: PropertyInfo, data: bytes, pointer_size: int = 8) -> object:
    decoded = decode_properties(schema(prop), data, pointer_size)
    assert decoded.errors == {}, decoded.errors
    assert decoded.end_offset == len(data)
    return decoded[prop.name]


@pytest.mark.parametrize(
    ("in_type", "data", "expected"),
    [
        (InType.INT8, b"\xff", -1),
        (InType.UINT8, b"\xff", 255),
        (InType.INT16, b"\xcd\xff", -51),
        (InType.UINT16, b"\x33\x00", 51),
        (InType.INT32, b"\x9a\xff\xff\xff", -102),
        (InType.UINT32, b"\xff\xff\xff\xff", 0xFFFFFFFF),
        (InType.INT64, struct.pack("<q", -204), -204),
        (InType.UINT64, struct.pack("<Q", 2**64 - 1), 2**64 - 1),
        (InType.FLOAT, struct.pack("<f", 1.5), 1.5),
        (InType.DOUBLE, struct.pack("<d", -2.25), -2.25),
        (InType.BOOLEAN, b"\x02\x00\x00\x00", True),
        (InType.BOOLEAN, b"\x00\x00\x00\x00", False),
        (InType.GUID, GUID.bytes_le, GUID),
        (InType.HEXINT32, b"\x78\x56\x34\x12", 0x12345678),
        (InType.HEXINT64, struct.pack("<Q", 0xFFFFF80012345678), 0xFFFFF80012345678),
        (InType.UNICODESTRING, "Mercury\0".encode("utf-16-le"), "Mercury"),
        (InType.ANSISTRING, b"Venus\0", "Venus"),
        (InType.ANSISTRING, b"caf\xe9\x80\0", "café€"),  # cp1252 by default
        (InType.UNICODECHAR, "Ж".encode("utf-16-le"), "Ж"),
        (InType.ANSICHAR, b"M", "M"),
        (InType.MANIFEST_COUNTEDSTRING, b"\x04\x00" + "hi".encode("utf-16-le"), "hi"),
        (InType.MANIFEST_COUNTEDANSISTRING, b"\x02\x00hi", "hi"),
        (InType.MANIFEST_COUNTEDBINARY, b"\x03\x00abc", b"abc"),
        (InType.COUNTEDSTRING, b"\x04\x00" + "hi".encode("utf-16-le"), "hi"),
        (InType.COUNTEDANSISTRING, b"\x02\x00hi", "hi"),
        (InType.REVERSEDCOUNTEDSTRING, b"\x00\x04" + "hi".encode("utf-16-le"), "hi"),
        (InType.REVERSEDCOUNTEDANSISTRING, b"\x00\x02hi", "hi"),
        (InType.NONNULLTERMINATEDSTRING, "rest".encode("utf-16-le"), "rest"),
        (InType.NONNULLTERMINATEDANSISTRING, b"rest", "rest"),
        (InType.HEXDUMP, b"\x02\x00\x00\x00\xab\xcd", b"\xab\xcd"),
        (InType.SID, SYSTEM_SID, "S-1-5-18"),
    ],
)
def test_each_in_type_decodes_to_a_typed_value(in_type: InType, data: bytes, expected: object) -> None:
    value = decode_one(PropertyInfo("v", in_type), data)
    assert value == expected
    assert type(value) is type(expected)


def test_utf16_terminator_must_be_aligned() -> None:
    # "\u0100\u0001" has the bytes 00 01 01 00: a 00 00 pair at an odd offset is not a terminator.
    data = "\u0100\u0001".encode("utf-16-le") + b"\0\0"
    assert decode_one(PropertyInfo("v", InType.UNICODESTRING), data) == "\u0100\u0001"


def test_a_string_without_its_nul_runs_to_the_end_of_the_payload() -> None:
    head = PropertyInfo("n", InType.UINT32)
    for prop, tail, text in [
        (PropertyInfo("url", InType.UNICODESTRING), "/index.htm".encode("utf-16-le"), "/index.htm"),
        (PropertyInfo("url", InType.UNICODESTRING), "/a".encode("utf-16-le") + b"\x7f", "/a"),  # odd byte: consumed, not text
        (PropertyInfo("url", InType.UNICODESTRING), b"!", ""),
        (PropertyInfo("url", InType.ANSISTRING), b"/index.htm", "/index.htm"),
    ]:
        data = struct.pack("<I", 7) + tail
        decoded = decode_properties(schema(head, prop), data, 8)
        assert decoded.ok and decoded["url"] == text
        assert decoded.end_offset == len(data) and decoded.raw("url") == tail


def test_an_unterminated_string_takes_every_byte_left_wherever_it_is() -> None:
    # Not only the last property: later properties find the payload empty.
    decoded = decode_properties(schema(PropertyInfo("s", InType.ANSISTRING), PropertyInfo("after", InType.UINT8)), b"ab\x01", 8)
    assert decoded["s"] == "ab\x01"
    assert decoded.errors["after"].message == "UINT8 needs 1 bytes, 0 left in the payload"
    strings = PropertyInfo("s", InType.UNICODESTRING, count=2)
    decoded = decode_properties(schema(strings), "x".encode("utf-16-le"), 8)
    assert decoded.errors["s"].message == "UNICODESTRING needs at least 1 byte, 0 left in the payload"
    assert decoded.errors["s"].offset == 2


def test_a_string_that_starts_at_the_end_of_the_payload_is_an_error() -> None:
    for in_type in (InType.UNICODESTRING, InType.ANSISTRING):
        decoded = decode_properties(schema(PropertyInfo("n", InType.UINT8), PropertyInfo("s", in_type)), b"\x01", 8)
        assert decoded["n"] == 1 and not decoded.ok
        assert decoded.errors["s"].message.endswith("needs at least 1 byte, 0 left in the payload")


def test_mapping_views_and_lookups_decode_what_they_need() -> None:
    props = (PropertyInfo("a", InType.UINT8), PropertyInfo("b", InType.UINT8), PropertyInfo("c", InType.UINT32))
    decoded = decode_properties(schema(*props), b"\x01\x02\x03", 8)
    assert decoded["a"] == 1 and "b" in decoded and decoded.get("b") == 2
    assert "c" not in decoded and decoded.get("c", "absent") == "absent" and "zz" not in decoded
    assert list(decoded.keys()) == ["a", "b"] and list(decoded.values()) == [1, 2]
    assert dict(decoded.items()) == {"a": 1, "b": 2} and len(decoded) == 2
    assert decoded.errors["c"].message == "UINT32 needs 4 bytes, 1 left in the payload"
    fresh = decode_properties(schema(*props), b"\x01\x02\x03\x00\x00\x00", 8)
    assert list(fresh.items()) == [("a", 1), ("b", 2), ("c", 3)]  # items() alone decodes everything


def test_strings_with_a_length_count_characters_and_stop_at_nul() -> None:
    assert decode_one(PropertyInfo("v", InType.UNICODESTRING, length=4), "ab\0\0".encode("utf-16-le")) == "ab"
    assert decode_one(PropertyInfo("v", InType.ANSISTRING, length=3), b"xyz") == "xyz"


def test_ansi_with_utf8_out_types_is_utf8() -> None:
    for out in (OutType.UTF8, OutType.XML, OutType.JSON):
        assert decode_one(PropertyInfo("v", InType.ANSISTRING, out), "ü€\0".encode()) == "ü€"


def test_pointer_and_sizet_follow_the_pointer_size() -> None:
    for in_type in (InType.POINTER, InType.SIZET):
        assert decode_one(PropertyInfo("p", in_type), b"\x01\x02\x03\x04", pointer_size=4) == 0x04030201
        assert decode_one(PropertyInfo("p", in_type), struct.pack("<Q", 2**63), pointer_size=8) == 2**63


def test_filetime_is_an_aware_utc_datetime() -> None:
    ticks = 132756731757910000  # 2021-09-09 14:59:35.791 UTC
    value = decode_one(PropertyInfo("t", InType.FILETIME), struct.pack("<q", ticks))
    assert value == datetime(2021, 9, 9, 14, 59, 35, 791000, tzinfo=UTC)
    assert decode_one(PropertyInfo("t", InType.FILETIME), bytes(8)) == 0  # "not set" stays a number
    assert decode_one(PropertyInfo("t", InType.FILETIME), b"\x01" + bytes(7)) == datetime(1601, 1, 1, tzinfo=UTC)
    assert decode_one(PropertyInfo("t", InType.FILETIME), b"\xff" * 7 + b"\x7f") == 2**63 - 1  # beyond year 9999


def test_systemtime_is_a_naive_datetime_unless_declared_utc() -> None:
    raw = struct.pack("<8H", 2021, 9, 4, 9, 14, 59, 35, 799)
    assert decode_one(PropertyInfo("t", InType.SYSTEMTIME), raw) == datetime(2021, 9, 9, 14, 59, 35, 799000)
    utc = decode_one(PropertyInfo("t", InType.SYSTEMTIME, OutType.DATETIME_UTC), raw)
    assert utc.tzinfo is UTC


def test_invalid_systemtime_is_an_error_but_decoding_goes_on() -> None:
    raw = struct.pack("<8H", 2021, 13, 0, 1, 0, 0, 0, 0) + b"\x07\x00"
    decoded = decode_properties(schema(PropertyInfo("t", InType.SYSTEMTIME), PropertyInfo("n", InType.UINT16)), raw, 8)
    assert "t" not in decoded
    assert decoded["n"] == 7
    error = decoded.errors["t"]
    assert isinstance(error, PropertyDecodeError)
    assert error.raw == raw[:16] and error.offset == 0 and "month" in error.message
    assert decoded.not_decoded == ()


def test_sid_with_large_authority_prints_hex() -> None:
    raw = bytes([1, 0]) + (2**40).to_bytes(6, "big")
    assert sid_to_string(raw) == "S-1-0x010000000000"


def test_wbemsid_skips_the_token_user_by_pointer_size() -> None:
    prop = PropertyInfo("sid", InType.WBEMSID)
    assert decode_one(prop, b"\x01" * 16 + SYSTEM_SID, pointer_size=8) == "S-1-5-18"
    assert decode_one(prop, b"\x01" * 8 + SYSTEM_SID, pointer_size=4) == "S-1-5-18"
    assert decode_one(prop, bytes(4)) is None  # "no SID": the four zero bytes alone


def test_binary_takes_its_length_constant_or_referenced() -> None:
    assert decode_one(PropertyInfo("b", InType.BINARY, length=3), b"abc") == b"abc"
    props = (PropertyInfo("n", InType.UINT16), PropertyInfo("b", InType.BINARY, length="n"))
    decoded = decode_properties(schema(*props), b"\x02\x00xyz", 8)
    assert decoded["b"] == b"xy"
    assert decoded.trailing == b"z"


def test_binary_without_length_is_an_error_except_ipv6() -> None:
    decoded = decode_properties(schema(PropertyInfo("b", InType.BINARY)), b"abc", 8)
    assert "without a length" in decoded.errors["b"].message
    address = ipaddress.IPv6Address("fe80::1")
    assert decode_one(PropertyInfo("a", InType.BINARY, OutType.IPV6), address.packed) == address


def test_out_types_that_change_the_typed_value() -> None:
    assert decode_one(PropertyInfo("p", InType.UINT16, OutType.PORT), b"\x00\x50") == 80
    assert decode_one(PropertyInfo("a", InType.UINT32, OutType.IPV4), bytes([10, 0, 0, 1])) == ipaddress.IPv4Address("10.0.0.1")
    assert decode_one(PropertyInfo("b", InType.UINT8, OutType.BOOLEAN), b"\x01") is True
    assert decode_one(PropertyInfo("c", InType.UINT8, OutType.STRING), b"M") == 77  # stays a number; format shows "M"


def test_arrays_with_constant_referenced_and_in_data_counts() -> None:
    assert decode_one(PropertyInfo("a", InType.UINT16, count=3), b"\x01\x00\x02\x00\x03\x00") == [1, 2, 3]
    props = (PropertyInfo("n", InType.UINT8), PropertyInfo("a", InType.ANSISTRING, count="n"))
    assert decode_properties(schema(*props), b"\x02a\0bc\0", 8)["a"] == ["a", "bc"]
    assert decode_one(PropertyInfo("v", InType.INT8, count_in_data=True), b"\x02\x00\xff\x01") == [-1, 1]
    assert decode_one(PropertyInfo("e", InType.UINT32, count=0), b"") == []


def test_nested_structs_and_struct_arrays() -> None:
    point = PropertyInfo("pt", InType.NULL, members=(PropertyInfo("x", InType.INT16), PropertyInfo("y", InType.INT16)))
    line = PropertyInfo("line", InType.NULL, count=2, members=(point, PropertyInfo("tag", InType.ANSISTRING)))
    data = struct.pack("<hh", 1, 2) + b"a\0" + struct.pack("<hh", -3, 4) + b"b\0"
    assert decode_one(line, data) == [{"pt": {"x": 1, "y": 2}, "tag": "a"}, {"pt": {"x": -3, "y": 4}, "tag": "b"}]


def test_errors_inside_structs_and_arrays_name_the_element() -> None:
    point = PropertyInfo("pt", InType.NULL, count=2, members=(PropertyInfo("s", InType.ANSISTRING), PropertyInfo("x", InType.INT16)))
    decoded = decode_properties(schema(point), b"a\0\x01\x00bc", 8)
    assert decoded.errors["pt"].message.startswith("pt[1].x: INT16 needs 2 bytes, 0 left")
    assert decoded.errors["pt"].offset == 6
    bad_time = PropertyInfo("times", InType.SYSTEMTIME, count=2)
    decoded = decode_properties(schema(bad_time), struct.pack("<8H", 2021, 9, 4, 9, 1, 2, 3, 4) + bytes(16), 8)
    assert decoded.errors["times"].message.startswith("times[1]: SYSTEMTIME")
    assert len(decoded.errors["times"].raw) == 32


def test_count_may_refer_to_a_struct_member_decoded_earlier() -> None:
    header = PropertyInfo("h", InType.NULL, members=(PropertyInfo("n", InType.UINT32),))
    items = PropertyInfo("items", InType.UINT8, count="n")
    decoded = decode_properties(schema(header, items), b"\x02\x00\x00\x00\x05\x06", 8)
    assert decoded["items"] == [5, 6]


def test_truncated_final_property_is_an_error_for_that_property() -> None:
    props = (PropertyInfo("a", InType.UINT32), PropertyInfo("b", InType.UINT64), PropertyInfo("c", InType.UINT8))
    decoded = decode_properties(schema(*props), b"\x01\x00\x00\x00\x02\x00\x00", 8)
    assert dict(decoded) == {"a": 1}
    error = decoded.errors["b"]
    assert error.property_name == "b" and error.offset == 4 and error.raw == b"\x02\x00\x00"
    assert "needs 8 bytes, 3 left" in error.message
    assert decoded.not_decoded == ("c",)
    assert decoded.end_offset == 4
    assert not decoded.ok
    assert decoded.values_in_order() == [1, None, None]


@pytest.mark.parametrize(
    "prop",
    [
        PropertyInfo("s", InType.MANIFEST_COUNTEDSTRING),
        PropertyInfo("g", InType.GUID),
        PropertyInfo("t", InType.SYSTEMTIME),
        PropertyInfo("sid", InType.SID),
        PropertyInfo("a", InType.UINT32, count=4),
        PropertyInfo("v", InType.UINT32, count_in_data=True),
        PropertyInfo("b", InType.BINARY, length=9),
        PropertyInfo("h", InType.HEXDUMP),
    ],
)
def test_every_truncation_is_reported_per_property(prop: PropertyInfo) -> None:
    data = b"\x05\x01ab\x01"  # no NUL anywhere, every count too large
    decoded = decode_properties(schema(prop, PropertyInfo("after", InType.UINT8)), data, 8)
    assert prop.name in decoded.errors
    assert decoded.errors[prop.name].raw == data
    assert decoded.not_decoded == ("after",)


def test_unresolvable_references_and_unknown_in_types_are_errors() -> None:
    decoded = decode_properties(schema(PropertyInfo("a", InType.UINT8, count="missing")), b"\x01", 8)
    assert "refers to 'missing'" in decoded.errors["a"].message
    decoded = decode_properties(schema(PropertyInfo("x", 4242)), b"\x01", 8)
    assert "in-type 4242" in decoded.errors["x"].message
    decoded = decode_properties(schema(PropertyInfo("x", InType.UINT8, problem="bad metadata")), b"\x01", 8)
    assert decoded.errors["x"].message == "bad metadata"


def test_huge_counts_do_not_loop() -> None:
    props = (PropertyInfo("n", InType.UINT32), PropertyInfo("e", InType.NULL, count="n", members=()))
    decoded = decode_properties(schema(*props), b"\xff\xff\xff\xff", 8)
    assert "count 4294967295" in decoded.errors["e"].message


def test_decoding_is_lazy_and_stops_at_the_requested_property() -> None:
    props = (PropertyInfo("a", InType.UINT8), PropertyInfo("b", InType.UINT8), PropertyInfo("c", InType.UINT32))
    decoded = decode_properties(schema(*props), b"\x01\x02", 8)
    assert decoded["b"] == 2
    assert decoded._next == 2  # "c" has not been looked at yet
    assert decoded.get("c") is None
    assert "c" in decoded.errors


def test_raw_bytes_of_properties_are_kept() -> None:
    props = (PropertyInfo("a", InType.UINT16), PropertyInfo("s", InType.ANSISTRING))
    decoded = decode_properties(schema(*props), b"\x01\x00hey\0", 8)
    assert decoded.raw("a") == b"\x01\x00"
    assert decoded.raw("s") == b"hey\0"
    assert decoded.raw("nope") is None


def test_pointer_size_must_be_4_or_8() -> None:
    with pytest.raises(InvalidArgument):
        decode_properties(schema(), b"", 2)
