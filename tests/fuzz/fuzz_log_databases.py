"""Fuzz of log databases at scale: damaged copies of a real log (truncated, bits flipped, pages
overwritten, header changed) read by ``openetw log query FILE.db``, each in a child process with
a time bound. Any exit but a project error, an internal error, a traceback or a timeout is a
finding; the damaged file is kept under --keep for replay.

Usage: python tests/fuzz/fuzz_log_databases.py [--iterations 2000] [--seed 1] [--events 2000]
       [--timeout 30] [--keep DIR]

The pytest test ``tests/eventlog/test_log_trust.py::test_fuzzed_log_databases_give_only_project_errors``
runs the same damages in-process at small scale in CI.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from openetw.eventlog import LogConfig, LogStore  # noqa: E402
from openetw.testing.damage import damaged  # noqa: E402
from tests.eventlog.events import made_events  # noqa: E402

PROJECT_ERRORS = {0, 2, 3}  # printed events (some rows may be left out), or a project error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--keep", type=Path, default=None, help="a directory for the files of findings")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="openetw-fuzz-logs-"))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OPENETW_LOGS_DIR=str(work / "none"), OPENETW_NO_AUTOSTART="1")
    try:
        store = LogStore(work / "logs")
        store.create("App", LogConfig(max_size=64 << 20))
        store.append("App", made_events(args.events))
        store.close()
        original = (work / "logs" / "App.db").read_bytes()
        rng = random.Random(args.seed)
        outcomes: collections.Counter[str] = collections.Counter()
        findings = 0
        for iteration in range(args.iterations):
            kind, data = damaged(original, rng)
            target = work / "fuzzed.db"
            for name in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
                name.unlink(missing_ok=True)
            target.write_bytes(data)
            command = [sys.executable, "-m", "openetw", "log", "query", str(target), "--format", "json", "--query", "*[System[Level<=4]]"]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
                bad = done.returncode not in PROJECT_ERRORS or "internal error" in done.stderr or "Traceback" in done.stderr
                outcome = f"exit {done.returncode}"
                detail = done.stderr.strip().splitlines()[-1:] if bad else []
            except subprocess.TimeoutExpired:
                bad, outcome, detail = True, "timeout", []
            outcomes[f"{kind}: {outcome}"] += 1
            if bad:
                findings += 1
                print(f"finding {iteration} ({kind}, {outcome}): {' '.join(detail)}", flush=True)
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(target, args.keep / f"finding-{args.seed}-{iteration}.db")
        for outcome, count in sorted(outcomes.items()):
            print(f"{count:8,}  {outcome}")
        print(f"{args.iterations:,} damaged databases, {findings} findings")
        return 1 if findings else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
