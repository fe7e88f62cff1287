"""``openetw providers``: registered providers with their processes, and installed manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.controller import Session
from openetw.guids import format_guid, parse_guid, provider_guid_from_name
from openetw.manifest.store import ManifestRegistry
from tests.manifest.store.sample_manifests import GUID_A, GUID_B, write_manifest
from tests.service.harness import Producer, ServiceProcess

TRACELOGGING = "Test.Listing"


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ManifestRegistry:
    """Private manifest stores with one provider in the user store and one in the system store."""
    data = tmp_path / "data"
    monkeypatch.setenv("OPENETW_DATA_DIR", str(data))
    registry = ManifestRegistry(data, euid=0)
    registry.install([write_manifest(tmp_path / "user.man", "Contoso-User", GUID_A, [(1, 0, ["a"]), (2, 0, [])])])
    registry.install([write_manifest(tmp_path / "system.man", "Contoso-System", GUID_B, [(7, 0, ["b"])])], system=True)
    return registry


def listing(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["providers", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def guid(text: str) -> str:
    return format_guid(parse_guid(text))


def test_registered_and_installed_providers_are_listed_and_marked(
    stores: ManifestRegistry, service: ServiceProcess, producers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    producer: Producer = producers()
    producer.register(TRACELOGGING)
    producer.send("register_manifest", guid=GUID_A)  # a process writing the installed provider
    with Session.start("Listed", output=tmp_path / "l.etl", providers=[TRACELOGGING]):
        assert producer.wait_enabled(TRACELOGGING)
        rows = listing(capsys)
    registered = {row["guid"]: row for row in rows if row["kind"] == "registered" and row["pid"] == producer.pid}
    tracelogging = registered.pop(format_guid(provider_guid_from_name(TRACELOGGING)))
    assert tracelogging["name"] == TRACELOGGING and tracelogging["sessions"] == ["Listed"]
    assert tracelogging["manifest"] is None
    (manifest_process,) = registered.values()
    assert manifest_process["guid"] == guid(GUID_A) and manifest_process["manifest"] == "user"
    assert manifest_process["sessions"] == []
    installed = [(row["name"], row["guid"], row["store"], row["events"], row["pid"]) for row in rows if row["kind"] == "manifest"]
    assert installed == [("Contoso-User", guid(GUID_A), "user", 2, None), ("Contoso-System", guid(GUID_B), "system", 1, None)]
    assert {row["kind"] for row in rows} == {"registered", "manifest", "secured"}  # secured: the provider security table

    assert main(["providers"]) == 0
    text = capsys.readouterr().out
    assert "registered providers (" in text and "installed manifests (2):" in text
    assert f"pid {producer.pid}" in text and "[manifest: user]" in text
    assert "Contoso-System" in text and "system" in text


def test_installed_manifests_are_listed_without_a_service(stores: ManifestRegistry, service_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [(row["kind"], row["name"]) for row in rows] == [("manifest", "Contoso-User"), ("manifest", "Contoso-System")]
    assert "no trace service is running" in captured.err
    assert main(["providers"]) == 0
    assert "registered providers (0):" in capsys.readouterr().out


def test_nothing_installed_and_nothing_registered(service_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "empty"))
    assert listing(capsys) == []

