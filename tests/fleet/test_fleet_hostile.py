"""Hostile hosts against a real JetStream cluster and collector: a poison message, forged
headers. Collection goes on, every good event is kept, every bad message counted."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path
from typing import Any

from openetw.fleet.connect import StreamOptions, connect, ensure_stream
from openetw.fleet.wire import KIND_HEADER, message_headers
from tests.fleet.harness import (
    SYNTHETIC_START,
    CollectorProcess,
    NatsCluster,
    collected,
    synthetic_session,
    wait_until_ended,
)

START = SYNTHETIC_START


async def _publish(urls: str, messages: list[tuple[str, dict[str, str], bytes]]) -> None:
    client = await connect(StreamOptions.build(urls), name="hostile test", reconnect=False)
    try:
        js = client.jetstream(timeout=10.0)
        await ensure_stream(js)
        for subject, headers, payload in messages:
            await js.publish(subject, payload, headers=headers, stream="ETW", timeout=10.0)
    finally:
        await client.close()


def _wait_for(out: Path, check: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = collected(out)
        if check(report):
            return report
        time.sleep(0.3)
    raise AssertionError(f"not reached: {collected(out)}")


def test_poison_and_forged_headers_do_not_stop_or_fool_the_collector(tmp_path: Path, nats_cluster: NatsCluster) -> None:
    # The poison: one message on web-02's subject marked as a header, 100 random bytes.
    def poison() -> tuple[str, dict[str, str], bytes]:
        return ("etw.web-02.Payroll", message_headers(host="web-02", session="Payroll", start=START, sequence=0, kind=KIND_HEADER,
                                                      events=0, events_lost=0, buffers_lost=0, nonce=secrets.token_hex(4)), os.urandom(100))  # fmt: skip

    # web-01 publishing web-02's next sequence numbers first, on its own subject, as web-02.
    forged = synthetic_session("web-01", "Payroll", 20, claimed="web-02")[1:]
    asyncio.run(_publish(nats_cluster.urls, [poison(), *forged, *synthetic_session("web-02", "Payroll", 30), *synthetic_session("web-01", "Web", 10)]))
    out = tmp_path / "fleet"
    collector = CollectorProcess(nats_cluster.urls, out)
    try:
        report = wait_until_ended(out, 2)
        sessions = {(s["host"], s["session"]): s for s in report["sessions"]}
        payroll, web = sessions[("web-02", "Payroll")], sessions[("web-01", "Web")]
        assert (payroll["buffers"], payroll["events"], payroll["gaps"], payroll["duplicates"]) == (30, 150, 0, 0)
        assert (web["buffers"], web["events"], web["gaps"]) == (10, 50, 0)
        assert report["hosts"]["web-02"]["rejected_reasons"] == {"header": 1}
        assert report["hosts"]["web-01"]["rejected_reasons"] == {"identity": 21}  # 20 buffers and the end
        assert len(sessions) == 2

        # The poison was set aside, not left to stop the next collector: a restart goes on.
        collector.kill()
        collector = CollectorProcess(nats_cluster.urls, out)
        asyncio.run(_publish(nats_cluster.urls, [poison(), *synthetic_session("web-01", "Later", 5, start=START + 1)]))
        report = _wait_for(out, lambda r: any(s["session"] == "Later" and s["ended"] for s in r["sessions"]))
        later = next(s for s in report["sessions"] if s["session"] == "Later")
        assert (later["buffers"], later["events"], later["gaps"]) == (5, 25, 0)
        assert report["hosts"]["web-02"]["rejected"] == 2
        assert collector.process.poll() is None
        final = collector.stop()
        assert final["hosts"]["web-02"]["events"] == 150
    finally:
        collector.kill()
