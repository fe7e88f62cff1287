"""The speedscope export opens in speedscope itself (its npm package's built files, on loopback,
in Chromium through Playwright): the threads' profiles and the named frames are there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openetw.etl.reader import EtlReader
from openetw.events.profile import load_profile
from openetw.export.flame import write_speedscope
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path
from tests.export.speedscope_app import LAUNCH_ARGS, serve, speedscope_dir
from tests.export.test_timeline_speedscope import CHROMIUM, _need


def test_speedscope_export_opens_in_speedscope(tmp_path: Path) -> None:
    _need(Path(CHROMIUM).exists() or shutil.which("chromium") is not None, "chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    try:
        app = speedscope_dir()
    except OSError as error:
        _need(False, f"the speedscope package could not be fetched: {error}")
    with EtlReader(str(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))) as reader:
        profile = load_profile(reader.records(time_order=True), registry=SchemaRegistry(), process="Test.x64")
    out = tmp_path / "net-cpu.json"
    with out.open("wb") as f:
        write_speedscope(profile.samples, f)
    threads = len(json.loads(out.read_text())["profiles"])
    problems: list[str] = []
    with serve(app, {"/profile.json": out}) as base, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                             args=LAUNCH_ARGS, headless=True)  # fmt: skip
        try:
            page = browser.new_page()
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda message: problems.append(f"console: {message.text}") if message.type == "error" else None)
            page.goto(f"{base}/index.html#profileURL={base}/profile.json&title=net-cpu")
            page.wait_for_function("document.title.startsWith('net-cpu')", timeout=120_000)
            page.get_by_text(f"(1/{threads})", exact=False).first.wait_for(timeout=60_000)
            page.keyboard.press("3")  # the sandwich view: functions by self and total time
            page.get_by_text("Symbol Name").wait_for(timeout=60_000)
            page.get_by_text("mscorlib!System.DateTime.GetDatePart").first.wait_for(timeout=60_000)
            body = page.inner_text("body")
        finally:
            browser.close()
    assert "Something went wrong" not in body and "Test.x64!Test.Program.Main" in body
    assert not problems, problems
