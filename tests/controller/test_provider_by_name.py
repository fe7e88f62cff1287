"""Enabling by name: an installed manifest's provider name resolves to the manifest's GUID."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openetw.controller.session import _provider_text
from openetw.guids import provider_guid_from_name
from tests.conftest import corpus_path


def test_a_guid_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path))
    guid = uuid.uuid4()
    assert _provider_text(guid) == str(guid)
    assert _provider_text("{" + str(guid).upper() + "}") == str(guid)


def test_an_installed_manifest_name_resolves_to_its_guid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from openetw.manifest.store import ManifestRegistry

    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path))
    manifest = corpus_path("manifests", "authored-samples", "general_tracing_evntdrv_Eventdrv_evntdrv.xml")
    ManifestRegistry().install([manifest])
    assert _provider_text("Sample Driver") == "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6"
    assert _provider_text("sample driver") == "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6"


def test_other_names_go_to_the_service_for_name_hashing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path))
    assert _provider_text("MyCompany.Web") == "MyCompany.Web"
    assert provider_guid_from_name("MyCompany.Web") != uuid.UUID("b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6")
