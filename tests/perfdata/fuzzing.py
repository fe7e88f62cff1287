"""Mutating perf.data files and EventHeader events, and reading them as every reader does.

``mutate(data, rng)`` damages a copy: bytes flipped, words set to edge values (sizes, counts,
offsets), cuts, insertions, deletions. ``check_perf_data(data)`` reads the result as a source in
both orders and as columns, and returns what went wrong: an error that is not
``PerfDataFormatError``, or a read past ``MEMORY_BOUND``. An empty list: the reader held.
``tests/perfdata/test_damage.py`` runs a few in CI, ``benchmarks/fuzz_perfdata.py`` many.
"""

from __future__ import annotations

import os
import random
import tempfile
import traceback
import tracemalloc

from openetw.consumer.perfdata_source import PerfDataSource
from openetw.errors import PerfDataFormatError
from openetw.perfdata.columns import sample_columns
from openetw.perfdata.reader import PerfData

MEMORY_BOUND = 32 << 20  # a 170 KB file: a read holds it, its records and small tables
_EDGES = (b"\xff" * 8, b"\x00" * 8, b"\x08\x00\x00\x00\x00\x00\x00\x00", b"\xff\xff\xff\x7f\x00\x00\x00\x00")


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A damaged copy of ``data`` (one to three kinds of damage)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        kind = rng.choice(("flip", "word", "word", "cut", "insert", "delete"))
        at = rng.randrange(len(out))
        if kind == "flip":
            out[at] ^= rng.randint(1, 255)
        elif kind == "word":
            width = rng.choice((2, 4, 8))
            value = rng.choice(_EDGES) if rng.random() < 0.7 else rng.randbytes(8)
            out[at : at + width] = value[: len(out[at : at + width])]
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = rng.randbytes(rng.randint(1, 64))
        else:
            del out[at : at + rng.randint(1, 64)]
    return bytes(out)


def _read_source(path: str, time_order: bool) -> None:
    source = PerfDataSource(path, time_order=time_order)
    source.open()
    try:
        for _ in source.records():
            pass
        source.losses()
        source.notices()
    finally:
        source.close()


def check_perf_data(data: bytes, *, measure: bool = True) -> list[str]:
    """What went wrong reading ``data`` every way (empty: nothing)."""
    problems: list[str] = []
    handle, path = tempfile.mkstemp(suffix=".data")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        for name, read in (
            ("source in time order", lambda: _read_source(path, True)),
            ("source in file order", lambda: _read_source(path, False)),
            ("columns", lambda: sample_columns(PerfData(data))),
        ):
            if measure:
                tracemalloc.start()
            try:
                read()
            except PerfDataFormatError:
                pass
            except Exception:  # noqa: BLE001 - what the fuzz looks for
                problems.append(f"{name}: {traceback.format_exc(limit=6)}")
            finally:
                if measure:
                    peak = tracemalloc.get_traced_memory()[1]
                    tracemalloc.stop()
                    if peak > MEMORY_BOUND:
                        problems.append(f"{name}: {peak} bytes traced, past {MEMORY_BOUND}")
    finally:
        os.unlink(path)
    return problems
