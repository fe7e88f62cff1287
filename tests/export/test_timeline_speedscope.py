"""The Chrome JSON export opens in a real viewer: speedscope (its npm package's built files,
served on loopback) in Chromium through Playwright."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from openetw.export.source import Selection
from openetw.export.timeline import export_timeline
from openetw.export.trace_check import check_chrome
from tests.conftest import corpus_path
from tests.export.conftest import registry
from tests.export.speedscope_app import LAUNCH_ARGS, serve, speedscope_dir

CHROMIUM = "/usr/bin/chromium"


def _need(condition: bool, reason: str) -> None:
    if not condition:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI must have it: make test installs it)")
        pytest.skip(reason)


def test_chrome_export_opens_in_speedscope(tmp_path: Path) -> None:
    _need(Path(CHROMIUM).exists() or shutil.which("chromium") is not None, "chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    try:
        app = speedscope_dir()
    except OSError as error:  # no route to the npm registry
        _need(False, f"the speedscope package could not be fetched: {error}")
    out = tmp_path / "net-gc.json"
    selection = Selection(providers=("Microsoft-Windows-DotNETRuntime",))
    export_timeline([str(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))], str(out), "chrome", registry=registry(), selection=selection)
    assert check_chrome(str(out)).ok
    events = json.loads(out.read_text())["traceEvents"]
    threads = {(event["pid"], event["tid"]) for event in events if event["ph"] == "X"}
    names = Counter(event["name"] for event in events if event["ph"] == "X")
    name, count = names.most_common(1)[0]
    assert count > 100 and "GC" in name  # the .NET garbage collections
    problems: list[str] = []
    with serve(app, {"/profile.json": out}) as base, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                             args=LAUNCH_ARGS, headless=True)  # fmt: skip
        try:
            page = browser.new_page()
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda message: problems.append(f"console: {message.text}") if message.type == "error" else None)
            page.goto(f"{base}/index.html#profileURL={base}/profile.json&title=net-gc")
            page.wait_for_function("document.title.startsWith('net-gc')", timeout=120_000)
            # one profile per thread with slices; the sandwich view lists the slices by name
            page.get_by_text(f"net-gc (1/{len(threads)})").wait_for(timeout=60_000)
            page.keyboard.press("3")
            page.get_by_text("Symbol Name").wait_for(timeout=60_000)
            page.get_by_text(f"{name} {{", exact=False).first.wait_for(timeout=60_000)
            body = page.inner_text("body")
        finally:
            browser.close()
    assert "Something went wrong" not in body and f"{name} {{" in body
    assert not problems, problems
