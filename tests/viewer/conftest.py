"""The viewer's fixtures: a private index cache, a Chromium driven by Playwright (Debian's
``/usr/bin/chromium``, never a downloaded one), a viewer served on a thread, and a directory
for screenshots (printed at the end of the run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
_ARTIFACTS: list[Path] = []


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (under CI the viewer's browser tests must run: `make test` installs chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="package", autouse=True)
def viewer_index_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Indexes of corpus files (a read-only folder) go to a private cache while the viewer's tests run
    (and no longer: the tests after them see no setting of theirs)."""
    path = tmp_path_factory.mktemp("viewer-index")
    old = os.environ.get("OPENETW_INDEX_DIR")
    os.environ["OPENETW_INDEX_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("OPENETW_INDEX_DIR", None)
    else:
        os.environ["OPENETW_INDEX_DIR"] = old


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go: $OPENETW_TEST_ARTIFACTS/viewer, else a temporary folder."""
    root = os.environ.get("OPENETW_TEST_ARTIFACTS")
    path = Path(root) / "viewer" if root else Path(tempfile.mkdtemp(prefix="openetw-viewer-screenshots-"))
    path.mkdir(parents=True, exist_ok=True)
    _ARTIFACTS.append(path)
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for path in _ARTIFACTS:
        terminalreporter.write_line(f"viewer screenshots: {path}")


# Per package: Playwright's sync API keeps an event loop running on this thread while it is open,
# and tests elsewhere call asyncio.run.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        _unavailable(f"{CHROMIUM} is not installed (Debian package chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (the test extra)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    # The page's Content-Security-Policy would stop Playwright's own waiting predicates (they are
    # evaluated as strings); the page's escaping is what the tests check, with the policy off.
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True, bypass_csp=True)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.errors = errors
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(*files)``: a viewer of those files on a thread (stopped at the end)."""
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    started: list[ViewerServer] = []

    def start(*files: str | Path) -> ViewerServer:
        viewer = Viewer()
        for path in files:
            viewer.open(str(path))
        server = ViewerServer(viewer).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


def openetw_json(*args: str) -> list[dict[str, Any]]:
    """``openetw ARGS --json``'s JSON lines."""
    import json

    done = subprocess.run([sys.executable, "-m", "openetw", *args], capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def openetw_text(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "openetw", *args], capture_output=True, text=True, timeout=300, check=True)
    return done.stdout


@pytest.fixture(scope="session")
def million_etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of over 1,000,000 events: diaghub.etl's buffers repeated (``testing.large``)."""
    from openetw.testing.large import repeat_buffers

    source = corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")
    target = tmp_path_factory.mktemp("viewer-large") / "million.etl"
    if shutil.disk_usage(target.parent).free < 400 << 20:
        _unavailable("not enough free disk space for a 1M-event trace")
    per_copy = repeat_buffers(source, target, 0)
    copies = -(-1_000_000 // per_copy)
    repeat_buffers(source, target, copies * target.stat().st_size)
    return target
