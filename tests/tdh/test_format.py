"""TDH-style rendering of typed values and FormatMessage-style message inserts."""

from __future__ import annotations

import ipaddress
import struct
import uuid
from datetime import UTC, datetime

import pytest

from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.format import error_name, format_event_message, format_message, format_properties, format_value
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema


def prop(in_type: InType, out_type: OutType | None = None, **kwargs: object) -> PropertyInfo:
    return PropertyInfo("v", in_type, out_type, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "info", "expected"),
    [
        (-51, prop(InType.INT16), "-51"),
        (255, prop(InType.UINT8, OutType.HEXINT8), "0xFF"),
        (0, prop(InType.UINT32, OutType.HEXINT32), "0x0"),
        (0xC0000034, prop(InType.HEXINT32), "0xC0000034"),
        (0xFFFFF80012345678, prop(InType.POINTER), "0xFFFFF80012345678"),
        (16, prop(InType.SIZET), "0x10"),
        (-1, prop(InType.INT32, OutType.HEXINT32), "0xFFFFFFFF"),
        (5, prop(InType.UINT32, OutType.WIN32ERROR), "0x5 (ERROR_ACCESS_DENIED)"),
        (12345, prop(InType.UINT32, OutType.WIN32ERROR), "0x3039"),
        (0xC0000034, prop(InType.UINT32, OutType.NTSTATUS), "0xC0000034 (STATUS_OBJECT_NAME_NOT_FOUND)"),
        (-2147024891, prop(InType.INT32, OutType.HRESULT), "0x80070005 (E_ACCESSDENIED)"),
        (77, prop(InType.UINT8, OutType.STRING), "M"),
        (True, prop(InType.BOOLEAN), "true"),
        (False, prop(InType.UINT8, OutType.BOOLEAN), "false"),
        (1.5, prop(InType.DOUBLE), "1.5"),
        (struct.unpack("<f", struct.pack("<f", 0.1))[0], prop(InType.FLOAT), "0.1"),
        (uuid.UUID("0ad614c4-0ef4-4225-8013-f44f37cb0397"), prop(InType.GUID), "{0AD614C4-0EF4-4225-8013-F44F37CB0397}"),
        (datetime(2021, 9, 9, 14, 59, 35, 799000, tzinfo=UTC), prop(InType.FILETIME), "2021-09-09T14:59:35.799000Z"),
        (datetime(2021, 9, 9, 14, 59, 35, 799000), prop(InType.SYSTEMTIME), "2021-09-09T14:59:35.799000"),
        (b"\x01\xab", prop(InType.BINARY), "0x01AB"),
        (ipaddress.IPv4Address("10.1.2.3"), prop(InType.UINT32, OutType.IPV4), "10.1.2.3"),
        (ipaddress.IPv6Address("fe80::1"), prop(InType.BINARY, OutType.IPV6), "fe80::1"),
        (80, prop(InType.UINT16, OutType.PORT), "80"),
        ("<a/>", prop(InType.UNICODESTRING, OutType.XML), "<a/>"),
        ("S-1-5-18", prop(InType.SID), "S-1-5-18"),
        (None, prop(InType.UINT8), ""),
        ([1, 2], prop(InType.UINT8, count=2), "[1, 2]"),
        ([72, 105, 0, 1], prop(InType.UINT16, OutType.STRING, count_in_data=True), "Hi"),
    ],
)
def test_format_value(value: object, info: PropertyInfo, expected: str) -> None:
    assert format_value(value, info) == expected


def test_socket_addresses() -> None:
    v4 = struct.pack("<H", 2) + struct.pack(">H", 443) + bytes([192, 168, 1, 2]) + bytes(8)
    assert format_value(v4, prop(InType.BINARY, OutType.SOCKETADDRESS)) == "192.168.1.2:443"
    v6 = struct.pack("<H", 23) + struct.pack(">H", 80) + bytes(4) + ipaddress.IPv6Address("fe80::1").packed + struct.pack("<I", 4)
    assert format_value(v6, prop(InType.BINARY, OutType.SOCKETADDRESS)) == "[fe80::1%4]:80"
    assert format_value(b"\x99\x00", prop(InType.BINARY, OutType.SOCKETADDRESS)) == "0x9900"


def test_maps() -> None:
    value_map = EventMap("Color", "value", (MapEntry(1, "Red"), MapEntry(2, "Green")))
    bit_map = EventMap("Flags", "bit", (MapEntry(1, "Read"), MapEntry(2, "Write"), MapEntry(8, "Delete")))
    maps = {"Color": value_map, "Flags": bit_map}
    assert format_value(2, prop(InType.UINT32, map_name="Color"), maps) == "Green"
    assert format_value(7, prop(InType.UINT32, map_name="Color"), maps) == "7"
    assert format_value(3, prop(InType.UINT32, map_name="Flags"), maps) == "Read | Write"
    assert format_value(0x19, prop(InType.UINT32, map_name="Flags"), maps) == "Read | Delete | 0x10"
    assert format_value(0, prop(InType.UINT32, map_name="Flags"), maps) == "0"


def test_error_names() -> None:
    assert error_name(OutType.HRESULT, 0x80070002) == "HRESULT_FROM_WIN32(ERROR_FILE_NOT_FOUND)"
    assert error_name(OutType.NTSTATUS, 0x12345678) is None


@pytest.mark.parametrize(
    ("message", "values", "expected"),
    [
        ("%1 %%11 = %2 %%12", ["8", "2"], "8 %11 = 2 %12"),
        ("a%nb%tc", [], "a\nb\tc"),
        ("100%% sure", [], "100% sure"),
        ("%1!s! and %2!08x! and %3!d!", ["x", 255, -3], "x and 000000ff and -3"),
        ("%1!#X!", [-1], "0XFFFFFFFFFFFFFFFF"),
        ("%1!I64u!", [-1], "18446744073709551615"),
        ("%1!weird!", [5], "5"),
        ("missing %3", ["a"], "missing %3"),
        ("%10 vs %1", list("abcdefghij"), "j vs a"),
        ("stop%0 here", [], "stop"),
        ("dot%. bang%! sp%b end%", [], "dot. bang! sp  end%"),
        ("%1", [uuid.UUID(int=1)], "{00000000-0000-0000-0000-000000000001}"),
    ],
)
def test_format_message(message: str, values: list[object], expected: str) -> None:
    assert format_message(message, values) == expected


def test_a_message_is_parsed_once_and_filled_afresh_each_time() -> None:
    message = "%2 then %1!x!, %2 again%0 never shown"
    assert format_message(message, [255, "b"]) == "b then ff, b again"
    assert format_message(message, [16, "c"]) == "c then 10, c again"
    assert format_message(message, ["text"]) == "%2 then text, %2 again"


def test_parameter_strings() -> None:
    assert format_message("%1 %%11", ["8"], {11: "quarts"}) == "8 quarts"


def test_format_event_message_and_properties_use_the_schema() -> None:
    schema = Schema(
        uuid.UUID(int=5),
        message="Opened %1 with %2 (status %3)",
        properties=(
            PropertyInfo("path", InType.UNICODESTRING),
            PropertyInfo("mode", InType.UINT32, map_name="Mode"),
            PropertyInfo("status", InType.UINT32, OutType.NTSTATUS),
        ),
        maps={"Mode": EventMap("Mode", "value", (MapEntry(1, "read"),))},
    )
    data = "C:\\x\0".encode("utf-16-le") + struct.pack("<II", 1, 0)
    decoded = decode_properties(schema, data, 8)
    assert format_event_message(decoded) == "Opened C:\\x with read (status 0x0 (STATUS_SUCCESS))"
    assert format_properties(decoded) == {"path": "C:\\x", "mode": "read", "status": "0x0 (STATUS_SUCCESS)"}
