"""Events still in a producer's pool when the service dies: the producer, in another process,
hands the pool to the next service once it reattaches, and they are stored (or counted lost),
so that per log ``written = stored + refused + lost`` holds exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogStore
from openetw.eventlog.writer import PAUSE_AFTER_COMMIT_ENV, PAUSE_BEFORE_COMMIT_ENV
from tests.eventlog.test_service_logs import DRIVER, machine, services  # noqa: F401 - fixtures
from tests.service.harness import ServiceProcess, start_service

PRODUCER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import sample_driver as events
provider = events.provider
events.register()
for line in sys.stdin:
    command = line.split()
    if command[0] == "wait":  # until the System channel listens (again)
        deadline = time.monotonic() + 30
        while not provider.sample_event_a_enabled and time.monotonic() < deadline:
            time.sleep(0.02)
        print(provider.sample_event_a_enabled, flush=True)
    elif command[0] == "write":
        print(sum(provider.write_sample_event_a() for _ in range(int(command[1]))), flush=True)
"""


def ask(producer: subprocess.Popen[str], command: str) -> str:
    assert producer.stdin is not None and producer.stdout is not None
    producer.stdin.write(command + "\n")
    producer.stdin.flush()
    return producer.stdout.readline().strip()


def test_events_left_in_a_pool_by_a_killed_service_reach_the_log(machine: Path, services: list[ServiceProcess]) -> None:  # noqa: F811
    assert main(["manifest", "install", str(DRIVER / "evntdrv.xml")]) == 0
    services.append(start_service(machine / "control.sock"))
    store = LogStore(machine / "data" / "logs")
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(DRIVER / "generated")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=os.environ.copy())  # fmt: skip
    try:
        assert ask(producer, "wait") == "True"
        written = int(ask(producer, "write 300"))
        deadline = time.monotonic() + 20
        while store.info("System").written < written and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.info("System").stored == written  # the first ones arrived the ordinary way

        # The service stops taking buffers, the producer writes on (into its pool), the service dies.
        os.kill(services[0].pid, signal.SIGSTOP)
        in_pool = int(ask(producer, "write 2000"))
        assert in_pool == 2000
        time.sleep(1.5)  # the producer's flush timer marks its partly filled buffer FULL
        services[0].process.kill()
        services[0].process.wait(timeout=10)
        assert store.info("System").written == written  # nothing of the last ones reached the log

        services.append(start_service(machine / "control.sock"))
        assert ask(producer, "wait") == "True"  # reattached: its pool went to the new service
        written += in_pool + int(ask(producer, "write 100"))
        deadline = time.monotonic() + 30
        while store.info("System").written < written and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        assert producer.stdin is not None
        producer.stdin.close()
        producer.wait(timeout=30)
    info = store.info("System")
    assert info.written == written
    assert info.written == info.stored + info.refused + info.lost
    assert (info.stored, info.refused, info.lost) == (written, 0, 0)
    ids = [event.event_id for event in store.query("System")]
    assert len(ids) == written and set(ids) == {2}


def test_a_service_killed_after_its_commit_and_before_giving_buffers_back_stores_none_twice(
    machine: Path, services: list[ServiceProcess], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """The store thread pauses right after its first commit, before the pool gets those buffers
    back; the service is killed there. The producer hands the pool over, TAKEN buffers and all:
    the log's mark for the pool says which it holds, and those are not stored again."""
    assert main(["manifest", "install", str(DRIVER / "evntdrv.xml")]) == 0
    paused = machine / "paused"
    monkeypatch.setenv(PAUSE_AFTER_COMMIT_ENV, str(paused))
    services.append(start_service(machine / "control.sock"))
    monkeypatch.delenv(PAUSE_AFTER_COMMIT_ENV)
    store = LogStore(machine / "data" / "logs")
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(DRIVER / "generated")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=os.environ.copy())  # fmt: skip
    try:
        assert ask(producer, "wait") == "True"
        written = int(ask(producer, "write 300"))
        deadline = time.monotonic() + 20
        while not paused.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paused.exists()  # committed, and the buffers are still TAKEN in the pool
        committed = store.info("System").stored
        assert 0 < committed <= written
        written += int(ask(producer, "write 2000"))  # more behind them: FULL, TAKEN and queued, FILLING
        time.sleep(1.5)  # the producer's flush timer marks its partly filled buffer FULL
        services[0].process.kill()
        services[0].process.wait(timeout=10)
        assert store.info("System").stored == committed

        services.append(start_service(machine / "control.sock"))
        assert ask(producer, "wait") == "True"  # reattached: its pool went to the new service
        written += int(ask(producer, "write 100"))
        deadline = time.monotonic() + 30
        while store.info("System").written < written and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # anything stored twice would arrive now
    finally:
        assert producer.stdin is not None
        producer.stdin.close()
        producer.wait(timeout=30)
    info = store.info("System")
    assert (info.written, info.stored, info.refused, info.lost) == (written, written, 0, 0)
    assert len(list(store.query("System"))) == written


def test_a_pool_handed_to_a_service_that_dies_before_storing_it_goes_to_the_next(
    machine: Path, services: list[ServiceProcess], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """The service taking a dead one's pool over keeps its buffers TAKEN until they are stored,
    and the producer keeps the pool until that service answers: killed before its commit, it
    leaves the pool to the next service, which stores every event once."""
    assert main(["manifest", "install", str(DRIVER / "evntdrv.xml")]) == 0
    services.append(start_service(machine / "control.sock"))
    store = LogStore(machine / "data" / "logs")
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(DRIVER / "generated")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=os.environ.copy())  # fmt: skip
    try:
        assert ask(producer, "wait") == "True"
        os.kill(services[0].pid, signal.SIGSTOP)  # takes nothing more: the pool keeps what follows
        written = int(ask(producer, "write 1500"))
        time.sleep(1.5)  # the producer's flush timer marks its partly filled buffer FULL
        services[0].process.kill()
        services[0].process.wait(timeout=10)
        assert store.info("System").written == 0

        paused = machine / "paused"
        monkeypatch.setenv(PAUSE_BEFORE_COMMIT_ENV, str(paused))
        services.append(start_service(machine / "control.sock"))  # takes the pool over, dies before storing it
        monkeypatch.delenv(PAUSE_BEFORE_COMMIT_ENV)
        deadline = time.monotonic() + 30
        while not paused.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paused.exists()
        services[1].process.kill()
        services[1].process.wait(timeout=10)
        assert store.info("System").written == 0

        services.append(start_service(machine / "control.sock"))
        assert ask(producer, "wait") == "True"
        written += int(ask(producer, "write 100"))
        deadline = time.monotonic() + 30
        while store.info("System").written < written and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # anything stored twice would arrive now
    finally:
        assert producer.stdin is not None
        producer.stdin.close()
        producer.wait(timeout=30)
    info = store.info("System")
    assert (info.written, info.stored, info.refused, info.lost) == (written, written, 0, 0)
    assert len(list(store.query("System"))) == written
