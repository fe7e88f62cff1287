"""The viewer's session, its checks of Host, Origin and CSRF, its launch file, and one bad file
breaking only its own source (over HTTP on loopback, against a served viewer)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_path
from tests.viewer.test_app import _api, _request

pytest.importorskip("starlette")


def write_evtx(path: Path, times: list[int], payload: bytes = b"\x00\x01\xfe") -> Path:
    """An .evtx of one event per FILETIME in ``times``, each with a binary field."""
    from openetw.evtx.record import EvtxHeader
    from openetw.evtx.writer import EvtxWriter

    writer = EvtxWriter()
    with open(path, "wb") as out:
        out.write(writer.file_header(dirty=True))
        for number, filetime in enumerate(times):
            header = EvtxHeader()
            header.provider_name = "Contoso-Odd"
            header.event_id = 7 + number
            header.level = 4
            header.time_created = filetime
            writer.add_event(header, {"Blob": payload, "Index": str(number)})
            for chunk in writer.take_chunks():
                out.write(chunk)
        for chunk in writer.finish():
            out.write(chunk)
        out.seek(0)
        out.write(writer.file_header())
    return path


def test_a_filetime_above_2_63_and_a_damaged_file_break_only_their_own_source(serve: Any, tmp_path: Path) -> None:
    odd = write_evtx(tmp_path / "odd.evtx", [133_000_000_000_000_000, 2**63 + 5])
    damaged = tmp_path / "damaged.etl"
    damaged.write_bytes(b"\x13" * 70000)
    server = serve(corpus_path("evtx", "system.evtx"))
    for path in (odd, damaged):
        assert _api(server, "/api/open", method="POST", body={"path": str(path)})[0] == 200
    assert all(source.ready.wait(60) for source in server.viewer.sources.values())
    for _ in range(3):  # every time, not only the first
        status, body = _api(server, "/api/sources")
        assert status == 200
    by_name = {source["name"]: source for source in body["sources"]}
    assert by_name["system.evtx"]["error"] is None and by_name["system.evtx"]["events"] == 1881
    assert by_name["odd.evtx"]["error"] is None and by_name["odd.evtx"]["events"] == 2
    assert by_name["damaged.etl"]["error"]
    status, rows = _api(server, f"/api/s/{by_name['odd.evtx']['id']}/rows")
    assert status == 200 and [row["fields"]["Blob"] for row in rows["rows"]] == ["0001FE", "0001FE"]  # hex, not b'...'
    status, failed = _api(server, f"/api/s/{by_name['damaged.etl']['id']}/rows")
    assert status == 400 and failed["error"] == by_name["damaged.etl"]["error"]
    assert _api(server, f"/api/s/{by_name['damaged.etl']['id']}/close", method="POST", body={}) == (200, {"closed": by_name["damaged.etl"]["id"]})
    status, body = _api(server, "/api/sources")
    assert status == 200 and sorted(source["name"] for source in body["sources"]) == ["odd.evtx", "system.evtx"]
    assert _api(server, "/api/s/f1/rows?level=2")[1]["total"] == 41
    status, refused = _api(server, "/api/s/f1/tail?cursor=0")  # a file has no tail: no stream that idles forever
    assert status == 400 and "only a live session or a log has a tail" in refused["error"]


def _exchange(server: Any) -> tuple[str, str]:
    """The launch token exchanged as a browser would: (the cookie as sent back, the CSRF token)."""
    status, headers, _ = _request(server, f"/?token={server.viewer.token}")
    assert status == 200
    return headers["set-cookie"].split(";")[0], headers["refresh"].partition("#csrf=")[2]


def test_the_session_cookie_alone_opens_nothing_and_cross_origin_requests_are_refused(serve: Any, tmp_path: Path) -> None:
    server = serve(corpus_path("evtx", "system.evtx"))
    cookie, csrf = _exchange(server)
    assert cookie.startswith(f"openetw_viewer_{server.port}=")
    same_origin = {"Cookie": cookie, "Origin": server.base, "X-OpenETW-CSRF": csrf}
    assert _request(server, "/api/sources", headers=same_origin)[0] == 200
    # what a server on another port receives from the browser is the cookie: it opens no API
    assert _request(server, "/api/sources", headers={"Cookie": cookie})[0] == 403
    assert _request(server, "/api/s/f1/export?format=csv", headers={"Cookie": cookie})[0] == 403
    # a page on 127.0.0.1:<another port> POSTing text/plain (no preflight) with the browser's cookie
    shadow = json.dumps({"path": "/etc/shadow"}).encode()
    other = f"http://127.0.0.1:{server.port + 1 if server.port < 65535 else 1}"
    for headers in ({"Cookie": cookie, "Origin": other, "Content-Type": "text/plain", "Sec-Fetch-Site": "same-site"},
                    {"Cookie": cookie, "Origin": other, "Content-Type": "text/plain", "X-OpenETW-CSRF": csrf},
                    {"Cookie": cookie, "Content-Type": "text/plain", "X-OpenETW-CSRF": csrf},  # no Origin on a POST
                    {"Cookie": cookie, "Origin": server.base, "Content-Type": "text/plain"}):  # no CSRF token  # fmt: skip
        status, _, body = _post(server, shadow, headers)
        assert status == 403, (headers, body)
    assert [source.name for source in server.viewer.sources.values()] == ["system.evtx"]
    # a name that resolves here (DNS rebinding) is not this server
    assert _request(server, "/api/sources", headers={**same_origin, "Host": f"evil.example:{server.port}"})[0] == 403
    assert _request(server, "/api/sources", headers={**same_origin, "Sec-Fetch-Site": "same-site"})[0] == 403
    assert _request(server, f"/api/sources?csrf={csrf}", headers={"Cookie": cookie})[0] == 200  # the event stream's way
    # the token opened one session; a cookie of another run (or a forged one) opens nothing
    assert _request(server, f"/?token={server.viewer.token}")[0] == 403
    forged = cookie.rsplit(".", 1)[0] + "." + "0" * 64
    assert _request(server, "/", headers={"Cookie": forged})[0] == 403


def _post(server: Any, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("POST", "/api/open", body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), data


def test_the_launch_file_is_private_from_the_start_and_gone_once_used(serve: Any, tmp_path: Path) -> None:
    server = serve()
    old = os.umask(0o022)
    try:
        path = Path(server.launch_file(str(tmp_path)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert server.url.replace("&", "&amp;") in path.read_text()
    _exchange(server)
    assert not path.exists()


def test_the_browser_is_started_without_the_token_on_its_command_line(tmp_path: Path) -> None:
    argv_log = tmp_path / "argv.json"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv, open({str(argv_log)!r}, 'w'))\n")
    fake.chmod(0o700)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENETW_")}
    env.update(BROWSER=f"{fake} %s", TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen([sys.executable, "-m", "openetw", "viewer", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)  # fmt: skip
    try:
        assert process.stdout is not None
        token = json.loads(process.stdout.readline())["url"].partition("?token=")[2]
        deadline = time.monotonic() + 60
        while not argv_log.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        argv = json.loads(argv_log.read_text())
        assert token not in " ".join(argv)
        launch = Path(argv[-1].removeprefix("file://"))
        assert launch.is_file() and stat.S_IMODE(launch.stat().st_mode) == 0o600 and token in launch.read_text()
    finally:
        process.terminate()
        process.wait(30)
    assert not launch.exists()  # removed when the viewer stops


def test_an_event_without_a_known_schema_says_what_event_viewer_says(serve: Any) -> None:
    server = serve(corpus_path("etl", "perfview", "gcevents.etl"))
    status, body = _api(server, "/api/s/f1/rows?limit=100")
    assert status == 200 and body["total"] == 71
    missing = [row for row in body["rows"] if row["message"].startswith("The description for Event ID")]
    # .NET 8's GCFitBucketInfo (208) and GCLOHCompact (209) are newer than the runtime layouts openetw
    # ships: what `openetw report` counts as not decoded
    assert sorted(row["id"] for row in missing) == [208, 209]
    first = missing[0]
    assert first["message"].startswith(f"The description for Event ID {first['id']} from source Microsoft-Windows-DotNETRuntime cannot be found.")
    assert all(not row["message"].startswith("The description") for row in body["rows"] if row not in missing)


@pytest.mark.parametrize(("host", "bind", "allowed"), [
    ("127.0.0.1:8000", "127.0.0.1", True), ("localhost:8000", "127.0.0.1", True), ("[::1]:8000", "::1", True),
    ("127.0.0.1:8001", "127.0.0.1", False), ("127.0.0.1", "127.0.0.1", False), ("evil.example:8000", "127.0.0.1", False),
    ("192.168.1.5:8000", "127.0.0.1", False), ("192.168.1.5:8000", "0.0.0.0", True), ("evil.example:8000", "0.0.0.0", False),
    ("", "127.0.0.1", False), ("[::1:8000", "::1", False),
])  # fmt: skip
def test_the_host_must_name_this_server(host: str, bind: str, allowed: bool) -> None:
    from openetw.viewer.auth import host_allowed

    assert host_allowed(host, 8000, bind) is allowed
