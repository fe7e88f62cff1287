"""The EventHeader encoder: decoding its output gives the values back, for every encoding and
format; LinuxTracepoints' own events (the interceptor file) re-encode to their bytes."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from openetw.errors import InvalidArgument
from openetw.perfdata import eventheader as EH
from openetw.perfdata.encode import command_string, encode_event, tracepoint_name
from openetw.perfdata.eventheader import EhField, decode_fields, parse_event, parse_tracepoint_name
from openetw.perfdata.interceptor import interceptor_events
from tests.conftest import corpus_path

COUNTED_CHAR8 = (EH.STRING_LENGTH16_CHAR8, EH.BINARY_LENGTH16_CHAR8)
VALUE_FORMATS = (
    EH.UNSIGNED_INT,
    EH.SIGNED_INT,
    EH.HEX_INT,
    EH.ERRNO,
    EH.PID,
    EH.TIME,
    EH.BOOLEAN,
    EH.FLOAT,
    EH.UUID,
    EH.PORT,
    EH.IPV4,
    EH.IPV6,
)
GUID = uuid.UUID("01020304-0506-0708-0102-030405060708")
# (encoding, format, value) for every encoding and the formats it takes.
CASES: list[tuple[int, int, Any]] = [
    (EH.VALUE8, EH.DEFAULT, 200), (EH.VALUE8, EH.SIGNED_INT, -100), (EH.VALUE8, EH.HEX_INT, 0xAB), (EH.VALUE8, EH.BOOLEAN, 1),
    (EH.VALUE8, EH.HEX_BYTES, b"\x7f"), (EH.VALUE8, EH.STRING8, "þ"),
    (EH.VALUE16, EH.UNSIGNED_INT, 60000), (EH.VALUE16, EH.SIGNED_INT, -30000), (EH.VALUE16, EH.HEX_INT, 0xBEEF),
    (EH.VALUE16, EH.BOOLEAN, 0), (EH.VALUE16, EH.HEX_BYTES, b"\x01\x02"), (EH.VALUE16, EH.STRING_UTF, "Ω"), (EH.VALUE16, EH.PORT, 443),
    (EH.VALUE32, EH.UNSIGNED_INT, 4000000000), (EH.VALUE32, EH.SIGNED_INT, -2000000000), (EH.VALUE32, EH.HEX_INT, 0xDEADBEEF),
    (EH.VALUE32, EH.ERRNO, 2), (EH.VALUE32, EH.PID, 4242), (EH.VALUE32, EH.TIME, 2000000000), (EH.VALUE32, EH.BOOLEAN, 1),
    (EH.VALUE32, EH.FLOAT, 0.5), (EH.VALUE32, EH.HEX_BYTES, b"\x01\x02\x03\x04"), (EH.VALUE32, EH.STRING_UTF, "\U0001f600"),
    (EH.VALUE32, EH.IPV4, b"\x7f\x00\x00\x01"),
    (EH.VALUE64, EH.UNSIGNED_INT, 18000000000000000000), (EH.VALUE64, EH.SIGNED_INT, -9000000000000000000),
    (EH.VALUE64, EH.HEX_INT, 0xFFFFFFFFFFFFCFC7), (EH.VALUE64, EH.TIME, -11644473601), (EH.VALUE64, EH.FLOAT, -math.pi),
    (EH.VALUE64, EH.HEX_BYTES, bytes(range(8))),
    (EH.VALUE128, EH.DEFAULT, bytes(range(16))), (EH.VALUE128, EH.UUID, GUID), (EH.VALUE128, EH.IPV6, bytes(range(16))),
    (EH.ZSTRING_CHAR8, EH.DEFAULT, "hjkl ü"), (EH.ZSTRING_CHAR8, EH.STRING8, "þæ"), (EH.ZSTRING_CHAR8, EH.HEX_BYTES, b"\x01\x02"),
    (EH.ZSTRING_CHAR8, EH.STRING_XML, "<a/>"), (EH.ZSTRING_CHAR8, EH.STRING_JSON, '{"a":1}'), (EH.ZSTRING_CHAR8, EH.STRING_UTF_BOM, "x"),
    (EH.ZSTRING_CHAR16, EH.DEFAULT, "Grüße"), (EH.ZSTRING_CHAR32, EH.STRING_UTF, "\U0001f600!"),
    (EH.STRING_LENGTH16_CHAR8, EH.DEFAULT, "with\0nul"), (EH.STRING_LENGTH16_CHAR16, EH.DEFAULT, ""),
    (EH.STRING_LENGTH16_CHAR32, EH.STRING_JSON, "[1]"),
    (EH.BINARY_LENGTH16_CHAR8, EH.DEFAULT, b"\x00\xff"), (EH.BINARY_LENGTH16_CHAR8, EH.HEX_BYTES, b""),
    (EH.BINARY_LENGTH16_CHAR8, EH.UNSIGNED_INT, 7),
]  # fmt: skip


def round_trip(fields: list[EhField], values: list[Any], **header: Any) -> list[Any]:
    event = parse_event(encode_event("Event", fields, values, **{"level": 4, **header}))
    return [value for _, value in decode_fields(event)]


@pytest.mark.parametrize(("encoding", "fmt", "value"), CASES)
@pytest.mark.parametrize("little_endian", [True, False])
def test_every_encoding_and_format_decodes_back(encoding: int, fmt: int, value: Any, little_endian: bool) -> None:
    if encoding == EH.BINARY_LENGTH16_CHAR8 and isinstance(value, int):
        value = value.to_bytes(
            4, "little" if little_endian else "big"
        )  # a counted value: its bytes in the event's order
        expected: Any = 7
    else:
        expected = value
    scalar = EhField("v", encoding, fmt, tag=0x12 if fmt else 0)
    array = EhField("a", encoding, fmt, count="variable")
    fixed = EhField("c", encoding, fmt, count=2)
    got = round_trip(
        [scalar, array, fixed], [value, [value, value, value], [value, value]], little_endian=little_endian
    )
    if fmt == EH.FLOAT and encoding == EH.VALUE32:
        assert got[0] == pytest.approx(expected)
    else:
        assert got == [expected, [expected] * 3, [expected] * 2]


def test_structs_activity_ids_and_the_header() -> None:
    point = EhField(
        "Point", EH.STRUCT, members=(EhField("x", EH.VALUE32, EH.SIGNED_INT), EhField("label", EH.ZSTRING_CHAR8))
    )
    points = EhField("Points", EH.STRUCT, count="variable", members=point.members)
    related = uuid.UUID(int=5)
    data = encode_event(
        "Moved;attr=1", [point, points], [[-1, "a"], [[("x", 2), ("label", "b")], [3, "c"]]], level=2, version=3, id=7, tag=0xBEEF,
        opcode=1, activity_id=GUID, related_id=related,
    )  # fmt: skip
    event = parse_event(data)
    assert (event.name, event.attributes, event.level, event.version, event.id, event.tag, event.opcode) == (
        "Moved",
        "attr=1",
        2,
        3,
        7,
        0xBEEF,
        1,
    )
    assert event.activity_id == GUID.bytes and event.related_id == related.bytes
    assert decode_fields(event) == [
        ("Point", [("x", -1), ("label", "a")]),
        ("Points", [[("x", 2), ("label", "b")], [("x", 3), ("label", "c")]]),
    ]


def test_misuse_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        encode_event("E", [EhField("v", EH.VALUE8)], [1, 2], level=4)
    with pytest.raises(InvalidArgument):
        encode_event("E", [EhField("s", EH.ZSTRING_CHAR8)], ["a\0b"], level=4)
    with pytest.raises(InvalidArgument):
        encode_event("E", [EhField("c", EH.VALUE8, count=2)], [[1]], level=4)
    with pytest.raises(InvalidArgument):
        tracepoint_name("has space", 4, 0)


def test_tracepoint_names_and_the_registration_command() -> None:
    assert tracepoint_name("MyProvider", 3, 0x2A) == "MyProvider_L3K2a"
    assert parse_tracepoint_name("OtherProvider_L5K0Gperf") == EH.TracepointName(
        "OtherProvider", 5, 0, (("G", "perf"),)
    )
    assert parse_tracepoint_name("sched_switch") is None
    assert command_string("P", 5, 1) == "P_L5K1 u8 eventheader_flags;u8 version;u16 id;u16 tag;u8 opcode;u8 level"


def test_linuxtracepoints_events_reencode_to_their_bytes() -> None:
    """The interceptor file holds the events LinuxTracepoints' providers wrote for every type:
    each re-encodes from its decoded values to the same bytes, except where decoding is not
    one to one (a BOM dropped, text that was no UTF-8, a counted field read as a number, a
    struct declaring more fields than follow); those decode to the same values again."""
    data = corpus_path("perfdata", "EventHeaderInterceptorLE64.dat").read_bytes()
    identical = 0
    for _, _, raw in interceptor_events(data):
        event = parse_event(raw)
        values = [value for _, value in decode_fields(event)]
        header = {
            "level": event.level, "version": event.version, "id": event.id, "tag": event.tag, "opcode": event.opcode,
            "activity_id": uuid.UUID(bytes=event.activity_id) if event.activity_id else None,
            "related_id": uuid.UUID(bytes=event.related_id) if event.related_id else None,
        }  # fmt: skip
        name = event.name + (f";{event.attributes}" if event.attributes else "")
        counted_numbers = any(
            field.encoding in COUNTED_CHAR8 and field.format in VALUE_FORMATS for field in event.fields
        )
        try:
            again = encode_event(name, event.fields, values, **header)
        except InvalidArgument:
            assert counted_numbers
            continue
        if again == raw:
            identical += 1
        elif not counted_numbers:
            assert [value for _, value in decode_fields(parse_event(again))] == values
    assert identical >= 263
