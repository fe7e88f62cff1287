"""Fuzz the .etl parser at large scale: mutated copies of the corpus files, read by both engines.

    .venv/bin/python benchmarks/fuzz_etl.py --iterations 2000 [--seed N] [--max-bytes B]
        [--timeout S] [--no-memory] [--save DIR] [FILE ...]

Each iteration damages a copy of one file (``openetw.testing.fuzz.mutate``) and reads it as every
reader does, with the compiled core and the pure-Python reference (``openetw.testing.fuzz.check``):
only the project's errors, the engines alike, memory under the bound (tracemalloc), each iteration
within ``--timeout`` seconds. A failing copy is written to ``--save`` (``fuzz-SEED.etl``) to be
replayed with ``--replay``. Exits 1 when any iteration failed.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from pathlib import Path

from openetw.testing.fuzz import check, mutate

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "etl"


class Hang(BaseException):
    """An iteration over its time (a BaseException: the checks catch every Exception)."""


def _expire(signum: int, frame: object) -> None:
    raise Hang


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz the .etl parser with mutated corpus files, both engines.")
    parser.add_argument("files", nargs="*", type=Path, help="the .etl files to mutate (default: the corpus's)")
    parser.add_argument("--iterations", type=int, default=200, help="mutated copies to check (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="the first seed (each iteration has its own)")
    parser.add_argument("--max-bytes", type=int, default=1 << 20, help="skip corpus files larger than this (default 1 MiB)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds an iteration may take before it counts as a hang (default 600:"
                        " the pure engine under tracemalloc takes minutes over a 5 MB trace)")
    parser.add_argument("--no-memory", action="store_true", help="do not measure memory (faster)")
    parser.add_argument("--save", type=Path, help="write failing copies to this directory")
    parser.add_argument("--replay", type=Path, help="check one saved copy and exit")
    options = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _expire)
    if options.replay is not None:
        problems = check(options.replay.read_bytes(), measure_memory=not options.no_memory)
        print("\n".join(problems) or "no problem")
        return 1 if problems else 0
    paths = options.files or sorted(p for p in CORPUS.rglob("*.etl") if p.stat().st_size <= options.max_bytes)
    if not paths:
        parser.error(f"no .etl file to mutate (corpus: {CORPUS})")
    originals = [(path.name, path.read_bytes()) for path in paths]
    failures = 0
    started = time.perf_counter()
    for iteration in range(options.iterations):
        seed = options.seed + iteration
        rng = random.Random(seed)
        name, data = rng.choice(originals)
        damaged = mutate(data, rng)
        signal.alarm(options.timeout)
        try:
            problems = check(damaged, measure_memory=not options.no_memory)
        except Hang:
            problems = [f"no result within {options.timeout} s"]
        finally:
            signal.alarm(0)
        if problems:
            failures += 1
            print(f"seed {seed} ({name}, {len(damaged)} bytes):", *problems, sep="\n  ", flush=True)
            if options.save is not None:
                options.save.mkdir(parents=True, exist_ok=True)
                (options.save / f"fuzz-{seed}.etl").write_bytes(damaged)
        if (iteration + 1) % 100 == 0:
            print(f"{iteration + 1} iterations, {failures} failed, {time.perf_counter() - started:.0f} s", flush=True)
    print(f"{options.iterations} iterations over {len(originals)} files: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
