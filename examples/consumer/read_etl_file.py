"""Reading an .etl file: every event through the default callback, a time window, statistics.

Events of providers nobody enabled go to the default callback. Only the middle minute of the
file is delivered; the process starts before it still teach the trace the process names.

    .venv/bin/python examples/consumer/read_etl_file.py [FILE.etl]
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

from _corpus import corpus_file

from openetw.consumer import EtlIndex, UserTrace


def main() -> None:
    etl = Path(sys.argv[1]) if len(sys.argv) > 1 else corpus_file("etl", "tx", "Process.etl")
    manifest = corpus_file("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml")
    index = EtlIndex.open(etl)  # what the trace uses too: built once, then loaded
    first, last = index.records["filetime"][[0, -1]]
    middle = (int(first) + int(last)) // 2

    trace = UserTrace(files=[etl], manifests=[manifest], start_time=middle - 300_000_000, end_time=middle + 300_000_000)
    by_event: Counter[str] = Counter()
    by_process: Counter[str] = Counter()

    def every_event(record, context) -> None:
        by_event[context.schema_for(record).event_name or f"id {record.id}"] += 1
        by_process[context.process_name_of(record) or str(record.pid)] += 1

    trace.set_default_event_callback(every_event)
    trace.set_rundown_callback(lambda record, context: None)  # state before the window arrives here
    trace.start()

    stats = trace.query_stats()
    print(f"{etl.name}: window of {timedelta(seconds=60)} around the middle of the file")
    print(f"  delivered {stats['events_handled']}, outside {stats['events_outside_window']}, state before {stats['state_events_before_window']}")
    print(f"  buffers {stats['buffers']}, events lost {stats['events_lost']}, index at {index.index_path}")
    for name, count in by_event.most_common(5):
        print(f"  {count:>6} {name}")
    for name, count in by_process.most_common(5):
        print(f"  {count:>6} events of {name}")


if __name__ == "__main__":
    main()
