"""Shared fixtures. The corpus lives in ../shared/corpus beside the checkout; under CI it must be there."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.machine_service_guard")
from tests.machine_service_guard import mark_this_run  # noqa: E402 - after the line above

# Nothing of the caller's settings reaches a test or any process it starts: every OPENETW_*
# variable goes (OPENETW_PURE stays: it picks the engine the suite runs on), and the manifest
# stores and the Event Log's logs live in a directory of this run. The run's token marks the
# processes the tests start (see tests/machine_service_guard.py).
KEPT_SETTINGS = ("OPENETW_PURE",)
for _name in [name for name in os.environ if name.startswith("OPENETW_") and name not in KEPT_SETTINGS]:
    del os.environ[_name]
PRIVATE_DATA_DIR = tempfile.mkdtemp(prefix="openetw-tests-data-")
atexit.register(shutil.rmtree, PRIVATE_DATA_DIR, True)
os.environ["OPENETW_DATA_DIR"] = PRIVATE_DATA_DIR
mark_this_run()
_test_numbers = itertools.count(1)

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


@pytest.fixture(autouse=True)
def own_data_dir(monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test's manifest stores and logs (and those of a service it starts) are its own: what
    one test installs, no later test sees. A test may still point OPENETW_DATA_DIR elsewhere."""
    directory = os.path.join(PRIVATE_DATA_DIR, f"test-{next(_test_numbers)}")
    monkeypatch.setenv("OPENETW_DATA_DIR", directory)
    return directory
