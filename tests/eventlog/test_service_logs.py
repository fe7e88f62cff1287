"""The Sample Driver with its manifest installed and no trace session started by anyone: its
System-channel events land in the System log, which keeps them across a stop, a new start and
a SIGKILL of the service, and which `openetw log query` reads with the service down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogStore
from tests.service.harness import ServiceProcess, start_service

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "examples" / "sample_driver"
MESSAGES = ["Driver Loaded", "IRP A Occurred", "Driver Unloaded"]


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private data directory (manifest stores, logs) and socket; no service yet."""
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    return tmp_path


@pytest.fixture
def services() -> Iterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    try:
        yield started
    finally:
        for service in started:
            service.kill()


def run_driver() -> str:
    result = subprocess.run([sys.executable, str(DRIVER / "sample_driver.py"), "--requests", "1", "--interval", "0"],
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return result.stdout


def wait_for(store: LogStore, log: str, count: int) -> list[str | None]:
    deadline = time.monotonic() + 20
    while True:
        events = list(store.query(log)) if store.exists(log) else []
        rendered = store.exists(log) and store.pending(log) == 0  # the service renders what it stored first
        if (len(events) >= count and rendered) or time.monotonic() > deadline:
            return [e.message for e in events]
        time.sleep(0.1)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    try:
        return [json.loads(out)]  # one document
    except json.JSONDecodeError:
        return [json.loads(line) for line in out.splitlines() if line.strip()]  # JSON lines


def test_the_sample_driver_lands_in_the_system_log_and_stays(machine: Path, services: list[ServiceProcess],
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["manifest", "install", str(DRIVER / "evntdrv.xml")]) == 0
    capsys.readouterr()
    services.append(start_service(machine / "control.sock"))
    sessions = cli_json(capsys, "session", "list", "--json")[0]
    assert "EventLog-Admin" in [s["name"] for s in sessions]  # type: ignore[union-attr,index]

    out = run_driver()
    assert out.count("written\n") == 3 and "not written" not in out, out
    store = LogStore(machine / "data" / "logs")
    assert wait_for(store, "System", 3) == MESSAGES
    events = list(store.query("System"))
    assert [(e.provider, e.event_id, e.channel) for e in events] == [("Sample Driver", i, "System") for i in (1, 2, 3)]
    assert events[0].fields == {"DeviceNameLength": "32", "name": "\\Device\\EventDrv", "Status": "0"}
    assert len(events[0].record) > 80 and events[0].format == "etw"

    assert main(["service", "stop"]) == 0
    assert services[0].process.wait(timeout=20) == 0
    capsys.readouterr()
    read = cli_json(capsys, "log", "query", "System", "--format", "json")  # the service is down: read directly
    assert [e["message"] for e in read] == MESSAGES
    assert read[0]["cursor"] == f"{store.info('System').log_id}:1"

    services.append(start_service(machine / "control.sock"))
    assert wait_for(store, "System", 3) == MESSAGES
    run_driver()
    assert wait_for(store, "System", 6) == MESSAGES * 2

    services[1].process.kill()  # SIGKILL
    services[1].process.wait(timeout=10)
    assert [e.message for e in store.query("System")] == MESSAGES * 2
    info = cli_json(capsys, "log", "get", "System", "--info", "--json")[0]
    assert (info["records"], info["oldest_record_id"], info["refused"], info["lost"]) == (6, 1, 0, 0)
    assert os.path.isfile(machine / "data" / "logs" / "System.db")
