"""Several manifests for one provider: later sources win per (id, version), lookups by id take the newest."""

from __future__ import annotations

import uuid

from openetw.guids import provider_guid_from_name
from openetw.manifest import load_manifest, parse_manifest
from openetw.manifest.store import find_merged, merge_manifests
from tests.conftest import corpus_path
from tests.manifest.store.sample_manifests import GUID_A, GUID_B, manifest_xml, provider_xml


def _manifest(path: str, *providers: str):
    return parse_manifest(manifest_xml(*providers), path).manifest


def test_later_source_wins_per_event_key_and_newest_version_wins_by_id():
    older = _manifest("old.man", provider_xml("Contoso", GUID_A, [(1, 0, ["Old"]), (1, 1, ["OldV1", "Extra"]), (7, 0, [])]))
    newer = _manifest("new.man", provider_xml("Contoso", GUID_A, [(1, 0, ["New"]), (2, 0, ["Two"])]))
    merged = merge_manifests([("old.man", older), ("new.man", newer)])

    provider = merged[uuid.UUID(GUID_A)]
    assert list(provider.events) == [(1, 0), (1, 1), (2, 0), (7, 0)]
    assert provider.sources == ("old.man", "new.man")
    assert provider.events[(1, 0)].source == "new.man"
    assert [f.name for f in provider.events[(1, 0)].template.fields] == ["New"]
    # The version-less lookup answers the newest version even though an older file defined it.
    newest = provider.event(1)
    assert newest is not None and newest.event.version == 1 and newest.source == "old.man"
    assert [f.name for f in newest.template.fields] == ["OldV1", "Extra"]
    assert provider.event(1, 0).source == "new.man"
    assert provider.event(3) is None and provider.event(7, 1) is None
    assert [(o.key, o.replaced_source, o.winning_source) for o in provider.overrides] == [((1, 0), "old.man", "new.man")]


def test_order_of_sources_decides():
    first = _manifest("a.man", provider_xml("Contoso", GUID_A, [(1, 0, ["A"])]))
    second = _manifest("b.man", provider_xml("Contoso", GUID_A, [(1, 0, ["B"])]))
    assert merge_manifests([("a.man", first), ("b.man", second)])[uuid.UUID(GUID_A)].event(1).source == "b.man"
    assert merge_manifests([("b.man", second), ("a.man", first)])[uuid.UUID(GUID_A)].event(1).source == "a.man"


def test_each_event_resolves_its_template_in_its_own_file():
    # Both files use template id "t1v0", with different fields: each event keeps its own.
    older = _manifest("old.man", provider_xml("Contoso", GUID_A, [(1, 0, ["OldField"])]))
    newer = _manifest("new.man", provider_xml("Contoso", GUID_A, [(1, 1, ["NewField"])]).replace("t1v1", "t1v0"))
    assert newer.providers[0].events[0].template == "t1v0"
    provider = merge_manifests([("old.man", older), ("new.man", newer)])[uuid.UUID(GUID_A)]
    assert [f.name for f in provider.event(1, 0).template.fields] == ["OldField"]
    assert [f.name for f in provider.event(1, 1).template.fields] == ["NewField"]


def test_definitions_merge_by_name_later_wins_and_name_is_the_last_sources():
    older = _manifest("old.man", provider_xml("Contoso-Old", GUID_A, [(1, 0, [])], keywords={"Net": 0x1, "Disk": 0x2}))
    newer = _manifest("new.man", provider_xml("Contoso", GUID_A, [(2, 0, [])], keywords={"Net": 0x10, "Cpu": 0x4}))
    provider = merge_manifests([("old.man", older), ("new.man", newer)])[uuid.UUID(GUID_A)]
    assert provider.name == "Contoso"
    assert [(k.name, k.mask) for k in provider.keywords] == [("Net", 0x10), ("Disk", 0x2), ("Cpu", 0x4)]


def test_providers_stay_apart_and_keep_first_appearance_order():
    one = _manifest("one.man", provider_xml("B-Provider", GUID_B, [(1, 0, [])]), provider_xml("A-Provider", GUID_A, [(1, 0, [])]))
    merged = merge_manifests([("one.man", one)])
    assert [p.name for p in merged.values()] == ["B-Provider", "A-Provider"]
    assert all(len(p.events) == 1 for p in merged.values())


def test_duplicate_event_inside_one_provider_first_wins():
    provider_text = f"""      <provider name="Contoso" guid="{{{GUID_A}}}" symbol="CONTOSO">
        <templates>
          <template tid="First"><data name="A" inType="win:UInt32"/></template>
          <template tid="Second"><data name="B" inType="win:UInt32"/></template>
        </templates>
        <events>
          <event value="1" symbol="FirstEvent" template="First"/>
          <event value="1" symbol="SecondEvent" template="Second"/>
        </events>
      </provider>
"""
    manifest = parse_manifest(manifest_xml(provider_text), "dup.man").manifest
    provider = merge_manifests([("dup.man", manifest)])[uuid.UUID(GUID_A)]
    assert provider.event(1, 0).event.symbol == "FirstEvent"
    assert [f.name for f in provider.event(1, 0).template.fields] == ["A"]
    assert provider.overrides == ()


def test_provider_without_guid_is_keyed_by_its_name_hash():
    manifest = _manifest("n.man", provider_xml("MyCompany-MyApp", None, [(1, 0, [])]))
    merged = merge_manifests([("n.man", manifest)])
    assert list(merged) == [provider_guid_from_name("MyCompany-MyApp")]


def test_find_merged_by_guid_spellings_and_case_insensitive_name():
    merged = merge_manifests([("a.man", _manifest("a.man", provider_xml("Contoso-Sample", GUID_A, [(1, 0, [])])))])
    for key in (GUID_A, "{" + GUID_A.upper() + "}", uuid.UUID(GUID_A), "contoso-SAMPLE", "  Contoso-Sample "):
        assert [p.name for p in find_merged(merged, key)] == ["Contoso-Sample"], key
    assert find_merged(merged, GUID_B) == [] and find_merged(merged, "nope") == []


def test_find_merged_returns_every_provider_sharing_a_name():
    merged = merge_manifests([
        ("a.man", _manifest("a.man", provider_xml("Twin", GUID_A, [(1, 0, [])]))),
        ("b.man", _manifest("b.man", provider_xml("twin", GUID_B, [(1, 0, [])]))),
    ])
    assert {str(p.guid) for p in find_merged(merged, "TWIN")} == {GUID_A, GUID_B}


def test_corpus_osrusbfx2_twins_later_file_supplies_every_event():
    folder = corpus_path("manifests", "authored-samples")
    dchu = load_manifest(folder / "general_DCHU_osrfx2_DCHU_base_osrfx2_DCHU_base_osrusbfx2.man").manifest
    kmdf = load_manifest(folder / "usb_kmdf_fx2_driver_osrusbfx2.man").manifest
    merged = merge_manifests([("dchu", dchu), ("kmdf", kmdf)])
    assert len(merged) == 1
    provider = next(iter(merged.values()))
    assert provider.name == "OSRUSBFX2"
    assert len(provider.events) == len(kmdf.providers[0].events) == 9
    assert {item.source for item in provider.events.values()} == {"kmdf"}
    assert len(provider.overrides) == 9
    assert provider.provider.resource_file.endswith("osrusbfx2.SYS")


def test_corpus_versioned_event_newest_version():
    manifest = load_manifest(corpus_path("manifests", "perfview", "VersionedEvent.manifest.xml")).manifest
    provider = next(iter(merge_manifests([("v", manifest)]).values()))
    newest = provider.event(1)
    assert newest.event.version == 1
    assert [f.name for f in newest.template.fields] == ["ProcessId", "Name", "CommandLine"]
