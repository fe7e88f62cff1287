"""The ``.etl`` parser fuzzed at small scale: mutated corpus files read by both engines.

Each mutated copy (``openetw.testing.fuzz.mutate``: flips, header fields set to edge values, cuts,
insertions, deletions, repeated buffers) is read strictly and leniently, in file and time order,
and indexed, with the compiled core and the pure-Python reference: only the project's errors, the
two engines alike, memory under ``MEMORY_BOUND`` (counted by tracemalloc), and no hang (a
watchdog). ``benchmarks/fuzz_etl.py --iterations N`` runs the same at large scale.
"""

from __future__ import annotations

import os
import random

import pytest

import openetw._native as native
from openetw.testing.fuzz import check, mutate
from tests.etl.test_damage import watchdog
from tests.native import cases

SMALL_FILE = 400 << 10
ITERATIONS = 3  # mutated copies of each small corpus file


def _small_corpus() -> list[tuple[str, bytes]]:
    files = [path for path in cases.corpus_files() if path.stat().st_size <= SMALL_FILE]
    if not files:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no corpus .etl file under {cases.CORPUS}")
        pytest.skip(f"corpus not available: {cases.CORPUS}")
    return [(path.name, path.read_bytes()) for path in files]


def test_mutated_corpus_files_give_only_project_errors_alike_in_both_engines() -> None:
    if native.module("_read") is None:
        if os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
            pytest.fail(f"the compiled core must be active under CI: {native.reason()}")
        pytest.skip(f"compiled core not active: {native.reason()}")
    rng = random.Random(20261129)
    checked = 0
    for name, data in _small_corpus():
        for _ in range(ITERATIONS):
            seed = rng.getrandbits(32)
            damaged = mutate(data, random.Random(seed))
            with watchdog(120):
                problems = check(damaged)
            assert not problems, (name, seed, problems)
            checked += 1
    assert checked >= 3 * ITERATIONS
