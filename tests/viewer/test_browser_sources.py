"""The viewer in Chromium: .NET events decoded as the CLI decodes them, a tailed session's facets
and timeline that follow it, nothing of a previous source left after switching, and a server on
another port of 127.0.0.1 that learns nothing opening the viewer."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Any

from tests.conftest import corpus_path
from tests.viewer.test_browser import _facet, _idle, _ready, _select, _shot, _total

DOTNET = {"Microsoft-Windows-DotNETRuntime": 32730, "Microsoft-Windows-DotNETRuntimeRundown": 33011}


def test_the_dotnet_events_of_a_perfview_trace_have_names_fields_and_a_field_value_finds_them(page: Any, serve: Any, artifacts: Path) -> None:
    server = serve(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))
    _ready(page, server)
    providers = _facet(page, "provider")
    assert {name: providers.get(name) for name in DOTNET} == DOTNET
    page.click("#facets li[data-facet='provider'][title='Microsoft-Windows-DotNETRuntime']")
    _idle(page)
    assert _total(page) == DOTNET["Microsoft-Windows-DotNETRuntime"]
    events = {name for name in _facet(page, "event") if name.startswith("Microsoft-Windows-DotNETRuntime/")}
    assert "Microsoft-Windows-DotNETRuntime/Method/LoadVerbose" in events
    assert not any("Event(" in name for name in events)
    page.click("#facets details[data-facet-name='event'] summary")
    page.click("#facets li[data-facet='event'][title='Microsoft-Windows-DotNETRuntime/Method/LoadVerbose']")
    _idle(page)
    page.click("#rows .row[data-index='0']")
    page.wait_for_function("document.getElementById('detail').dataset.row !== undefined")
    fields = dict(page.eval_on_selector_all("#detail-fields tr", "rows => rows.slice(1).map(r => [r.children[0].textContent, r.children[1].textContent])"))
    assert fields.get("MethodNamespace")
    assert "cannot be found" not in page.text_content("#detail-message")
    _shot(page, artifacts, "dotnet-events")
    needle = fields["MethodNamespace"]
    page.click("#facets li[data-facet='event'].on")  # back to every event of the provider
    _idle(page)
    generation = page.evaluate("window.__viewer.state.generation")
    page.fill("#search", needle)
    page.press("#search", "Enter")
    page.wait_for_function(f"window.__viewer.state.generation > {generation} && window.__viewer.idle()", timeout=120_000)
    _idle(page)
    assert 0 < _total(page) < DOTNET["Microsoft-Windows-DotNETRuntime"]
    page.click("#rows .row[data-index='0']")
    page.wait_for_function("document.getElementById('detail').dataset.row !== undefined")
    assert needle.lower() in page.text_content("#detail-fields").lower() + page.text_content("#detail-message").lower()
    assert not page.errors


def test_switching_sources_leaves_nothing_of_the_previous_one(page: Any, serve: Any) -> None:
    server = serve(corpus_path("evtx", "system.evtx"), corpus_path("etl", "tx", "HTTP_Server.etl"))
    _ready(page, server)
    _select(page, "f1")
    page.click("#rows .row[data-index='2']")
    page.wait_for_function("document.getElementById('detail').dataset.row === '2'")
    assert page.text_content("#detail-message")
    page.fill("#goto", "40")
    page.press("#goto", "Enter")
    page.wait_for_selector("#rows .row.target[data-index='40']")
    _select(page, "f2")
    assert page.evaluate("document.getElementById('detail').dataset.row") is None
    assert page.text_content("#detail-message") == "" and page.text_content("#detail-fields") == ""
    assert page.query_selector("#rows .row.target") is None and page.input_value("#goto") == ""
    assert page.evaluate("window.__viewer.state.selected") is None and page.evaluate("window.__viewer.state.target") is None
    assert not page.errors


PROVIDER = "Contoso.ViewerFacets"


def test_facets_and_timeline_follow_a_session_attached_before_its_first_event(page: Any, artifacts: Path, service: Any, producers: Any) -> None:
    from openetw.controller import Session
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    producer = producers()
    producer.register(PROVIDER)
    with Session.start("ViewerFacets", mode="realtime", flush_timer=1, providers=[PROVIDER]), ViewerServer(Viewer()) as server:
        assert producer.wait_enabled(PROVIDER)
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_selector("#tree li[data-session='ViewerFacets']")
        page.click("#tree li[data-session='ViewerFacets']")
        page.wait_for_function("window.__viewer.state.tail !== null", timeout=30_000)
        _idle(page)
        assert page.evaluate("window.__viewer.state.hist.series.length") == 0  # nothing yet
        for count in (30, 60):
            assert producer.write(PROVIDER, 30, start=count - 30) == 30
            page.wait_for_function(
                f"""(() => {{ const item = document.querySelector("#facets li[data-facet='provider'][title='{PROVIDER}'] .count");
                    return item !== null && item.textContent === '{count}'; }})()""", timeout=60_000)  # fmt: skip
            # the timeline follows too (it refreshes on its own beat, at most once a second)
            page.wait_for_function(
                f"""(() => {{ const series = window.__viewer.state.hist.series;
                    return series.reduce((total, entry) => total + entry.counts.reduce((a, b) => a + b, 0), 0) === {count}; }})()""",
                timeout=60_000)  # fmt: skip
        _shot(page, artifacts, "live-facets")
        page.goto("about:blank")  # the tail stream ends before the server does


def test_a_server_on_another_port_learns_nothing_that_opens_the_viewer(page: Any, serve: Any, artifacts: Path, tmp_path: Path) -> None:
    from tests.viewer.test_app import _request

    server = serve(corpus_path("evtx", "system.evtx"))
    launch = server.launch_file(str(tmp_path))  # as `openetw viewer` hands it to the browser
    page.goto(Path(launch).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    _idle(page)
    assert page.url.rstrip("/") == server.base and _total(page) == 1881
    received: list[str] = []
    attack = f"""<!DOCTYPE html><title>waiting</title><script>
      const viewer = "{server.base}";
      const tries = [
        fetch(viewer + "/api/open", {{method: "POST", mode: "no-cors", credentials: "include",
          headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{path: "/etc/shadow"}})}}),
        fetch(viewer + "/api/sources", {{mode: "no-cors", credentials: "include"}}),
      ];
      Promise.allSettled(tries).then(() => {{ document.title = "sent"; }});
    </script>"""

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.headers.get("Cookie") or "")
            body = attack.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
        page.wait_for_function("document.title === 'sent'", timeout=30_000)
    finally:
        other.shutdown()
        other.server_close()
        thread.join(10)
    assert [source.name for source in server.viewer.sources.values()] == ["system.evtx"]  # the cross-port POST was refused
    cookies = [part.strip() for header in received for part in header.split(";") if part.strip()]
    # the browser does send the viewer's cookie to the other port (cookies are per host, not per port) ...
    assert any(cookie.startswith(f"openetw_viewer_{server.port}=") for cookie in cookies)
    for cookie in cookies:  # ... and it opens nothing
        assert server.viewer.token not in cookie
        assert _request(server, "/api/sources", headers={"Cookie": cookie})[0] == 403
        assert _request(server, "/api/s/f1/rows", headers={"Cookie": cookie, "Origin": server.base})[0] == 403
    page.goto(server.base + "/")  # the viewer's own page still works in its browser
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    _idle(page)
    assert _total(page) == 1881
    _shot(page, artifacts, "cross-port-refused")
    assert not page.errors
