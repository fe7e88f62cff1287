"""The fleet's stream viewed live as a real-time session: ``UserTrace(streams=[...])`` and
``openetw trace --stream``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from openetw.consumer import Provider, UserTrace
from openetw.fleet.source import StreamSource
from openetw.tdh import decode_all, schema_from_record
from tests.fleet.harness import Host, NatsCluster, make_cluster, written_by

COUNT = 300


@pytest.fixture
def single_node(tmp_path: Path) -> Any:
    cluster = make_cluster(tmp_path / "nats", 1)
    try:
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.kill()


def test_view_of_one_host_from_now_and_the_cli_from_the_start(tmp_path: Path, single_node: NatsCluster) -> None:
    alpha, beta = Host(tmp_path / "alpha", "alpha"), Host(tmp_path / "beta", "beta")
    try:
        sessions = [host.start_session("View", "*Fleet.View", single_node.urls, buffer_size=8) for host in (alpha, beta)]
        time.sleep(1.0)  # the sessions' headers are in the stream before the view starts

        seen: list[tuple[int, int]] = []
        trace = UserTrace(streams=[StreamSource(single_node.urls, hosts=["alpha"], start="now")])
        provider = Provider("*Fleet.View")

        def on_event(record: Any, _context: Any) -> None:
            values = decode_all(schema_from_record(record), record.user_data)
            seen.append((int(values["pid"]), int(values["index"])))
            if len(seen) >= COUNT:
                trace.stop()

        provider.add_on_event_callback(on_event)
        trace.enable(provider)
        trace.open()
        runner = threading.Thread(target=trace.process)
        runner.start()
        producers = [host.producer("Fleet.View", COUNT, 1000) for host in (alpha, beta)]
        written = [written_by(process) for process in producers]
        runner.join(30)
        trace.close()
        assert not runner.is_alive()
        assert written == [COUNT, COUNT]
        assert sorted(index for _, index in seen) == list(range(COUNT))
        assert len({pid for pid, _ in seen}) == 1  # alpha's producer only
        for session in sessions:
            session.stop()

        # The command line, from the stream's start, beta only: beta's events, as JSON lines.
        view = subprocess.Popen(
            [sys.executable, "-m", "openetw", "trace", "--stream", single_node.urls, "--from", "start", "--host", "beta",
             "-p", "*Fleet.View", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert view.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while len(lines) < COUNT and time.monotonic() < deadline:
            line = view.stdout.readline()
            if not line:
                break
            lines.append(json.loads(line))
        view.terminate()
        view.wait(10)
        assert len(lines) == COUNT
        assert sorted(int(line["fields"]["index"]) for line in lines) == list(range(COUNT))
    finally:
        alpha.stop()
        beta.stop()
