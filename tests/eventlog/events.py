"""Made-up events for the Event Log tests: varied System facts and fields, from a seed."""

from __future__ import annotations

import random

from openetw.eventlog import NewEvent

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
