"""Captures one real perf_event_open ring from this machine as test data (run as root).

    python tests/kernel/data/capture_perf.py tests/kernel/data/perf

Opens the event :class:`openetw.kernel.perf.PerfSource` opens (cpu-clock at 1000 Hz with
call chains, MMAP2/COMM/FORK/EXIT side-band, CLOCK_MONOTONIC) on CPU 0 with a 4-page data area,
pins itself to CPU 0, starts ``/bin/sh -c 'exit 3'`` children and reads the ring until its
unread part wraps around the end of the data area; then writes the data area
(``ring-cpu0.data``) and the positions and attributes (``ring-cpu0.json``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from openetw.kernel import perf_format as F
from openetw.kernel.perf import PerfSource, _ioctl, _Ring, perf_event_open

DATA_PAGES = 4


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {0})
    source = PerfSource(image=True, profile=True, frequency=1000, cpus=[0], ring_pages=DATA_PAGES)
    attr = source.attr()
    fd = perf_event_open(F.pack_attr(attr), -1, 0)
    ring = _Ring(fd, 0, DATA_PAGES)
    try:
        _ioctl(fd, 0x2400)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            subprocess.run(["/bin/sh", "-c", "exit 3"], check=False)
            raw, head = ring.unread()
            tail = head - len(raw)
            size = ring.size
            wrapped = raw and (tail % size) > (head % size) and (head % size) != 0
            kinds = {r.kind for r in F.RingParser(attr.sample_type).parse(raw)}
            if wrapped and {"mmap2", "fork", "exit", "comm", "sample"} <= kinds and "lost" not in kinds:
                _ioctl(fd, 0x2401)
                (out / "ring-cpu0.data").write_bytes(bytes(ring.data))
                meta = {
                    "tail": tail, "head": head, "data_size": size, "sample_type": attr.sample_type,
                    "flags": attr.flags, "sample_period": attr.sample_period, "kernel": platform.release(),
                    "machine": platform.machine(),
                }
                (out / "ring-cpu0.json").write_text(json.dumps(meta, indent=1) + "\n")
                print(f"captured {len(raw)} unread bytes at {tail}..{head}: {sorted(kinds)}")
                return
            if len(raw) > size // 2:
                ring.consumed(head)  # start over: the next unread part begins further on
            time.sleep(0.002)
        sys.exit("no wrapped capture within 30 s")
    finally:
        ring.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "perf"))
