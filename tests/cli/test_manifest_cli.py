"""``openetw manifest``: install/list/show/uninstall round trips, conflicts, validate, refusals."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.manifest import load_manifest
from tests.conftest import corpus_path
from tests.manifest.store.sample_manifests import BILLION_LAUGHS, GUID_A, GUID_B, UNDEFINED_TEMPLATE, write_manifest

EVENT_KEYS = {"id", "version", "symbol", "name", "level", "opcode", "task", "keywords", "channel", "message", "fields", "source"}
MALFORMED = (
    "Microsoft-Windows-AppXDeployment-Server.xml",
    "Microsoft-Windows-GroupPolicy.xml",
    "Microsoft-Windows-NetworkProvider.xml",
    "Microsoft-Windows-Ntfs.xml",
)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "data"
    monkeypatch.setenv("OPENETW_DATA_DIR", str(directory))
    # A manifest with an Admin channel would start the machine's service: a private one, never started.
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    return directory


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_install_list_show_uninstall_round_trip(capsys, data_dir: Path, tmp_path: Path):
    source = write_manifest(tmp_path / "contoso.man", "Contoso-Sample", GUID_A, [(1, 0, ["A", "B"]), (2, 0, [])])
    code, out, err = run(capsys, "manifest", "install", str(source))
    assert code == 0, err
    assert out.startswith(f"installed Contoso-Sample {{{GUID_A}}}: 2 events from {source.resolve()} into the user store")
    assert str(data_dir / "manifests" / "files") in out

    code, out, _ = run(capsys, "manifest", "list", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1
    assert {k: rows[0][k] for k in ("provider", "guid", "events", "store", "source")} == {
        "provider": "Contoso-Sample", "guid": GUID_A, "events": 2, "store": "user", "source": str(source.resolve()),
    }
    code, out, _ = run(capsys, "manifest", "list")
    assert code == 0 and out.splitlines()[0].split() == ["PROVIDER", "GUID", "EVENTS", "STORE", "SOURCE"]
    assert out.splitlines()[1].split()[:4] == ["Contoso-Sample", f"{{{GUID_A}}}", "2", "user"]

    for key in ("contoso-sample", GUID_A.upper(), "{" + GUID_A + "}"):
        code, out, _ = run(capsys, "manifest", "show", "--json", key)
        view = json.loads(out)
        assert code == 0 and view["provider"] == "Contoso-Sample" and view["guid"] == GUID_A
        assert [(e["id"], [f["name"] for f in e["fields"]]) for e in view["events"]] == [(1, ["A", "B"]), (2, [])]
        assert view["sources"] == [{"path": rows[0]["file"], "store": "user"}]

    code, out, _ = run(capsys, "manifest", "uninstall", "CONTOSO-SAMPLE")
    assert code == 0 and out == f"uninstalled Contoso-Sample {{{GUID_A}}} from the user store\n"
    code, out, err = run(capsys, "manifest", "list")
    assert code == 0 and out == "" and "no manifests installed" in err
    code, _, err = run(capsys, "manifest", "uninstall", "Contoso-Sample")
    assert code == 2 and "not installed in the user store" in err


def test_reinstall_replaces_and_uninstall_by_file(capsys, data_dir: Path, tmp_path: Path):
    first = write_manifest(tmp_path / "v1.man", "Contoso", GUID_A, [(1, 0, [])])
    second = write_manifest(tmp_path / "v2.man", "Contoso", GUID_A, [(1, 0, []), (2, 0, []), (3, 0, [])])
    assert run(capsys, "manifest", "install", str(first))[0] == 0
    assert run(capsys, "manifest", "install", str(second))[0] == 0
    rows = json.loads(run(capsys, "manifest", "list", "--json")[1])
    assert [(r["events"], r["source"]) for r in rows] == [(3, str(second.resolve()))]
    code, out, _ = run(capsys, "manifest", "uninstall", str(second))
    assert code == 0 and "uninstalled Contoso" in out
    assert json.loads(run(capsys, "manifest", "list", "--json")[1]) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: the system store is writable")
def test_system_store_refused_when_not_root(capsys, data_dir: Path, tmp_path: Path):
    source = write_manifest(tmp_path / "contoso.man", "Contoso", GUID_A, [(1, 0, [])])
    code, out, err = run(capsys, "manifest", "install", "--system", str(source))
    assert code == 1 and out == ""
    assert "can only be changed by root" in err and "--system" in err
    assert not (data_dir / "system").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write the system store")
def test_system_store_with_data_dir_writes_there(capsys, data_dir: Path, tmp_path: Path):
    source = write_manifest(tmp_path / "contoso.man", "Contoso", GUID_A, [(1, 0, [])])
    code, out, err = run(capsys, "manifest", "install", "--system", str(source))
    assert code == 0, err
    assert "into the system store" in out and str(data_dir / "system" / "manifests" / "files") in out
    assert (data_dir / "system" / "manifests" / "index.json").is_file()
    assert not (data_dir / "manifests").exists()
    rows = json.loads(run(capsys, "manifest", "list", "--json")[1])
    assert [(r["provider"], r["store"]) for r in rows] == [("Contoso", "system")]
    code, _, err = run(capsys, "manifest", "uninstall", "Contoso")
    assert code == 2 and "(use --system)" in err
    assert run(capsys, "manifest", "uninstall", "--system", "Contoso")[0] == 0


def test_conflicting_manifests_later_file_and_newest_version_win(capsys, data_dir: Path, tmp_path: Path):
    older = write_manifest(tmp_path / "older.man", "Contoso", GUID_A, [(1, 0, ["Old"]), (1, 1, ["OldV1"]), (5, 0, [])])
    newer = write_manifest(tmp_path / "newer.man", "Contoso", GUID_A, [(1, 0, ["New"]), (2, 0, ["Two"])])
    code, out, err = run(capsys, "manifest", "show", "Contoso", "--json", "--manifest", str(older), "--manifest", str(newer))
    assert code == 0, err
    view = json.loads(out)
    events = {(e["id"], e["version"]): e for e in view["events"]}
    assert list(events) == [(1, 0), (1, 1), (2, 0), (5, 0)]
    assert events[(1, 0)]["source"] == str(newer) and [f["name"] for f in events[(1, 0)]["fields"]] == ["New"]
    assert events[(1, 1)]["source"] == str(older) and [f["name"] for f in events[(1, 1)]["fields"]] == ["OldV1"]
    assert events[(5, 0)]["source"] == str(older)
    assert view["overridden"] == [{"id": 1, "version": 0, "source": str(older), "by": str(newer)}]
    assert [s["path"] for s in view["sources"]] == [str(older), str(newer)]

    # Given files win over the installed copy; the text output names each event's source.
    assert run(capsys, "manifest", "install", str(newer))[0] == 0
    code, out, _ = run(capsys, "manifest", "show", "Contoso", "--manifest", str(older))
    assert code == 0
    block = out[out.index("  1 v0  E1v0"):]
    assert block.split("\n")[1:3] == ["      Old: win:UInt32 -> xs:unsignedInt", f"      source: {older}"]
    assert "Overridden definitions" in out


def test_show_finds_a_provider_by_its_installed_name_after_a_given_file_renames_it(capsys, data_dir: Path, tmp_path: Path):
    assert run(capsys, "manifest", "install", str(write_manifest(tmp_path / "old.man", "Old-Name", GUID_A, [(1, 0, [])])))[0] == 0
    renamed = write_manifest(tmp_path / "new.man", "New-Name", GUID_A, [(2, 0, [])])
    for key in ("old-name", "new-name"):
        code, out, err = run(capsys, "manifest", "show", "--json", key, "--manifest", str(renamed))
        view = json.loads(out)
        assert code == 0, err
        assert view["provider"] == "New-Name" and [e["id"] for e in view["events"]] == [1, 2]
        assert [s["store"] for s in view["sources"]] == ["user", "given"]


def test_show_reads_only_the_installed_files_of_that_provider(capsys, data_dir: Path, tmp_path: Path):
    run(capsys, "manifest", "install", str(write_manifest(tmp_path / "a.man", "Alpha", GUID_A, [(1, 0, [])])))
    run(capsys, "manifest", "install", str(write_manifest(tmp_path / "b.man", "Beta", GUID_B, [(1, 0, [])])))
    beta = next(r for r in json.loads(run(capsys, "manifest", "list", "--json")[1]) if r["provider"] == "Beta")
    Path(beta["file"]).write_text("<damaged")
    code, _, err = run(capsys, "manifest", "show", "Alpha")
    assert code == 0 and err == ""
    code, _, err = run(capsys, "manifest", "show", "Beta")
    assert code == 2 and "warning: skipped installed" in err and "no provider 'Beta'" in err


def test_show_lists_every_event_of_an_authored_sample_with_its_fields(capsys, data_dir: Path):
    path = corpus_path("manifests", "authored-samples", "PowerShell.Core.Instrumentation.man")
    provider = load_manifest(path).manifest.providers[0]
    code, out, err = run(capsys, "manifest", "show", "--json", "--manifest", str(path), "PowerShellCore")
    assert code == 0, err
    view = json.loads(out)
    assert view["guid"] == str(provider.guid)
    assert len(view["events"]) == len({e.key for e in provider.events}) == 191
    for shown in view["events"]:
        event = provider.event(shown["id"], shown["version"])
        template = provider.template_for(event)
        assert len(shown["fields"]) == (len(template.fields) if template else 0), shown["id"]
        assert shown["source"] == str(path)
        assert set(shown) >= EVENT_KEYS
        for item in shown["fields"]:
            assert set(item) >= {"name", "in_type", "out_type", "count", "length", "map"}
    assert len(view["channels"]) == len(provider.channels)
    assert len(view["tasks"]) == len(provider.tasks)
    assert len(view["keywords"]) == len(provider.keywords)
    assert all(e["message"] for e in view["events"])


def test_show_of_osrusbfx2_names_levels_channels_and_keywords(capsys, data_dir: Path):
    path = corpus_path("manifests", "authored-samples", "usb_kmdf_fx2_driver_osrusbfx2.man")
    view = json.loads(run(capsys, "manifest", "show", "--json", "--manifest", str(path), "osrusbfx2")[1])
    first = view["events"][0]
    assert {k: first[k] for k in ("id", "symbol", "level", "opcode", "task", "keywords", "channel")} == {
        "id": 1, "symbol": "ReadStart", "level": "win:Informational", "opcode": "win:Start", "task": "read",
        "keywords": ["readwrite"], "channel": "OsrUsbfx2/Analytic",
    }
    assert first["message"] == "Read.  Device = %1, Length = %2"
    assert [(f["name"], f["in_type"], f["out_type"]) for f in first["fields"]] == [
        ("Device", "win:Pointer", "win:HexInt64"), ("Length", "win:UInt32", "xs:unsignedInt"),
    ]
    assert [k["name"] for k in view["keywords"]] == ["deviceinfo", "readwrite"]


def test_manifest_directory_with_malformed_files_loads_the_rest_and_warns(capsys, data_dir: Path, tmp_path: Path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    write_manifest(folder / "good.man", "Contoso", GUID_A, [(1, 0, [])])
    (folder / "bad.xml").write_text("<instrumentationManifest><oops")
    (folder / "evil.man").write_text(BILLION_LAUGHS)
    code, out, err = run(capsys, "manifest", "show", "--json", "--manifest", str(folder), "Contoso")
    assert code == 0 and json.loads(out)["provider"] == "Contoso"
    assert err.count("openetw: warning: skipped") == 2
    assert "bad.xml" in err and "evil.man" in err
    rows = json.loads(run(capsys, "manifest", "list", "--json", "--manifest", str(folder))[1])
    assert [(r["provider"], r["store"]) for r in rows] == [("Contoso", "given")]


def test_show_unknown_or_ambiguous_provider(capsys, data_dir: Path, tmp_path: Path):
    code, _, err = run(capsys, "manifest", "show", "Nobody")
    assert code == 2 and "no provider 'Nobody'" in err
    a = write_manifest(tmp_path / "a.man", "Twin", GUID_A, [(1, 0, [])])
    b = write_manifest(tmp_path / "b.man", "Twin", GUID_B, [(1, 0, [])])
    code, _, err = run(capsys, "manifest", "show", "twin", "--manifest", str(a), "--manifest", str(b))
    assert code == 2 and "several providers" in err
    assert run(capsys, "manifest", "show", GUID_B, "--manifest", str(a), "--manifest", str(b))[0] == 0


def test_validate_json_over_the_authored_samples(capsys):
    folder = corpus_path("manifests", "authored-samples")
    code, out, err = run(capsys, "manifest", "validate", "--lenient", "--json", str(folder))
    results = json_lines(out)
    assert code == 0, err
    assert len(results) == len([p for p in folder.iterdir() if p.suffix in (".xml", ".man")]) == 5
    for result in results:
        assert {"path", "ok", "errors", "warnings"} <= set(result)
        assert result["ok"] is True and result["errors"] == []
    osr = next(r for r in results if r["path"].endswith("usb_kmdf_fx2_driver_osrusbfx2.man"))
    assert len(osr["warnings"]) == 3 and osr["warnings"][0].startswith("line 99: <data>: ")


@pytest.mark.parametrize("malformed", MALFORMED)
def test_validate_json_keeps_going_past_a_malformed_file(capsys, tmp_path: Path, malformed: str):
    folder = tmp_path / "two"
    folder.mkdir()
    good = corpus_path("manifests", "authored-samples", "general_tracing_evntdrv_Eventdrv_evntdrv.xml")
    shutil.copy(good, folder / "a-good.xml")
    shutil.copy(corpus_path("manifests", "Win10-17134", malformed), folder / "b-bad.xml")
    code, out, err = run(capsys, "manifest", "validate", "--json", str(folder))
    good, bad = json_lines(out)
    assert code == 2 and "1 of 2 manifest files have errors" in err
    assert good["ok"] is True and good["path"].endswith("a-good.xml")
    assert bad["ok"] is False and bad["path"].endswith("b-bad.xml")
    assert len(bad["errors"]) == 1
    assert bad["errors"][0].startswith("line ") and "malformed XML" in bad["errors"][0]
    assert bad["diagnostics"][0]["line"] == int(bad["errors"][0].split()[1].rstrip(":"))


def test_validate_text_and_strict(capsys, tmp_path: Path):
    broken = tmp_path / "broken.man"
    broken.write_text(UNDEFINED_TEMPLATE)
    code, out, _ = run(capsys, "manifest", "validate", str(broken))
    assert code == 2
    assert out.splitlines() == [
        f"{broken}: 1 error, 0 warnings",
        "  error: line 6: <event>: event 1 version 0: template 'missing' is not defined [undefined-template]",
    ]
    sample = corpus_path("manifests", "authored-samples", "general_tracing_evntdrv_Eventdrv_evntdrv.xml")
    code, out, _ = run(capsys, "manifest", "validate", str(sample))
    assert code == 0 and out == f"{sample}: ok (1 provider, 3 events, 0 warnings)\n"
    # Event id 0 is an error as mc.exe makes it, and a warning under --lenient.
    zero = write_manifest(tmp_path / "zero.man", "Zero", GUID_A, [(0, 0, [])])
    assert run(capsys, "manifest", "validate", "--lenient", str(zero))[0] == 0
    code, out, _ = run(capsys, "manifest", "validate", "--json", str(zero))
    assert code == 2 and any("[event-value-zero]" in e for e in json_lines(out)[0]["errors"])


def test_validate_missing_path_and_empty_directory(capsys, tmp_path: Path):
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "manifest", "validate", "--json", str(tmp_path / "nope.man"), str(tmp_path / "empty"))
    results = json_lines(out)
    assert code == 2 and [r["ok"] for r in results] == [False, False]
    assert "No such file" in results[0]["errors"][0]
    assert "no *.xml or *.man" in results[1]["errors"][0]


def test_devices_and_fifos_are_refused_without_hanging(capsys, data_dir: Path, tmp_path: Path):
    fifo = tmp_path / "pipe.man"
    os.mkfifo(fifo)
    code, out, _ = run(capsys, "manifest", "validate", "--json", "/dev/zero", str(fifo))
    results = json_lines(out)
    assert code == 2 and [r["path"] for r in results] == ["/dev/zero", str(fifo)]
    assert all(r["errors"] == ["cannot read manifest: not a regular file (a directory, device, FIFO or socket)"] for r in results)
    code, _, err = run(capsys, "manifest", "show", "Contoso", "--manifest", "/dev/zero", "--manifest", str(fifo))
    assert code == 2 and err.count("warning: skipped") == 2
    code, _, err = run(capsys, "manifest", "install", "/dev/zero")
    assert code == 2 and "not a regular file" in err


@pytest.mark.parametrize("content", [BILLION_LAUGHS, UNDEFINED_TEMPLATE, "not xml at all"])
def test_install_refuses_hostile_and_invalid_files(capsys, data_dir: Path, tmp_path: Path, content: str):
    path = tmp_path / "hostile.man"
    path.write_text(content)
    code, out, err = run(capsys, "manifest", "install", str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"openetw: error: {path}")
    assert json.loads(run(capsys, "manifest", "list", "--json")[1]) == []
    code, out, _ = run(capsys, "manifest", "validate", "--json", str(path))
    assert code == 2 and json_lines(out)[0]["ok"] is False


def test_install_reports_warnings_on_stderr(capsys, data_dir: Path):
    path = corpus_path("manifests", "authored-samples", "usb_kmdf_fx2_driver_osrusbfx2.man")
    code, out, err = run(capsys, "manifest", "install", str(path))
    assert code == 0 and out.startswith("installed OSRUSBFX2 ")
    assert err.count("[nonstandard-out-type]") == 3


def test_help_texts_answer_what_each_command_does(capsys):
    code, out, _ = run(capsys, "manifest", "--help")
    assert code == 0
    for command in ("install", "uninstall", "list", "show", "validate"):
        assert command in out
    for command, phrase in (
        ("install", "replaced"), ("uninstall", "by GUID"), ("list", "--json"), ("show", "later file wins"),
        ("validate", "Exits 0"),
    ):
        code, out, _ = run(capsys, "manifest", command, "--help")
        assert code == 0 and phrase in " ".join(out.split()), command
