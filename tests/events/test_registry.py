"""Manifest sources of reports: lazy loading per provider, precedence, installed manifests."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest

from openetw.etl.build import build_event_record
from openetw.events.registry import build_registry

GUID = uuid.UUID("0badf00d-1111-2222-3333-444455556666")
OTHER = uuid.UUID("0badf00d-9999-2222-3333-444455556666")


def manifest(name: str, field: str, guid: uuid.UUID = GUID, *, with_guid: bool = True) -> str:
    guid_attr = f' guid="{{{guid}}}"' if with_guid else ""
    return f"""<?xml version="1.0"?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
 <instrumentation><events>
  <provider name="{name}"{guid_attr} symbol="P" resourceFileName="x" messageFileName="x">
   <templates><template tid="T"><data name="{field}" inType="win:UInt32"/></template></templates>
   <events><event value="1" version="0" template="T" level="win:Informational"/></events>
  </provider>
 </events></instrumentation>
</instrumentationManifest>"""


def event(provider: uuid.UUID = GUID) -> object:
    return build_event_record(provider_id=provider, id=1, user_data=struct.pack("<I", 9))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def field_of(registry, provider: uuid.UUID = GUID) -> str:  # type: ignore[no-untyped-def]
    schema = registry.schema_for(event(provider))
    assert schema is not None
    return schema.properties[0].name


def test_files_are_parsed_only_when_their_provider_is_met(tmp_path: Path) -> None:
    write(tmp_path / "a.man", manifest("Demo-A", "first"))
    write(tmp_path / "b.man", manifest("Demo-B", "other", OTHER))
    registry = build_registry([tmp_path], installed=False)
    assert registry.parsed_files == 0 and registry.errors == []
    assert field_of(registry) == "first"
    assert registry.parsed_files == 1
    assert registry.provider_name(event(OTHER)) == "Demo-B"
    assert registry.parsed_files == 2


def test_files_added_after_a_provider_was_met_are_still_loaded(tmp_path: Path) -> None:
    write(tmp_path / "other.man", manifest("Demo-B", "other", OTHER))
    registry = build_registry([tmp_path / "other.man"], installed=False)
    assert registry.schema_for(event()) is None  # GUID met while no file declares it
    registry.add_files([write(tmp_path / "a.man", manifest("Demo-A", "first"))])
    assert field_of(registry) == "first"


def test_later_sources_win_for_a_provider(tmp_path: Path) -> None:
    early = write(tmp_path / "early.man", manifest("Demo", "early"))
    late = write(tmp_path / "late.man", manifest("Demo", "late"))
    assert field_of(build_registry([early, late], installed=False)) == "late"
    assert field_of(build_registry([late, early], installed=False)) == "early"


def test_a_file_a_scan_cannot_index_is_parsed_at_once(tmp_path: Path) -> None:
    path = write(tmp_path / "named.man", manifest("Named-Only-Provider", "value", with_guid=False))
    registry = build_registry([path], installed=False)
    assert registry.parsed_files == 1
    assert registry.provider_count == 1


def test_utf16_manifests_are_indexed(tmp_path: Path) -> None:
    path = tmp_path / "wide.man"
    path.write_bytes(manifest("Demo", "wide").replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="UTF-16"?>').encode("utf-16"))
    registry = build_registry([path], installed=False)
    assert registry.parsed_files == 0
    assert field_of(registry) == "wide"


def test_problems_are_collected_not_raised(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.man", manifest("Demo", "x").replace("</provider>", ""))
    registry = build_registry([tmp_path / "absent.man", broken], installed=False)
    assert registry.schema_for(event()) is None
    assert len(registry.errors) == 2
    assert "absent.man" in str(registry.errors[0])


def test_installed_manifests_are_used_and_given_ones_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.manifest.store import ManifestRegistry

    store = tmp_path / "data"
    monkeypatch.setenv("OPENETW_DATA_DIR", str(store))
    ManifestRegistry(store).install([write(tmp_path / "installed.man", manifest("Demo", "installed"))])
    assert field_of(build_registry([], installed=True)) == "installed"
    assert build_registry([], installed=False).schema_for(event()) is None
    given = write(tmp_path / "given.man", manifest("Demo", "given"))
    assert field_of(build_registry([given], installed=True)) == "given"


# -- one way to build a registry: MOF and TMF files too -------------------------------------------

COUNTER_CLASS = uuid.UUID("6d1f3a52-0c4e-4d8f-9a7b-2e5c8b1f4a90")
MOF = f"""
[Dynamic, Guid("{{6d1f3a52-0c4e-4d8f-9a7b-0123456789ab}}")]
class DemoCounters : EventTrace {{}};

[Dynamic, Guid("{{{COUNTER_CLASS}}}"), EventVersion(1)]
class Counter_V1 : DemoCounters {{}};

[Dynamic, EventType(7), EventTypeName("Tick")]
class Counter_V1_Tick : Counter_V1
{{
    [WmiDataId(1), read] uint32 Ticks;
}};
"""
WPP_GUID = uuid.UUID("3a8e9c41-5b2d-4f6e-8a1c-7d9b0e2f4c63")
TMF = f"""// PDB: demo.pdb
{WPP_GUID} demo // SRC=demo.c MJ= MN=
#typev demo_c12 10 "%0Ticks %10!u!" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_INIT FUNC=Tick
{{
ticks, ItemULong -- 10
}}
"""


def test_mof_and_tmf_files_join_the_registry_and_their_problems_its_errors(tmp_path: Path) -> None:
    from openetw.etl.build import build_classic_record, build_message_record

    write(tmp_path / "a.man", manifest("Demo-A", "first"))
    mof = write(tmp_path / "counters.mof", MOF)
    tmf = write(tmp_path / "demo.tmf", TMF)
    broken = write(tmp_path / "broken.mof", "class {")
    registry = build_registry([tmp_path / "a.man"], installed=False, mof=[mof, broken], tmf=[tmf, tmp_path / "none.tmf"])
    assert field_of(registry) == "first"
    classic = build_classic_record(event_guid=COUNTER_CLASS, type=7, version=1, user_data=struct.pack("<I", 3))
    assert registry.event_name(classic) == "Counter/Tick"
    message = build_message_record(message_number=10, message_guid=WPP_GUID, user_data=struct.pack("<I", 3))
    schema = registry.schema_for(message)
    assert schema is not None and [p.name for p in schema.properties] == ["ticks"]
    assert sorted(Path(error.path or "").name for error in registry.errors) == ["broken.mof", "none.tmf"]


def test_the_registry_is_built_in_one_place() -> None:
    """Schema registries filled from files, the store or loaded manifests are built by
    ``build_registry`` only (``UserTrace`` and the Event Log's channels included): a registry
    made anywhere else in ``src`` starts with no manifest (the shipped layouts, the kernel
    classes when told) and is given none."""
    import ast

    import openetw

    src = Path(openetw.__file__).parent
    home = "tdh/from_files.py"
    readers = {"LazyManifestRegistry", "schemas_from_mof_file", "read_tmf_path", "add_manifest", "load_manifests"}
    found = []
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src).as_posix()
        if where == home or where.startswith("tdh/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in readers or (name == "SchemaRegistry" and (node.args or any(k.arg in (None, "manifests") for k in node.keywords))):
                found.append(f"{where}:{node.lineno}: {name}")
    assert found == []


def test_the_former_names_are_the_read_models() -> None:
    import openetw.report.sources as former
    from openetw.events import registry

    for name in registry.__all__:
        assert getattr(former, name) is getattr(registry, name)
