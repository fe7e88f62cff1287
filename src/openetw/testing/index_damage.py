"""Damaged copies of a genuine index, and what a trace makes of them (tests and fuzzing).

``mutations(data, rng)`` gives the ways an index file gets damaged on a disk or by hand: bit
flips, overwritten bytes, cuts, insertions; ``events_with_index(trace, index, damaged)`` puts a
damaged copy where the reader will look and returns the events a ``UserTrace`` delivers, or the
project error it raised. A sound reader gives the same events as with no index, or a project
error, never another exception and never other events.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

from openetw.errors import OpenEtwError

__all__ = ["bit_flips", "events_with_index", "mutations", "plain_events"]

Events = list[tuple[str, int, bytes]]


def bit_flips(data: bytes, positions: int) -> Iterator[tuple[str, bytes]]:
    """``positions`` copies of ``data``, each with one bit flipped, at places spread evenly over
    it (its first and last bytes included)."""
    size = len(data)
    places = sorted({min(size - 1, round(n * (size - 1) / max(1, positions - 1))) for n in range(positions)})
    for number, at in enumerate(places):
        bit = number % 8
        damaged = bytearray(data)
        damaged[at] ^= 1 << bit
        yield f"bit {bit} of byte {at}", bytes(damaged)


def mutations(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random damage of ``data``: flipped bits, overwritten bytes, a cut or an insertion."""
    damaged = bytearray(data)
    kind = rng.randrange(5)
    at = rng.randrange(len(damaged)) if damaged else 0
    if kind == 0:
        flips = rng.randint(1, 8)
        for _ in range(flips):
            spot = rng.randrange(len(damaged))
            damaged[spot] ^= 1 << rng.randrange(8)
        return f"{flips} bit flips", bytes(damaged)
    if kind == 1:
        length = rng.randint(1, 64)
        damaged[at : at + length] = bytes(rng.randrange(256) for _ in range(len(damaged[at : at + length])))
        return f"{length} bytes overwritten at {at}", bytes(damaged)
    if kind == 2:
        return f"cut at {at}", bytes(damaged[:at])
    if kind == 3:
        length = rng.randint(1, 64)
        return f"{length} bytes inserted at {at}", bytes(damaged[:at] + os.urandom(length) + damaged[at:])
    other = rng.choice([0, 0xFF])
    length = rng.randint(1, 4096)
    damaged[at : at + length] = bytes([other]) * len(damaged[at : at + length])
    return f"{length} bytes set to {other:#x} at {at}", bytes(damaged)


def _events(trace_path: Path, *, index: bool) -> Events:
    from openetw.consumer import UserTrace

    got: Events = []
    trace = UserTrace(files=[trace_path], manifests=[], index=index)
    trace.set_default_event_callback(lambda record, context: got.append((record.kind, record.filetime, bytes(record.raw))))
    trace.start()
    return got


def plain_events(trace_path: Path) -> Events:
    """The events of ``trace_path`` read with no index at all."""
    return _events(trace_path, index=False)


def events_with_index(trace_path: Path, location: Path, damaged: bytes) -> Events | OpenEtwError:
    """The events a trace delivers with ``damaged`` stored as the index at ``location``
    (written with the mode the reader gave the genuine one, so it is believed), or the
    project error it raised."""
    mode = location.stat().st_mode & 0o777 if location.exists() else 0o600
    location.unlink(missing_ok=True)
    fd = os.open(location, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(damaged)
    try:
        return _events(trace_path, index=True)
    except OpenEtwError as error:
        return error
