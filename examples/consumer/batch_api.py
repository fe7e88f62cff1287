"""The batch API: header columns of millions of events as numpy arrays, no record built.

The first pass over a file writes its index (``FILE.etl.idx``, or the cache directory when the
folder is read-only); counting, selecting and batching then run on the index's columns.

    .venv/bin/python examples/consumer/batch_api.py [FILE.etl]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from _corpus import corpus_file

from openetw.consumer import EtlIndex, Provider, UserTrace


def main() -> None:
    etl = Path(sys.argv[1]) if len(sys.argv) > 1 else corpus_file("etl", "tx", "Process.etl")
    started = time.perf_counter()
    index = EtlIndex.open(etl)
    print(f"{etl.name}: {len(index)} records, index {'built' if index.built else 'loaded'} in {time.perf_counter() - started:.3f}s ({index.index_path})")

    for (provider, event_id), count in sorted(index.count_by("provider", "id").items(), key=lambda item: -item[1])[:5]:
        print(f"  {count:>7} events {event_id} of {provider}")

    trace = UserTrace(files=[etl], manifests=[])
    trace.enable(Provider("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716").event_ids([5, 6]))  # image loads and unloads
    rows = 0
    per_pid: dict[int, int] = {}
    for batch in trace.batches(columns=["filetime", "pid", "id"], batch_size=2048):
        rows += len(batch)
        pids, counts = np.unique(batch.rows["pid"], return_counts=True)
        for pid, count in zip(pids.tolist(), counts.tolist()):
            per_pid[pid] = per_pid.get(pid, 0) + count
        if rows == len(batch):
            print(f"  first batch: {len(batch)} rows; first event's user data: {batch.user_data(0)[:16].hex()}...")
    busiest = sorted(per_pid.items(), key=lambda item: -item[1])[:3]
    print(f"  {rows} image events; busiest processes: {busiest}")


if __name__ == "__main__":
    main()
