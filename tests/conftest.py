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
