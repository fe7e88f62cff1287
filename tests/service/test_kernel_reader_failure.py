"""A kernel session whose reader fails is reported failed, with the reason, by ``kernel query``
and ``session query``, and the service stays up for everything else.

The failure is injected through the recorder's test hook (``$OPENETW_KERNEL_READER_FAULT`` in
the service's environment: every pool write fails once tracing runs). Root and tracefs are
needed (skipped with the reason otherwise)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.controller import ServiceClient, Session, list_sessions
from openetw.service.kernel_recorder import READER_FAULT_ENV
from tests.service.harness import ServiceProcess, kill_recorders, need_tracefs, start_service
from tests.service.test_kernel_sessions import run_json

FAULT = "injected fault: the kernel event source broke"
WAIT = 60.0  # a guard against hangs only


@pytest.fixture
def faulty_kernel_service(service_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceProcess]:
    need_tracefs()
    monkeypatch.setenv(READER_FAULT_ENV, FAULT)
    running = start_service(service_env)
    monkeypatch.delenv(READER_FAULT_ENV)
    try:
        yield running
    finally:
        running.kill()
        kill_recorders(running.pid)


def test_a_failed_kernel_reader_shows_as_failed_with_its_reason(
    faulty_kernel_service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = run_json(capsys, "session", "start", "KBroken", "--kernel-flags", "process", "-o", str(tmp_path / "broken.etl"))
    assert started["state"] == "running"
    deadline = time.monotonic() + WAIT
    queried = run_json(capsys, "session", "query", "KBroken")
    while queried["state"] != "failed" and time.monotonic() < deadline:
        subprocess.run(["/bin/true"], check=True)  # events for the reader to (fail to) write
        time.sleep(0.2)
        queried = run_json(capsys, "session", "query", "KBroken")
    assert queried["state"] == "failed", queried
    assert FAULT in queried["failure"] and "reader failed" in queried["failure"]

    kernel = run_json(capsys, "kernel", "query", "KBroken")
    assert kernel["state"] == "failed" and FAULT in kernel["failure"]
    assert main(["session", "query", "KBroken"]) == 0
    assert f"failure: the reader failed: OSError: {FAULT}" in capsys.readouterr().out

    # The service is up: it answers, starts and stops other sessions, and lets the failed one go.
    assert faulty_kernel_service.process.poll() is None
    with Session.start("AfterFailure", mode="realtime") as other:
        assert other.info()["state"] == "running"
    with ServiceClient(autostart=False) as client:
        final = client.call("stop_session", session="KBroken")["session"]  # a failed session is let go
    assert final["state"] == "failed" and FAULT in final["failure"]
    assert "KBroken" not in [s["name"] for s in list_sessions()]
    assert faulty_kernel_service.process.poll() is None
