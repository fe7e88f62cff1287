"""WPP (TraceMessage) events and TMF files: parsing every item type, the schemas they give, records
written to an .etl file and decoded back with 32- and 64-bit pointers, formatted messages as
TraceFmt shows them, clean errors for malformed TMF text, and payload fuzzing."""

from __future__ import annotations

import ipaddress
import json
import struct
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import ManifestError, PropertyDecodeError
from openetw.etl import EtlReader
from openetw.etl.build import build_message_record
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.events.decoded import decode_record
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh import decode_all, decode_properties, format_event_message
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.wpp import (
    MAX_TMF_CHARS,
    TmfError,
    TmfMessage,
    convert_format,
    parse_tmf,
    read_tmf_path,
    schema_from_tmf,
    schemas_from_tmf,
)

FILTER = uuid.UUID("8c7ae5c4-3b1d-4e2f-9a55-1f2e3d4c5b6a")
CORE = uuid.UUID("15a8d173-19ed-3627-3053-66bb3b198115")

# Shaped like tracepdb's output: PDB comments, a message GUID line per source file, one #typev
# line per message with its argument block. Every item type appears at least once.
SAMPLE = r"""// PDB: d:\build\obj\amd64\netfilt.pdb
// PDB: Last Updated :2024-3-14:9:26:53:512 (UTC) [tracepdb]
8c7ae5c4-3b1d-4e2f-9a55-1f2e3d4c5b6a netfilt // SRC=filter.c MJ= MN=
#typev filter_c101 10 "%0Filter %10!s! attached to %11!s! (%12!d! / %13!u! / 0x%14!x!)" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_INIT FUNC=FilterAttach
{
FilterName, ItemString -- 10
DeviceName, ItemWString -- 11
Context->Count, ItemLong -- 12
Size, ItemULong -- 13
Mask, ItemULongX -- 14
}
#typev filter_c150 11 "%0chars %10!c! %11!u! shorts %12!hd! %13!hu! big %14!I64d! %15!I64u! %16!I64x! %17!I64X! %18!I64o!" //   LEVEL=TRACE_LEVEL_VERBOSE FLAGS=TRACE_DATA FUNC=FilterNumbers
{
c, ItemChar -- 10
uc, ItemUChar -- 11
s, ItemShort -- 12
us, ItemUShort -- 13
ll, ItemLongLong -- 14
ull, ItemULongLong -- 15
llx, ItemLongLongX -- 16
llxx, ItemLongLongXX -- 17
llo, ItemLongLongO -- 18
}
#typev filter_c201 12 "%0Context %10!p! ratio %11!g! id %12!s! clsid %13!s! iid %14!s! libid %15!s!" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_INIT FUNC=FilterContext
{
Context, ItemPtr -- 10
Ratio, ItemDouble -- 11
Id, ItemGuid -- 12
Clsid, ItemCLSID -- 13
Iid, ItemIID -- 14
Libid, ItemLIBID -- 15
}
#typev filter_c240 13 "%0Open failed: %10!s! / %11!s! / %12!s! / %13!s!" //   LEVEL=TRACE_LEVEL_ERROR FLAGS=TRACE_ERRORS FUNC=FilterOpen
{
status, ItemNTSTATUS -- 10
GetLastError(), ItemWINERROR -- 11
hr, ItemHRESULT -- 12
ndisStatus, ItemNDIS_STATUS -- 13
}
#typev filter_c300 14 "%0Peer %10!s!:%11!s! v6 %12!s! oid %13!s!" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_NET FUNC=FilterPeer
{
Peer.Address, ItemIPAddr -- 10
Peer.Port, ItemPort -- 11
Peer.Address6, ItemIPV6Addr -- 12
Request->Oid, ItemNDIS_OID -- 13
}
#typev filter_c350 15 "%0Name %10!s! path %11!s! stream %12!s! tag %13!s! code %14!s! wide %15!s!" //   LEVEL=TRACE_LEVEL_VERBOSE FLAGS=TRACE_DATA FUNC=FilterNames
{
Name, ItemPString -- 10
Path, ItemPWString -- 11
Stream, ItemDSWString -- 12
Tag, ItemChar4 -- 13
Code, ItemCharHidden(3) -- 14
Wide, ItemWChar(2) -- 15
}
#typev filter_c400 16 "%0State %10!s! access %11!s! enabled %12!s! kind %13!d! options %14!s! phase %15!s! bits %16!s! wide bits %17!s!" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_STATE FUNC=FilterState
{
State, ItemListLong(Idle,Running,Stopped=0x10,Failed) -- 10
Access, ItemSetLong(Read,Write,Execute) -- 11
Enabled, ItemListByte(false,true) -- 12
Kind, ItemEnum(FILTER_KIND) -- 13
Options, ItemFlagsEnum(FILTER_OPTIONS) -- 14
Phase, ItemListShort(Zero,One,Two) -- 15
Bits, ItemSetByte(B0,B1,B2) -- 16
WideBits, ItemSetShort(W0,W9=9) -- 17
}
#typev filter_c450 17 "%0At %10!s! took %11!I64d! due %12!I64d! user %13!s! dump %14!s!" //   LEVEL=TRACE_LEVEL_VERBOSE FLAGS=TRACE_DATA FUNC=FilterTimes
{
When, ItemTimestamp -- 10
Delta, ItemTimeDelta -- 11
Due, ItemWaitTime -- 12
User, ItemSid -- 13
Data, ItemHEXDump -- 14
}
#typev filter_c500 18 "%0tail: %10!s!" //   LEVEL=TRACE_LEVEL_VERBOSE FLAGS=TRACE_DATA FUNC=FilterTail
{
Rest, ItemNWString -- 10
}
// PDB: d:\build\obj\amd64\core.pdb
15a8d173-19ed-3627-3053-66bb3b198115 core // SRC=Unknown_cxx00 MJ= MN=
#typev Unknown_cxx00 10 "%0%10!s!: entered %!FUNC! of %!COMPNAME! at %!LEVEL! (%1 %2)" //   GLOBALS=GetDriverGlobals() LEVEL=TRACE_LEVEL_VERBOSE FLAGS=TRACINGPNP FUNC=FxChildList::EndScan
{
Arg, ItemString -- 10
}
#typev Unknown_cxx00 11 "%0no arguments, 100%% done" //   LEVEL=TRACE_LEVEL_WARNING FLAGS=TRACINGPNP FUNC=FxDevice::Start
{
}
#typev Unknown_cxx00 12 "%0unknown %10!d! then %11!d!" //   LEVEL=TRACE_LEVEL_ERROR FLAGS=TRACINGPNP FUNC=FxDevice::Stop
{
Arg, ItemMystery -- 10
Arg, ItemLong -- 11
}
#typev Unknown_cxx00 13 "%0swapped by DoTraceMessage" //   LEVEL=TRACINGPNP FLAGS=TRACE_LEVEL_ERROR
{
}
PUBLIC_TMF:
"""  # noqa: E501 - TMF lines as tracepdb writes them, one per message


@pytest.fixture(scope="module")
def messages() -> dict[tuple[uuid.UUID, int], TmfMessage]:
    return {(message.guid, message.number): message for message in parse_tmf(SAMPLE, "sample.tmf")}


@pytest.fixture(scope="module")
def registry(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> SchemaRegistry:
    registry = SchemaRegistry(kernel=False)
    assert registry.add_tmf(messages.values()) == len(messages)
    return registry


# -- parsing ----------------------------------------------------------------------------------------
def test_every_message_is_parsed_with_its_header_and_tail(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> None:
    assert sorted(messages) == sorted([(FILTER, n) for n in range(10, 19)] + [(CORE, n) for n in range(10, 14)])
    attach = messages[(FILTER, 10)]
    assert (attach.name, attach.component, attach.source_file, attach.line, attach.path) == ("filter_c101", "netfilt", "filter.c", 4, "sample.tmf")
    assert attach.format == "%0Filter %10!s! attached to %11!s! (%12!d! / %13!u! / 0x%14!x!)"
    assert (attach.level_name, attach.flags_name, attach.function) == ("TRACE_LEVEL_INFORMATION", "TRACE_INIT", "FilterAttach")
    assert [a.expression for a in attach.arguments] == ["FilterName", "DeviceName", "Context->Count", "Size", "Mask"]
    assert [a.number for a in attach.arguments] == [10, 11, 12, 13, 14]
    assert [a.line for a in attach.arguments] == [6, 7, 8, 9, 10]
    core = messages[(CORE, 10)]
    assert core.attributes["GLOBALS"] == "GetDriverGlobals()"
    assert core.component == "core" and core.function == "FxChildList::EndScan"
    assert messages[(CORE, 11)].arguments == ()


ITEM_TYPES = {
    (10, "FilterName"): (InType.ANSISTRING, None), (10, "DeviceName"): (InType.UNICODESTRING, None),
    (10, "Context->Count"): (InType.INT32, None), (10, "Size"): (InType.UINT32, None), (10, "Mask"): (InType.UINT32, OutType.HEXINT32),
    (11, "c"): (InType.INT8, None), (11, "uc"): (InType.UINT8, None), (11, "s"): (InType.INT16, None), (11, "us"): (InType.UINT16, None),
    (11, "ll"): (InType.INT64, None), (11, "ull"): (InType.UINT64, None), (11, "llx"): (InType.INT64, OutType.HEXINT64),
    (11, "llxx"): (InType.UINT64, OutType.HEXINT64), (11, "llo"): (InType.UINT64, None),
    (12, "Context"): (InType.POINTER, None), (12, "Ratio"): (InType.DOUBLE, None), (12, "Id"): (InType.GUID, None),
    (12, "Clsid"): (InType.GUID, None), (12, "Iid"): (InType.GUID, None), (12, "Libid"): (InType.GUID, None),
    (13, "status"): (InType.UINT32, OutType.NTSTATUS), (13, "GetLastError()"): (InType.UINT32, OutType.WIN32ERROR),
    (13, "hr"): (InType.UINT32, OutType.HRESULT), (13, "ndisStatus"): (InType.UINT32, OutType.NTSTATUS),
    (14, "Peer.Address"): (InType.UINT32, OutType.IPV4), (14, "Peer.Port"): (InType.UINT16, OutType.PORT),
    (14, "Peer.Address6"): (InType.BINARY, OutType.IPV6), (14, "Request->Oid"): (InType.UINT32, OutType.HEXINT32),
    (15, "Name"): (InType.COUNTEDANSISTRING, None), (15, "Path"): (InType.COUNTEDSTRING, None),
    (15, "Stream"): (InType.REVERSEDCOUNTEDSTRING, None), (15, "Tag"): (InType.NONNULLTERMINATEDANSISTRING, None),
    (15, "Code"): (InType.NONNULLTERMINATEDANSISTRING, None), (15, "Wide"): (InType.NONNULLTERMINATEDSTRING, None),
    (16, "State"): (InType.UINT32, None), (16, "Access"): (InType.UINT32, None), (16, "Enabled"): (InType.UINT8, None),
    (16, "Kind"): (InType.INT32, None), (16, "Options"): (InType.UINT32, OutType.HEXINT32), (16, "Phase"): (InType.UINT16, None),
    (16, "Bits"): (InType.UINT8, None), (16, "WideBits"): (InType.UINT16, None),
    (17, "When"): (InType.FILETIME, None), (17, "Delta"): (InType.INT64, None), (17, "Due"): (InType.INT64, None),
    (17, "User"): (InType.WBEMSID, None), (17, "Data"): (InType.MANIFEST_COUNTEDBINARY, None),
    (18, "Rest"): (InType.NONNULLTERMINATEDSTRING, None),
}  # fmt: skip


def test_each_item_type_gives_its_in_type_and_out_type(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> None:
    found = {(number, argument.prop.name): (argument.prop.in_type, argument.prop.out_type)
             for (guid, number), message in messages.items() if guid == FILTER for argument in message.arguments}  # fmt: skip
    assert found == ITEM_TYPES
    fixed = {argument.prop.name: argument.prop.length for argument in messages[(FILTER, 15)].arguments}
    assert (fixed["Tag"], fixed["Code"], fixed["Wide"]) == (4, 3, 2)
    assert messages[(FILTER, 14)].arguments[2].prop.length == 16


def test_lists_and_sets_become_value_and_bit_maps(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> None:
    maps = schema_from_tmf(messages[(FILTER, 16)]).maps
    assert [(e.value, e.message) for e in maps["State"].entries] == [(0, "Idle"), (1, "Running"), (16, "Stopped"), (17, "Failed")]
    assert maps["State"].kind == "value" and maps["Enabled"].kind == "value"
    assert [(e.value, e.message) for e in maps["Access"].entries] == [(1, "Read"), (2, "Write"), (4, "Execute")]
    assert maps["Access"].kind == "bit"
    assert [(e.value, e.message) for e in maps["WideBits"].entries] == [(1, "W0"), (512, "W9")]
    assert set(maps) == {"State", "Access", "Enabled", "Phase", "Bits", "WideBits"}


def test_schemas_carry_names_levels_flags_and_the_converted_message(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> None:
    attach = schema_from_tmf(messages[(FILTER, 10)])
    assert (attach.provider_id, attach.decode_guid, attach.event_id, attach.source) == (FILTER, FILTER, 10, "wpp")
    assert (attach.provider_name, attach.event_name, attach.level, attach.level_name) == ("netfilt", "filter_c101", 4, "TRACE_LEVEL_INFORMATION")
    assert attach.keyword_names == ("TRACE_INIT",)
    assert attach.message == "Filter %1!s! attached to %2!s! (%3!d! / %4!u! / 0x%5!x!)"
    core = schema_from_tmf(messages[(CORE, 10)])
    assert core.event_name == "FxChildList::EndScan"  # public TMFs name every message Unknown_cxx00
    assert core.level == 5 and core.keyword_names == ("TRACINGPNP",)
    assert core.message == "%1!s!: entered FxChildList::EndScan of core at TRACE_LEVEL_VERBOSE (core Unknown_cxx00)"
    assert schema_from_tmf(messages[(CORE, 11)]).message == "no arguments, 100%% done"
    swapped = schema_from_tmf(messages[(CORE, 13)])
    assert (swapped.level, swapped.level_name, swapped.keyword_names) == (2, "TRACE_LEVEL_ERROR", ("TRACINGPNP",))
    assert swapped.event_name == "Unknown_cxx00"  # no FUNC to fall back on
    assert [s.event_id for s in schemas_from_tmf(SAMPLE) if s.provider_id == CORE] == [10, 11, 12, 13]


def test_argument_names_fall_back_to_their_position_when_the_expression_does_not_name_them(messages: dict[tuple[uuid.UUID, int], TmfMessage]) -> None:
    assert [p.prop.name for p in messages[(CORE, 12)].arguments] == ["Arg1", "Arg2"]
    text = "15a8d173-19ed-3627-3053-66bb3b198115 x\n#typev a 10 \"%10!d!%11!d!%12!d!\"\n{\nn, ItemLong -- 10\nn, ItemLong -- 11\nArg2, ItemLong -- 12\n}\n"
    assert [a.prop.name for a in parse_tmf(text)[0].arguments] == ["n", "Arg2", "Arg3"]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("%0IOCTL = %10!d!", "IOCTL = %1!d!"),
        ("%0%11!s! before %10!x!", "%2!s! before %1!x!"),
        ("no prefix %10!08X!", "no prefix %1!08X!"),
        ("%0plain %10 and %10%11 and %105", "plain %1 and %1%2 and %1!s!5"),  # "%1" must not swallow the digits after it
        ("%0%10!s!: %!FUNC! [%!FLAGS!] %!UNKNOWN!.", "%1!s!: Run [TRACE_A] ."),
        ("%0literal %% and %n newline", "literal %% and %n newline"),
        ("%0thread %3 pid %8 cpu %9", "thread %%3 pid %%8 cpu %%9"),
        ("%0cut %0 here", "cut %0 here"),
        ("%0per%!LEVEL!cent", "per50%%cent"),
    ],
)
def test_format_strings_become_formatmessage_strings_over_the_payload_order(fmt: str, expected: str) -> None:
    assert convert_format(fmt, {10: 1, 11: 2}, component="comp", name="x_c1", attributes={"FUNC": "Run", "FLAGS": "TRACE_A", "LEVEL": "50%"}) == expected


def test_unicode_bom_and_utf8_texts_parse_alike() -> None:
    for data in (SAMPLE.encode("utf-16"), SAMPLE.encode("utf-8-sig"), SAMPLE.encode("cp1252")):
        assert [(m.guid, m.number, m.message) for m in parse_tmf(data)] == [(m.guid, m.number, m.message) for m in parse_tmf(SAMPLE)]


# -- records written, read back and decoded ---------------------------------------------------------
def _u16(value: int) -> bytes:
    return struct.pack("<H", value)


def _u32(value: int) -> bytes:
    return struct.pack("<I", value)


def _wide(text: str) -> bytes:
    return text.encode("utf-16-le")


GUID_A = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
WHEN = datetime(2024, 3, 14, 9, 26, 53, 512000, tzinfo=UTC)
WHEN_TICKS = int((WHEN - datetime(1601, 1, 1, tzinfo=UTC)).total_seconds()) * 10_000_000 + 5_120_000
SID_SYSTEM = bytes([1, 1, 0, 0, 0, 0, 0, 5]) + _u32(18)


def payloads(pointer_size: int) -> dict[tuple[uuid.UUID, int], tuple[bytes, dict[str, object], str]]:
    """Per message: the argument bytes, the decoded values expected and the formatted message."""
    pointer = 0xFFFF9F0012345000 if pointer_size == 8 else 0x81234560
    token_user = bytes(2 * pointer_size)  # SID pointer and attributes before the SID
    return {
        (FILTER, 10): (
            b"netfilt\0" + _wide("\\Device\\Ndis0\0") + struct.pack("<iII", -7, 4096, 0xBEEF),
            {"FilterName": "netfilt", "DeviceName": "\\Device\\Ndis0", "Context->Count": -7, "Size": 4096, "Mask": 0xBEEF},
            "Filter netfilt attached to \\Device\\Ndis0 (-7 / 4096 / 0xbeef)",
        ),
        (FILTER, 11): (
            struct.pack("<bBhHqQqQQ", 65, 200, -300, 60000, -5, 2**64 - 1, 255, 0xABCDEF, 8),
            {"c": 65, "uc": 200, "s": -300, "us": 60000, "ll": -5, "ull": 2**64 - 1, "llx": 255, "llxx": 0xABCDEF, "llo": 8},
            f"chars A 200 shorts -300 60000 big -5 {2**64 - 1} ff ABCDEF 10",
        ),
        (FILTER, 12): (
            pointer.to_bytes(pointer_size, "little") + struct.pack("<d", 0.25) + GUID_A.bytes_le * 4,
            {"Context": pointer, "Ratio": 0.25, "Id": GUID_A, "Clsid": GUID_A, "Iid": GUID_A, "Libid": GUID_A},
            f"Context {pointer:X} ratio 0.25 id {{{str(GUID_A).upper()}}} clsid {{{str(GUID_A).upper()}}} "
            f"iid {{{str(GUID_A).upper()}}} libid {{{str(GUID_A).upper()}}}",
        ),
        (FILTER, 13): (
            struct.pack("<IIII", 0xC0000034, 5, 0x80070057, 0xC0000001),
            {"status": 0xC0000034, "GetLastError()": 5, "hr": 0x80070057, "ndisStatus": 0xC0000001},
            "Open failed: 0xC0000034 (STATUS_OBJECT_NAME_NOT_FOUND) / 0x5 (ERROR_ACCESS_DENIED) / 0x80070057 (E_INVALIDARG) "
            "/ 0xC0000001 (STATUS_UNSUCCESSFUL)",
        ),
        (FILTER, 14): (
            bytes([192, 168, 1, 20]) + struct.pack(">H", 8080) + ipaddress.IPv6Address("fe80::1").packed + _u32(0x00010101),
            {"Peer.Address": ipaddress.IPv4Address("192.168.1.20"), "Peer.Port": 8080,
             "Peer.Address6": ipaddress.IPv6Address("fe80::1"), "Request->Oid": 0x00010101},
            "Peer 192.168.1.20:8080 v6 fe80::1 oid 0x10101",
        ),
        (FILTER, 15): (
            _u16(3) + b"abc" + _u16(8) + _wide("C:\\x") + struct.pack(">H", 4) + _wide("s1") + b"NDIS" + b"E42" + _wide("ok"),
            {"Name": "abc", "Path": "C:\\x", "Stream": "s1", "Tag": "NDIS", "Code": "E42", "Wide": "ok"},
            "Name abc path C:\\x stream s1 tag NDIS code E42 wide ok",
        ),
        (FILTER, 16): (
            _u32(16) + _u32(5) + b"\x01" + struct.pack("<i", -2) + _u32(0x30) + _u16(2) + b"\x0a" + _u16(0x201),
            {"State": 16, "Access": 5, "Enabled": 1, "Kind": -2, "Options": 0x30, "Phase": 2, "Bits": 10, "WideBits": 0x201},
            "State Stopped access Read | Execute enabled true kind -2 options 0x30 phase Two bits B1 | 0x8 wide bits W0 | W9",
        ),
        (FILTER, 17): (
            struct.pack("<qqq", WHEN_TICKS, 1500, -10_000_000) + _u32(1) + token_user[4:] + SID_SYSTEM + _u16(3) + b"\x00\xff\x10",
            {"When": WHEN, "Delta": 1500, "Due": -10_000_000, "User": "S-1-5-18", "Data": b"\x00\xff\x10"},
            "At 2024-03-14T09:26:53.512000Z took 1500 due -10000000 user S-1-5-18 dump 0x00FF10",
        ),
        (FILTER, 18): (_wide("to the end"), {"Rest": "to the end"}, "tail: to the end"),
        (CORE, 10): (
            b"FxChildList\0", {"Arg1": "FxChildList"}, "FxChildList: entered FxChildList::EndScan of core at TRACE_LEVEL_VERBOSE (core Unknown_cxx00)"
        ),
        (CORE, 11): (b"", {}, "no arguments, 100% done"),
    }


def write_trace(path: Path, records: list, pointer_size: int) -> None:  # type: ignore[type-arg]
    header = new_logfile_header(clock=linux_trace_clock(), buffer_size=8192, pointer_size=pointer_size, number_of_processors=2, cpu_speed_mhz=3000)
    with EtlWriter(path, header=header) as writer:
        assert writer.write_all(records) == len(records)


def read_trace(path: Path) -> list:  # type: ignore[type-arg]
    with EtlReader(path, strict=False) as reader:
        return [record for record in reader if record.kind == "wpp"]


@pytest.mark.parametrize("pointer_size", [4, 8])
@pytest.mark.parametrize("flagged", [True, False], ids=["pointer-flag", "logfile-pointer-size"])
def test_records_written_to_a_file_decode_to_the_values_and_messages(
    pointer_size: int, flagged: bool, registry: SchemaRegistry, tmp_path: Path
) -> None:
    expected = payloads(pointer_size)
    records = [
        build_message_record(
            message_number=number, message_guid=guid, sequence=index, timestamp=1_000_000 + index, pid=0x338, tid=0xE40,
            cpu=index % 2, user_data=data, pointer_size=pointer_size if flagged else None,
        )
        for index, ((guid, number), (data, _, _)) in enumerate(expected.items())
    ]  # fmt: skip
    path = tmp_path / "wpp.etl"
    write_trace(path, records, pointer_size)
    read = {(record.provider_id, record.message_number): record for record in read_trace(path)}  # buffers come per CPU
    assert sorted(read) == sorted(expected)
    for index, (key, (_, values, message)) in enumerate(expected.items()):
        record = read[key]
        assert (record.sequence, record.timestamp, record.cpu) == (index, 1_000_000 + index, index % 2)
        assert (record.pid, record.tid, record.pointer_size) == (0x338, 0xE40, pointer_size)
        event = decode_record(record, registry)
        assert event.schema is not None and event.schema.event_id == key[1], key
        assert event.errors == {}, (key, event.errors)
        assert event.properties == values, key
        assert event.message == message, key
        assert event.provider_name == ("netfilt" if key[0] == FILTER else "core")


def test_an_unknown_item_type_is_reported_on_its_argument_and_stops_decoding(registry: SchemaRegistry) -> None:
    record = build_message_record(message_number=12, message_guid=CORE, user_data=_u32(1) + _u32(2), pointer_size=8)
    event = decode_record(record, registry)
    assert event.schema is not None
    assert "ItemMystery is not supported" in event.errors["Arg1"]
    assert event.decoded is not None and event.decoded.not_decoded == ("Arg2",)
    assert event.message == "unknown  then "  # arguments that did not decode insert nothing


def test_records_without_a_known_message_find_no_schema(registry: SchemaRegistry) -> None:
    unknown_number = build_message_record(message_number=99, message_guid=FILTER, user_data=b"x")
    by_component = build_message_record(message_number=10, component_id=7, user_data=b"x")
    unknown_guid = build_message_record(message_number=10, message_guid=uuid.uuid4(), user_data=b"x")
    for record in (unknown_number, by_component, unknown_guid):
        assert registry.schema_for(record) is None
    assert registry.provider_name(unknown_number) == "netfilt"  # the GUID is known, the number is not


def test_a_later_tmf_wins_and_sources_are_remembered() -> None:
    registry = SchemaRegistry(kernel=False)
    registry.add_tmf(parse_tmf(SAMPLE, "old.tmf"))
    newer = SAMPLE.replace('"%0Filter %10!s!', '"%0Filter v2 %10!s!')
    registry.add_tmf(parse_tmf(newer), source="new.tmf")
    record = build_message_record(message_number=10, message_guid=FILTER, user_data=payloads(8)[(FILTER, 10)][0])
    schema = registry.schema_for(record)
    assert schema is not None and schema.message is not None and schema.message.startswith("Filter v2")
    assert registry.source_of(schema) == "new.tmf"


def test_read_tmf_path_takes_a_file_or_every_tmf_file_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / f"{FILTER}.tmf").write_text(SAMPLE.split("// PDB: d:\\build\\obj\\amd64\\core.pdb")[0])
    (tmp_path / "broken.TMF").write_text("not a tmf\n")
    (tmp_path / "notes.txt").write_text("ignored")
    messages, errors = read_tmf_path(tmp_path)
    assert {(m.guid, m.number) for m in messages} == {(FILTER, n) for n in range(10, 19)}
    assert [str(e) for e in errors] == [f"{tmp_path / 'broken.TMF'}:1: unexpected line 'not a tmf'"]
    messages, errors = read_tmf_path(tmp_path / "missing.tmf")
    assert messages == [] and len(errors) == 1 and "cannot read TMF file" in str(errors[0])


# -- malformed TMF text ------------------------------------------------------------------------------
HEADER = "8c7ae5c4-3b1d-4e2f-9a55-1f2e3d4c5b6a netfilt // SRC=filter.c\n"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('#typev a 10 "x"\n', 1, "#typev before any message GUID line"),
        (HEADER + "#typev a 10 x\n", 2, "expected #typev <name> <number>"),
        (HEADER + '#typev a 70000 "x"\n', 2, "message number 70000 is over 65535"),
        (HEADER + '#typev a 10 "x\n', 2, "no closing quote"),
        (HEADER + '#typev a 10 "x" junk\n', 2, "unexpected text after the format string"),
        (HEADER + '#typev a 10 "%10!d!"\n{\nx, ItemLong -- 10\n', 2, "the argument block of message 10 is not closed"),
        (HEADER + '#typev a 10 "x"\n{\n#typev b 11 "y"\n', 4, "#typev inside the argument block of message 10"),
        (HEADER + "{\n", 2, "'{' without a #typev"),
        (HEADER + "}\n", 2, "'}' without a '{'"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemLong\n}\n', 4, "expected '<expression>, <Item type> -- <number>'"),
        (HEADER + '#typev a 10 "x"\n{\nx ItemLong -- 10\n}\n', 4, "no item type"),
        (HEADER + '#typev a 10 "x"\n{\nx, Long -- 10\n}\n', 4, "no item type"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemLong -- 9\n}\n', 4, "arguments are numbered from 10"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemLong -- 10\ny, ItemLong -- 10\n}\n', 5, "argument number 10 is defined twice (first on line 4)"),
        (HEADER + '#typev a 10 "%11!d!"\n{\nx, ItemLong -- 10\n}\n', 2, "message 10: the format refers to %11"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemLong(3) -- 10\n}\n', 4, "ItemLong takes no parameters"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemListLong -- 10\n}\n', 4, "ItemListLong needs its names"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemListLong(a=zz) -- 10\n}\n', 4, "value 'zz' of 'a' is not an integer"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemSetByte(a,b=8) -- 10\n}\n', 4, "bit 8 of 'b' is outside the 8-bit value"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemEnum() -- 10\n}\n', 4, "ItemEnum needs the enum's name"),
        (HEADER + '#typev a 10 "x"\n{\nx, ItemWChar(many) -- 10\n}\n', 4, "ItemWChar needs a character count"),
        (HEADER + '#typev a 10 "x"\n{\n}\n#typev b 10 "y"\n{\n}\n', 5, "message 10 of 8c7ae5c4-3b1d-4e2f-9a55-1f2e3d4c5b6a is defined twice"),
        (HEADER + "garbage here\n", 2, "unexpected line 'garbage here'"),
        (HEADER + "a\0b\n", 2, "NUL character"),
    ],
)
def test_malformed_tmf_text_raises_a_clean_error_with_its_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(TmfError) as caught:
        parse_tmf(text, "bad.tmf")
    assert isinstance(caught.value, ManifestError)
    assert caught.value.line == line and caught.value.path == "bad.tmf"
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(f"bad.tmf:{line}: ")


def test_oversized_and_undecodable_texts_are_refused() -> None:
    with pytest.raises(TmfError, match="over the"):
        parse_tmf("x" * (MAX_TMF_CHARS + 1))
    with pytest.raises(TmfError, match="not valid UTF-16"):
        parse_tmf(b"\xff\xfe\x00\xd8")


def test_a_typev_without_a_block_has_no_arguments_and_unknown_directives_are_skipped() -> None:
    text = HEADER + '#typev a 10 "%0first"\n#enumv SOMETHING\n#typev b 11 "%0second"\n'
    assert [(m.number, m.message, m.arguments) for m in parse_tmf(text)] == [(10, "first", ()), (11, "second", ())]


def test_quotes_inside_the_format_and_the_tail_are_kept_apart() -> None:
    text = HEADER + '#typev a 10 "%0say \\"hi\\" %10!s!" // FUNC=quote"d LEVEL=TRACE_LEVEL_ERROR\n{\nx, ItemString -- 10\n}\n'
    message = parse_tmf(text)[0]
    assert message.format == '%0say \\"hi\\" %10!s!'
    assert message.function == 'quote"d' and message.level_name == "TRACE_LEVEL_ERROR"


TOKENS = ["{", "}", "#typev", " -- ", ", Item", "ItemListLong(", ")", '"', "//", "%1", "%10!d!", "\n", "=", "0x", ",", "\0", "%!FUNC!"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SAMPLE)), st.integers(0, 8), st.sampled_from(TOKENS)), max_size=6))
def test_mutated_tmf_text_only_raises_tmf_errors(edits: list[tuple[int, int, str]]) -> None:
    text = SAMPLE
    for position, deleted, token in edits:
        text = text[:position] + token + text[position + deleted :]
    try:
        schemas = schemas_from_tmf(text)
    except TmfError:
        return
    for schema in schemas:
        assert schema.source == "wpp"


# -- payload fuzzing ---------------------------------------------------------------------------------
ALL_SCHEMAS = schemas_from_tmf(SAMPLE)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_SCHEMAS), st.binary(max_size=96), st.sampled_from([4, 8]))
def test_any_payload_only_yields_per_property_errors(schema, data: bytes, pointer_size: int) -> None:  # type: ignore[no-untyped-def]
    decoded = decode_all(schema, data, pointer_size)
    for name, error in decoded.errors.items():
        assert isinstance(error, PropertyDecodeError) and error.property_name == name
    assert set(decoded) | set(decoded.errors) | set(decoded.not_decoded) <= {p.name for p in schema.properties}
    message = format_event_message(decoded)
    assert isinstance(message, str)
    walked = decode_properties(schema, data, pointer_size)  # the general walk agrees with the compiled reader
    assert repr(dict(walked)) == repr(dict(decoded)) and set(walked.errors) == set(decoded.errors)  # repr: NaN
    assert walked.not_decoded == decoded.not_decoded


# -- openetw dump --tmf --------------------------------------------------------------------------------
def test_dump_json_with_tmf_shows_properties_and_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from openetw.cli.main import main

    data, _, message = payloads(8)[(FILTER, 10)]
    records = [
        build_message_record(message_number=10, message_guid=FILTER, sequence=1, timestamp=5, pid=7, tid=8, user_data=data, pointer_size=8),
        build_message_record(message_number=10, message_guid=CORE, sequence=2, timestamp=6, pid=7, tid=8, user_data=b"Start\0", pointer_size=8),
    ]
    trace = tmp_path / "wpp.etl"
    write_trace(trace, records, 8)
    (tmp_path / "tmf").mkdir()
    filter_part, core_part = SAMPLE.split("// PDB: d:\\build\\obj\\amd64\\core.pdb")
    (tmp_path / "tmf" / f"{FILTER}.tmf").write_text(filter_part)
    (tmp_path / "core.tmf").write_text(core_part)
    (tmp_path / "bad.tmf").write_text(HEADER + "}\n")

    code = main(["dump", "--json", "--no-installed", "--tmf", str(tmp_path / "tmf"), "--tmf", str(tmp_path / "core.tmf"),
                 "--tmf", str(tmp_path / "bad.tmf"), str(trace)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.strip() == f"openetw: warning: {tmp_path / 'bad.tmf'}:2: '}}' without a '{{'"
    first, second = (event for event in map(json.loads, out.splitlines()) if event["kind"] == "wpp")
    assert (first["kind"], first["provider_id"], first["provider_name"], first["event_name"]) == ("wpp", str(FILTER), "netfilt", "filter_c101")
    assert first["properties"] == {"FilterName": "netfilt", "DeviceName": "\\Device\\Ndis0", "Context->Count": -7, "Size": 4096, "Mask": 0xBEEF}
    assert first["message"] == message and (first["pid"], first["tid"], first["id"]) == (7, 8, 10)
    assert "errors" not in first
    assert second["properties"] == {"Arg1": "Start"} and second["event_name"] == "FxChildList::EndScan"
    assert second["message"].startswith("Start: entered FxChildList::EndScan of core")

    code = main(["dump", "--no-installed", "--tmf", str(tmp_path / "tmf"), str(trace)])
    out, _ = capsys.readouterr()
    lines = [line for line in out.splitlines() if " id=10 " in line]
    assert code == 0 and len(lines) == 2, out
    assert " netfilt filter_c101 " in lines[0] and json.dumps(message) in lines[0] and "{FilterName=netfilt; " in lines[0]
    assert lines[1].split()[1] == str(CORE) and "{" not in lines[1]  # core.tmf not given: not decoded
