"""The on-disk manifest store: install, replace, look up, uninstall, load; refusals and damage."""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid
from pathlib import Path

import pytest

from openetw.errors import AccessDenied, InvalidArgument, ManifestError
from openetw.manifest.store import DATA_DIR_ENV, ManifestRegistry, ManifestRejected, ManifestStore, default_data_dirs
from tests.conftest import corpus_path
from tests.manifest.store.sample_manifests import (
    BILLION_LAUGHS,
    GUID_A,
    GUID_B,
    UNDEFINED_TEMPLATE,
    manifest_xml,
    provider_xml,
    write_manifest,
)


@pytest.fixture
def registry(tmp_path: Path) -> ManifestRegistry:
    # euid 0: the system store may be changed, whoever runs the tests.
    return ManifestRegistry(tmp_path / "data", euid=0)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_manifest(tmp_path / "contoso.man", "Contoso-Sample", GUID_A, [(1, 0, ["A", "B"]), (2, 0, [])])


def _stored_files(store: ManifestStore) -> list[str]:
    return sorted(path.name for path in store.files_directory.iterdir())


def test_install_list_find_load_uninstall_round_trip(registry: ManifestRegistry, source: Path):
    installed = registry.install([source])
    assert [(p.name, p.guid, p.events, p.store) for p in installed] == [("Contoso-Sample", uuid.UUID(GUID_A), 2, "user")]
    entry = installed[0]
    assert entry.source == str(source.resolve())
    assert entry.file.parent == registry.user.files_directory
    assert entry.installed.tzinfo is not None

    assert registry.list() == installed
    assert registry.find(GUID_A) == entry
    manifests = registry.load_all()
    assert [m.path for m in manifests] == [str(entry.file)]
    assert [e.value for e in manifests[0].providers[0].events] == [1, 2]

    assert registry.uninstall("Contoso-Sample") == [entry]
    assert registry.list() == [] and registry.load_all() == []
    assert _stored_files(registry.user) == []


def test_installed_copy_is_a_regular_file_independent_of_the_source(registry: ManifestRegistry, tmp_path: Path, source: Path):
    link = tmp_path / "link.man"
    link.symlink_to(source)
    entry = registry.install([link])[0]
    assert entry.file.is_file() and not entry.file.is_symlink()
    assert entry.file.read_bytes() == source.read_bytes()
    write_manifest(source, "Contoso-Sample", GUID_A, [(9, 0, [])])
    assert [e.value for e in registry.load_all()[0].providers[0].events] == [1, 2]


def test_index_is_json_naming_guid_name_file_time_and_source(registry: ManifestRegistry, source: Path):
    entry = registry.install([source])[0]
    document = json.loads(registry.user.index_path.read_text())
    assert document["format"] == 1
    assert document["providers"] == [
        {
            "guid": GUID_A,
            "name": "Contoso-Sample",
            "file": entry.file.name,
            "source": str(source.resolve()),
            "installed": entry.installed.isoformat(),
            "events": 2,
        }
    ]
    leftovers = [p.name for p in registry.user.directory.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_reinstalling_a_provider_replaces_it_and_drops_the_old_copy(registry: ManifestRegistry, tmp_path: Path, source: Path):
    registry.install([source])
    newer = write_manifest(tmp_path / "contoso-v2.man", "Contoso-Sample", GUID_A, [(1, 0, ["A"]), (2, 0, []), (3, 0, [])])
    entry = registry.install([newer])[0]
    assert [(p.guid, p.events, p.source) for p in registry.list()] == [(uuid.UUID(GUID_A), 3, str(newer.resolve()))]
    assert _stored_files(registry.user) == [entry.file.name]
    assert len(registry.load_all()[0].providers[0].events) == 3


def test_installing_the_same_file_twice_keeps_one_entry_and_one_copy(registry: ManifestRegistry, source: Path):
    registry.install([source])
    registry.install([source])
    assert len(registry.list()) == 1
    assert len(_stored_files(registry.user)) == 1


def test_reinstalling_rewrites_a_tampered_copy(registry: ManifestRegistry, source: Path):
    entry = registry.install([source])[0]
    entry.file.write_text("<tampered/>")
    registry.install([source])
    assert entry.file.read_bytes() == source.read_bytes()


def test_later_file_in_one_install_wins(registry: ManifestRegistry, tmp_path: Path):
    first = write_manifest(tmp_path / "first.man", "Contoso", GUID_A, [(1, 0, [])])
    second = write_manifest(tmp_path / "second.man", "Contoso", GUID_A, [(1, 0, []), (2, 0, [])])
    installed = registry.install([first, second])
    assert [p.source for p in installed] == [str(second.resolve())]
    assert _stored_files(registry.user) == [installed[0].file.name]


def test_a_replaced_provider_is_filtered_out_of_its_old_shared_file(registry: ManifestRegistry, tmp_path: Path):
    both = tmp_path / "both.man"
    both.write_text(manifest_xml(provider_xml("Alpha", GUID_A, [(1, 0, [])]), provider_xml("Beta", GUID_B, [(1, 0, [])])))
    registry.install([both])
    registry.install([write_manifest(tmp_path / "alpha2.man", "Alpha", GUID_A, [(5, 0, [])])])
    loaded = {p.name: (m.path, [e.value for e in p.events]) for m in registry.load_all() for p in m.providers}
    assert loaded["Alpha"][1] == [5] and loaded["Beta"][1] == [1]
    assert loaded["Beta"][0].endswith(".man") and "both" in loaded["Beta"][0]
    assert len(_stored_files(registry.user)) == 2


def test_lookup_by_guid_spellings_and_case_insensitive_name(registry: ManifestRegistry, source: Path):
    entry = registry.install([source])[0]
    for key in (GUID_A, GUID_A.upper(), "{" + GUID_A + "}", uuid.UUID(GUID_A), "contoso-sample", "CONTOSO-SAMPLE"):
        assert registry.find(key) == entry, key
    assert registry.find(GUID_B) is None and registry.find("other") is None


def test_load_all_can_be_limited_to_some_providers(registry: ManifestRegistry, tmp_path: Path, source: Path):
    registry.install([source, write_manifest(tmp_path / "b.man", "Beta", GUID_B, [(1, 0, [])])])
    assert [p.name for p in registry.matching("beta")] == ["Beta"]
    limited = registry.load_all(guids={uuid.UUID(GUID_B)})
    assert [[p.name for p in m.providers] for m in limited] == [["Beta"]]
    assert [m.providers[0].name for _, m in registry.sources(guids=set())] == []
    assert len(registry.load_all()) == 2


def test_user_store_is_looked_up_before_the_system_store(registry: ManifestRegistry, tmp_path: Path, source: Path):
    system_copy = write_manifest(tmp_path / "system.man", "Contoso-Sample", GUID_A, [(1, 0, [])])
    registry.install([system_copy], system=True)
    assert registry.find(GUID_A).store == "system"
    registry.install([source])
    assert registry.find(GUID_A).store == "user"
    assert [p.store for p in registry.list()] == ["user", "system"]
    assert [len(m.providers[0].events) for m in registry.load_all()] == [2, 1]
    # sources() is the merge order: lowest precedence (system) first.
    expected = [str(registry.system.entries()[0].file), str(registry.user.entries()[0].file)]
    assert [path for path, _ in registry.sources()] == expected


def test_system_store_refuses_a_caller_who_is_not_root(tmp_path: Path, source: Path):
    registry = ManifestRegistry(tmp_path / "data", euid=1000)
    with pytest.raises(AccessDenied, match="only be changed by root"):
        registry.install([source], system=True)
    with pytest.raises(AccessDenied):
        registry.uninstall(GUID_A, system=True)
    assert not registry.system.directory.exists()
    assert registry.install([source])[0].store == "user"


def test_system_store_files_are_readable_by_everyone(registry: ManifestRegistry, source: Path):
    entry = registry.install([source], system=True)[0]
    assert entry.file.stat().st_mode & 0o777 == 0o644
    assert registry.system.index_path.stat().st_mode & 0o777 == 0o644
    assert registry.system.directory.stat().st_mode & 0o777 == 0o755


def test_validation_errors_refuse_the_whole_install(registry: ManifestRegistry, tmp_path: Path, source: Path):
    broken = tmp_path / "broken.man"
    broken.write_text(UNDEFINED_TEMPLATE)
    with pytest.raises(ManifestRejected) as caught:
        registry.install([source, broken])
    error = caught.value
    assert isinstance(error, ManifestError) and error.exit_code == 2
    assert error.path == str(broken) and error.line == 6 and error.element == "event"
    assert [d.code for d in error.diagnostics if d.is_error] == ["undefined-template"]
    assert "undefined-template" in str(error) and "not installed" in str(error)
    assert registry.list() == []
    assert not registry.user.index_path.exists()


def test_malformed_xml_is_refused_with_its_line(registry: ManifestRegistry, tmp_path: Path):
    bad = tmp_path / "bad.man"
    bad.write_text('<?xml version="1.0"?>\n<instrumentationManifest>\n  <oops attr=></instrumentationManifest>\n')
    with pytest.raises(ManifestError) as caught:
        registry.install([bad])
    assert caught.value.line == 3 and caught.value.path == str(bad)


def test_warnings_are_reported_but_do_not_refuse(registry: ManifestRegistry):
    path = corpus_path("manifests", "authored-samples", "usb_kmdf_fx2_driver_osrusbfx2.man")
    entry = registry.install([path])[0]
    assert entry.name == "OSRUSBFX2"
    assert {w.code for w in entry.warnings} == {"nonstandard-out-type"}
    assert all(not w.is_error for w in entry.warnings)


def test_directory_installs_every_manifest_in_it(registry: ManifestRegistry):
    installed = registry.install([corpus_path("manifests", "authored-samples")])
    names = sorted(p.name for p in registry.list())
    assert names == ["OSRUSBFX2", "PowerShellCore", "Sample Driver", "UfxClientSample"]
    # Two files define OSRUSBFX2: the later one (by name) is the one installed.
    osr = registry.find("osrusbfx2")
    assert osr.source.endswith("usb_kmdf_fx2_driver_osrusbfx2.man")
    assert len(installed) == 4


@pytest.mark.parametrize(
    "content, message",
    [
        (BILLION_LAUGHS, "document type declarations are not allowed"),
        ("<notAManifest/>", "not an instrumentation manifest"),
        (manifest_xml(""), "defines no provider"),
        ("\x00\x01garbage", "malformed XML"),
    ],
)
def test_hostile_and_empty_files_are_refused(registry: ManifestRegistry, tmp_path: Path, content: str, message: str):
    path = tmp_path / "hostile.man"
    path.write_text(content)
    with pytest.raises(ManifestError, match=message):
        registry.install([path])
    assert registry.list() == []


def test_devices_fifos_and_missing_paths_are_refused_without_reading(registry: ManifestRegistry, tmp_path: Path):
    fifo = tmp_path / "pipe.man"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo, tmp_path / "missing.man"):
        with pytest.raises(ManifestError):
            registry.install([path])
    assert registry.list() == []


def test_empty_directory_is_refused(registry: ManifestRegistry, tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match=r"no \*.xml or \*.man"):
        registry.install([tmp_path / "empty"])


def test_uninstall_by_guid_by_file_and_by_vanished_source(registry: ManifestRegistry, tmp_path: Path):
    both = tmp_path / "both.man"
    both.write_text(manifest_xml(provider_xml("Alpha", GUID_A, [(1, 0, [])]), provider_xml("Beta", GUID_B, [(1, 0, [])])))
    registry.install([both])
    assert [p.name for p in registry.uninstall(str(both))] == ["Alpha", "Beta"]

    registry.install([both])
    assert [p.name for p in registry.uninstall("{" + GUID_B.upper() + "}")] == ["Beta"]
    stored = registry.list()[0].file
    assert [p.name for p in registry.uninstall(str(stored))] == ["Alpha"]

    registry.install([both])
    both.unlink()
    assert [p.name for p in registry.uninstall(str(both))] == ["Alpha", "Beta"]
    assert _stored_files(registry.user) == []


def test_uninstall_by_a_source_path_that_no_longer_parses(registry: ManifestRegistry, source: Path):
    registry.install([source])
    source.write_text("<broken")
    assert [p.name for p in registry.uninstall(str(source))] == ["Contoso-Sample"]
    with pytest.raises(ManifestError, match="malformed XML"):
        registry.uninstall(str(source))


def test_uninstall_of_something_not_installed_names_the_other_store(registry: ManifestRegistry, source: Path):
    with pytest.raises(InvalidArgument, match=r"not installed in the user store$"):
        registry.uninstall("Contoso-Sample")
    registry.install([source], system=True)
    with pytest.raises(InvalidArgument, match="it is in the system store \\(use --system\\)"):
        registry.uninstall("Contoso-Sample")
    assert registry.uninstall("Contoso-Sample", system=True)[0].store == "system"


def test_a_name_shared_by_two_guids_is_ambiguous(registry: ManifestRegistry, tmp_path: Path):
    registry.install([write_manifest(tmp_path / "a.man", "Twin", GUID_A, [(1, 0, [])])])
    registry.install([write_manifest(tmp_path / "b.man", "twin", GUID_B, [(1, 0, [])])])
    with pytest.raises(InvalidArgument, match="several GUIDs"):
        registry.find("TWIN")
    with pytest.raises(InvalidArgument, match="several GUIDs"):
        registry.uninstall("Twin")
    assert len(registry.list()) == 2
    assert registry.find(GUID_B).name == "twin"


@pytest.mark.parametrize(
    "index, message",
    [
        ("{not json", "store index is damaged"),
        ('{"format": 99, "providers": []}', "unknown index format 99"),
        ('{"format": 1, "providers": [{"guid": "x"}]}', "store index is damaged"),
        (
            '{"format": 1, "providers": [{"guid": "' + GUID_A + '", "name": "E", "file": "../../etc/passwd", '
            '"source": "/s", "installed": "2024-01-01T00:00:00+00:00", "events": 1}]}',
            "not a plain file name",
        ),
    ],
)
def test_a_damaged_or_hostile_index_is_reported(registry: ManifestRegistry, index: str, message: str):
    registry.user.directory.mkdir(parents=True)
    registry.user.index_path.write_text(index)
    with pytest.raises(ManifestError, match=message) as caught:
        registry.list()
    assert caught.value.path == str(registry.user.index_path)


def test_a_damaged_stored_copy_raises_or_is_collected(registry: ManifestRegistry, tmp_path: Path, source: Path):
    registry.install([source])
    other = registry.install([write_manifest(tmp_path / "b.man", "Other", GUID_B, [(1, 0, [])])])[0]
    other.file.write_text("<broken")
    with pytest.raises(ManifestError, match="malformed XML"):
        ManifestRegistry(tmp_path / "data").load_all()
    errors: list[ManifestError] = []
    manifests = ManifestRegistry(tmp_path / "data").load_all(errors)
    assert [m.providers[0].name for m in manifests] == ["Contoso-Sample"]
    assert [e.path for e in errors] == [str(other.file)]


def test_a_missing_stored_copy_is_reported(registry: ManifestRegistry, source: Path):
    entry = registry.install([source])[0]
    entry.file.unlink()
    with pytest.raises(ManifestError, match="missing from the store"):
        ManifestRegistry(registry.user.directory.parent).load_all()
    errors: list[ManifestError] = []
    assert ManifestRegistry(registry.user.directory.parent).load_all(errors) == []
    assert [e.path for e in errors] == [str(entry.file)]


def _install_many(data_dir: str, folder: str, worker: int) -> None:
    registry = ManifestRegistry(data_dir)
    for item in range(4):
        guid = str(uuid.UUID(int=worker * 100 + item + 1))
        path = write_manifest(Path(folder) / f"w{worker}-{item}.man", f"P{worker}-{item}", guid, [(1, 0, [])])
        registry.install([path])


def test_concurrent_installs_from_several_processes_lose_nothing(tmp_path: Path):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_install_many, args=(str(tmp_path / "data"), str(tmp_path), n)) for n in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    entries = ManifestRegistry(tmp_path / "data").list()
    assert sorted(p.name for p in entries) == sorted(f"P{w}-{i}" for w in range(4) for i in range(4))
    assert len(list((tmp_path / "data" / "manifests" / "files").iterdir())) == 16


def test_default_locations_follow_the_environment(tmp_path: Path):
    home = Path.home()
    assert default_data_dirs({}) == (home / ".local" / "share" / "openetw", Path("/var/lib/openetw"))
    assert default_data_dirs({"XDG_DATA_HOME": "/xdg"}) == (Path("/xdg/openetw"), Path("/var/lib/openetw"))
    assert default_data_dirs({"XDG_DATA_HOME": "relative"})[0] == home / ".local" / "share" / "openetw"
    assert default_data_dirs({DATA_DIR_ENV: str(tmp_path), "XDG_DATA_HOME": "/xdg"}) == (tmp_path, tmp_path / "system")
    registry = ManifestRegistry(tmp_path)
    assert registry.user.directory == tmp_path / "manifests"
    assert registry.system.directory == tmp_path / "system" / "manifests"
