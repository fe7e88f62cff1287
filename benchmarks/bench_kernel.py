"""Kernel trace: decode cost on captured tracefs pages, then a live session under load.

Offline (captured pages from tests/kernel/data, repeated): ring-buffer walk (headers only),
payload decode to dicts, and mapping to NT Kernel Logger records, in events per second.
Live (root and tracefs only): a kernel session with process/thread/cswitch/syscall flags
while a child makes getppid() calls; events read per second and events the kernel dropped.
Usage: python benchmarks/bench_kernel.py [--repeat 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import best_of, machine_note, table  # noqa: E402

from openetw.kernel import KernelEventMapper, KernelSession, find_tracefs  # noqa: E402
from tests.kernel import pages as P  # noqa: E402

COPIES = 40


def offline(repeat: int) -> list[list[object]]:
    parser, decoder = P.captured_parser(), P.captured_decoder()
    pages = [raw for _, raw in P.captured_pages()] * COPIES

    def walk() -> int:
        return sum(len(parser.parse(raw).events) for raw in pages)

    def decode() -> int:
        n = 0
        for raw in pages:
            sub = parser.parse(raw)
            for event in sub.events:
                decoder.decode(raw[event.offset : event.offset + event.length])
                n += 1
        return n

    def map_records() -> int:
        mapper = KernelEventMapper({"process", "thread", "cswitch", "disk_io", "network", "syscall"})
        n = 0
        for raw in pages:
            sub = parser.parse(raw)
            for event in sub.events:
                fmt, values = decoder.decode(raw[event.offset : event.offset + event.length])
                mapper.map(fmt.name, event.timestamp, 0, values)
                n += 1
        return n

    rows = []
    for label, fn in (("walk (headers)", walk), ("decode (dict)", decode), ("decode + map to records", map_records)):
        seconds, events = best_of(fn, repeat)
        rows.append([label, events, f"{events / seconds / 1e3:,.0f}k", f"{seconds / events * 1e9:,.0f}"])
    return rows


def live(seconds: float) -> list[list[object]] | str:
    if os.geteuid() != 0 or find_tracefs() is None:
        return "live run skipped: needs root and tracefs"
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for flags in (("process", "thread", "cswitch"), ("process", "thread", "cswitch", "syscall")):
            session = KernelSession(flags=flags, output=Path(tmp) / "bench.etl", name="bench", rundown=False)
            session.start()
            load = subprocess.Popen([sys.executable, "-c", "import os,time\nend=time.time()+%f\nwhile time.time()<end:\n  [os.getppid() for _ in range(1000)]" % seconds])
            load.wait()
            stats = session.stop()
            total = stats["events_read"] + stats["events_lost"]
            lost = 100 * stats["events_lost"] / total if total else 0.0
            size = (Path(tmp) / "bench.etl").stat().st_size
            rows.append(["+".join(flags), f"{stats['events_read'] / stats['duration_s'] / 1e3:,.0f}k", stats["events_lost"], f"{lost:.1f}%", f"{size / 1e6:.1f}"])
        return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args, _ = parser.parse_known_args()
    print(machine_note())
    print(table(["offline, captured pages", "events", "events/s", "ns/event"], offline(args.repeat)))
    result = live(args.seconds)
    if isinstance(result, str):
        print(result)
    else:
        print(table(["live session (getppid load)", "events read/s", "lost", "lost %", "file MB"], result))


if __name__ == "__main__":
    main()
