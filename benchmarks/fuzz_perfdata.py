"""Fuzz the perf.data reader at scale: mutations of the corpus' perf.data (bit flips, words set
to edge values, cuts, insertions, deletions), each read as a source (time and file order) and as
columns. Only ``PerfDataFormatError`` may come out, within bounded memory.

    PYTHONPATH=src python benchmarks/fuzz_perfdata.py --iterations 2000 [--seed 1] [--save failures/]

Every input that raised something else, or passed the memory bound, is written to ``--save`` with
its seed in the name; the exit status is the number of such inputs (at most 100). The CI-sized run
is ``tests/perfdata/test_damage.py``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.perfdata.fuzzing import check_perf_data, mutate  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "perfdata" / "perf.data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--file", type=Path, default=CORPUS)
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument(
        "--measure-every", type=int, default=10, help="trace memory on every Nth input (tracing is slow)"
    )
    args = parser.parse_args(argv)
    data = args.file.read_bytes()
    failures = 0
    start = time.monotonic()
    for iteration in range(args.iterations):
        seed = args.seed + iteration
        mutated = mutate(data, random.Random(seed))
        problems = check_perf_data(mutated, measure=iteration % args.measure_every == 0)
        if problems:
            failures += 1
            print(f"seed {seed}:\n" + "\n".join(problems), file=sys.stderr)
            if args.save is not None:
                args.save.mkdir(mode=0o700, parents=True, exist_ok=True)
                (args.save / f"perfdata-seed{seed}.data").write_bytes(mutated)
            if failures >= 100:
                break
    print(f"{args.iterations} mutated files, {failures} failing, {time.monotonic() - start:.0f} s")
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
