"""mc refuses a manifest past its documented limits with a clear error, in bounded time and memory."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openetw.errors import ManifestError
from openetw.mc.build import MAX_EMBEDDED_BYTES, MAX_PROVIDERS, compile_manifests, generate_from_file
from tests.manifest.samples import EVENTS_NS, WIN_NS


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


def test_each_module_of_a_many_provider_manifest_embeds_its_own_provider_only(tmp_path: Path) -> None:
    from openetw.mc import load_module

    body = "\n".join(
        f'<provider name="Many-P{i}" guid="{{{uuid.UUID(int=100 + i)}}}" symbol="M{i}" resourceFileName="m.dll" messageFileName="m.dll">'
        f'<events><event value="{i + 1}" symbol="Ev{i}" level="win:Informational"/></events></provider>'
        for i in range(3)
    )
    path = tmp_path / "many.man"
    path.write_text(
        f'<?xml version="1.0" encoding="utf-8"?>\n<instrumentationManifest xmlns="{EVENTS_NS}" xmlns:win="{WIN_NS}">'
        f"<instrumentation><events>\n{body}\n</events></instrumentation></instrumentationManifest>\n"
    )
    modules, _ = generate_from_file(path)
    assert len(modules) == 3
    for i, generated in enumerate(modules):
        module = load_module(generated.source, f"many_p{i}")
        embedded = module.MANIFEST_XML
        assert f"Many-P{i}".encode() in embedded
        assert all(f"Many-P{j}".encode() not in embedded for j in range(3) if j != i)
        assert module.PROVIDER_INDEX == 0
        assert [schema.event_id for schema in module.schemas()] == [i + 1]
        assert len(embedded) < path.stat().st_size


def _many_events(path: Path, count: int, providers: int = 1) -> Path:
    body = []
    for number in range(providers):
        events = "".join(f'<event value="{i % 65535 + 1}" version="{i // 65535}" symbol="E{number}_{i}" template="T"/>' for i in range(count))
        body.append(
            f'<provider name="Wide-P{number}" guid="{{{uuid.UUID(int=500 + number)}}}" symbol="W{number}" resourceFileName="w.dll" messageFileName="w.dll">'
            f'<templates><template tid="T"><data name="A" inType="win:UInt32"/></template></templates><events>{events}</events></provider>'
        )
    path.write_text(
        f'<?xml version="1.0" encoding="utf-8"?>\n<instrumentationManifest xmlns="{EVENTS_NS}" xmlns:win="{WIN_NS}">'
        f"<instrumentation><events>{''.join(body)}</events></instrumentation></instrumentationManifest>\n"
    )
    return path


def test_a_provider_past_the_events_per_module_limit_is_refused_before_generating(tmp_path: Path) -> None:
    """200,000 events made a 69 MB module that took 3 GB to import; now refused, naming the limit."""
    import tracemalloc

    from openetw.mc.build import MAX_EVENTS_PER_MODULE

    path = _many_events(tmp_path / "wide.man", MAX_EVENTS_PER_MODULE + 1)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match=f"at most {MAX_EVENTS_PER_MODULE} events per module"):
            generate_from_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20  # the manifest's model only: no module text was made
    result = compile_manifests([path], tmp_path / "out")
    assert not result.ok and not list(tmp_path.glob("out/*.py"))


def test_a_manifest_past_the_events_limit_is_refused(tmp_path: Path) -> None:
    from openetw.mc.build import MAX_EVENTS, MAX_EVENTS_PER_MODULE

    providers = MAX_EVENTS // MAX_EVENTS_PER_MODULE + 1
    with pytest.raises(ManifestError, match=f"at most {MAX_EVENTS} from one manifest"):
        generate_from_file(_many_events(tmp_path / "many.man", MAX_EVENTS_PER_MODULE, providers))


def test_a_provider_at_the_limit_generates_a_module_that_imports(tmp_path: Path) -> None:
    from openetw.mc import load_module

    modules, _ = generate_from_file(_many_events(tmp_path / "edge.man", 2000))
    module = load_module(modules[0].source, "wide_p0")
    assert len(module.provider.EVENTS) == 2000
