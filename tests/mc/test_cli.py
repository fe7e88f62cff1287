"""``openetw mc``: writes a module per provider, leaves unchanged files alone, goes on past bad
manifests, and ``--check`` names the stale modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.cli.main import main
from tests.mc.samples import WIDGET_MANIFEST

SAMPLE_DRIVER = Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml"
TWO_PROVIDERS = WIDGET_MANIFEST.replace(
    b"    </events>\n  </instrumentation>",
    b'      <provider name="Acme-Widget/Other" guid="{99999999-2222-3333-4444-555555555555}"'
    b' resourceFileName="w.dll" messageFileName="w.dll"/>\n    </events>\n  </instrumentation>',
)


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_providers_in_one_file_make_two_modules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "widget.man"
    manifest.write_bytes(TWO_PROVIDERS)
    code, out, _ = run(capsys, "mc", "--lenient", manifest, "-o", tmp_path / "out")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["acme_widget_other.py", "acme_widget_tests.py"]
    assert "written   " in out and "Acme-Widget/Other: 0 events" in out
    assert "1 cannot be written: BlobWritten: field 'Blob': BINARY needs a length" in out


def test_a_rebuild_leaves_files_alone_and_check_names_stale_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "gen"
    assert run(capsys, "mc", SAMPLE_DRIVER, "-o", out_dir)[0] == 0
    module = out_dir / "sample_driver.py"
    before = module.stat().st_mtime_ns
    code, out, _ = run(capsys, "mc", SAMPLE_DRIVER, "-o", out_dir)
    assert code == 0 and out.startswith("unchanged ")
    assert module.stat().st_mtime_ns == before
    code, out, _ = run(capsys, "mc", SAMPLE_DRIVER, "-o", out_dir, "--check")
    assert code == 0 and "1 of 1 modules" in out

    module.write_text(module.read_text() + "# edited by hand\n")
    code, out, err = run(capsys, "mc", SAMPLE_DRIVER, "-o", out_dir, "--check")
    assert code == 1
    assert f"stale: {module}" in out
    assert f"generated module(s) are stale: {module}" in err
    module.unlink()
    code, out, _ = run(capsys, "mc", SAMPLE_DRIVER, "-o", out_dir, "--check")
    assert code == 1 and f"stale: {module}" in out
    assert not module.exists()  # --check writes nothing


def test_bad_manifests_are_reported_and_the_others_compiled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in"
    source.mkdir()
    (source / "a_broken.man").write_bytes(b"<instrumentationManifest><unclosed>")
    (source / "b_widget.man").write_bytes(WIDGET_MANIFEST)
    (source / "c_empty.xml").write_bytes(b"")
    code, _out, err = run(capsys, "mc", "--lenient", source, tmp_path / "missing.man", "-o", tmp_path / "out")
    assert code == 2
    assert (tmp_path / "out" / "acme_widget_tests.py").exists()
    assert "a_broken.man" in err and "c_empty.xml" in err and "missing.man: no such file or directory" in err
    assert "3 manifest(s) could not be compiled" in err
    assert "ItemsSeen is written by write_items_seen_v1 (write_items_seen is another event's)" in err  # never silently


def test_mc_exe_s_rules_refuse_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "widget.man"
    manifest.write_bytes(WIDGET_MANIFEST)
    code, out, err = run(capsys, "mc", manifest, "-o", tmp_path / "out")
    assert code == 2 and not (tmp_path / "out").exists()
    assert f"openetw: error: {manifest}:49: <data>: " in err and "[binary-without-length] (and 2 more;" in err
    code, out, _ = run(capsys, "manifest", "validate", "--json", manifest)
    codes = {d["code"] for d in json_lines(out)[0]["diagnostics"] if d["severity"] == "error"}
    assert code == 2 and {"duplicate-symbol", "binary-without-length", "field-name"} <= codes
    code, out, _ = run(capsys, "manifest", "validate", "--lenient", "--json", manifest)
    assert code == 0 and json_lines(out)[0]["ok"] is True


def json_lines(text: str) -> list[dict]:
    import json

    return [json.loads(line) for line in text.splitlines()]


def test_the_same_provider_twice_gets_a_second_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "mc", SAMPLE_DRIVER, SAMPLE_DRIVER, "-o", tmp_path)
    assert code == 0
    assert (tmp_path / "sample_driver.py").exists() and (tmp_path / "sample_driver_2.py").exists()
    assert "written as sample_driver_2.py" in err
