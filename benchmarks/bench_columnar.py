"""Export from columns (Parquet, CSV, JSON lines): events/s, cold and warm, next to the record-by-record
path and DuckDB.

For each trace, in fresh processes (CPU time of every process, from ``getrusage`` of the children:
user + system, all threads):

* ``columns``: ``export_files(..., FORMAT)`` for each of ``--formats`` -- one .etl is written from
  its columns (``openetw.export.from_columns``; JSON lines by ``openetw.export.jsonl_columns``);
  cold = the first export in a fresh process (nothing imported, no index), warm = the best of the
  next ``--repeat`` exports in that process;
* ``records``: the record-by-record path on the same trace, same way (``export_tables`` for
  Parquet; with ``--records-jsonl`` also ``export_jsonl``, slow: tens of thousands of events/s);
* ``DuckDB from JSONL``: DuckDB reading the same events from ``openetw export --to jsonl``'s file
  (made beforehand, not timed) and writing them to Parquet, ``COPY (SELECT * FROM read_json(...,
  sample_size = -1, union_by_name = true)) TO ... (FORMAT parquet)`` -- what a user with the JSON
  lines would do (the whole file sampled: the events' ``properties`` differ from schema to schema).

Traces: diaghub.etl's buffers repeated to about ``--events`` events (``openetw.testing.large``: a
.NET and CLR user-mode trace), and the relogged kernel trace of ``bench_export.py`` at
``--size-mb`` (kernel events with many process lifetimes). Goal: 1 M events/s.

Usage: python benchmarks/bench_columnar.py [--events 1000000] [--size-mb 64] [--repeat 2] [--formats parquet,csv,jsonl]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, REPO, machine_note, table

DIAGHUB = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"

_CHILD = r"""
import json, shutil, sys, time
way, fmt, source, output, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
times, rows = [], 0
for run in range(1 + repeat):
    started = time.process_time()
    if way == "columns":
        from openetw.export import export_files
        from openetw.report.sources import build_registry
        summary = export_files([source], output, fmt, registry=build_registry([], installed=False))
    else:
        from openetw.export.pipeline import ExportSummary, export_tables
        from openetw.export.source import merged_records, open_inputs
        from openetw.report.sources import build_registry
        readers = open_inputs([source])
        summary = ExportSummary(inputs=[source], output=output, format=fmt)
        if fmt == "jsonl":
            from openetw.export.jsonl import export_jsonl
            with open(output, "w", encoding="utf-8") as out:
                export_jsonl(readers, merged_records(readers), build_registry([], installed=False), out, summary)
        else:
            from openetw.export.csv_format import CsvWriter
            from openetw.export.parquet import ParquetWriter
            writer = ParquetWriter(output) if fmt == "parquet" else CsvWriter(output)
            export_tables(readers, merged_records(readers), build_registry([], installed=False), writer, summary)
        for reader in readers:
            reader.close()
    times.append(time.process_time() - started)
    rows = summary.rows
print(json.dumps({"rows": rows, "cold": times[0], "warm": min(times[1:]) if repeat else None}))
"""

_DUCKDB = r"""
import duckdb, sys
source = f"read_json('{sys.argv[1]}', format = 'newline_delimited', sample_size = -1, union_by_name = true)"
duckdb.connect().execute(f"COPY (SELECT * FROM {source}) TO '{sys.argv[2]}' (FORMAT parquet)")
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child(args: list[str]) -> tuple[float, str]:
    """(CPU seconds of the child process, its output)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    before = _children_cpu()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return _children_cpu() - before, done.stdout


def export_way(way: str, fmt: str, source: Path, work: Path, repeat: int) -> dict[str, float]:
    output = work / f"out-{way}.{fmt}"
    shutil.rmtree(output, ignore_errors=True)
    cpu, out = run_child(["-c", _CHILD, way, fmt, str(source), str(output), str(repeat)])
    if output.is_file():
        output.unlink()
    result = json.loads(out.strip().splitlines()[-1])
    result["process_cpu"] = cpu  # the whole child: imports, the cold run and the warm runs
    return result  # type: ignore[no-any-return]


def duckdb_from_jsonl(source: Path, work: Path) -> tuple[float, int]:
    jsonl = work / f"{source.stem}.jsonl"
    if not jsonl.exists():
        from openetw.export import export_files
        from openetw.report.sources import build_registry

        export_files([str(source)], str(jsonl), "jsonl", registry=build_registry([], installed=False))
    target = work / f"{source.stem}-duckdb.parquet"
    cpu, _ = run_child(["-c", _DUCKDB, str(jsonl), str(target)])
    import duckdb

    rows = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()
    return cpu, int(rows[0]) if rows else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the repeated diaghub.etl (0: skip it)")
    parser.add_argument("--size-mb", type=int, default=64, help="size of the relogged kernel trace (0: skip it)")
    parser.add_argument("--repeat", type=int, default=2, help="warm runs after the cold one")
    parser.add_argument("--formats", default="parquet,csv,jsonl", help="export formats, comma-separated")
    parser.add_argument("--records-jsonl", action="store_true", help="also the record-by-record JSON lines (slow)")
    parser.add_argument("--no-duckdb", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="openetw-bench-columnar-"))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {machine_note()}", flush=True)
    try:
        from openetw.testing.large import repeat_buffers

        traces = []
        if args.events:
            repeated = work / "diaghub-repeated.etl"
            per_copy = repeat_buffers(DIAGHUB, repeated, 0)
            repeat_buffers(DIAGHUB, repeated, max(1, -(-args.events // per_copy)) * repeated.stat().st_size)
            traces.append(("diaghub.etl repeated", repeated))
        if args.size_mb:
            from bench_export import make_large_trace

            traces.append((f"relogged kernel, {args.size_mb} MB", make_large_trace(work, args.size_mb)))
        headers = ["trace", "events", "way", "cold events/s", "warm events/s", "process CPU s (all runs)"]
        rows = []
        for label, source in traces:
            first = len(rows)
            for fmt in args.formats.split(","):
                ways = ["columns"] + (["records"] if fmt != "jsonl" or args.records_jsonl else [])
                results = {way: export_way(way, fmt, source, work, args.repeat) for way in ways}
                events = int(results["columns"]["rows"])
                base = results.get("records")
                for way, result in results.items():
                    cells = []
                    for which in ("cold", "warm"):
                        seconds = result[which]
                        rate = events / seconds if seconds else 0.0
                        ratio = (
                            f" ({base[which] / seconds:.1f}x records)" if way == "columns" and base and seconds else ""
                        )
                        cells.append(f"{rate:,.0f}{ratio}")
                    rows.append([label, f"{events:,}", f"openetw {fmt}, {way}", *cells, f"{result['process_cpu']:.1f}"])
            if not args.no_duckdb:
                try:
                    cpu, found = duckdb_from_jsonl(source, work)
                    rows.append(
                        [label, f"{found:,}", "DuckDB JSONL -> Parquet", f"{found / cpu:,.0f}", "", f"{cpu:.1f}"]
                    )
                except RuntimeError as error:
                    rows.append([label, "", "DuckDB JSONL -> Parquet", f"failed: {str(error)[:80]}", "", ""])
            print(table(headers, rows[first:]), flush=True)
        print()
        print("Export, events/s of CPU time (cold: first export in a fresh process; warm: best of the next runs)")
        print(table(headers, rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
