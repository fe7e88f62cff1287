"""Producers writing flat out into a file session with the default buffers: every event is
accounted for, exactly (events written = events in the file + events the service counts lost).

The service runs in a scheduling group of its own (see ``own_scheduling_group``): in its
producers' group it got a 17th of the CPU under 16 flat-out producers and they lost events.
How many are lost depends on the machine's load, so it is reported, not asserted; the
accounting is exact at any load. The producers run the engine this process runs: the compiled
write path where it is built (``OPENETW_PURE=1`` for the pure one).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from openetw._native import module
from openetw.controller import Session
from openetw.service.logfile import count_records
from tests.service.harness import ServiceProcess

LOAD_PRODUCER = Path(__file__).with_name("load_producer.py")
PROVIDER = "Test.Load"
SESSION_PROVIDER = "*Test.Load"  # by its TraceLogging name hash: no manifest names it
PRODUCERS = 16
SECONDS = 1.0


def records_in_file(path: Path) -> int:
    """Records in a session file, counted by walking every buffer after the header buffer."""
    data = path.read_bytes()
    buffer_size = int.from_bytes(data[:4], "little")
    return sum(count_records(data[at : at + buffer_size]) for at in range(buffer_size, len(data) - buffer_size + 1, buffer_size))


def answer(process: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"producer {process.pid} did not answer"
    line = process.stdout.readline()
    assert line, f"producer {process.pid} exited with {process.wait(timeout=5)}"
    return json.loads(line)  # type: ignore[no-any-return]


def test_the_service_leaves_its_starters_session(service: ServiceProcess) -> None:
    assert os.getsid(service.pid) == service.pid != os.getsid(0)


def test_sixteen_producers_flat_out_every_event_is_in_the_file_or_counted_lost(service: ServiceProcess, tmp_path: Path) -> None:
    output = tmp_path / "load.etl"
    producers = [
        subprocess.Popen([sys.executable, str(LOAD_PRODUCER), PROVIDER, str(SECONDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(PRODUCERS)
    ]
    try:
        with Session.start("Load", output=output, providers=[(SESSION_PROVIDER, {"level": 5})]) as session:
            assert all(answer(producer, 60)["ready"] for producer in producers)
            for producer in producers:
                assert producer.stdin is not None
                producer.stdin.write("go\n")
                producer.stdin.flush()
            reports = [answer(producer, 60 + SECONDS) for producer in producers]
        stats = session.query()
    finally:
        for producer in producers:
            if producer.poll() is None:
                producer.kill()
            producer.wait(timeout=10)
            for stream in (producer.stdin, producer.stdout):
                if stream is not None:
                    stream.close()
    attempted = sum(int(report["attempted"]) for report in reports)  # type: ignore[call-overload]
    written = sum(int(report["written"]) for report in reports)  # type: ignore[call-overload]
    in_file = records_in_file(output)
    print(f"{PRODUCERS} producers, {attempted} writes: {stats['events_lost']} lost ({stats['events_lost'] / attempted:.3%})")
    assert attempted > PRODUCERS * 1000
    assert all(report["compiled"] for report in reports) == (module("_write") is not None), "the producers run this process's engine"
    assert written == in_file == stats["events_written"]
    assert attempted == in_file + stats["events_lost"]
