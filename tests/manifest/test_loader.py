from __future__ import annotations

from openetw.errors import ManifestError
from openetw.manifest import load_manifests
from tests.manifest.samples import full_manifest


def test_directory_keeps_going_past_bad_files(tmp_path):
    (tmp_path / "a.man").write_text(full_manifest(), encoding="utf-8")
    utf16 = full_manifest().replace('encoding="utf-8"', 'encoding="utf-16"')
    (tmp_path / "b.XML").write_bytes(utf16.encode("utf-16"))
    (tmp_path / "c.xml").write_text("<broken>", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a manifest", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.man").write_text(full_manifest(), encoding="utf-8")
    manifests, errors = load_manifests([tmp_path])
    assert [m.path.rsplit("/", 1)[1] for m in manifests] == ["a.man", "b.XML"]
    assert len(errors) == 1 and isinstance(errors[0], ManifestError)
    assert errors[0].path.endswith("c.xml") and errors[0].line == 1


def test_files_and_missing_paths(tmp_path):
    good = tmp_path / "good.man"
    good.write_text(full_manifest(), encoding="utf-8")
    manifests, errors = load_manifests([good, tmp_path / "absent.man", str(good)])
    assert len(manifests) == 2
    assert [e.message for e in errors] == ["no such file or directory"]
