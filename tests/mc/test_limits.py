"""mc refuses a manifest past its documented limits with a clear error, in bounded time and memory."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openetw.errors import ManifestError
from openetw.mc.build import MAX_EMBEDDED_BYTES, MAX_PROVIDERS, compile_manifests, generate_from_file
from tests.manifest.samples import EVENTS_NS


def _many_providers(path: Path, count: int, padding: int = 0) -> Path:
    providers = "\n".join(
        f'<provider name="Bomb-P{i}" guid="{{{uuid.UUID(int=i + 1)}}}" symbol="P{i}" resourceFileName="b.dll" messageFileName="b.dll"/>'
        for i in range(count)
    )
    pad = f"<!-- {'x' * padding} -->" if padding else ""
    path.write_text(
        f'<?xml version="1.0" encoding="utf-8"?>\n<instrumentationManifest xmlns="{EVENTS_NS}">{pad}'
        f"<instrumentation><events>{providers}</events></instrumentation></instrumentationManifest>\n"
    )
    return path


def test_twenty_thousand_providers_are_refused_with_the_limit_named(tmp_path: Path) -> None:
    path = _many_providers(tmp_path / "bomb.man", 20_000)
    with pytest.raises(ManifestError, match=f"at most {MAX_PROVIDERS} modules"):
        generate_from_file(path)  # refused after parsing, before any module is made
    result = compile_manifests([path], tmp_path / "out")
    assert not result.ok and not list(tmp_path.glob("out/*.py"))


def test_a_manifest_embedded_past_the_byte_limit_is_refused(tmp_path: Path) -> None:
    count = 600
    path = _many_providers(tmp_path / "wide.man", count, padding=MAX_EMBEDDED_BYTES // count)
    with pytest.raises(ManifestError, match="split the manifest"):
        generate_from_file(path)
    modules, _ = generate_from_file(_many_providers(tmp_path / "fine.man", 3))
    assert len(modules) == 3
