"""An unprivileged producer (``nobody``) against root's sessions: it cannot forge records into
root's file, register a provider secured for root, or take the session slots kept for root.

The work of ``nobody`` runs in a forked child that dropped its privileges (``as_other_user``):
nothing is executed from the checkout, which ``nobody`` may not be able to enter.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import ServiceClient, Session
from openetw.etl import layouts as L
from openetw.session import MAX_SESSIONS
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user, read_events, service_env  # noqa: F401 - fixture
from tests.service.test_access import reachable  # noqa: F401 - fixture

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
