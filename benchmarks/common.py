"""Helpers shared by the benchmarks: timing (best of N, imports excluded) and table printing."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"


def best_of(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    """Runs ``fn`` ``repeat`` times; returns (best seconds, what fn returned)."""
    best, result = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def machine_note() -> str:
    return f"{os.cpu_count()} cores, Python {os.sys.version.split()[0]}; shared machine, numbers are noisy"
