"""Traces as timelines: events/s exported to Perfetto and Chrome JSON, peak memory, bytes per event.

Cold rows: every export runs in a fresh process (nothing imported, no cache) and reports its
own CPU time, wall time and peak RSS. Inputs:

* ``net.4.5.2.x64.etl`` (the corpus' mixed .NET and kernel trace, compressed buffers), decoded
  with the corpus' .NET manifest;
* a large relogged kernel trace (``diaghub.kernel.1.etl`` and a made-up kernel trace with
  context switches, disk I/O and process lifetimes, relogged together as ``bench_export``
  makes it) of ``--size-mb`` (default 256; ``--size-mb 1024`` for the 1 GB row), and the same at
  a quarter of that size: the peak memory of the two shows whether it stays flat.

Every record is decoded (each event's fields become its arguments). Goal: 200k events/s.

Usage: python benchmarks/bench_timeline.py [--size-mb 256] [--formats perfetto,chrome] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import CLR_MANIFEST, NET_FILE, make_large_trace
from common import REPO, machine_note, table

sys.path.insert(0, str(REPO))

# One export in a fresh interpreter; prints its CPU, wall time, peak RSS and summary as JSON.
_CHILD = """
import json, resource, sys, time
wall, cpu = time.perf_counter(), time.process_time()
from openetw.export.timeline import export_timeline
from openetw.events.registry import build_registry
source, output, fmt, manifests = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
summary = export_timeline([source], output, fmt, registry=build_registry(manifests, installed=False))
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "summary": summary.as_json()}))
"""


def cold_export(source: Path, output: Path, fmt: str, manifests: list[str]) -> dict[str, Any]:
    output.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(output), fmt, *manifests], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes"] = output.stat().st_size
    output.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=256, help="size of the large relogged trace (1024 for the 1 GB row)")
    parser.add_argument("--formats", default="perfetto,chrome", help="comma-separated: perfetto, chrome")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the traces here")
    args = parser.parse_args()
    formats = [item for item in args.formats.split(",") if item]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="openetw-bench-timeline-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {machine_note()}", flush=True)
    try:
        quarter = make_large_trace(work, max(1, args.size_mb // 4))
        large = make_large_trace(work, args.size_mb)
        rows = []
        for label, source, manifests in (
            ("net.4.5.2.x64.etl", NET_FILE, [str(CLR_MANIFEST)]),
            (f"relogged kernel, {quarter.stat().st_size / 2**20:.0f} MB", quarter, []),
            (f"relogged kernel, {large.stat().st_size / 2**20:.0f} MB", large, []),
        ):
            for fmt in formats:
                result = cold_export(source, work / f"out-{source.stem}.{fmt}", fmt, manifests)
                summary = result["summary"]
                events = summary["records_read"]
                timeline = summary["timeline"]
                rows.append([
                    label, fmt, f"{events:,}", f"{result['wall']:.1f}", f"{result['cpu']:.1f}", f"{events / result['cpu']:,.0f}",
                    f"{result['rss_mb']:.0f}", f"{result['bytes'] / 2**20:.1f}", f"{result['bytes'] / max(events, 1):.1f}",
                    f"{timeline['switches']:,}", f"{timeline['slices']:,}",
                ])  # fmt: skip
                print(f"  exported {label} to {fmt}", flush=True)
        print()
        print("Export to timelines (cold: a fresh process each; events/s on CPU time; goal 200k/s, memory flat in trace size)")
        print(table(["input", "format", "events", "wall s", "CPU s", "events/s", "peak RSS MB", "output MB", "bytes/event",
                     "CSwitch", "slices"], rows))  # fmt: skip
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
