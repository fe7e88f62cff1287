"""Manifests read from user-given paths: regular files only, capped, every failure reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openetw.errors import ManifestError
from openetw.manifest.store.files import NotARegularFile, TooLarge, read_regular_file
from openetw.manifest.store.reading import read_manifest, read_manifests
from tests.manifest.store.sample_manifests import GUID_A, write_manifest


def test_read_manifests_keeps_going_and_reports_each_failure(tmp_path: Path):
    folder = tmp_path / "dir"
    folder.mkdir()
    write_manifest(folder / "a.man", "Alpha", GUID_A, [(1, 0, [])])
    (folder / "b.xml").write_text("<broken")
    (tmp_path / "empty").mkdir()
    fifo = tmp_path / "pipe.man"
    os.mkfifo(fifo)
    manifests, errors = read_manifests([folder, tmp_path / "missing.man", tmp_path / "empty", fifo, "/dev/zero"])
    assert [m.providers[0].name for m in manifests] == ["Alpha"]
    assert [Path(e.path).name for e in errors] == ["b.xml", "missing.man", "empty", "pipe.man", "zero"]
    assert "malformed XML" in errors[0].message and errors[0].line == 1
    assert "not a regular file" in errors[3].message and "not a regular file" in errors[4].message


def test_read_manifest_parses_and_names_the_path(tmp_path: Path):
    path = write_manifest(tmp_path / "a.man", "Alpha", GUID_A, [(1, 0, ["X"])])
    result = read_manifest(path)
    assert result.manifest.path == str(path) and result.warnings == []
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_manifest(tmp_path)


def test_read_regular_file_caps_the_size(tmp_path: Path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, 100) == b"x" * 100
    with pytest.raises(TooLarge):
        read_regular_file(path, 99)
    with pytest.raises(NotARegularFile):
        read_regular_file(tmp_path, 1000)
