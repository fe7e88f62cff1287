from __future__ import annotations

import uuid

import pytest

from openetw.errors import ManifestError
from openetw.manifest import (
    ChannelType,
    InType,
    MapKind,
    OutType,
    parse_manifest,
)
from tests.manifest.samples import (
    EVENTS_NS,
    FULL_PROVIDER,
    FULL_STRINGS,
    WIN_NS,
    assembly_manifest,
    full_manifest,
    manifest,
)


@pytest.fixture(scope="module")
def provider():
    result = parse_manifest(full_manifest(), "full.man")
    assert result.warnings == []
    return result.manifest.providers[0]


def test_provider_attributes(provider):
    assert provider.name == "Contoso-Sample"
    assert provider.guid == uuid.UUID("11111111-2222-3333-4444-555555555555")
    assert provider.symbol == "CONTOSO"
    assert provider.resource_file == "c.dll"
    assert provider.message_ref == "Provider"
    assert provider.message == "Contoso Sample"


def test_channels_values_and_kinds(provider):
    by_chid = {channel.chid: channel for channel in provider.channels}
    assert by_chid["SYS"].imported and by_chid["SYS"].value == 8 and by_chid["SYS"].standard
    assert by_chid["OP"].type is ChannelType.OPERATIONAL and by_chid["OP"].enabled
    assert by_chid["AN"].value == 20
    # Channels without a value get mc's numbering from 16, skipping declared values.
    assert by_chid["OP"].value == 16
    assert by_chid["ADM"].value == 17
    assert by_chid["ADM"].message == "Admin channel"
    assert provider.channel("Contoso-Sample/Admin") is by_chid["ADM"]
    assert provider.channel("Application").value == 9


def test_levels_tasks_opcodes_keywords(provider):
    assert provider.level("Chatty").value == 16
    assert provider.level("Chatty").message == "Chatty level"
    assert provider.level("win:Verbose").value == 5
    assert provider.level("win:Always").value == 0
    connect = provider.task("Connect")
    assert connect.event_guid == uuid.UUID("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
    assert [op.name for op in connect.opcodes] == ["Handshake", "Shared"]
    assert all(op.task == "Connect" for op in connect.opcodes)
    # Task-scoped opcode first, then the provider's, then winmeta's.
    assert provider.opcode("Shared", "Connect").value == 11
    assert provider.opcode("Shared", "Disconnect").value == 12
    assert provider.opcode("Shared").value == 12
    assert provider.opcode("win:Receive").value == 240
    assert provider.opcode("Handshake") is None
    assert provider.keyword("Disk").mask == 0x10
    assert provider.keyword("win:AuditSuccess").mask == 0x20000000000000
    assert [kw.name for kw in provider.keywords_for_mask(0x11)] == ["Network", "Disk"]


def test_maps(provider):
    state = provider.map("State")
    assert state.kind is MapKind.VALUE_MAP
    assert [entry.message for entry in state.entries] == ["Idle", "Busy"]
    flags = provider.map("Flags")
    assert flags.kind is MapKind.BIT_MAP
    assert [entry.message for entry in flags.matching(3)] == ["Read", "Write"]
    assert state.matching(1)[0].message == "Busy"
    assert state.matching(7) == ()


def test_template_fields(provider):
    template = provider.template("T_Connect")
    names = [field.name for field in template.fields]
    assert names == ["Host", "Port", "State", "Flags", "Size", "Blob", "Fixed", "Count", "Items", "Pair"]
    port = template.field("Port")
    assert port.in_type is InType.UINT16 and port.out_type is OutType.PORT
    assert template.field("Host").effective_out_type is OutType.STRING
    assert template.field("Blob").length == "Size"
    assert template.field("Fixed").length == 16
    assert template.field("Pair").count == 2
    items = template.field("Items")
    assert items.is_struct and items.count == "Count" and items.is_array
    assert [(m.name, m.in_type) for m in items.members] == [("Id", InType.UINT32), ("Name", InType.ANSISTRING)]
    assert template.index_of("Blob") == 5
    assert provider.template("T_Empty").fields == ()


def test_events_descriptor_values(provider):
    start = provider.event(1, 0)
    assert (start.task_value, start.opcode_value, start.level_value, start.channel_value) == (1, 1, 4, 16)
    assert start.keywords == ("Network", "Disk")
    assert start.keyword_mask == 0x11
    assert start.message == "Connecting to %1:%2 (state %3)%n"
    v1 = provider.event(1, 1)
    assert (v1.opcode_value, v1.level_value, v1.channel_value) == (10, 16, 20)
    assert provider.event(2).opcode_value == 11
    assert provider.event(3).opcode_value == 12
    assert provider.event(3).channel_value == 17
    plain = provider.event(16)
    assert (plain.task_value, plain.opcode_value, plain.level_value, plain.keyword_mask) == (0, 0, 0, 0)
    assert plain.line is not None


def test_event_lookup_newest_version(provider):
    assert provider.event(1).version == 1
    assert provider.event(1, 0).version == 0
    assert provider.event(1, 7) is None
    assert provider.event(99) is None
    assert len(provider.events_with_id(1)) == 2
    assert provider.opcode_for(provider.event(1, 1)).name == "Handshake"
    assert provider.task_for(provider.event(1)).name == "Connect"


def test_lookups_by_value(provider):
    assert provider.task_by_value(2).name == "Disconnect"
    assert provider.opcode_by_value(11, 1).name == "Shared"
    assert provider.opcode_by_value(11) is None
    assert provider.opcode_by_value(2).name == "win:Stop"
    assert provider.level_by_value(16).name == "Chatty"
    assert provider.level_by_value(2).name == "win:Error"
    assert provider.channel_by_value(20).chid == "AN"
    assert provider.channel_by_value(10).name == "Security"


def test_lines_point_at_elements():
    text = full_manifest()
    result = parse_manifest(text)
    template = result.manifest.providers[0].template("T_Connect")
    line = text.splitlines()[template.field("Port").line - 1]
    assert 'name="Port"' in line


def test_manifest_lookup_by_guid_and_name():
    result = parse_manifest(full_manifest())
    found = result.manifest.provider("{11111111-2222-3333-4444-555555555555}".upper())
    assert found is not None and found.name == "Contoso-Sample"
    assert result.manifest.provider("contoso-sample") is found
    assert result.manifest.provider("nothing") is None


def test_bytes_with_bom_and_utf16():
    text = full_manifest()
    plain = parse_manifest(text).manifest
    with_bom = parse_manifest(b"\xef\xbb\xbf" + text.encode("utf-8")).manifest
    utf16 = parse_manifest(text.replace('encoding="utf-8"', 'encoding="utf-16"').encode("utf-16")).manifest
    assert with_bom.providers == plain.providers
    assert utf16.providers == plain.providers


def test_text_whose_declaration_claims_utf16():
    text = full_manifest().replace('encoding="utf-8"', 'encoding="utf-16"')
    assert parse_manifest(text).manifest.providers[0].name == "Contoso-Sample"


def test_assembly_wrapper_and_build_placeholders():
    result = parse_manifest(assembly_manifest(FULL_PROVIDER, FULL_STRINGS))
    assert [p.name for p in result.manifest.providers] == ["Contoso-Sample"]
    provider = result.manifest.providers[0]
    assert provider.message == "Contoso Sample"
    assert provider.event(1, 0).message.startswith("Connecting")
    assert provider.event(1, 0).keyword_mask == 0x11


def test_any_prefixes():
    text = f"""<ev:instrumentationManifest xmlns:ev="{EVENTS_NS}" xmlns:w="{WIN_NS}" xmlns:s="http://www.w3.org/2001/XMLSchema">
  <ev:instrumentation><ev:events>
    <ev:provider name="P" guid="{{11111111-2222-3333-4444-555555555555}}">
      <ev:templates><ev:template tid="T"><ev:data name="A" inType="w:UInt32" outType="s:hexBinary"/></ev:template></ev:templates>
      <ev:events><ev:event value="1" level="w:Warning" opcode="w:Stop" template="T"/></ev:events>
    </ev:provider>
  </ev:events></ev:instrumentation>
</ev:instrumentationManifest>"""
    provider = parse_manifest(text).manifest.providers[0]
    field = provider.template("T").fields[0]
    assert field.in_type is InType.UINT32 and field.in_type_name == "win:UInt32"
    assert field.out_type is OutType.HEXBINARY
    event = provider.event(1)
    assert event.level == "win:Warning" and event.level_value == 3 and event.opcode_value == 2


def test_default_culture_prefers_en_us_and_keeps_others():
    text = manifest(
        '<events><event value="1" message="$(string.Hello)"/></events>',
        '<string id="Hello" value="Hello"/>',
    ).replace(
        "<localization>",
        '<localization><resources culture="de-DE"><stringTable><string id="Hello" value="Hallo"/>'
        '<string id="Provider" value="Beispiel"/></stringTable></resources>',
    )
    result = parse_manifest(text).manifest
    assert result.cultures == ("de-DE", "en-US")
    assert result.default_culture == "en-US"
    assert result.providers[0].event(1).message == "Hello"
    assert result.string("Hello", "de-DE") == "Hallo"
    assert result.string("Hello") == "Hello"
    assert result.string("Missing") is None


def test_first_culture_when_no_en_us():
    text = manifest('<events><event value="1" message="$(string.Provider)"/></events>').replace(
        'culture="en-US"', 'culture="fr-FR"'
    )
    result = parse_manifest(text).manifest
    assert result.default_culture == "fr-FR"
    assert result.providers[0].event(1).message == "Contoso Sample"


def test_literal_message_and_placeholder_kept():
    text = manifest('<events><event value="1" message="Plain text"/></events>').replace(
        'resourceFileName="c.dll"', 'resourceFileName="$(runtime.system32)\\c.dll"'
    )
    provider = parse_manifest(text).manifest.providers[0]
    assert provider.event(1).message == "Plain text" and provider.event(1).message_ref is None
    assert provider.resource_file == "$(runtime.system32)\\c.dll"


def test_string_ids_with_parentheses():
    text = manifest(
        '<tasks><task name="Open(async)" value="1" message="$(string.task_Open(async))"/></tasks>',
        '<string id="task_Open(async)" value="Open (async)"/>',
    )
    assert parse_manifest(text).manifest.providers[0].task("Open(async)").message == "Open (async)"


def test_nonstandard_names_are_mapped_with_warnings():
    text = manifest(
        """<templates><template tid="T">
             <data name="A" inType="win:UInt32" outType="xs:HexInt32"/>
             <data name="B" inType="win:CountedUtf16String"/>
             <data name="C" inType="win:Struct"/>
             <data name="D" inType="win:29"/>
             <data name="E" inType="win:Nonsense"/>
           </template></templates>
           <events><event value="1" level="win:Always" template="T"/></events>"""
    )
    result = parse_manifest(text)
    fields = result.manifest.providers[0].template("T").fields
    assert fields[0].out_type is OutType.HEXINT32
    assert fields[1].in_type is InType.MANIFEST_COUNTEDSTRING
    assert fields[2].in_type is InType.NULL and fields[3].in_type is InType.NULL
    assert fields[4].in_type is InType.NULL and fields[4].in_type_name == "win:Nonsense"
    assert result.manifest.providers[0].event(1).level_value == 0
    codes = sorted(w.code for w in result.warnings)
    assert codes == [
        "nonstandard-in-type", "nonstandard-in-type", "nonstandard-in-type",
        "nonstandard-level", "nonstandard-out-type", "unknown-in-type",
    ]
    assert all(w.line is not None and w.element for w in result.warnings)


def test_regenerated_task_names_and_stray_placement():
    text = f"""<instrumentationManifest xmlns="{EVENTS_NS}" xmlns:win="{WIN_NS}"><instrumentation>
      <provider name="P" guid="{{11111111-2222-3333-4444-555555555555}}">
        <tasks><task name="None" value="0"><opcodes><opcode name="Run" value="10"/></opcodes></task></tasks>
        <valueMap name="M"><map value="1" message="one"/></valueMap>
        <events><event value="1" task="task_0" opcode="Run"/><event value="2" task="task_7"/></events>
      </provider></instrumentation></instrumentationManifest>"""
    result = parse_manifest(text)
    provider = result.manifest.providers[0]
    assert provider.event(1).opcode_value == 10
    assert provider.event(2).task_value == 7
    assert provider.map("M").entries[0].message == "one"
    assert {w.code for w in result.warnings} == {"provider-placement", "map-placement"}


def test_duplicate_strings_first_wins():
    text = manifest("", '<string id="Provider" value="Second"/>')
    result = parse_manifest(text)
    assert result.manifest.providers[0].message == "Contoso Sample"
    assert [w.code for w in result.warnings] == ["duplicate-string"]


@pytest.mark.parametrize(
    ("body", "element", "needle"),
    [
        ('<events><event value="abc"/></events>', "event", "value='abc'"),
        ('<events><event version="1"/></events>', "event", "'value'"),
        ('<keywords><keyword name="K" mask="0xZZ"/></keywords>', "keyword", "mask"),
        ('<levels><level value="16"/></levels>', "level", "'name'"),
        ('<channels><channel name="C" type="Chatty"/></channels>', "channel", "Chatty"),
        ('<tasks><task name="T" value="1" eventGUID="nope"/></tasks>', "task", "nope"),
        ('<templates><template tid="T"><data name="A"/></template></templates>', "data", "inType"),
    ],
)
def test_unusable_values_raise_with_line_and_element(body, element, needle):
    text = manifest(body)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "bad.man")
    error = caught.value
    assert error.path == "bad.man" and error.element == element
    assert needle in error.message
    assert f"<{element}" in text.splitlines()[error.line - 1]


def test_bad_provider_guid():
    with pytest.raises(ManifestError, match="not a GUID") as caught:
        parse_manifest(manifest("", provider_attrs='name="P" guid="{not-a-guid}"'))
    assert caught.value.element == "provider"


def test_missing_guid_and_name_still_parse():
    provider = parse_manifest(manifest("", provider_attrs='symbol="S"')).manifest.providers[0]
    assert provider.guid is None and provider.name == ""


def test_not_a_manifest():
    with pytest.raises(ManifestError, match="not an instrumentation manifest") as caught:
        parse_manifest("<html><body/></html>", "page.html")
    assert caught.value.line == 1 and caught.value.element == "html"


def test_malformed_xml_names_line_and_open_element():
    text = manifest('<events>\n<event value="1" message="$(string.a"b")"/></events>')
    with pytest.raises(ManifestError, match="malformed XML") as caught:
        parse_manifest(text, "broken.man")
    assert caught.value.line == text.splitlines().index('<event value="1" message="$(string.a"b")"/></events>') + 1
    assert caught.value.element == "events"
    assert str(caught.value).startswith(f"broken.man:{caught.value.line}: <events>: ")


def test_empty_and_wrong_input_types():
    with pytest.raises(ManifestError):
        parse_manifest(b"")
    with pytest.raises(ManifestError):
        parse_manifest("   ")
    with pytest.raises(TypeError):
        parse_manifest(42)  # type: ignore[arg-type]


def test_load_manifest_missing_file(tmp_path):
    from openetw.manifest import load_manifest

    with pytest.raises(ManifestError, match="cannot read") as caught:
        load_manifest(tmp_path / "absent.man")
    assert caught.value.path.endswith("absent.man")
