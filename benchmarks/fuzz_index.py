"""Fuzz the consumer's index files: damage a genuine index at random, many times, and check that
a trace gives the same events as with no index or a project error (never another exception,
never other events).

    PYTHONPATH=src python benchmarks/fuzz_index.py --iterations 5000 [--seed N] [--records 2000]
        [--trace FILE.etl]

Without --trace a trace of every record kind is made with the test kit. Indexes and traces go
into a temporary folder (the user's cache is not touched). Exit status 1 when a damaged index
gave other events or an exception that is not the project's.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--records", type=int, default=2000, help="records of the made trace (without --trace)")
    parser.add_argument("--block-rows", type=int, default=100, help="rows per index block (small: many blocks)")
    parser.add_argument("--trace", type=Path, default=None, help="fuzz the index of this .etl file instead")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="openetw-fuzz-index-"))
    os.environ["OPENETW_INDEX_DIR"] = str(work / "cache")
    os.environ["OPENETW_INDEX_BLOCK_ROWS"] = str(args.block_rows)
    os.environ.pop("OPENETW_INDEX_BESIDE", None)
    from openetw.consumer import EtlIndex
    from openetw.testing.index_damage import events_with_index, mutations, plain_events

    try:
        if args.trace is not None:
            path = work / args.trace.name
            shutil.copyfile(args.trace, path)
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.consumer.helpers import every_kind, write_etl

            path = write_etl(work / "fuzz.etl", every_kind(args.records))
        location = EtlIndex.open(path).index_path
        assert location is not None
        genuine = location.read_bytes()
        expected = plain_events(path)
        outcomes = {"same events": 0, "project error": 0}
        bad = 0
        started = time.perf_counter()
        for number in range(args.iterations):
            what, damaged = mutations(genuine, rng)
            try:
                got = events_with_index(path, location, damaged)
            except Exception:  # noqa: BLE001 - what the fuzzer is looking for
                bad += 1
                print(f"iteration {number} ({what}): an exception that is not the project's", file=sys.stderr)
                traceback.print_exc()
                continue
            if isinstance(got, list):
                if got != expected:
                    bad += 1
                    print(f"iteration {number} ({what}): other events ({len(got)}, not {len(expected)})", file=sys.stderr)
                    continue
                outcomes["same events"] += 1
            else:
                outcomes["project error"] += 1
        seconds = time.perf_counter() - started
        print(f"seed {seed}: {args.iterations} damaged indexes of {len(genuine):,} bytes ({len(expected):,} events) in {seconds:.1f} s: "
              f"{outcomes['same events']} same events, {outcomes['project error']} project errors, {bad} failures")  # fmt: skip
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
