"""A user other than root who holds as many connections as the per-user limit allows gets a
clear refusal for the next one, from a real service, while root still connects; a producer of
that user gets no more pools than its limit, while root's producers get theirs.

``nobody``'s side runs in a forked child that dropped its privileges (nothing is executed from
the checkout): it holds its connections while the parent, as root, connects.
"""

from __future__ import annotations

import codecs
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import ServiceClient, Session
from openetw.provider import TraceLoggingProvider  # imported here: nobody may not read the checkout
from openetw.provider.link import link
from tests.service.harness import OTHER_UID, Producer, ServiceProcess, as_other_user, start_service

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

LIMIT = 3
POOL_LIMIT = 1
POOLED = "Test.Pooled"


@pytest.fixture
def limited(service_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceProcess]:
    """A service every user may reach, allowing each user other than root ``LIMIT`` connections."""
    base = Path(tempfile.mkdtemp(prefix="openetw-limits-"))
    socket_path = base / "run" / "control.sock"
    socket_path.parent.mkdir()
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    monkeypatch.setenv("OPENETW_MAX_USER_CONNECTIONS", str(LIMIT))
    monkeypatch.setenv("OPENETW_MAX_USER_POOLS", str(POOL_LIMIT))
    running = start_service(socket_path)
    try:
        for directory in (base, socket_path.parent):
            os.chmod(directory, 0o711)
        os.chmod(socket_path, 0o666)
        yield running
    finally:
        running.kill()
        shutil.rmtree(base, ignore_errors=True)


def _status(client: ServiceClient) -> dict[str, Any]:
    try:
        return {"ok": True, "connections": client.call("status")["connections"]}
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return {"ok": False, "type": type(exc).__name__, "message": str(exc)}


def _nobody_holding_connections() -> tuple[int, int, int]:
    """Fork a child that becomes ``nobody``, takes its connections and reports (pid, report fd, go fd)."""
    for codec in ("utf-8", "ascii", "latin-1"):
        codecs.lookup(codec)
    report_read, report_write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 1
        try:
            os.close(report_read)
            os.close(go_write)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            held = [ServiceClient(autostart=False) for _ in range(LIMIT)]
            first = [_status(client) for client in held]
            extra = ServiceClient(autostart=False)
            refused = _status(extra)
            extra.close()
            os.write(report_write, (json.dumps({"held": first, "refused": refused}) + "\n").encode())
            os.read(go_read, 1)  # root connects meanwhile
            held.pop().close()
            for _ in range(100):  # the service sees the end of the closed one in its own time
                with ServiceClient(autostart=False) as again:
                    answer = _status(again)
                if answer["ok"]:
                    break
                time.sleep(0.05)
            os.write(report_write, (json.dumps({"after_closing_one": answer}) + "\n").encode())
            status = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(report_write, (json.dumps({"error": repr(exc)}) + "\n").encode())
        finally:
            os._exit(status)
    os.close(report_write)
    os.close(go_read)
    return pid, report_read, go_write


def test_the_connection_over_the_limit_is_refused_clearly_and_root_still_connects(limited: ServiceProcess) -> None:
    pid, report_fd, go_fd = _nobody_holding_connections()
    with os.fdopen(report_fd, "r") as reports:
        try:
            first = json.loads(reports.readline())
            assert "error" not in first, first
            assert all(item["ok"] for item in first["held"]), first
            refused = first["refused"]
            assert refused["ok"] is False and refused["type"] == "ServiceError", refused
            assert f"uid {OTHER_UID} already holds {LIMIT} connections" in refused["message"]
            assert f"at most {LIMIT} per user" in refused["message"]
            # root has no limit: it connects (more than once) while nobody holds every one of theirs
            with ServiceClient(autostart=False) as one, ServiceClient(autostart=False) as two, ServiceClient(autostart=False) as three:
                assert [_status(c)["ok"] for c in (one, two, three)] == [True, True, True]
                with ServiceClient(autostart=False) as four:
                    assert _status(four) == {"ok": True, "connections": LIMIT + 4}
        finally:
            os.write(go_fd, b"x")
            os.close(go_fd)
        second = json.loads(reports.readline())
    os.waitpid(pid, 0)
    assert second["after_closing_one"]["ok"] is True, second  # a freed slot is usable again
    assert limited.process.poll() is None
    assert "one more refused" in (limited.directory / "service.log").read_text()


def test_a_users_producer_gets_no_more_pools_than_the_limit_and_roots_still_gets_its_own(limited: ServiceProcess, tmp_path: Path) -> None:
    def produce() -> dict[str, Any]:
        provider = TraceLoggingProvider(POOLED).register()
        deadline = time.monotonic() + 5  # both sessions enable it; only one pool may come
        while len(link()._state.session_writers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        written = provider.write("Tick", index=1)
        return {"pools": len(link()._state.session_writers), "written": written, "enabled": provider.enabled}

    first = Session.start("PoolsA", output=tmp_path / "a.etl", providers=[POOLED])
    second = Session.start("PoolsB", output=tmp_path / "b.etl", providers=[POOLED])
    try:
        report = as_other_user(produce)
        assert report == {"pools": POOL_LIMIT, "written": True, "enabled": True}, report
        root = Producer(dict(os.environ))
        try:
            assert root.register(POOLED)
            assert root.wait_sessions(POOLED, 2) == 2  # root: a pool in each session
        finally:
            root.kill()
    finally:
        totals = [first.stop()["events_written"], second.stop()["events_written"]]
    assert sorted(totals) == [0, 1]  # nobody's one event reached the one session it had a pool for
    assert f"uid {OTHER_UID} has {POOL_LIMIT} pools already" in (limited.directory / "service.log").read_text()
