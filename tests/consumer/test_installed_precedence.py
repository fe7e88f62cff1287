"""Installed manifests in a trace's registry: the user's own store wins over the system's, for
schemas and for provider names, as in every other registry (``events.registry.build_registry``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openetw.consumer.trace import _registry
from openetw.events.registry import build_registry
from openetw.manifest.store import ManifestRegistry
from openetw.testing import EventRecordBuilder

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml"
PROVIDER = uuid.UUID("b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6")


def _variant(tmp_path: Path, where: str, field: str) -> Path:
    path = tmp_path / where / "evntdrv.xml"
    path.parent.mkdir()
    path.write_text(SAMPLE.read_text(encoding="utf-8").replace('name="DeviceNameLength"', f'name="{field}"'), encoding="utf-8")
    return path


def test_the_users_store_wins_over_the_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("OPENETW_DATA_DIR", str(data))
    stores = ManifestRegistry(data, euid=0)
    stores.install([_variant(tmp_path, "system", "SystemField")], system=True)
    stores.install([_variant(tmp_path, "user", "UserField")])
    record = EventRecordBuilder(PROVIDER, 1).pack()

    registry, names = _registry(None, [])
    schema = registry.schema_for(record)
    assert schema is not None
    assert schema.properties[0].name == "UserField"
    assert names["sample driver"] == PROVIDER

    reference = build_registry(installed=True).schema_for(record)
    assert reference is not None
    assert reference.properties[0].name == "UserField"
