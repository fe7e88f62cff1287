"""MOF files as classic providers publish them: classes, qualifiers, types, versions, the schemas
they give, decoding with them, and clean errors with line numbers for everything malformed."""

from __future__ import annotations

import ipaddress
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import ManifestError
from openetw.etl.build import build_classic_record
from openetw.manifest.winmeta import InType, OutType
from openetw.provider.classic import pack_fields
from openetw.tdh import REST, decode_all, format_properties
from openetw.tdh.mof_file import (
    MofError,
    MofEventClass,
    parse_mof,
    schemas_from_mof,
    schemas_from_mof_file,
    schemas_from_mof_text,
)
from openetw.tdh.mof_syntax import MAX_MOF_CHARS
from openetw.tdh.registry import SchemaRegistry

PROVIDER = uuid.UUID("7c214fb1-9cac-4b8d-baed-7bf48bf63bb3")
TRANSFER = uuid.UUID("b49d5931-ad85-4070-b1b1-3f81f1532875")
FAULT = uuid.UUID("0f6d3d44-5a9e-4c8e-9b43-1c1b9f0d2a77")

# A provider, two versions of an event class, and a second event class: the shape Microsoft's
# "Publishing Your Event Schema for a Classic Provider" shows, with every property type used.
SAMPLE = r"""// Contoso file transfer service: classic provider schema.
#pragma namespace("\\\\.\\root\\wmi")
#pragma classflags("forceupdate")

[dynamic: ToInstance, Description("Contoso file transfer") : amended,
 Guid("{7C214FB1-9CAC-4b8d-BAED-7BF48BF63BB3}")]
class ContosoTransfer : EventTrace
{
    [Description("Enable flags") : amended,
     ValueMap{"0x1", "0x2"}, Values{"Transfers", "Faults"}]
    uint32 Flags;
};

[dynamic: ToInstance, Description("Transfers") : amended,
 Guid("{B49D5931-AD85-4070-B1B1-3F81F1532875}"),
 DisplayName("Transfer") : amended]
class Transfer : ContosoTransfer
{
};

[dynamic: ToInstance, Description("A transfer starts or ends") : amended,
 EventType{1, 2}, EventTypeName{"Start", "End"} : amended]
class Transfer_Start : Transfer
{
    [WmiDataId(1), Description("Transfer number") : amended, read] uint32 Index;
    [WmiDataId(3), read, StringTermination("Counted"), format("w")] string Path;
    [WmiDataId(2), read, format("x")] uint64 Bytes;
    [WmiDataId(4), read, extension("Guid")] object Session;
    [WmiDataId(5), read, extension("IPAddrV4")] object Peer;
    [WmiDataId(6), read, extension("Port")] object PeerPort;
    [WmiDataId(7), read, extension("Sid")] object User;
    [WmiDataId(8), read] boolean Compressed;
    [WmiDataId(9), read, StringTermination("NullTerminated")] string Tag;
    [WmiDataId(10), read, pointer] uint32 Context;
    [WmiDataId(11), read, ValueMap{"0", "1", "2"}, Values{"Idle", "Busy", "Done"}] uint8 State;
    [WmiDataId(12), read, ValueType("flag"), ValueMap{"0x1", "0x4"}, Values{"Read", "Write"}] uint32 Access;
};

/* The first layout, before Bytes became 64-bit. */
[dynamic: ToInstance, Description("Transfers") : amended,
 Guid("{B49D5931-AD85-4070-B1B1-3F81F1532875}"),
 EventVersion(0)]
class Transfer_V0 : ContosoTransfer
{
};

[dynamic: ToInstance, EventType(1), EventTypeName("Start")]
class Transfer_V0_Start : Transfer_V0
{
    [WmiDataId(1), read] uint32 Index;
    [WmiDataId(2), read] uint32 Bytes;
};

[dynamic: ToInstance, Guid("{0F6D3D44-5A9E-4C8E-9B43-1C1B9F0D2A77}"), EventVersion(3)]
class Fault : ContosoTransfer
{
    [WmiDataId(1), read] uint16 Count;
};

[dynamic: ToInstance, EventType(10), EventTypeName("Codes")]
class Fault_Codes : Fault
{
    [WmiDataId(2), read, WmiSizeIs("Count"), format("x")] uint32 Codes[];
    [WmiDataId(3), read] char16 Where[8];
    [WmiDataId(4), read, MAX(4)] sint16 Deltas[];
    [WmiDataId(5), read, extension("NoPrint")] uint8 Blob[6];
    [WmiDataId(6), read] real32 Ratio;
    [WmiDataId(7), read] real64 Precise;
    [WmiDataId(8), read, format("c")] uint8 Letter;
    [WmiDataId(9), read, BitMap{"0", "3"}, BitValues{"Low", "High"}] uint8 Bits;
    [WmiDataId(10), read, extension("SizeT")] object Size;
    [WmiDataId(11), read, extension("WmiTime")] object When;
    [WmiDataId(12), read, extension("IPAddrV6")] object Peer6;
    [WmiDataId(13), read, extension("Variant")] object Extra;
    [WmiDataId(14), read, StringTermination("ReverseCounted"), format("w")] string Reverse;
    [WmiDataId(15), read, format("s")] uint8 Name[4];
    [WmiDataId(16), read, pointer] object Handle;
    [WmiDataId(17), read, StringTermination("NotCounted")] string Rest;
};
"""


def classes_by_name(text: str = SAMPLE) -> dict[str, MofEventClass]:
    return {c.name: c for c in parse_mof(text, "sample.mof")}


def mof_error(text: str) -> MofError:
    with pytest.raises(MofError) as caught:
        parse_mof(text, "bad.mof")
    assert isinstance(caught.value, ManifestError)
    assert caught.value.path == "bad.mof"
    return caught.value


# -- classes and qualifiers ----------------------------------------------------------------------


def test_event_type_classes_are_found_with_their_event_class_and_provider() -> None:
    classes = classes_by_name()
    assert list(classes) == ["Transfer_Start", "Transfer_V0_Start", "Fault_Codes"]
    start = classes["Transfer_Start"]
    assert (start.event_class, start.display_name, start.guid, start.version) == ("Transfer", "Transfer", TRANSFER, None)
    assert (start.provider_name, start.provider_guid) == ("ContosoTransfer", PROVIDER)
    assert start.event_types == ((1, "Start"), (2, "End"))
    assert start.line == 23 and start.path == "sample.mof"
    v0 = classes["Transfer_V0_Start"]
    assert (v0.event_class, v0.display_name, v0.version, v0.event_types) == ("Transfer_V0", "Transfer", 0, ((1, "Start"),))
    fault = classes["Fault_Codes"]
    assert (fault.guid, fault.version, fault.display_name, fault.event_types) == (FAULT, 3, "Fault", ((10, "Codes"),))


def test_properties_follow_wmidataid_and_inherit_from_parents() -> None:
    start = classes_by_name()["Transfer_Start"]
    assert [p.name for p in start.properties] == [
        "Index", "Bytes", "Path", "Session", "Peer", "PeerPort", "User", "Compressed", "Tag", "Context", "State", "Access",
    ]  # fmt: skip
    # The provider's Flags has no WmiDataId: not event data. Fault's Count is inherited.
    fault = classes_by_name()["Fault_Codes"]
    assert fault.properties[0].name == "Count" and fault.properties[1].count == "Count"


def test_types_and_qualifiers_become_tdh_types() -> None:
    classes = classes_by_name()
    start = {p.name: p for p in classes["Transfer_Start"].properties}
    fault = {p.name: p for p in classes["Fault_Codes"].properties}
    expected = {
        "Index": (InType.UINT32, None, None, None),
        "Bytes": (InType.UINT64, OutType.HEXINT64, None, None),
        "Path": (InType.COUNTEDSTRING, None, None, None),
        "Session": (InType.GUID, None, None, None),
        "Peer": (InType.UINT32, OutType.IPV4, None, None),
        "PeerPort": (InType.UINT16, OutType.PORT, None, None),
        "User": (InType.WBEMSID, None, None, None),
        "Compressed": (InType.BOOLEAN, None, None, None),
        "Tag": (InType.ANSISTRING, None, None, None),
        "Context": (InType.POINTER, None, None, None),
        "Codes": (InType.UINT32, OutType.HEXINT32, "Count", None),
        "Where": (InType.UNICODESTRING, None, None, 8),
        "Deltas": (InType.INT16, None, 4, None),
        "Blob": (InType.BINARY, None, None, 6),
        "Ratio": (InType.FLOAT, None, None, None),
        "Precise": (InType.DOUBLE, None, None, None),
        "Letter": (InType.ANSICHAR, None, None, None),
        "Size": (InType.SIZET, None, None, None),
        "When": (InType.UINT64, None, None, None),
        "Peer6": (InType.BINARY, OutType.IPV6, None, 16),
        "Extra": (InType.HEXDUMP, None, None, None),
        "Reverse": (InType.REVERSEDCOUNTEDSTRING, None, None, None),
        "Name": (InType.ANSISTRING, None, None, 4),
        "Handle": (InType.POINTER, None, None, None),
        "Rest": (InType.NONNULLTERMINATEDANSISTRING, None, None, None),
    }
    for name, (in_type, out_type, count, length) in expected.items():
        prop = start.get(name) or fault[name]
        assert (prop.in_type, prop.out_type, prop.count, prop.length) == (in_type, out_type, count, length), name


def test_value_maps_and_bit_maps() -> None:
    classes = classes_by_name()
    start, fault = classes["Transfer_Start"], classes["Fault_Codes"]
    state = start.maps["Transfer_Start.State"]
    assert (state.kind, [(e.value, e.message) for e in state.entries]) == ("value", [(0, "Idle"), (1, "Busy"), (2, "Done")])
    assert [(e.value, e.message) for e in start.maps["Transfer_Start.Access"].entries] == [(1, "Read"), (4, "Write")]
    assert start.maps["Transfer_Start.Access"].kind == "bit"
    bits = fault.maps["Fault_Codes.Bits"]
    assert (bits.kind, [(e.value, e.message) for e in bits.entries]) == ("bit", [(1, "Low"), (8, "High")])
    assert {p.name: p.map_name for p in start.properties}["State"] == "Transfer_Start.State"
    only_values = classes_by_name(SAMPLE.replace('ValueMap{"0", "1", "2"}, ', ""))["Transfer_Start"]
    assert [e.value for e in only_values.maps["Transfer_Start.State"].entries] == [0, 1, 2]  # a zero-based index


def test_schemas_are_keyed_by_guid_type_and_version() -> None:
    schemas = schemas_from_mof_text(SAMPLE, "sample.mof")
    keys = [(s.provider_id, s.event_id, s.version, s.opcode) for s in schemas]
    # Transfer has no EventVersion: it is the newest, one above Transfer_V0's 0.
    assert keys == [(TRANSFER, 1, 1, 1), (TRANSFER, 2, 1, 2), (TRANSFER, 1, 0, 1), (FAULT, 10, 3, 10)]
    start, end = schemas[0], schemas[1]
    assert (start.provider_name, start.event_name, start.task_name, start.opcode_name) == ("ContosoTransfer", "Transfer/Start", "Transfer", "Start")
    assert end.event_name == "Transfer/End"
    assert (start.source, start.event_guid, start.level) == ("mof", TRANSFER, 0)
    assert schemas_from_mof(parse_mof(SAMPLE))[3].maps["Fault_Codes.Bits"].kind == "bit"


def test_a_single_unversioned_class_is_version_0_and_unnamed_types_take_the_class_name() -> None:
    text = """
    [Guid("{11111111-2222-3333-4444-555555555555}")] class Lone : EventTrace {};
    [EventType{5, 6}, EventTypeName{"Five"}] class Lone_Event : Lone { [WmiDataId(1)] uint32 A; };
    """
    schemas = schemas_from_mof_text(text)
    assert [(s.event_id, s.version, s.event_name, s.opcode_name, s.provider_name) for s in schemas] == [
        (5, 0, "Lone/Five", "Five", "Lone"), (6, 0, "Lone", None, "Lone"),
    ]  # fmt: skip


def test_a_v_suffix_is_dropped_from_the_name_when_it_matches_the_version() -> None:
    text = """
    [Guid("{11111111-2222-3333-4444-555555555555}"), EventVersion(2)] class Disk_V2 : Nowhere {};
    [EventType(1), EventTypeName("Read")] class Disk_V2_Read : Disk_V2 { [WmiDataId(1)] uint32 A; };
    [Guid("{11111111-2222-3333-4444-555555555556}"), EventVersion(1)] class Net_V7 : Nowhere {};
    [EventType(1)] class Net_V7_Send : Net_V7 {};
    """
    schemas = schemas_from_mof_text(text)
    assert [s.event_name for s in schemas] == ["Disk/Read", "Net_V7"]
    assert schemas[1].properties == ()


def test_what_event_tracing_does_not_use_is_skipped() -> None:
    text = r"""
    #pragma autorecover
    qualifier Dynamic : boolean = false, scope(class);
    instance of __Win32Provider as $P { Name = "x"; Nested = {1, 2}; };
    [Guid("{11111111-2222-3333-4444-555555555555}"), Description("a" "b" "\"c\"\n\x41")]
    class Methods : EventTrace
    {
        [Implemented] uint32 Reset([in] uint32 How, [out] string Why);
        uint32 Defaulted = 5;
        string Listed[] = {"a", "b"};
    };
    [EventType(1)] class Methods_One : Methods { [WmiDataId(1)] uint32 A; uint32 NotData; };;
    """
    (one,) = parse_mof(text)
    assert [p.name for p in one.properties] == ["A"]


def test_utf16_files_and_byte_input(tmp_path: Path) -> None:
    path = tmp_path / "unicode.mof"
    path.write_bytes(b"\xff\xfe" + SAMPLE.replace("Contoso file", "Contoso fïle").encode("utf-16-le"))
    schemas = schemas_from_mof_file(path)
    assert len(schemas) == 4 and schemas[0].event_name == "Transfer/Start"
    assert len(schemas_from_mof_text(SAMPLE.encode("utf-8"))) == 4


def test_unsized_last_array_takes_the_rest() -> None:
    text = """
    [Guid("{11111111-2222-3333-4444-555555555555}")] class Stack : EventTrace {};
    [EventType(32)] class Stack_Walk : Stack { [WmiDataId(1)] uint64 Stamp; [WmiDataId(2), pointer] uint32 Frames[]; };
    """
    (schema,) = schemas_from_mof_text(text)
    frames = schema.properties[1]
    assert (frames.in_type, frames.count) == (InType.POINTER, REST)
    # Pointer-sized fields follow the producer: a 32-bit record's frames are 4 bytes each.
    payload = (77).to_bytes(8, "little") + b"".join(f.to_bytes(4, "little") for f in (0x401000, 0x402000, 0x403000))
    record = build_classic_record(event_guid=schema.provider_id, type=32, pointer_size=4, user_data=payload)
    assert record.pointer_size == 4
    assert dict(decode_all(schema, record.user_data, record.pointer_size)) == {"Stamp": 77, "Frames": [0x401000, 0x402000, 0x403000]}


# -- decoding with the schemas -------------------------------------------------------------------


def test_classic_records_decode_through_the_registry() -> None:
    registry = SchemaRegistry()
    for schema in schemas_from_mof_text(SAMPLE):
        registry.add_schema(schema, source="sample.mof")
    session = uuid.uuid4()
    payload = pack_fields([
        ("UINT32", 7), ("UINT64", 0x1000), ("COUNTEDSTRING", r"C:\data\a.bin"), ("GUID", session),
        ("UINT32", "10.1.2.3", OutType.IPV4), ("UINT16", 8443, OutType.PORT), ("WBEMSID", "S-1-5-21-10-20-30-1001"),
        ("BOOLEAN", True), ("ANSISTRING", "fast"), ("POINTER", 0xDEADBEEF), ("UINT8", 2), ("UINT32", 5),
    ])  # fmt: skip
    record = build_classic_record(event_guid=TRANSFER, type=2, version=1, level=4, user_data=payload)
    schema = registry.schema_for(record)
    assert schema is not None and schema.event_name == "Transfer/End"
    assert (registry.provider_name(record), registry.event_name(record)) == ("ContosoTransfer", "Transfer/End")
    values = decode_all(schema, record.user_data, record.pointer_size)
    assert not values.errors
    assert dict(values) == {
        "Index": 7, "Bytes": 0x1000, "Path": r"C:\data\a.bin", "Session": session, "Peer": ipaddress.IPv4Address("10.1.2.3"),
        "PeerPort": 8443, "User": "S-1-5-21-10-20-30-1001", "Compressed": True, "Tag": "fast", "Context": 0xDEADBEEF,
        "State": 2, "Access": 5,
    }  # fmt: skip
    text = format_properties(values)
    assert text["Bytes"] == "0x1000" and text["State"] == "Done" and text["Access"] == "Read | Write"
    # Version 0 records decode with the V0 layout; a newer version than any falls back to the newest.
    v0 = build_classic_record(event_guid=TRANSFER, type=1, version=0, user_data=pack_fields([("UINT32", 1), ("UINT32", 2)]))
    assert dict(decode_all(registry.schema_for(v0), v0.user_data)) == {"Index": 1, "Bytes": 2}
    newer = build_classic_record(event_guid=TRANSFER, type=1, version=9, user_data=payload)
    assert registry.schema_for(newer) is registry.schema_for(build_classic_record(event_guid=TRANSFER, type=1, version=1))


def test_the_second_class_decodes_arrays_strings_and_blobs() -> None:
    (schema,) = [s for s in schemas_from_mof_text(SAMPLE) if s.provider_id == FAULT]
    payload = pack_fields([
        ("UINT16", 2), ("UINT32", 0xC0000005), ("UINT32", 0x80004005), ("BINARY", "disk".encode("utf-16-le").ljust(16, b"\0")),
        ("INT16", -1), ("INT16", 2), ("INT16", -3), ("INT16", 4), ("BINARY", b"\x01\x02\x03\x04\x05\x06"),
        ("FLOAT", 0.5), ("DOUBLE", 2.25), ("ANSICHAR", "Q"), ("UINT8", 9), ("SIZET", 1 << 40), ("UINT64", 123456789),
        ("BINARY", ipaddress.IPv6Address("fe80::1").packed), ("HEXDUMP", b"xyz"), ("REVERSEDCOUNTEDSTRING", "back"),
        ("BINARY", b"abc\0"), ("POINTER", 0x7FF6_0000_1000), ("NONNULLTERMINATEDANSISTRING", "to the end"),
    ])  # fmt: skip
    values = decode_all(schema, payload)
    assert not values.errors
    assert dict(values) == {
        "Count": 2, "Codes": [0xC0000005, 0x80004005], "Where": "disk", "Deltas": [-1, 2, -3, 4], "Blob": b"\x01\x02\x03\x04\x05\x06",
        "Ratio": 0.5, "Precise": 2.25, "Letter": "Q", "Bits": 9, "Size": 1 << 40, "When": 123456789,
        "Peer6": ipaddress.IPv6Address("fe80::1"), "Extra": b"xyz", "Reverse": "back", "Name": "abc", "Handle": 0x7FF6_0000_1000,
        "Rest": "to the end",
    }  # fmt: skip


# -- errors --------------------------------------------------------------------------------------

GOOD_HEAD = '[Guid("{11111111-2222-3333-4444-555555555555}")] class E : EventTrace {};\n'


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("class A {\n/* never closed\n", 2, "comment never closed"),
        ('[Description("open\n")] class A {};', 1, "string never closed"),
        ("[Guid(\"x\")]\nclass A : B\n{\n  [WmiDataId(1)] uint32 X;\n", 2, "class A is never closed"),
        ("class A {\n uint32 X\n};", 3, "expected ';' after property X"),
        ("class A { uint32 X; } @", 1, "unexpected character '@'"),
        ("#include <x>\nclass A {};", 1, "unknown directive '#include'"),
        ("[A(1), A(2)] class X {};", 1, "qualifier A given twice"),
        ("banana", 1, "expected a class declaration"),
        ("[Max(" + "9" * 100 + ")] class A {};", 1, "number of 100 characters"),
        ("class A {};\nclass a {};", 2, "class a is declared twice (first on line 1)"),
        ("[Guid(1)] class A : B {};\n[Guid(2)] class B : A {};\n[EventType(1)] class C : A {};", 3, "is its own ancestor"),
        ("[EventType(1)] class C : Unknown { [WmiDataId(1)] uint32 A; };", 1, "has no Guid"),
        ('[Guid("nope")] class E : EventTrace {};\n[EventType(1)] class C : E {};', 1, "'nope' is not a GUID"),
        (GOOD_HEAD + "[EventType(256)] class C : E {};", 2, "EventType must be an integer in 0..255"),
        (GOOD_HEAD + "[EventType{1, 1}] class C : E {};", 2, "EventType lists a type twice"),
        (GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1)] datetime When; };', 3, "type 'datetime' of When has no event tracing layout"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] object Blob; };", 3, "object Blob has no extension"),
        (GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1), extension("Blob")] object B; };', 3, "extension 'blob'"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] uint8 A;\n [WmiDataId(1)] uint8 B; };", 4, "WmiDataId(1) is given to both A and B"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(0)] uint8 A; };", 3, "WmiDataId of A must be an integer in 1..65535"),
        (
            GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1), WmiSizeIs("N")] uint8 A[];\n [WmiDataId(2)] uint8 N; };',
            3, "names 'N', not an earlier integer property",
        ),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] uint8 A[];\n [WmiDataId(2)] uint8 N; };", 3, "array A has no size"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] uint8 A[70000]; };", 3, "array size of A must be an integer in 0..65535"),
        (GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1), StringTermination("Pascal")] string S; };', 3, "StringTermination 'pascal'"),
        (GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1), ValueMap{"1"}, Values{"a", "b"}] uint8 S; };', 3, "as many strings as values"),
        (GOOD_HEAD + '[EventType(1)] class C : E {\n [WmiDataId(1), ValueMap{"one"}, Values{"a"}] uint8 S; };', 3, "ValueMap entry of S must be an integer"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] uint8 A;\n [WmiDataId(2)] uint8 a; };", 4, "property a is declared twice"),
        (GOOD_HEAD + "[EventType(1)] class C : E {\n [WmiDataId(1)] Other ref Link; };", 3, "is a reference"),
        (GOOD_HEAD + '[EventType(1), EventVersion("x")] class C : E {};', 2, "EventVersion must be an integer"),
    ],
)
def test_malformed_mof_is_a_clean_error_with_its_line(text: str, line: int, message: str) -> None:
    error = mof_error(text)
    assert error.line == line, str(error)
    assert message in str(error)
    assert str(error).startswith(f"bad.mof:{line}: ")


def test_errors_name_the_class() -> None:
    error = mof_error(GOOD_HEAD + "[EventType(1)] class Broken : E {\n [WmiDataId(1)] object Blob; };")
    assert error.element == "Broken" and str(error).startswith("bad.mof:3: class Broken: object Blob")


def test_hostile_input_is_refused_early() -> None:
    with pytest.raises(MofError, match="over the"):
        parse_mof(" " * (MAX_MOF_CHARS + 1))
    with pytest.raises(MofError, match="NUL characters") as caught:
        parse_mof("class A {};\n\0\0garbage")
    assert caught.value.line == 2
    with pytest.raises(MofError, match="not valid UTF-16"):
        parse_mof(b"\xff\xfe\x00\xd8", "odd.mof")
    # Binary garbage decodes as cp1252 and fails as text, on its line.
    with pytest.raises(MofError, match="unexpected character"):
        parse_mof(bytes(range(1, 256)))


def test_unreadable_files_are_mof_errors(tmp_path: Path) -> None:
    with pytest.raises(MofError, match="cannot read MOF file") as caught:
        schemas_from_mof_file(tmp_path / "missing.mof")
    assert caught.value.path == str(tmp_path / "missing.mof")
    with pytest.raises(MofError, match="cannot read MOF file"):
        schemas_from_mof_file(tmp_path)


def test_deep_and_long_input_stays_linear() -> None:
    # Many classes and a long qualifier list parse without recursion limits.
    parts = [GOOD_HEAD]
    values = ", ".join(['"v"'] * 50)
    for i in range(2000):
        parts.append(f"[EventType({i % 256}), Values{{{values}}}] class C{i} : E {{ [WmiDataId(1)] uint32 A; }};\n")
    classes = parse_mof("".join(parts))
    assert len(classes) == 2000
    with pytest.raises(MofError, match="never closed"):
        parse_mof("instance of X " + "{" * 100000)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_mof_only_ever_raises_mof_errors(data: st.DataObject) -> None:
    text = SAMPLE
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(text)))
        action = data.draw(st.sampled_from(["cut", "insert", "truncate"]))
        if action == "cut":
            text = text[:position] + text[position + data.draw(st.integers(1, 30)) :]
        elif action == "insert":
            text = text[:position] + data.draw(st.text(alphabet='{}[]();:,="\\/*#x0-9 \nAZaz', max_size=8)) + text[position:]
        else:
            text = text[:position]
    try:
        schemas = schemas_from_mof_text(text)
    except MofError as error:
        assert error.line is None or 1 <= error.line <= text.count("\n") + 1
        return
    for schema in schemas:
        assert 0 <= schema.event_id <= 255 and schema.source == "mof"
