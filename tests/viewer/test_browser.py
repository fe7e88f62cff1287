"""The viewer in a real browser (Playwright driving Debian's chromium): what the page shows is
checked against what ``openetw dump`` / ``report`` print for the same files and filters."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer.index import EtlIndex
from openetw.etl.clock import filetime_to_iso
from tests.conftest import corpus_path
from tests.viewer.conftest import openetw_json, openetw_text

HTTP_SERVER = ("etl", "tx", "HTTP_Server.etl")
SYSTEM_EVTX = ("evtx", "system.evtx")


def _ready(page: Any, server: Any) -> None:
    page.goto(server.url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    _idle(page)


def _idle(page: Any) -> None:
    page.wait_for_function("window.__viewer.idle()", timeout=60_000)


def _select(page: Any, source_id: str) -> None:
    page.click(f"#tree li[data-source='{source_id}']")
    page.wait_for_function(f"window.__viewer.state.source && window.__viewer.state.source.id === '{source_id}'", timeout=60_000)
    _idle(page)


def _facet(page: Any, name: str) -> dict[str, int]:
    values = page.eval_on_selector_all(
        f"#facets li[data-facet='{name}']", "items => items.map(i => [i.querySelector('.label').textContent, i.querySelector('.count').textContent])"
    )
    return {label: int(count) for label, count in values}


def _click_facet(page: Any, name: str, label: str) -> None:
    page.click(f"#facets li[data-facet='{name}'][title={json.dumps(label)}]")
    _idle(page)


def _shown(page: Any, *columns: str) -> list[dict[str, str]]:
    """The rows in the page's table, in order, as {column: text}."""
    rows = page.eval_on_selector_all(
        "#rows .row",
        "rows => rows.map(r => [Number(r.dataset.index), Object.fromEntries([...r.children].map(c => [c.className.replace('cell c-', ''), c.textContent]))])",
    )
    return [cells for _, cells in sorted(rows, key=lambda pair: pair[0])]


def _total(page: Any) -> int:
    return int(page.get_attribute("#status", "data-total"))


def _shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"))


def test_facets_of_a_corpus_etl_and_evtx_count_what_dump_reads(page: Any, serve: Any, artifacts: Path) -> None:
    etl, evtx = corpus_path(*HTTP_SERVER), corpus_path(*SYSTEM_EVTX)
    server = serve(etl, evtx)
    _ready(page, server)
    etl_id, evtx_id = (source.id for source in server.viewer.sources.values())
    _select(page, etl_id)
    dumped = openetw_json("dump", str(etl), "--time-order", "--json", "--quiet")
    assert _total(page) == len(dumped)
    assert _facet(page, "level") == {{0: "Log Always", 4: "Information"}[level]: count for level, count in Counter(r["level"] for r in dumped).items()}
    by_provider = Counter(r.get("provider_id") for r in dumped if "provider_id" in r)
    shown = _facet(page, "provider")
    for guid, count in by_provider.items():
        if guid in shown:
            assert shown[guid] == count
    assert sum(shown.values()) == len(dumped)
    _shot(page, artifacts, "etl-facets")

    _select(page, evtx_id)
    dumped = openetw_json("dump", str(evtx), "--json", "--quiet")
    assert _total(page) == len(dumped) == 1881
    assert _facet(page, "provider") == dict(Counter(r["provider_name"] for r in dumped).most_common(50))
    levels = {1: "Critical", 2: "Error", 3: "Warning", 4: "Information", 0: "Log Always"}
    assert _facet(page, "level") == {levels[level]: count for level, count in Counter(r["level"] for r in dumped).items()}
    assert _facet(page, "channel") == {"System": 1881}
    _shot(page, artifacts, "evtx-facets")
    assert not page.errors


def test_level_and_provider_filters_show_exactly_what_dump_selects(page: Any, serve: Any, artifacts: Path) -> None:
    evtx = corpus_path(*SYSTEM_EVTX)
    server = serve(evtx)
    _ready(page, server)
    _click_facet(page, "level", "Error")
    _click_facet(page, "provider", "Service Control Manager")
    wanted = [r for r in openetw_json("dump", str(evtx), "--json", "--quiet", "--provider", "Service Control Manager") if r["level"] == 2]
    assert _total(page) == len(wanted) == 16
    shown = _shown(page)
    assert [(row["time"], row["id"], row["provider"], row["levelName"]) for row in shown] == [
        (r["time"], str(r["id"]), r["provider_name"], "Error") for r in wanted
    ]
    _shot(page, artifacts, "evtx-filtered")
    # a second level widens the set: Error or Information
    _click_facet(page, "level", "Information")
    wider = [r for r in openetw_json("dump", str(evtx), "--json", "--quiet", "--provider", "Service Control Manager") if r["level"] in (2, 4)]
    assert _total(page) == len(wider)
    # the same selection as an Event Log XPath query, with the facets cleared
    _click_facet(page, "level", "Information")
    _click_facet(page, "level", "Error")
    _click_facet(page, "provider", "Service Control Manager")
    assert _total(page) == 1881
    page.fill("#xpath", "*[System[Provider[@Name='Service Control Manager'] and (Level=2)]]")
    page.press("#xpath", "Enter")
    _idle(page)
    assert _total(page) == 16
    assert [row["time"] for row in _shown(page)] == [r["time"] for r in wanted]


def test_an_opened_event_shows_its_xml_as_the_event_log_prints_it(page: Any, serve: Any, artifacts: Path) -> None:
    evtx = corpus_path(*SYSTEM_EVTX)
    server = serve(evtx)
    _ready(page, server)
    page.click("#rows .row[data-index='3']")
    page.wait_for_function("document.getElementById('detail').dataset.row === '3'")
    report = openetw_text("report", str(evtx), "--format", "xml").splitlines()
    events = [line for line in report if line.startswith("<Event ")]
    page.click("#tab-details")
    page.check("#xml-view")
    assert page.text_content("#detail-xml") == events[3]
    _shot(page, artifacts, "evtx-detail-xml")
    page.click("#tab-general")
    dumped = openetw_json("dump", str(evtx), "--json", "--quiet", "--limit", "4")[3]
    assert page.text_content("#detail-summary").count(dumped["provider_name"]) >= 1
    _shot(page, artifacts, "evtx-detail-general")


def test_jumping_to_rows_of_a_million_event_trace(page: Any, serve: Any, artifacts: Path, million_etl: Path) -> None:
    server = serve(million_etl)
    _ready(page, server)
    index = EtlIndex.open(million_etl)
    try:
        assert len(index) >= 1_000_000
        assert _total(page) == len(index)
        for row in (500_000, 999_999):
            page.fill("#goto", str(row))
            page.press("#goto", "Enter")
            page.wait_for_selector(f"#rows .row[data-index='{row}']", timeout=30_000)
            cells = page.eval_on_selector(f"#rows .row[data-index='{row}']", "r => [...r.children].map(c => c.textContent)")
            segment = index.segment_at(int(np.searchsorted([b["first_row"] for b in index.blocks], row, side="right") - 1))
            expected = segment.records[row - segment.first_row]
            assert cells[1] == filetime_to_iso(int(expected["filetime"]))
            assert cells[3] == str(int(expected["id"]))
            assert page.evaluate("window.__viewer.renderedRows()") <= 200
            assert page.evaluate("window.__viewer.cachedRows()") <= 600
            _shot(page, artifacts, f"million-row-{row}")
    finally:
        index.close()


def _drag_timeline(page: Any, left: float, right: float) -> None:
    box = page.locator("#timeline").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * left, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * right, y, steps=4)
    page.mouse.up()
    page.wait_for_function("document.getElementById('range').dataset.start")
    _idle(page)


def _type_range(page: Any, start: str, end: str) -> None:
    page.fill("#range-from", start)
    page.fill("#range-to", end)
    page.press("#range-to", "Enter")
    _idle(page)


def test_dragging_on_the_timeline_selects_exactly_that_range(page: Any, serve: Any, artifacts: Path) -> None:
    etl = corpus_path(*HTTP_SERVER)
    server = serve(etl)
    _ready(page, server)
    _drag_timeline(page, 0.7, 0.8)
    start, end = int(page.get_attribute("#range", "data-start")), int(page.get_attribute("#range", "data-end"))
    index = EtlIndex.open(etl)
    try:
        chosen = index.select(start=start, end=end)
        assert 0 < len(chosen) < len(index)
        assert _total(page) == len(chosen)
        first = _shown(page)[0]
        segment = index.segment_at(0)
        assert first["time"] == filetime_to_iso(int(segment.records[int(chosen[0])]["filetime"]))
    finally:
        index.close()
    _shot(page, artifacts, "etl-timeline-range")


def test_a_typed_time_range_selects_what_the_drag_selects(page: Any, serve: Any, artifacts: Path) -> None:
    etl = corpus_path(*HTTP_SERVER)
    server = serve(etl)
    _ready(page, server)
    _drag_timeline(page, 0.7, 0.8)
    start, end = int(page.get_attribute("#range", "data-start")), int(page.get_attribute("#range", "data-end"))
    assert (page.input_value("#range-from"), page.input_value("#range-to")) == (filetime_to_iso(start), filetime_to_iso(end))
    dragged = _total(page)
    index = EtlIndex.open(etl)
    try:
        assert 0 < dragged == len(index.select(start=start, end=end)) < len(index)
        page.click("#clear-range")
        page.wait_for_function("!document.getElementById('range').dataset.start")
        _idle(page)
        assert _total(page) == len(index) and page.input_value("#range-from") == ""
        # the drag's range typed in: the same rows
        _type_range(page, filetime_to_iso(start), filetime_to_iso(end))
        assert (int(page.get_attribute("#range", "data-start")), int(page.get_attribute("#range", "data-end"))) == (start, end)
        assert _total(page) == dragged
        # a window typed as people type it: whole seconds, an offset, an open end
        times = index.segment_at(0).records["filetime"]
        middle = int(times[len(times) // 2]) // 10_000_000 * 10_000_000
        local = filetime_to_iso(middle + 2 * 3600 * 10_000_000)[:19] + "+02:00"
        _type_range(page, local, "")
        assert page.get_attribute("#range", "data-start") == str(middle) and page.get_attribute("#range", "data-end") == ""
        assert page.input_value("#range-from") == filetime_to_iso(middle)
        assert _total(page) == len(index.select(start=middle)) > 0
        assert _shown(page)[0]["time"] >= filetime_to_iso(middle)
        # a bad value: an inline error, the range as it was
        shown = _total(page)
        _type_range(page, filetime_to_iso(middle), "2020-13-45T00:00:00Z")
        assert page.is_visible("#range-error") and page.text_content("#range-error").startswith("To: ")
        assert page.get_attribute("#range-to", "aria-invalid") == "true" and page.get_attribute("#range-from", "aria-invalid") is None
        assert page.get_attribute("#range", "data-start") == str(middle) and _total(page) == shown
        _shot(page, artifacts, "etl-typed-range-error")
        _type_range(page, filetime_to_iso(end), filetime_to_iso(start))
        assert page.text_content("#range-error") == "To is before From" and _total(page) == shown
        _type_range(page, filetime_to_iso(start), filetime_to_iso(end))
        assert not page.is_visible("#range-error") and page.get_attribute("#range-to", "aria-invalid") is None
        assert _total(page) == dragged
    finally:
        index.close()
    _shot(page, artifacts, "etl-typed-range")


def test_the_exported_filtered_set_is_what_dump_selects(page: Any, serve: Any, artifacts: Path, tmp_path: Path) -> None:
    evtx = corpus_path(*SYSTEM_EVTX)
    server = serve(evtx)
    _ready(page, server)
    _click_facet(page, "level", "Warning")
    wanted = [r for r in openetw_json("dump", str(evtx), "--json", "--quiet") if r["level"] == 3]
    for fmt in ("json", "csv", "evtx"):
        page.select_option("#export-format", fmt)
        with page.expect_download() as download:
            page.click("#export")
        path = tmp_path / f"export.{fmt}"
        download.value.save_as(path)
        if fmt == "json":
            exported = [json.loads(line) for line in path.read_text().splitlines()]
            assert exported == wanted
        elif fmt == "csv":
            assert len(path.read_text().splitlines()) == len(wanted) + 1
        else:
            again = openetw_json("dump", str(path), "--json", "--quiet")
            assert [(r["time"], r["id"], r["provider_name"]) for r in again] == [(r["time"], r["id"], r["provider_name"]) for r in wanted]


def test_event_content_never_runs_as_script(page: Any, serve: Any, artifacts: Path, tmp_path: Path) -> None:
    from openetw.evtx.record import EvtxHeader
    from openetw.evtx.writer import EvtxWriter

    hostile = ['<script>window.__xss = 1</script>', '"onerror="window.__xss=2', "<img src=x onerror=\"window.__xss=3\">"]
    writer = EvtxWriter()
    path = tmp_path / "hostile.evtx"
    with open(path, "wb") as out:
        out.write(writer.file_header(dirty=True))
        for number, text in enumerate(hostile):
            header = EvtxHeader()
            header.provider_name = f"Evil{text}"
            header.event_id = 100 + number
            header.level = 2
            header.time_created = 133_000_000_000_000_000 + number * 10_000_000
            header.channel = text
            header.computer = text
            writer.add_event(header, {"Payload": text, f"Field{number}": text})
            for chunk in writer.take_chunks():
                out.write(chunk)
        for chunk in writer.finish():
            out.write(chunk)
        out.seek(0)
        out.write(writer.file_header())
    server = serve(path)
    _ready(page, server)
    assert _total(page) == 3
    for row in range(3):
        page.click(f"#rows .row[data-index='{row}']")
        page.wait_for_function(f"document.getElementById('detail').dataset.row === '{row}'")
        page.click("#tab-details")
        page.check("#xml-view")
        assert hostile[row] in page.text_content("#detail-fields")
        page.click("#tab-general")
    page.click("#counts-button")
    page.wait_for_selector("#counts table")
    for facet in ("provider", "channel"):
        assert set(hostile) <= {label.removeprefix("Evil") for label in _facet(page, facet)}
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 1  # the viewer's own
    assert hostile[0] in page.text_content("#rows")
    _shot(page, artifacts, "xss-escaped")
    assert not page.errors


PROVIDER = "Contoso.ViewerTail"


def test_a_live_session_tails_every_event_in_order(page: Any, artifacts: Path, service: Any, producers: Any) -> None:
    from openetw.controller import Session
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    producer = producers()
    producer.register(PROVIDER)
    with Session.start("ViewerTail", mode="realtime", flush_timer=1, providers=[PROVIDER]) as session, ViewerServer(Viewer()) as server:
        assert producer.wait_enabled(PROVIDER)
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_selector("#tree li[data-session='ViewerTail']")
        page.click("#tree li[data-session='ViewerTail']")
        page.wait_for_function("window.__viewer.state.tail !== null", timeout=30_000)
        page.click("#columns-button")
        page.fill("#field-column", "index")
        page.click("#add-field-column")
        page.click("#columns-button")
        writer = threading.Thread(target=producer.write, args=(PROVIDER, 1000))
        writer.start()
        page.wait_for_function("window.__viewer.state.stats.tailReceived >= 1000", timeout=60_000)
        writer.join(30)
        stats = page.evaluate("window.__viewer.state.stats")
        assert stats["tailReceived"] == 1000 and stats["tailInOrder"]
        assert _total(page) == 1000
        _shot(page, artifacts, "live-tail")
        seen: dict[int, str] = {}
        row = 0
        while row < 1000:
            page.fill("#goto", str(row))
            page.press("#goto", "Enter")
            page.wait_for_selector(f"#rows .row[data-index='{row}']")
            _idle(page)
            pick = "rows => rows.map(r => [Number(r.dataset.index), r.querySelector('.c-field-index').textContent])"
            for cells in page.eval_on_selector_all("#rows .row", pick):
                seen[cells[0]] = cells[1]
            row += 20
        assert [seen[i] for i in range(1000)] == [str(i) for i in range(1000)]
        # pause, write more, resume: the cursor picks up where it stopped
        page.click("#pause")
        assert producer.write(PROVIDER, 20, start=1000) == 20
        time.sleep(1.5)
        assert page.evaluate("window.__viewer.state.stats.tailReceived") == 1000
        page.click("#pause")
        page.wait_for_function("window.__viewer.state.stats.tailReceived >= 1020", timeout=30_000)
        assert page.evaluate("window.__viewer.state.stats.tailInOrder")
        assert session.query()["events_lost"] == int(page.get_attribute("#lost", "data-events-lost"))
        page.goto("about:blank")  # the tail stream ends before the server does


@pytest.mark.parametrize("token", [None, "wrong"])
def test_the_page_without_the_token_is_forbidden(page: Any, serve: Any, token: str | None) -> None:
    server = serve()
    url = server.base + "/" + (f"?token={token}" if token else "")
    response = page.goto(url)
    assert response.status == 403
    assert page.evaluate("document.querySelectorAll('script').length") == 0


def test_the_cpu_stacks_pane_draws_the_flame_graph_and_by_name(page: Any, serve: Any, artifacts: Path) -> None:
    """What ``openetw stacks --json`` computes for the same file."""
    net = corpus_path("etl", "perfview", "net.4.5.2.x64.etl")
    expected = openetw_json("stacks", str(net), "--json", "--no-installed")[0]
    server = serve(net)
    _ready(page, server)
    page.click("#stacks-button")
    page.wait_for_selector("#stacks .flame .frame", timeout=120_000)
    header = page.text_content("#stacks .group")
    assert header is not None and f"{expected['samples']} samples" in header
    frames = page.eval_on_selector_all("#stacks .flame .frame", "items => items.map(i => [i.textContent, i.style.width])")
    names = {name for name, _ in frames}
    assert "ROOT" in names and "Test.x64!Test.Program.Main" in names and "mscorlib!System.DateTime.get_Now" in names
    assert dict(frames)["ROOT"] == "100%"
    shown = page.eval_on_selector_all("#stacks table tr", "rows => rows.slice(1, 4).map(r => r.lastElementChild.textContent)")
    assert shown == [row["name"] for row in expected["by_name"][:3]]
    _shot(page, artifacts, "cpu-stacks")
    assert not page.errors
