"""Schemas from manifests: names as TDH and PerfView show them, properties, maps, damaged input."""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pytest

from openetw.errors import ManifestError
from openetw.manifest import Manifest, load_manifest, parse_manifest
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh import decode_properties, format_event_message, format_properties
from openetw.tdh.from_manifest import schema_from_manifest_event, schemas_from_manifest
from openetw.tdh.schema import PropertyInfo, Schema
from tests.conftest import corpus_path

CORPUS_MANIFEST_DIRS = ("Win10-17134", "authored-samples", "perfview", "dotnet-runtime")
DOTNET_RUNTIME = uuid.UUID("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4")
PROVIDER = uuid.UUID("6b7c2a3e-0b0a-4f7e-9c3d-2f5b8e1d4a90")

SAMPLE = f"""<?xml version="1.0" encoding="UTF-8"?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"
    xmlns:win="http://manifests.microsoft.com/win/2004/08/windows/events"
    xmlns:xs="http://www.w3.org/2001/XMLSchema">
 <instrumentation><events>
  <provider name="Sample-Provider" guid="{{{PROVIDER}}}" symbol="SAMPLE" resourceFileName="s.dll"
      messageFileName="s.dll" message="$(string.provider)">
   <channels>
    <importChannel chid="SYS" name="System"/>
    <channel chid="OPS" name="Sample-Provider/Operational" type="Operational" enabled="true"/>
   </channels>
   <levels><level name="Chatty" value="16" message="$(string.level.chatty)"/></levels>
   <tasks>
    <task name="Copy" value="1" message="$(string.task.copy)">
     <opcodes><opcode name="Begin" value="10" message="$(string.opcode.begin)"/></opcodes>
    </task>
    <task name="Quiet" value="2"/>
   </tasks>
   <keywords>
    <keyword name="Io" mask="0x1" message="$(string.keyword.io)"/>
    <keyword name="Net" mask="0x2"/>
   </keywords>
   <maps>
    <valueMap name="Mode"><map value="1" message="$(string.map.read)"/><map value="2" message="$(string.map.write)"/></valueMap>
    <bitMap name="Flags"><map value="0x1" message="$(string.map.hidden)"/><map value="0x4" message="$(string.map.system)"/></bitMap>
   </maps>
   <templates>
    <template tid="CopyArgs">
     <data name="Path" inType="win:UnicodeString"/>
     <data name="Mode" inType="win:UInt32" map="Mode"/>
     <data name="Attributes" inType="win:UInt16" map="Flags"/>
     <data name="Status" inType="win:UInt32" outType="win:NTSTATUS"/>
     <data name="Count" inType="win:UInt16"/>
     <struct name="Ranges" count="Count">
      <data name="Start" inType="win:UInt64" outType="win:HexInt64"/>
      <data name="Size" inType="win:UInt32"/>
     </struct>
     <data name="Hash Size" inType="win:UInt32"/>
     <data name="Hash" inType="win:Binary" length="HashSize"/>
    </template>
    <template tid="BrokenArgs">
     <data name="Data" inType="win:Binary" length="Later"/>
     <data name="Later" inType="win:UInt32"/>
     <data name="Text" inType="win:UnicodeString" length="Data"/>
     <data name="Mapped" inType="win:UInt32" map="NoSuchMap"/>
     <data name="Opaque" inType="win:Struct"/>
    </template>
   </templates>
   <events>
    <event value="1" version="0" symbol="CopyBegin" task="Copy" opcode="Begin" level="Chatty"
        keywords="Io Net" channel="OPS" template="CopyArgs" message="$(string.event.copy)"/>
    <event value="2" version="1" symbol="CopyDone" task="Copy" opcode="win:Stop" level="win:Informational"
        channel="SYS"/>
    <event value="3" symbol="QuietInfo" task="Quiet" opcode="win:Info" level="win:Warning"/>
    <event value="4" symbol="NoTask" opcode="win:DC_Start" level="win:LogAlways" template="BrokenArgs"/>
    <event value="5" level="win:Verbose" template="NoSuchTemplate"/>
   </events>
  </provider>
 </events></instrumentation>
 <localization><resources culture="en-US"><stringTable>
  <string id="provider" value="A sample provider"/>
  <string id="level.chatty" value="Chatty level"/>
  <string id="task.copy" value="FileCopy"/>
  <string id="opcode.begin" value="Begins"/>
  <string id="keyword.io" value="Input/Output"/>
  <string id="map.read" value="Read"/>
  <string id="map.write" value="Write"/>
  <string id="map.hidden" value="Hidden"/>
  <string id="map.system" value="System"/>
  <string id="event.copy" value="Copying %1 (mode %2)"/>
 </stringTable></resources></localization>
</instrumentationManifest>
"""


def sample_schemas() -> dict[tuple[int, int], Schema]:
    manifest = parse_manifest(SAMPLE).manifest
    return {(event_id, version): schema for _, event_id, version, schema in schemas_from_manifest(manifest)}


@lru_cache(maxsize=1)
def _corpus_manifests(root: str) -> tuple[Manifest, ...]:
    manifests = []
    for folder in CORPUS_MANIFEST_DIRS:
        for path in sorted((Path(root) / folder).iterdir()):
            if path.suffix.lower() not in (".xml", ".man"):
                continue
            try:
                manifests.append(load_manifest(path).manifest)
            except ManifestError:
                continue  # unparseable corpus files are the parser's tests' business
    return tuple(manifests)


def corpus_manifests() -> tuple[Manifest, ...]:
    """Every parseable manifest of the corpus (parsed once per test session)."""
    return _corpus_manifests(str(corpus_path("manifests")))


def walk(properties: tuple[PropertyInfo, ...]) -> Iterator[PropertyInfo]:
    for prop in properties:
        yield prop
        if prop.members:
            yield from walk(prop.members)


# --- names ------------------------------------------------------------------------------------


def test_names_come_from_messages_with_the_task_opcode_composite() -> None:
    schema = sample_schemas()[(1, 0)]
    assert schema.provider_id == PROVIDER
    assert schema.provider_name == "Sample-Provider"
    assert schema.provider_message == "A sample provider"
    assert (schema.task_name, schema.opcode_name, schema.event_name) == ("FileCopy", "Begins", "FileCopy/Begins")
    assert (schema.level, schema.level_name) == (16, "Chatty level")
    assert (schema.task, schema.opcode, schema.keyword) == (1, 10, 0x3)
    assert schema.keyword_names == ("Input/Output", "Net")
    assert schema.channel_name == "Sample-Provider/Operational"
    assert schema.channel == 16
    assert schema.message == "Copying %1 (mode %2)"
    assert schema.source == "manifest"


def test_winmeta_items_are_named_by_their_winmeta_messages() -> None:
    schemas = sample_schemas()
    done = schemas[(2, 1)]
    assert (done.event_name, done.opcode_name, done.level_name, done.channel_name) == ("FileCopy/Stop", "Stop", "Information", "System")
    assert done.channel == 8
    quiet = schemas[(3, 0)]  # opcode win:Info (0) is left out of the name; a task without message is its name
    assert (quiet.event_name, quiet.task_name, quiet.opcode_name, quiet.level_name) == ("Quiet", "Quiet", "Info", "Warning")
    no_task = schemas[(4, 0)]
    assert (no_task.event_name, no_task.task_name, no_task.level_name) == ("NoTask/DCStart", None, "Log Always")
    assert schemas[(5, 0)].event_name == "EventID(5)"


def test_corpus_names_match_perfview_baselines() -> None:
    names = set()
    for manifest in corpus_manifests():
        if any(p.name in ("Microsoft-Windows-DotNETRuntime", "Microsoft-Windows-DotNETRuntimeRundown",
                          "Microsoft-Windows-Kernel-File", "Microsoft-Windows-Kernel-Process",
                          "Microsoft-Windows-DNS-Client") for p in manifest.providers):  # fmt: skip
            names.update(f"{s.provider_name}/{s.event_name}" for _, _, _, s in schemas_from_manifest(manifest))
    baseline = set()
    for path in corpus_path("etl", "baselines", "perfview").glob("*.baseline.txt"):
        baseline.update(re.findall(r"^(?:EVENT [\d,.]+|COUNT): ?(\S+?)[ :]", path.read_text("utf-8", "replace"), re.M))
    expected = {
        "Microsoft-Windows-DotNETRuntime/GC/AllocationTick",
        "Microsoft-Windows-DotNETRuntime/GC/Start",
        "Microsoft-Windows-DotNETRuntime/GC/HeapStats",
        "Microsoft-Windows-DotNETRuntime/Runtime/Start",
        "Microsoft-Windows-DotNETRuntime/Type/BulkType",
        "Microsoft-Windows-DotNETRuntimeRundown/Loader/ModuleDCStop",
        "Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopComplete",
        "Microsoft-Windows-Kernel-File/Create",
        "Microsoft-Windows-Kernel-Process/ProcessStart/Start",
        "Microsoft-Windows-DNS-Client/DnsServerForInterface",
    }
    assert expected <= baseline
    assert expected - names == set()


# --- properties and maps -----------------------------------------------------------------------


def test_template_becomes_properties_with_structs_references_and_maps() -> None:
    schema = sample_schemas()[(1, 0)]
    by_name = {prop.name: prop for prop in schema.properties}
    assert [prop.name for prop in schema.properties] == ["Path", "Mode", "Attributes", "Status", "Count", "Ranges", "Hash Size", "Hash"]
    assert by_name["Path"].in_type is InType.UNICODESTRING and by_name["Path"].out_type is None
    assert by_name["Status"].out_type is OutType.NTSTATUS
    ranges = by_name["Ranges"]
    assert ranges.count == "Count" and ranges.members is not None
    assert [(m.name, m.in_type, m.out_type) for m in ranges.members] == [("Start", InType.UINT64, OutType.HEXINT64), ("Size", InType.UINT32, None)]
    # A reference spelled as the field's display name resolves to the field.
    assert by_name["Hash"].length == "Hash Size" and by_name["Hash"].problem is None
    assert schema.maps["Mode"].kind == "value"
    assert [(e.value, e.message) for e in schema.maps["Mode"].entries] == [(1, "Read"), (2, "Write")]
    assert schema.maps["Flags"].kind == "bit"
    assert set(schema.maps) == {"Mode", "Flags"}


def test_manifest_schema_decodes_and_formats() -> None:
    schema = sample_schemas()[(1, 0)]
    data = (
        "C:\\a.txt\0".encode("utf-16-le") + struct.pack("<IHIH", 2, 5, 0xC0000022, 2)
        + struct.pack("<QI", 0x1000, 16) + struct.pack("<QI", 0x2000, 32)
        + struct.pack("<I", 3) + b"\xaa\xbb\xcc"
    )  # fmt: skip
    decoded = decode_properties(schema, data, 8)
    assert decoded.errors == {} and decoded.end_offset == len(data)
    assert decoded["Ranges"] == [{"Start": 0x1000, "Size": 16}, {"Start": 0x2000, "Size": 32}]
    text = format_properties(decoded)
    assert text["Mode"] == "Write"
    assert text["Attributes"] == "Hidden | System"
    assert text["Status"] == "0xC0000022 (STATUS_ACCESS_DENIED)"
    assert text["Hash"] == "0xAABBCC"
    assert format_event_message(decoded) == "Copying C:\\a.txt (mode Write)"


def test_damaged_templates_degrade_to_problems_not_exceptions() -> None:
    schema = sample_schemas()[(4, 0)]
    by_name = {prop.name: prop for prop in schema.properties}
    assert by_name["Data"].problem == "length refers to 'Later', which is not an earlier field of the template"
    assert by_name["Text"].problem == "length refers to 'Data', which is not an integer field"
    assert by_name["Mapped"].map_name is None and by_name["Mapped"].problem is None
    assert by_name["Opaque"].problem is not None and "win:Struct" in by_name["Opaque"].problem
    undefined = sample_schemas()[(5, 0)]
    assert [prop.problem for prop in undefined.properties] == ["template 'NoSuchTemplate' is not defined"]
    decoded = decode_properties(schema, b"\x01\x02\x03\x04", 8)
    assert str(decoded.errors["Data"].message) == by_name["Data"].problem
    assert decoded.not_decoded == ("Later", "Text", "Mapped", "Opaque")


def test_provider_without_guid_gets_the_name_derived_guid() -> None:
    text = SAMPLE.replace(f' guid="{{{PROVIDER}}}"', "")
    manifest = parse_manifest(text).manifest
    provider = manifest.providers[0]
    from openetw.guids import provider_guid_from_name

    schema = schema_from_manifest_event(manifest, provider, provider.events[0])
    assert schema.provider_id == provider_guid_from_name("Sample-Provider")


def test_dotnet_runtime_sample_events() -> None:
    manifest = load_manifest(corpus_path("manifests", "dotnet-runtime", "ClrEtwAll.man")).manifest
    schemas = {(pid, eid, ver): s for pid, eid, ver, s in schemas_from_manifest(manifest)}
    tick = schemas[(DOTNET_RUNTIME, 10, 2)]
    assert (tick.event_name, tick.level_name, tick.keyword_names) == ("GC/AllocationTick", "Verbose", ("GC",))
    assert [(p.name, p.in_type) for p in tick.properties][:4] == [
        ("AllocationAmount", InType.UINT32), ("AllocationKind", InType.UINT32), ("ClrInstanceID", InType.UINT16),
        ("AllocationAmount64", InType.UINT64),
    ]  # fmt: skip
    assert tick.property_named("TypeID").in_type is InType.POINTER
    assert [(e.value, e.message) for e in tick.maps["GCAllocationKindMap"].entries] == [(0, "Small"), (1, "Large")]
    bulk = schemas[(DOTNET_RUNTIME, 15, 0)]
    values = bulk.property_named("Values")
    assert bulk.event_name == "Type/BulkType" and values is not None and values.count == "Count" and values.members


# --- the corpus ---------------------------------------------------------------------------------


def test_every_event_of_every_corpus_manifest_converts() -> None:
    count = 0
    problems: set[str] = set()
    for manifest in corpus_manifests():
        for provider_id, event_id, version, schema in schemas_from_manifest(manifest):
            count += 1
            assert isinstance(provider_id, uuid.UUID)
            assert (schema.event_id, schema.version) == (event_id, version)
            assert schema.provider_name and schema.event_name
            for prop in walk(schema.properties):
                if prop.problem:
                    problems.add(re.sub(r"'[^']*'", "'…'", prop.problem))
                if prop.map_name is not None:
                    assert prop.map_name in schema.maps
    assert count > 40000
    # The corpus only has opaque types (regenerated manifests); references all resolve.
    assert problems == {"inType '…' does not describe the payload, which cannot be decoded"}


@pytest.mark.parametrize("event_key", [(1, 0), (4, 0)])
def test_schema_from_manifest_event_matches_the_iterator(event_key: tuple[int, int]) -> None:
    manifest = parse_manifest(SAMPLE).manifest
    provider = manifest.providers[0]
    event = provider.event(*event_key)
    assert event is not None
    assert schema_from_manifest_event(manifest, provider, event) == sample_schemas()[event_key]
