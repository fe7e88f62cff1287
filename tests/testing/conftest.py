"""Every consumer test keeps its indexes and installed manifests in its own temporary folders,
and never starts a trace service on its own (live tests start a private one)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_stores(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    index_dir = tmp_path_factory.mktemp("etl-index")
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(index_dir))
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path_factory.mktemp("no-service") / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    return index_dir
