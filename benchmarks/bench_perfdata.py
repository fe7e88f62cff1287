"""Reading a perf.data of kernel tracepoint samples: openetw vs ``perf script``, same file, same run.

The file is recorded here: ``perf record -e syscalls:sys_enter_getppid`` of a child that calls
getppid() --calls times (≥ 1 M samples; a bigger ring buffer keeps losses low), needs root and
perf. Every row runs in a fresh process (imports excluded from the time) and reports records per
CPU second of that process (on a shared machine time waiting for a CPU is not the reader's),
beside its wall time:

* ``perf script``: the kernel's own reader, printing every sample (to /dev/null);
* ``openetw columns``: ``PerfData`` + ``sample_columns``, every field of every sample decoded into
  numpy columns (time, pid, tid, cpu, ip, period and the tracepoint's fields);
* ``openetw samples``: ``PerfData.records()``, each sample parsed into a ``Sample`` one at a time;
* ``openetw records``: ``PerfDataSource`` (file order), each sample as a TraceLogging ``EventRecord``
  (what dump, export and probes read), on the first --record-limit samples (rate per sample).

Goal: openetw columns ≥ 5× perf script's records per CPU second.
Usage: python benchmarks/bench_perfdata.py [--calls 1100000] [--record-limit 200000] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_note, table

TRACEPOINT = "syscalls:sys_enter_getppid"


def _child(mode: str, path: str, limit: int) -> None:
    """In a fresh process: import, then time reading the file one way."""
    import mmap

    from openetw.perfdata.reader import PerfData

    with open(path, "rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if mode == "columns":
            from openetw.perfdata.columns import sample_columns

            def run() -> int:
                tables = sample_columns(PerfData(data))
                return sum(table.rows for table in tables.values())
        elif mode == "samples":

            def run() -> int:
                return sum(1 for sample in PerfData(data).records() if sample is not None)
        else:
            from openetw.consumer.perfdata_source import PerfDataSource

            def run() -> int:
                source = PerfDataSource(path, time_order=False)
                source.open()
                count = 0
                for _ in source.records():
                    count += 1
                    if count >= limit:
                        break
                source.close()
                return count

        cpu, wall = time.process_time(), time.perf_counter()
        count = run()
        print(json.dumps({"records": count, "cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}))


def _run_child(mode: str, path: str, limit: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, path, "--record-limit", str(limit)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _perf_script(path: str) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(["perf", "script", "-i", path], check=True, stdout=sink, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall}


def record(path: str, calls: int) -> float:
    """Records the file; returns the CPU seconds of perf record and its workload."""
    workload = f"import os\ng = os.getppid\nfor _ in range({calls}):\n    g()\n"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        ["perf", "record", "-q", "-m", "4096", "-e", TRACEPOINT, "-o", path, "--", sys.executable, "-c", workload],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_100_000)
    parser.add_argument("--record-limit", type=int, default=200_000)
    parser.add_argument("--keep", help="keep the recorded file here")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.record_limit)
        return
    if shutil.which("perf") is None or os.geteuid() != 0:
        sys.exit("needs perf and root (perf record of kernel tracepoints)")
    with tempfile.TemporaryDirectory(prefix="openetw-bench-perf-") as folder:
        path = args.keep or os.path.join(folder, "perf.data")
        recording_cpu = record(path, args.calls)
        columns = _run_child("columns", path, args.record_limit)
        samples = columns["records"]
        if samples < 1_000_000:
            print(f"warning: {samples} samples recorded (fewer than 1 M): raise --calls", file=sys.stderr)
        perf = _perf_script(path)
        rows = [["perf script", samples, perf["cpu"], perf["wall"], samples / perf["cpu"]]]
        rows.append(["openetw columns", samples, columns["cpu"], columns["wall"], samples / columns["cpu"]])
        for mode in ("samples", "records"):
            result = _run_child(mode, path, args.record_limit)
            rows.append(
                [
                    f"openetw {mode}",
                    int(result["records"]),
                    result["cpu"],
                    result["wall"],
                    result["records"] / result["cpu"],
                ]
            )
        size = os.path.getsize(path)
    print(
        f"perf.data: {samples} samples of {TRACEPOINT}, {size / 1e6:.1f} MB (perf record and its workload: {recording_cpu:.2f} CPU s); {machine_note()}"
    )
    print(
        table(
            ["reader", "records", "CPU s", "wall s", "records/CPU s"],
            [[r[0], r[1], f"{r[2]:.3f}", f"{r[3]:.3f}", f"{r[4]:,.0f}"] for r in rows],
        )
    )
    print(f"openetw columns / perf script: {rows[1][4] / rows[0][4]:.1f}x records per CPU second (goal >= 5x)")


if __name__ == "__main__":
    main()
