"""Peer credentials decide who controls a session, and files are made with their owner's rights."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import ServiceClient, Session
from openetw.provider import TraceLoggingProvider
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user, indices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def test_only_the_owner_or_root_controls_a_session(reachable: tuple[ServiceProcess, Path], tmp_path: Path) -> None:
    def intrude() -> dict[str, Any]:
        report: dict[str, Any] = {}
        with ServiceClient(autostart=False) as client:
            try:
                client.call("stop_session", session="Owned")
                report["stop"] = "allowed"
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                report["stop"] = type(exc).__name__
            client.call("start_session", config={"name": "Mine", "mode": "real-time"})
            report["visible"] = [s["name"] for s in client.call("list")["sessions"]]
            report["owner"] = client.call("query", session="Mine")["session"]["owner_uid"]
        return report

    with Session.start("Owned", output=tmp_path / "owned.etl") as owned:
        assert as_other_user(intrude) == {"stop": "AccessDenied", "visible": ["Mine"], "owner": OTHER_UID}
        assert owned.query()["events_written"] == 0  # still running
        with ServiceClient() as client:  # root sees and controls every session
            assert sorted(s["name"] for s in client.call("list")["sessions"]) == ["Mine", "Owned"]
            client.call("stop_session", session="Mine")


def test_a_new_file_session_gets_its_next_files_with_its_owners_rights(reachable: tuple[ServiceProcess, Path]) -> None:
    _, theirs = reachable
    pattern = theirs / "part%d.etl"

    def trace() -> dict[str, Any]:
        provider = TraceLoggingProvider("Test.Access").register()
        session = Session.start("Parts", output=pattern, mode="newfile", max_size=1, flush_timer=0, providers=["Test.Access"])
        deadline = time.monotonic() + 10
        while not provider.enabled and time.monotonic() < deadline:
            time.sleep(0.01)
        written = sum(provider.write("Tick", index=i, pad="x" * 200) for i in range(6000))
        stats = session.stop()
        provider.unregister()
        return {"written": written, **stats}

    report = as_other_user(trace)
    assert report.get("written") == 6000, report
    parts = sorted(theirs.glob("part*.etl"))
    assert len(parts) >= 2
    assert {path.stat().st_uid for path in parts} == {OTHER_UID}
    assert report["events_written"] + report["events_lost"] == 6000
    assert sum(len(indices(path)) for path in parts) == report["events_written"]
