"""The viewer's web application over HTTP: the token, the cookie, the API's answers and errors."""

from __future__ import annotations

import http.client
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_path

pytest.importorskip("starlette")


def _request(server: Any, path: str, *, cookie: str | None = None, auth: bool = False, method: str = "GET", body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """One request; ``auth``: as a session of the run (its cookie, CSRF token and this origin)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    sent = dict(headers or {})
    if cookie is not None:
        sent["Cookie"] = f"openetw_viewer_{server.port}={cookie}"
    if auth:
        sent = {**server.client_headers(), "Origin": server.base, **sent}
    payload = json.dumps(body).encode() if body is not None else None
    connection.request(method, path, body=payload, headers=sent)
    response = connection.getresponse()
    data = response.read(2000) if "event-stream" in (response.getheader("Content-Type") or "") else response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def _api(server: Any, path: str, **kwargs: Any) -> Any:
    status, _, data = _request(server, path, auth=True, **kwargs)
    return status, json.loads(data)


@pytest.mark.parametrize("path", ["/", "/static/viewer.js", "/api/sources", "/api/s/f1/rows", "/api/s/f1/tail", "/api/sessions"])
def test_every_request_without_the_token_is_forbidden(serve: Any, path: str) -> None:
    server = serve(corpus_path("evtx", "system.evtx"))
    assert _request(server, path)[0] == 403
    assert _request(server, path, cookie="not-the-token")[0] == 403
    assert _request(server, path + "?token=wrong")[0] == 403
    assert _request(server, path, auth=True)[0] in (200, 400) if path != "/api/s/f1/tail" else True


def test_the_token_is_exchanged_once_for_a_session_cookie_named_for_the_port(serve: Any) -> None:
    server = serve()
    status, headers, _ = _request(server, f"/?token={server.viewer.token}&x=1")
    assert status == 200
    location, _, fragment = headers["refresh"].removeprefix("0;url=").partition("#")
    assert location == "/?x=1" and fragment.startswith("csrf=")
    cookie = headers["set-cookie"]
    name, _, value = cookie.split(";")[0].partition("=")
    assert name == f"openetw_viewer_{server.port}" and server.viewer.token not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert _request(server, f"/?token={server.viewer.token}")[0] == 403  # the token opens one session
    status, headers, body = _request(server, "/", cookie=value)
    assert status == 200 and b"viewer.js" in body
    assert "script-src 'self'" in headers["content-security-policy"] and "unsafe-inline" not in headers["content-security-policy"]
    assert _request(server, "/api/sources", cookie=value)[0] == 403  # the cookie alone opens no API
    csrf = fragment.removeprefix("csrf=")
    assert _request(server, "/api/sources", cookie=value, headers={"X-OpenETW-CSRF": csrf})[0] == 200
    assert _request(server, f"/api/sources?csrf={csrf}", cookie=value)[0] == 200
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith(f"?token={server.viewer.token}")


def test_the_tail_stream_needs_the_token_too(serve: Any) -> None:
    server = serve(corpus_path("evtx", "system.evtx"))
    assert _request(server, "/api/s/f1/tail?cursor=0", headers={"Accept": "text/event-stream"})[0] == 403


def test_rows_facets_and_timeline_of_an_evtx(serve: Any) -> None:
    server = serve(corpus_path("evtx", "system.evtx"))
    status, body = _api(server, "/api/s/f1/rows?offset=10&limit=5&level=2")
    assert status == 200 and body["total"] == 41 and body["events"] == 1881
    assert [row["levelName"] for row in body["rows"]] == ["Error"] * 5 and body["offset"] == 10
    status, facets = _api(server, "/api/s/f1/facets?level=2")
    assert facets["total"] == 41
    assert {entry["label"]: entry["count"] for entry in facets["facets"]["level"]} == {"Information": 1498, "Warning": 342, "Error": 41}
    assert sum(entry["count"] for entry in facets["facets"]["provider"]) == 41
    status, timeline = _api(server, "/api/s/f1/timeline?bins=50&level=2,3")
    assert sum(sum(series["counts"]) for series in timeline["series"]) == 41 + 342
    status, found = _api(server, "/api/s/f1/rows?q=cldflt&limit=100")
    assert status == 200 and found["total"] > 0 and all("cldflt" in json.dumps(row).lower() for row in found["rows"])


def test_bad_requests_say_what_is_wrong(serve: Any, tmp_path: Path) -> None:
    server = serve(corpus_path("evtx", "system.evtx"))
    assert _api(server, "/api/s/f1/rows?level=high") == (400, {"error": "level: 'high' is not a number"})
    assert _api(server, "/api/s/nope/rows")[0] == 400
    assert _api(server, "/api/s/f1/event/99999")[1]["error"].startswith("no event 99999")
    assert _api(server, "/api/s/f1/export?format=pdf")[1]["error"].startswith("no export format 'pdf'")
    status, body = _api(server, "/api/open", method="POST", body={"path": str(tmp_path / "missing.etl")})
    assert status == 400 and body["error"].startswith("no such file")
    assert _api(server, "/api/s/f1/export?format=etl")[1]["error"].endswith("export it as .evtx, XML, JSON or CSV")


def _refused_opening(server: Any, path: Path) -> tuple[int, dict[str, Any]]:
    return _api(server, "/api/open", method="POST", body={"path": str(path)})


def test_a_file_this_user_may_not_read_is_refused(serve: Any, tmp_path: Path) -> None:
    secret = tmp_path / "secret.etl"
    secret.write_bytes(b"\0" * 64)
    secret.chmod(0)
    try:
        if os.geteuid() != 0:
            status, body = _refused_opening(serve(), secret)
            assert status == 400 and "permission denied" in body["error"], body
            return
        # Root reads every file: the viewer is run by another account, in a child that drops to it.
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            code = 1
            try:
                os.close(read_end)
                from openetw.viewer.app import Viewer
                from openetw.viewer.server import ViewerServer

                # Started, and a file opened, before dropping: what they import may lie in a
                # checkout only root may enter.
                server = ViewerServer(Viewer()).start()
                try:
                    assert _refused_opening(server, corpus_path("etl", "tx", "HTTP_Server.etl"))[0] == 200
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)  # nobody, every thread of this process
                    status, body = _refused_opening(server, secret)
                finally:
                    server.stop()
                os.write(write_end, json.dumps([status, body]).encode())
                code = 0
            except BaseException as error:  # noqa: BLE001 - whatever went wrong reaches the parent's assertion
                os.write(write_end, f"child failed: {error!r}".encode())
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reply:
            answer = reply.read()
        _, wait_status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(wait_status) == 0, answer
        status, body = json.loads(answer)
        assert status == 400 and "permission denied" in body["error"], body
    finally:
        secret.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_an_etl_opened_through_the_page_is_indexed_with_progress_then_served(serve: Any) -> None:
    server = serve()
    status, info = _api(server, "/api/open", method="POST", body={"path": str(corpus_path("etl", "tx", "HTTP_Server.etl"))})
    assert status == 200 and info["kind"] == "etl" and 0.0 <= info["progress"] <= 1.0
    status, body = _api(server, f"/api/s/{info['id']}/rows?limit=1")
    assert body["total"] == 2042
    status, again = _api(server, f"/api/s/{info['id']}")
    assert again["ready"] and again["progress"] == 1.0 and again["events_lost"] == 0 and again["buffers_lost"] == 0
    status, counts = _api(server, f"/api/s/{info['id']}/counts")
    assert sum(entry["count"] for entry in counts["events"]) == 2042
    status, data = _request(server, f"/api/s/{info['id']}/export?format=etl&level=4", auth=True)[::2]
    assert status == 200 and len(data) > 0


def test_the_command_prints_one_url_with_the_token_and_serves_it(tmp_path: Path) -> None:
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    evtx = corpus_path("evtx", "system.evtx")
    process = subprocess.Popen([sys.executable, "-m", "openetw", "viewer", str(evtx), "--no-browser", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        printed = json.loads(process.stdout.readline())
        url = printed["url"]
        base, _, token = url.partition("/?token=")
        assert base == f"http://127.0.0.1:{printed['port']}" and len(token) >= 32
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/api/sources", timeout=30)
        assert refused.value.code == 403
        with urllib.request.urlopen(url, timeout=30) as exchanged:
            cookie = exchanged.headers["Set-Cookie"].split(";")[0]
            csrf = exchanged.headers["Refresh"].partition("#csrf=")[2]
        request = urllib.request.Request(base + "/api/sources", headers={"Cookie": cookie, "X-OpenETW-CSRF": csrf})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert [source["name"] for source in json.loads(response.read())["sources"]] == ["system.evtx"]
    finally:
        process.terminate()
        process.wait(30)


def test_the_command_refuses_a_missing_file() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "openetw", "viewer", "/nonexistent/x.etl", "--no-browser"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2 and "no such file: /nonexistent/x.etl" in done.stderr


def test_a_websocket_without_the_token_is_refused(serve: Any) -> None:
    server = serve()
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    assert _request(server, "/api/s/f1/tail", headers=upgrade)[0] == 403
    assert _request(server, "/api/s/f1/tail?token=wrong", headers=upgrade)[0] == 403


def test_full_text_search_over_an_etl_builds_its_text_index_once_with_progress(serve: Any) -> None:
    import time

    server = serve(corpus_path("etl", "tx", "HTTP_Server.etl"))
    status, body = _api(server, "/api/s/f1/rows?limit=1")
    assert body["total"] == 2042
    status, index = _api(server, "/api/s/f1/text-index", method="POST")
    assert status == 200 and index["state"] in ("building", "ready") and 0.0 <= index["progress"] <= 1.0
    deadline = time.monotonic() + 120
    while index["state"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.1)
        status, index = _api(server, "/api/s/f1/text-index", method="POST")
    assert index == {"state": "ready", "progress": 1.0}
    source = server.viewer.sources["f1"]
    texts = source.text_index()
    matching = [row for row, text in enumerate(texts) if "dd5ef90a" in text]
    status, found = _api(server, "/api/s/f1/rows?q=DD5EF90A&limit=500")
    assert found["total"] == len(matching) > 0
    assert [row["row"] for row in found["rows"]] == matching[:500]


def test_stacks_of_an_etl_source_and_refused_for_an_evtx(serve: Any) -> None:
    server = serve(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"), corpus_path("evtx", "system.evtx"))
    status, body = _api(server, "/api/s/f1/stacks?fold=5")
    assert status == 200 and body["samples"] == 6318
    assert body["by_name"][0]["name"] == "mscorlib!System.DateTime.GetDatePart"
    assert body["tree"]["name"] == "ROOT" and body["tree"]["inclusive"] == 6318
    assert 0.85 < body["naming"]["image_share"] <= 1
    status, body = _api(server, "/api/s/f2/stacks")
    assert status == 400 and "stacks come from .etl files" in json.dumps(body)


def test_stacks_of_an_etl_source_come_from_its_index(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flame pane takes a single .etl's CPU samples the way ``openetw stacks`` does: from
    the file's index, on arrays, never record by record."""

    def per_record(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the per-record path was taken")

    monkeypatch.setattr("openetw.events.profile.load_profile", per_record)
    server = serve(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))
    status, body = _api(server, "/api/s/f1/stacks?fold=5")
    assert status == 200 and body["samples"] == 6318
    assert body["by_name"][0]["name"] == "mscorlib!System.DateTime.GetDatePart"
