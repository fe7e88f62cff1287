"""Shared fixtures. The corpus lives in ../shared/corpus beside the checkout; under CI it must be there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The fixtures that start a private trace service (service_env, service, producers, kernel_service, reachable).
# The guard that stops a machine's trace service a test started (see tests/machine_service_guard.py).
pytest_plugins = ["tests.service.harness", "tests.machine_service_guard"]

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"


def corpus_path(*parts: str) -> Path:
    """A path inside the shared corpus; fails under CI when the corpus is missing, skips elsewhere."""
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"corpus file missing under CI: {path}")
        pytest.skip(f"corpus not available: {path}")
    return path


@pytest.fixture
def corpus() -> Path:
    return corpus_path()


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test has its own user cache, and the caller's index settings are not read."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for name in ("OPENETW_INDEX_BESIDE", "OPENETW_INDEX_CACHE_MB", "OPENETW_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return cache
