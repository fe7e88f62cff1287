"""Fuzz the ``.evtx`` reader at scale: mutations of corpus files (bit flips, truncations, record
sizes, template offsets, name offsets and value descriptors, chunk header fields, spliced pages),
each read, rendered and decoded. Only the project's errors may come out, within bounded memory.

    PYTHONPATH=src python benchmarks/fuzz_evtx.py --iterations 5000 [--seed 1] [--save failures/]

Every file that raised something else, or passed the memory bound, is written to ``--save`` (a
directory made private to you) with its seed and mutation in the name; the exit status is the
number of such files (at most 100). The CI-sized run is ``tests/evtx/test_fuzz.py``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.evtx import fuzzing  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "evtx"
SMALL_FILES = ["Security_short_selected.evtx", "new-user-security.evtx", "Application_no_crc32.evtx", "pyevtx_issue_38.evtx",
               "Microsoft-Windows-HelloForBusiness%4Operational.evtx", "issue_201.evtx", "pyevtx_dns_log_malformed.evtx"]  # fmt: skip
MEMORY_BOUND = 64 << 20  # traced bytes one mutated file of at most a few chunks may take


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000, help="mutated files to read (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="the first seed; iteration i uses seed + i")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the directory of .evtx files to mutate")
    parser.add_argument("--files", nargs="*", default=SMALL_FILES, help="file names in --corpus (default: the small ones)")
    parser.add_argument("--save", type=Path, default=None, help="write failing inputs here")
    parser.add_argument("--no-memory", action="store_true", help="do not trace memory (faster, no memory bound checked)")
    args = parser.parse_args(argv)

    originals = [(name, (args.corpus / name).read_bytes()) for name in args.files if (args.corpus / name).exists()]
    if not originals:
        parser.error(f"no .evtx files found in {args.corpus}")
    failures = 0
    slowest = (0.0, "")
    peak_max = 0
    started = time.perf_counter()
    if not args.no_memory:
        tracemalloc.start()
    for iteration in range(args.iterations):
        seed = args.seed + iteration
        rng = random.Random(seed)
        name, data = originals[seed % len(originals)]
        mutation, mutated = fuzzing.mutate(data, rng)
        if not args.no_memory:
            tracemalloc.reset_peak()
        begin = time.perf_counter()
        problem = None
        try:
            fuzzing.consume(mutated)
        except Exception:  # noqa: BLE001 - anything that is not a project error is the finding
            problem = traceback.format_exc()
        took = time.perf_counter() - begin
        slowest = max(slowest, (took, f"seed {seed} {mutation} {name}"))
        if not args.no_memory:
            peak = tracemalloc.get_traced_memory()[1]
            peak_max = max(peak_max, peak)
            if peak > MEMORY_BOUND and problem is None:
                problem = f"traced {peak} bytes (bound {MEMORY_BOUND})"
        if problem is not None:
            failures += 1
            print(f"FAIL seed {seed} {mutation} {name}\n{problem}", file=sys.stderr)
            if args.save is not None:
                args.save.mkdir(mode=0o700, parents=True, exist_ok=True)
                target = args.save / f"{seed}-{mutation}-{name}"
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(mutated)
    print(
        f"{args.iterations} mutated files, {failures} failures, {time.perf_counter() - started:.1f} s; "
        f"slowest {slowest[0] * 1000:.0f} ms ({slowest[1]})" + ("" if args.no_memory else f"; largest traced peak {peak_max >> 10} KiB")
    )
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
