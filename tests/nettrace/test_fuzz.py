"""The EventPipe reader fuzzed at small scale: mutated corpus traces give only ``NettraceFormatError``.

Each mutated copy (``openetw.testing.fuzz_nettrace.mutate``: flips, object tags, sizes and counts
set to edge values, cuts, insertions, deletions, repeated blocks) is read as the trace source
reads it, every payload decoded: only the project's format error, memory under ``MEMORY_BOUND``
(counted by tracemalloc), and no hang (a watchdog). Inputs: the small TraceLogging trace whole,
and the first 48 KiB of larger ones (a cut trace of each container version).
"""

from __future__ import annotations

import random

from openetw.testing.fuzz_nettrace import check, mutate
from tests.etl.test_damage import watchdog

HEADS = {
    "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf": None,
    "eventpipe-dotnetcore2.0-linux-objver2.netperf": 48 << 10,
    "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace": 48 << 10,
    "only_managed_samples.nettrace": 48 << 10,
}
ITERATIONS = {None: 60, 48 << 10: 6}


def test_mutated_traces_give_only_format_errors(trace_file) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(20261129)
    checked = 0
    for name, size in HEADS.items():
        data = trace_file(name).read_bytes()
        data = data if size is None else data[:size]
        assert check(data) == [], name  # the input itself reads (a cut is a reported loss)
        for _ in range(ITERATIONS[size]):
            seed = rng.getrandbits(32)
            with watchdog(120):
                problems = check(mutate(data, random.Random(seed)))
            assert not problems, (name, seed, problems)
            checked += 1
    assert checked == 60 + 3 * 6
