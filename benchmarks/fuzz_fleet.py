"""Fuzz of the fleet collector's message check at any scale: hostile NATS messages (random and
mutated subjects, headers and payloads, forged host names) mixed with two good sessions, through
the collector's batch handling and store (``openetw.testing.fleet_fuzz``), seed after seed.

Each round must end with both good sessions complete (every buffer, every record, no gap) and
every refused message counted; a crash or a hang is the finding. Prints one JSON line per round
and a total. ``tests/fleet/test_fleet_check.py`` runs one small round in CI.

Usage: python benchmarks/fuzz_fleet.py [--iterations 100000] [--rounds 1] [--seed N] [--corpus FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent.parent / "shared" / "corpus" / "etl" / "perfview" / "primitive-types.etl"


def _held(session: dict[str, object] | None) -> tuple[object, ...] | None:
    return None if session is None else (session["buffers"], session["events"], session["gaps"], session["ended"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000, help="hostile messages per round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="an .etl file of 8 KB buffers (its first two are used)")
    options = parser.parse_args()
    from openetw.fleet.collector import TERM
    from openetw.testing.fleet_fuzz import GOOD_HOSTS, run

    failures = 0
    reasons: Counter[str] = Counter()
    started = time.perf_counter()
    for round_index in range(options.rounds):
        seed = options.seed + round_index
        began = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="openetw-fuzz-fleet-") as directory:
            result = run(options.iterations, seed, Path(directory), options.corpus)
        sessions = {s["host"]: s for s in result.report["sessions"]}
        expected = (result.good_buffers, result.good_records, 0, True)
        problems = [f"{host}: {sessions.get(host)}" for host in GOOD_HOSTS if _held(sessions.get(host)) != expected]
        refused = sum(entry["messages"] for entry in result.report["rejected"].values())
        if refused != result.answers[TERM]:
            problems.append(f"{result.answers[TERM]} terminated, {refused} counted")
        for entry in result.report["rejected"].values():
            reasons.update(entry["reasons"])
        failures += bool(problems)
        elapsed = time.perf_counter() - began
        print(json.dumps({"seed": seed, "messages": options.iterations, "answers": dict(result.answers), "refused": refused,
                          "messages_per_second": round(options.iterations / elapsed), "problems": problems}), flush=True)  # fmt: skip
    print(json.dumps({"rounds": options.rounds, "failed": failures, "reasons": dict(reasons), "seconds": round(time.perf_counter() - started, 1)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
