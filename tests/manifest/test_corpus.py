"""The real manifests in the shared corpus: every well-formed one loads into a usable model."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from openetw.errors import ManifestError
from openetw.manifest import (
    ChannelType,
    InType,
    OutType,
    ParseResult,
    format_message,
    inserts_used,
    load_manifest,
    load_manifests,
    validate,
)
from tests.conftest import corpus_path

MALFORMED = {
    "Microsoft-Windows-AppXDeployment-Server.xml": 286,
    "Microsoft-Windows-GroupPolicy.xml": 29,
    "Microsoft-Windows-NetworkProvider.xml": 32,
    "Microsoft-Windows-Ntfs.xml": 43,
}


@pytest.fixture(scope="module")
def build_corpus() -> dict[str, ParseResult | ManifestError]:
    """Every Win10-17134 file, parsed once: name → result or the error it raised."""
    folder = corpus_path("manifests", "Win10-17134")
    outcomes: dict[str, ParseResult | ManifestError] = {}
    for path in sorted(folder.glob("*.xml")):
        try:
            outcomes[path.name] = load_manifest(path)
        except ManifestError as error:
            outcomes[path.name] = error
    return outcomes


def parsed(outcomes) -> list[ParseResult]:
    return [outcome for outcome in outcomes.values() if isinstance(outcome, ParseResult)]


def test_every_well_formed_build_manifest_parses(build_corpus):
    assert len(build_corpus) == 868
    failures = {name: str(o) for name, o in build_corpus.items() if isinstance(o, ManifestError)}
    assert sorted(failures) == sorted(MALFORMED)
    for result in parsed(build_corpus):
        assert result.manifest.providers, result.manifest.path
        assert all(provider.guid is not None and provider.name for provider in result.manifest.providers)


@pytest.mark.parametrize(("name", "line"), sorted(MALFORMED.items()))
def test_malformed_build_manifests_name_their_line(name, line):
    path = corpus_path("manifests", "Win10-17134", name)
    with pytest.raises(ManifestError, match="malformed XML") as caught:
        load_manifest(path)
    assert caught.value.line == line
    assert caught.value.element == "valueMap"
    assert caught.value.path == str(path)


def test_counts_match_the_corpus_description(build_corpus):
    counts: Counter[str] = Counter()
    for result in parsed(build_corpus):
        counts["providers"] += len(result.manifest.providers)
        counts["strings"] += sum(len(table.strings) for table in result.manifest.string_tables)
        counts["duplicate strings"] += sum(1 for w in result.warnings if w.code == "duplicate-string")
        for provider in result.manifest.providers:
            counts["events"] += len(provider.events)
            counts["events with template"] += sum(1 for e in provider.events if e.template is not None)
            counts["events with version > 0"] += sum(1 for e in provider.events if e.version > 0)
            counts["templates"] += len(provider.templates)
            counts["keywords"] += len(provider.keywords)
            counts["tasks"] += len(provider.tasks)
            counts["task opcodes"] += sum(len(task.opcodes) for task in provider.tasks)
            counts["maps"] += len(provider.maps)
            counts["map entries"] += sum(len(item.entries) for item in provider.maps)
            for template in provider.templates:
                for field in template.fields:
                    if field.is_struct:
                        counts["structs"] += 1
                        counts["data"] += len(field.members)
                    else:
                        counts["data"] += 1
    assert counts == {
        "providers": 865,
        "events": 48_363,
        "events with template": 34_582,
        "events with version > 0": 4_793,
        "templates": 14_298,
        "data": 60_073,
        "structs": 5,
        "keywords": 2_517,
        "tasks": 15_653,
        "task opcodes": 3_615,
        "maps": 901 + 133,
        "map entries": 8_609,
        # 30,388 <string> elements; 76 repeat an id already in the same table.
        "strings": 30_388 - 76,
        "duplicate strings": 76,
    }


def test_known_defects_are_warnings_not_errors(build_corpus):
    codes: Counter[str] = Counter()
    for result in parsed(build_corpus):
        codes.update(w.code for w in result.warnings)
        diagnostics = validate(result.manifest)
        assert not [d for d in diagnostics if d.is_error], result.manifest.path
        codes.update(d.code for d in diagnostics)
    assert codes["nonstandard-level"] == 4_680  # win:Always
    assert codes["size-ref-not-earlier"] == 14
    assert codes["duplicate-event"] == 53
    assert codes["binary-without-length"] == 186
    assert codes["event-value-zero"] == 44
    assert codes["field-name"] == 23
    assert codes["duplicate-provider"] == 1
    assert codes["nonstandard-in-type"] + codes["opaque-type"] > 0


def test_kernel_general_holds_two_providers_with_one_guid(build_corpus):
    manifest = build_corpus["Microsoft-Windows-Kernel-General.xml"].manifest
    regenerated, original = manifest.providers
    assert regenerated.guid == original.guid
    assert original.channels[0].imported and original.channels[0].value == 8
    event = original.event(1, 1)
    assert event.channel_value == 8 and event.keyword_mask == 0x10
    access = original.template("tid_AccessCheckLog")
    structs = [f for f in access.fields if f.is_struct]
    assert [s.name for s in structs] == ["TokenGroups", "TokenPackage", "TokenCapabilities", "DaclAce", "SaclAce"]
    assert structs[0].count == "TokenGroupsCount"
    assert [m.in_type for m in structs[0].members] == [InType.HEXINT32, InType.SID]
    assert original.template("tid_SystemStop").fields[0].out_type is OutType.DATETIME
    assert regenerated.map("Ex:SystemTimeChange.ReasonMap").entries[1].message.startswith("An application")


def test_regenerated_names_resolve(build_corpus):
    provider = build_corpus["Microsoft-Windows-PowerShell.xml"].manifest.providers[0]
    event = provider.event(7941, 1)
    assert event.task == "task_0" and event.task_value == 0
    assert provider.opcode_for(event).name == "Tobeusedwhenoperationisjustexecutingamethod"
    tcpip = build_corpus["Microsoft-Windows-TCPIP.xml"].manifest.providers[0]
    assert max(task.value for task in tcpip.tasks) > 1000


AUTHORED = [
    "PowerShell.Core.Instrumentation.man",
    "general_DCHU_osrfx2_DCHU_base_osrfx2_DCHU_base_osrusbfx2.man",
    "general_tracing_evntdrv_Eventdrv_evntdrv.xml",
    "usb_kmdf_fx2_driver_osrusbfx2.man",
    "usb_ufxclientsample_UfxClientSample.man",
]


@pytest.mark.parametrize("name", AUTHORED)
def test_authored_samples_validate_and_render_messages(name):
    result = load_manifest(corpus_path("manifests", "authored-samples", name))
    assert not [d for d in validate(result.manifest) if d.is_error]
    assert all(w.code == "nonstandard-out-type" for w in result.warnings)
    for provider in result.manifest.providers:
        for event in provider.events:
            assert event.message is not None, (event.value, event.message_ref)
            template = provider.template_for(event)
            names = [f"<{field.name}>" for field in template.fields] if template else []
            text = format_message(event.message, names)
            assert not [n for n in inserts_used(text) if n <= len(names)]
            for number in inserts_used(event.message):
                assert names[number - 1] in text


def test_authored_sample_totals():
    results = [load_manifest(corpus_path("manifests", "authored-samples", name)) for name in AUTHORED]
    providers = [p for r in results for p in r.manifest.providers]
    events = [e for p in providers for e in p.events]
    channels = Counter(c.type for p in providers for c in p.channels if not c.imported)
    assert len(providers) == 5  # the sixth <provider> in the set is a perf-counter provider
    assert len(events) == 217 and sum(1 for e in events if e.channel) == 209
    assert sum(len(p.templates) for p in providers) == 122
    assert channels == {ChannelType.OPERATIONAL: 3, ChannelType.ANALYTIC: 3, ChannelType.ADMIN: 1, ChannelType.DEBUG: 1}
    strings = [s for r in results for t in r.manifest.string_tables for s in t.strings.values()]
    assert len(strings) == 331
    assert sum(1 for s in strings if inserts_used(s)) == 188


def test_powershell_assembly_wrapper():
    result = load_manifest(corpus_path("manifests", "authored-samples", "PowerShell.Core.Instrumentation.man"))
    (provider,) = result.manifest.providers
    assert provider.name == "PowerShellCore"
    assert provider.level("Debug").value == 20
    assert {c.chid for c in provider.channels} == {"C_OPERATIONAL", "C_ANALYTIC", "C_DEBUG", "C_ADMIN"}
    event = provider.event(0xD001)
    assert event.version == 1 and event.channel_value == provider.channel("C_OPERATIONAL").value
    assert format_message(event.message, ["Nightly", "noon"]) == "Scheduled Job Nightly started at noon \n"


def test_driver_samples_with_bom():
    path = corpus_path("manifests", "authored-samples", "usb_kmdf_fx2_driver_osrusbfx2.man")
    assert Path(path).read_bytes().startswith(b"\xef\xbb\xbf")
    provider = load_manifest(path).manifest.providers[0]
    assert provider.template("tid_DeviceStatus").field("NTStatus").out_type is OutType.HEXINT32


@pytest.mark.parametrize("folder", ["perfview", "dotnet-runtime"])
def test_clr_and_perfview_manifests(folder):
    manifests, errors = load_manifests([corpus_path("manifests", folder)])
    assert errors == []
    for manifest in manifests:
        assert not [d for d in validate(manifest) if d.is_error], manifest.path
    clr = next(m for m in manifests if m.path.endswith("ClrEtwAll.man"))
    names = {p.name for p in clr.providers}
    assert "Microsoft-Windows-DotNETRuntime" in names and "Microsoft-Windows-DotNETRuntimeRundown" in names
    total = sum(len(p.events) for p in clr.providers)
    assert total == {"perfview": 384, "dotnet-runtime": 430}[folder]
    runtime = clr.provider("Microsoft-Windows-DotNETRuntime")
    assert any(f.is_struct for t in runtime.templates for f in t.fields)
