"""Made-up events for the Event Log tests: varied System facts and fields, from a seed."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from openetw.eventlog import LogConfig, LogStore, NewEvent

BASE_TIME = 134_000_000_000_000_000  # a FILETIME in 2025
PROVIDERS = ("Alpha", "Beta", "Microsoft-Windows-Gamma")


def made_events(count: int, seed: int = 15, *, payload: int = 40, start_time: int = BASE_TIME) -> list[NewEvent]:
    rng = random.Random(seed)
    events = []
    for index in range(count):
        level = rng.choice((1, 2, 3, 4, 4, 4, 5))
        events.append(NewEvent(
            time_created=start_time + index * 10_000_000, provider=rng.choice(PROVIDERS), event_id=rng.randrange(1, 12),
            record=rng.randbytes(payload), level=level, task=rng.randrange(0, 4), opcode=rng.choice((0, 1, 2)),
            keywords=rng.choice((0x8000000000000000, 0x4000000000000010, 0x10, 0)), channel="Application",
            computer="host", pid=rng.randrange(100, 110), tid=rng.randrange(1000, 1010), uid=rng.choice((0, 1000)),
            fields={"index": index, "name": rng.choice(("apple", "pear", "plum")), "flag": index % 2 == 0},
            message=f"Event number {index} about {rng.choice(('disks', 'networks', 'printers'))}",
        ))  # fmt: skip
    return events


def private_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: int) -> LogStore:
    """A logs directory of the test's own (no service reached, none started), its Application log
    owned by the caller and holding ``events`` made-up events."""
    monkeypatch.setenv("OPENETW_LOGS_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "no-service.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    store = LogStore(tmp_path / "logs")
    store.create("Application", LogConfig(owner=os.geteuid()))
    store.append("Application", made_events(events))
    return store
