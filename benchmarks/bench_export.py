"""Traces as tables: events/s exported to Parquet, peak memory, bytes per event; SQL vs Python loops.

Cold rows: every export runs in a fresh process (nothing imported, no index, no cache) and
reports its own CPU time, wall time and peak RSS. Inputs:

* ``net.4.5.2.x64.etl`` (the corpus' mixed .NET and kernel trace, compressed buffers), decoded
  with the corpus' .NET manifest;
* a large relogged kernel trace: ``diaghub.kernel.1.etl`` and a made-up kernel trace with
  context switches, disk I/O and process lifetimes (``tests/export/synthetic.py``), relogged
  together (``openetw relog``) as many times as it takes to reach ``--size-mb`` (default 256;
  ``--size-mb 1024`` for the 1 GB row), and the same at a quarter of that size to show memory
  staying flat.

Then four questions over the large trace: events per provider, top processes by context
switches, disk bytes per process, the 99th percentile of process lifetimes (Process/Start to
Process/Stop). Each is asked as SQL (DuckDB over the exported layout, best of ``--repeat``) and
computed by a Python loop over the consumer (``UserTrace`` with a default callback: one pass
answers all four, timed once); the answers must be equal.

Exports from columns in every format (Parquet, CSV, JSON lines), cold and warm, beside the
record-by-record path and DuckDB reading the same events from JSON lines: ``bench_columnar.py``.

Usage: python benchmarks/bench_export.py [--size-mb 256] [--repeat 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, REPO, best_of, machine_note, table

sys.path.insert(0, str(REPO))

KERNEL_FILE = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.kernel.1.etl"
NET_FILE = CORPUS / "etl" / "perfview" / "net.4.5.2.x64.etl"
CLR_MANIFEST = CORPUS / "manifests" / "dotnet-runtime" / "ClrEtwAll.man"

# One export in a fresh interpreter; prints its CPU, wall time, peak RSS and summary as JSON.
_CHILD = """
import json, resource, sys, time
wall, cpu = time.perf_counter(), time.process_time()
from openetw.export import export_files
from openetw.events.registry import build_registry
source, output, manifests = sys.argv[1], sys.argv[2], sys.argv[3:]
summary = export_files([source], output, "parquet", registry=build_registry(manifests, installed=False))
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "summary": summary.as_json()}))
"""

QUESTIONS = {
    "events per provider": "SELECT provider_name, count(*) AS n FROM events GROUP BY 1",
    "top processes by CSwitch": (
        'SELECT e.process_name, count(*) AS n FROM "Windows Kernel/Thread/CSwitch" c JOIN events e USING (record) '
        "GROUP BY 1 ORDER BY n DESC, 1 LIMIT 10"
    ),
    "disk bytes per process": (
        "SELECT e.process_name, sum(d.TransferSize) AS bytes FROM (SELECT record, TransferSize FROM "
        '"Windows Kernel/DiskIO/Read" UNION ALL SELECT record, TransferSize FROM "Windows Kernel/DiskIO/Write") d '
        "JOIN events e USING (record) GROUP BY 1"
    ),
    "p99 process lifetime": (
        'WITH s AS (SELECT p.ProcessID AS pid, min(e.time) AS t FROM "Windows Kernel/Process/Start" p JOIN events e '
        'USING (record) GROUP BY 1), x AS (SELECT p.ProcessID AS pid, max(e.time) AS t FROM "Windows Kernel/Process/Stop" p '
        "JOIN events e USING (record) GROUP BY 1) SELECT quantile_cont(epoch_ns(x.t) - epoch_ns(s.t), 0.99) FROM s JOIN x USING (pid)"
    ),
}


def make_large_trace(directory: Path, size_mb: int) -> Path:
    """``diaghub.kernel.1.etl`` and a synthetic kernel trace, relogged together to ``size_mb``."""
    from openetw.etl.reader import EtlReader
    from openetw.etl.relog import relog
    from tests.export.synthetic import kernel_trace

    synthetic = kernel_trace(directory / "synthetic.etl", steps=20_000)
    unit = KERNEL_FILE.stat().st_size + synthetic.stat().st_size
    copies = max(1, round(size_mb * 1024 * 1024 / unit))
    target = directory / f"relogged-{size_mb}mb.etl"
    readers = [EtlReader(str(path), strict=False) for _ in range(copies) for path in (KERNEL_FILE, synthetic)]
    try:
        relog(readers, str(target))
    finally:
        for reader in readers:
            reader.close()
    return target


def cold_export(source: Path, output: Path, manifests: list[str]) -> dict[str, Any]:
    shutil.rmtree(output, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(output), *manifests], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes"] = sum(path.stat().st_size for path in output.rglob("*") if path.is_file())
    return result


def python_answers(source: Path) -> tuple[float, dict[str, Any]]:
    """The four answers from one pass of a ``UserTrace`` over ``source`` (seconds, answers)."""
    import numpy as np

    from openetw.consumer import UserTrace

    per_provider: Counter[str | None] = Counter()
    switches: Counter[str | None] = Counter()
    disk: defaultdict[str | None, int] = defaultdict(int)
    starts: dict[int, int] = {}
    stops: dict[int, int] = {}

    def on_event(record: Any, context: Any) -> None:
        schema = context.schema_for(record)
        provider, name = schema.provider_name, schema.event_name
        per_provider[provider] += 1
        if provider != "Windows Kernel":
            return
        if name == "Thread/CSwitch":
            switches[context.process_name_of(record)] += 1
        elif name == "DiskIO/Read" or name == "DiskIO/Write":
            disk[context.process_name_of(record)] += context.parser_for(record).parse("TransferSize")
        elif name == "Process/Start":
            pid, when = context.parser_for(record).parse("ProcessID"), record.filetime
            starts[pid] = min(starts.get(pid, when), when)
        elif name == "Process/Stop":
            pid, when = context.parser_for(record).parse("ProcessID"), record.filetime
            stops[pid] = max(stops.get(pid, when), when)

    with tempfile.TemporaryDirectory() as index_dir:
        trace = UserTrace(files=[str(source)], manifests=[], index_dir=index_dir)
        trace.set_default_event_callback(on_event)
        started = time.process_time()
        trace.start()
        seconds = time.process_time() - started
    durations = [(stops[pid] - starts[pid]) * 100 for pid in stops if pid in starts]
    top = sorted(switches.items(), key=lambda item: (-item[1], item[0] or ""))[:10]
    return seconds, {
        "events per provider": dict(per_provider),
        "top processes by CSwitch": top,
        "disk bytes per process": dict(disk),
        "p99 process lifetime": float(np.percentile(durations, 99)) if durations else None,
    }


def sql_answers(layout: Path, repeat: int) -> tuple[dict[str, float], dict[str, Any]]:
    from openetw.export.sql import open_database

    connection = open_database([str(layout)])
    seconds: dict[str, float] = {}
    answers: dict[str, Any] = {}
    for label, query in QUESTIONS.items():
        rows: list[Any] = []

        def run(query: str = query, rows: list[Any] = rows) -> int:
            rows[:] = connection.execute(query).fetchall()
            return len(rows)

        seconds[label], _ = best_of(run, repeat, clock=time.perf_counter)
        if label == "top processes by CSwitch":
            answers[label] = [tuple(row) for row in rows]
        elif label == "p99 process lifetime":
            answers[label] = rows[0][0]
        else:
            answers[label] = {row[0]: row[1] for row in rows}
    connection.close()
    return seconds, answers


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float):
        return abs(left - right) <= 1e-9 * max(abs(left), abs(right), 1.0)
    return bool(left == right)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=256, help="size of the large relogged trace (1024 for the 1 GB row)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the SQL questions")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the traces and layouts here")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="openetw-bench-export-"))
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
            result = cold_export(source, work / f"layout-{source.stem}", manifests)
            summary = result["summary"]
            events = summary["rows"]
            rows.append([
                label, f"{events:,}", f"{result['wall']:.1f}", f"{result['cpu']:.1f}", f"{events / result['cpu']:,.0f}",
                f"{result['rss_mb']:.0f}", f"{result['bytes'] / 2**20:.1f}", f"{result['bytes'] / max(events, 1):.1f}",
                f"{summary['decoded'] / max(events, 1):.1%}",
            ])  # fmt: skip
            print(f"  exported {label}", flush=True)
        print()
        print("Export to Parquet (cold: a fresh process each; events/s on CPU time; goal 300k/s on the relogged trace)")
        print(table(["input", "events", "wall s", "CPU s", "events/s", "peak RSS MB", "output MB", "bytes/event", "typed"], rows))

        layout = work / f"layout-{large.stem}"
        sql_seconds, sql = sql_answers(layout, args.repeat)
        python_seconds, python = python_answers(large)
        events = json.loads((layout / "_schemas.json").read_text())["events"]["rows"]
        print()
        print(f"Questions over the {large.stat().st_size / 2**20:.0f} MB trace ({events:,} events): DuckDB over its tables "
              f"(wall, best of {args.repeat}) vs one Python pass of the consumer answering all four (CPU {python_seconds:.1f} s)")  # fmt: skip
        qrows = [[label, f"{sql_seconds[label]:.3f}", f"{python_seconds:.1f}", f"{python_seconds / sql_seconds[label]:,.0f}x",
                  "yes" if _equal(sql[label], python[label]) else "NO"] for label in QUESTIONS]  # fmt: skip
        print(table(["question", "SQL s", "Python pass s", "ratio", "same answer"], qrows))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
