"""An unprivileged producer (``nobody``) against root's sessions: it cannot forge records into
root's file, register a provider secured for root, or take the session slots kept for root.

The work of ``nobody`` runs in a forked child that dropped its privileges (``as_other_user``):
nothing is executed from the checkout, which ``nobody`` may not be able to enter.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import ServiceClient, Session
from openetw.etl import layouts as L
from openetw.guids import provider_guid_from_name
from openetw.session import MAX_SESSIONS
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user, read_events

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

FORGER = "Test.Forger"
SECURITY_AUDITING = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")


def _record(guid: uuid.UUID, *, pid: int, tid: int, event_id: int = 1, size: int | None = None, data: bytes = b"payload!") -> bytes:
    total = L.EVENT_HEADER.size + len(data)
    head = L.EVENT_HEADER.pack(
        total if size is None else size, L.HEADER_TYPE_EVENT_HEADER64, L.MARKER_FLAGS_TYPED, L.EVENT_HEADER_FLAG_64_BIT_HEADER, 0,
        tid, pid, time.monotonic_ns(), guid.bytes_le, event_id, 0, 0, 4, 0, 0, 0, 0, bytes(16),
    )  # fmt: skip
    raw = head + data
    return raw + bytes(-len(raw) % 8)


def test_records_nobody_forges_into_roots_session_are_rejected_and_counted(reachable: tuple[ServiceProcess, Path], tmp_path: Path) -> None:
    dissect = pytest.importorskip("dissect.etl")
    output = tmp_path / "root.etl"

    def forge() -> dict[str, Any]:
        import threading

        from openetw.guids import provider_guid_from_name
        from openetw.provider import TraceLoggingProvider
        from openetw.provider.link import link

        provider = TraceLoggingProvider(FORGER).register()
        deadline = time.monotonic() + 10
        while not (provider.enabled and link()._state.session_writers) and time.monotonic() < deadline:
            time.sleep(0.01)
        (writer,) = link()._state.session_writers.values()
        mine, me, tid = provider_guid_from_name(FORGER), os.getpid(), threading.get_native_id()
        wrote = {
            "good": [provider.write("Tick", index=i) for i in range(5)],
            "own": writer.write(_record(mine, pid=me, tid=tid), 1),
            "audit-as-init": writer.write(_record(SECURITY_AUDITING, pid=1, tid=1, event_id=4624), 1),
            "unregistered": writer.write(_record(SECURITY_AUDITING, pid=me, tid=tid, event_id=4624), 1),
            "wrong-pid": writer.write(_record(mine, pid=1, tid=tid), 1),
            "other-thread": writer.write(_record(mine, pid=me, tid=1), 1),
            "after": [provider.write("Tick", index=i) for i in range(5, 10)],
            "bad-size": writer.write(_record(mine, pid=me, tid=tid, size=0xFFF8), 1),
        }
        return {"wrote": wrote, "pid": me}

    with Session.start("Root", output=output, providers=[FORGER]) as session:
        report = as_other_user(forge)
        assert "error" not in report, report
        assert all(value for value in report["wrote"].values()), report
    stats = session.query()
    assert stats["events_rejected"] == 5
    assert stats["events_written"] == 11  # ten Ticks and the one honest raw record
    records = read_events(output)  # strict: no format errors, nothing unknown
    assert len(records) == 11
    assert {r.pid for r in records} == {report["pid"]}
    assert SECURITY_AUDITING not in {r.provider_id for r in records}
    with open(output, "rb") as handle:
        assert sum(1 for _ in dissect.ETL(handle)) == 11 + 1  # and the logfile header


def test_a_secured_provider_is_refused_to_nobody_until_root_lets_them(reachable: tuple[ServiceProcess, Path]) -> None:
    from click.testing import CliRunner

    from openetw.cli.main import cli

    def register(provider: str) -> dict[str, Any]:
        with ServiceClient(autostart=False) as client:
            try:
                reply = client.call("register", provider=provider)
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                return {"refused": type(exc).__name__, "message": str(exc)}
            try:
                client.call("secure_provider", provider=provider, owners=[{"kind": "user", "id": OTHER_UID}])
                secured = "allowed"
            except Exception as exc:  # noqa: BLE001
                secured = type(exc).__name__
            return {"registration": reply["registration"], "secure": secured}

    assert as_other_user(lambda: register(str(SECURITY_AUDITING)))["refused"] == "AccessDenied"
    assert "registration" in as_other_user(lambda: register("Test.Open"))
    assert as_other_user(lambda: register("Test.Open"))["secure"] == "AccessDenied"  # only root secures

    runner = CliRunner()
    secured = runner.invoke(cli, ["providers", "secure", "Test.Payroll", "--owner", "root", "--json"])
    assert secured.exit_code == 0, secured.output
    assert as_other_user(lambda: register("Test.Payroll"))["refused"] == "AccessDenied"
    assert runner.invoke(cli, ["providers", "secure", "Test.Payroll", "--owner", "nobody"]).exit_code == 0
    assert "registration" in as_other_user(lambda: register("Test.Payroll"))
    listing = runner.invoke(cli, ["providers", "--json"])
    rows = {row["guid"]: row for row in json.loads(listing.stdout) if row["kind"] == "secured"}
    assert rows[str(SECURITY_AUDITING)]["owners"] == [{"kind": "user", "id": 0}]
    payroll = rows[str(provider_guid_from_name("Test.Payroll"))]
    assert {"kind": "user", "id": OTHER_UID} in payroll["owners"] and payroll["name"] == "Test.Payroll"


def test_sixty_four_session_starts_by_nobody_leave_roots_slots_free(reachable: tuple[ServiceProcess, Path]) -> None:
    def grab() -> dict[str, Any]:
        started, refused = 0, set()
        with ServiceClient(autostart=False) as client:
            for number in range(MAX_SESSIONS):
                try:
                    client.call("start_session", config={"name": f"Grab{number}", "mode": "real-time"})
                    started += 1
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    refused.add(type(exc).__name__)
        return {"started": started, "refused": sorted(refused)}

    report = as_other_user(grab)
    assert report == {"started": 8, "refused": ["TooManySessions"]}
    with ServiceClient() as client:  # root fills the table to the last slot
        for number in range(MAX_SESSIONS - 8):
            client.call("start_session", config={"name": f"Root{number}", "mode": "real-time"})
        assert len(client.call("list")["sessions"]) == MAX_SESSIONS
