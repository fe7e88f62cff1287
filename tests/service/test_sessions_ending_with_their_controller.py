"""A session started with ``end_with_connection`` ends when its controller's connection closes
(the controller killed or not); others outlive their controller, as ETW's do."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from openetw.controller import Session, list_sessions
from tests.service.harness import ServiceProcess

CONTROLLER = """
import sys, time
from openetw.controller import Session
owned = Session.start("Owned", mode="realtime", end_with_connection=True, providers=["*Test.Owned"])
kept = Session.start("Kept", mode="realtime", providers=["*Test.Owned"])
print("started", flush=True)
time.sleep(60)
"""


def names(socket: Path) -> set[str]:
    return {info["name"] for info in list_sessions(socket=socket)}


def test_a_session_ends_with_its_controller_only_when_asked(service: ServiceProcess, tmp_path: Path) -> None:
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER], stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout is not None and controller.stdout.readline().strip() == "started"
        assert names(service.socket) == {"Owned", "Kept"}
        controller.kill()  # SIGKILL: the connection closes without a word
        controller.wait(timeout=10)
        deadline = time.monotonic() + 20
        while "Owned" in names(service.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert names(service.socket) == {"Kept"}
        assert "stopped 'Owned': its controller" in (service.directory / "service.log").read_text()
    finally:
        if controller.poll() is None:
            controller.kill()
        Session.attach("Kept", socket=service.socket).stop()


def test_end_with_connection_is_checked(service: ServiceProcess) -> None:
    from openetw.controller.client import ServiceClient
    from openetw.errors import OpenEtwError

    with ServiceClient(service.socket, autostart=False) as client:
        try:
            client.call("start_session", config={"name": "Bad", "mode": "real-time"}, end_with_connection="yes")
        except OpenEtwError as error:
            assert "end_with_connection must be true or false" in str(error)
        else:
            raise AssertionError("a non-boolean end_with_connection was accepted")
    assert "Bad" not in names(service.socket)
