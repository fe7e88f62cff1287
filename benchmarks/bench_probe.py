"""Probe firings per second: D programs over a large relogged file, beside hand-written callbacks.

The file is diaghub.etl relogged with its buffers repeated (timestamps shifted) to the event count
asked for (default 1 M; ``--full`` for 5 M). Rows, each measured in this process after one warm-up
(the file's index built), CPU time deciding (the machine is shared), each run ``--repeat`` times
(default 5): the best and the worst run are shown, a goal met "every run" when the worst meets it:

- ``etw:::generic_event { @[probemod] = count(); }`` — header only: column-wise over the index,
  and record by record (the compiled clause called per event); column-wise also with no index
  (cold: a fresh index directory each time, the index built in the same pass);
- ``etw::: { @[pid] = count(); }`` — header only, by a header column (pid), column-wise;
- ``etw:<ImageID>::<ids> { @[probemod] = sum(args->ImageBase); }`` — one decoded field, both ways
  too (column-wise reads the field at its fixed place in each event's user data);
- the same work as hand-written openetw consumer callbacks (``UserTrace`` default callback);
- ``etw:<ImageID>::36 { @[args->PDBFileName] = count(); }`` — a string field as the key, both ways.

Compile time (parse, check, generate, load) of a 100-line script is reported apart, as is the
catalog that types ``args->`` (from the index's kinds of event and schema lookups).

Then whole processes, CPU time of each (``getrusage`` of the child: every thread, interpreter
start and imports included; modules run from bytecode compiled by a first run, as installed),
the least and the most of ``--repeat`` runs, beside DuckDB over the Parquet export of the same file:

- ``openetw probe --file`` warm (the index built by an earlier run) and cold (a fresh index
  directory: the index is built in that run), the three programs;
- ``openetw export --to parquet`` once (its CPU time reported), then a fresh ``python`` running
  DuckDB's ``SELECT provider_id, count(*) ... GROUP BY`` and ``SELECT pid, count(*) ... GROUP BY``
  over ``events.parquet``, and
  ``SELECT sum(ImageBase) ...`` over the ImageID tables (one provider: the group is one row);
- ratios: the probe's CPU time over DuckDB's (above 1: DuckDB is faster), and over DuckDB's with
  the export counted (a probe reads the ``.etl`` itself).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORPUS, best_of, machine_note, table

from openetw.consumer import EtlIndex, UserTrace

SOURCE = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
IMAGE_ID = "b3e675d7-2554-4f18-830b-2762732560de"
HEADER_ONLY = "etw:::generic_event { @[probemod] = count(); }"
BY_PID = "etw::: { @[pid] = count(); }"
# The ImageID events that carry ImageBase (all but FileVersion, 64): 96% of the file.
ONE_FIELD = f"etw:{IMAGE_ID}::0, etw:{IMAGE_ID}::3?, etw:{IMAGE_ID}::40 {{ @[probemod] = sum(args->ImageBase); }}"
IMAGE_BASE_OPCODES = frozenset({0, 32, 36, 37, 38, 40})
# A string field as the key: the PDB file names of the DbgID_RSDS events (opcode 36, after a GUID).
STRING_KEY = f"etw:{IMAGE_ID}::36 {{ @[args->PDBFileName] = count(); }}"
GOALS = {"header only, column-wise": 20e6, "header only, column-wise, cold": 5e6, "count by pid, column-wise": 20e6,
         "header only, per record": 2e6, "one decoded field, column-wise": 5e6, "one decoded field, per record": 1e6}


def runs_of(fn: Any, repeat: int) -> tuple[list[float], int]:
    """``fn`` run ``repeat`` times: (the CPU seconds of each run, what it returned)."""
    seconds, result = [], 0
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = fn()
        seconds.append(time.process_time() - start)
    return seconds, result


def spread(values: list[float], unit: str = " s", scale: float = 1.0) -> str:
    """``min-max`` of ``values`` (each times ``scale``)."""
    low, high = min(values) * scale, max(values) * scale
    return f"{low:.2f}-{high:.2f}{unit}"


def make_file(target: str, events: int) -> int:
    """diaghub.etl with its data buffers repeated until the file holds at least ``events`` events
    (``openetw.testing.large``); returns how many it holds."""
    from openetw.testing.large import repeat_buffers

    per_copy = repeat_buffers(SOURCE, target, 0)  # the header buffer and one copy of the rest
    copies = max(1, -(-events // per_copy))
    return repeat_buffers(SOURCE, target, copies * os.path.getsize(target))


def probe_run(path: str, text: str, *, columnar: bool) -> tuple[Any, Any, Any]:
    from openetw.probe.lang.program import compile_script
    from openetw.probe.run.adapter import Catalog, TraceFiles

    files = TraceFiles([path], manifests=[])
    scanned = Catalog.scan(files) if "args->" in text else None
    catalog = scanned.items() if scanned is not None else []

    def fields_of(specs: list[str]) -> Any:
        from openetw.probe.lang.descriptions import parse_description
        from openetw.probe.lang.schema_types import merge_fields

        merged = None
        for identity, fields, _ in catalog:
            if fields is not None and any(parse_description(s).match(identity) for s in specs):
                merged = dict(fields) if merged is None else merge_fields(merged, fields)
        return merged

    return compile_script(text, fields_of=fields_of), files, scanned


def run_probe(path: str, text: str, columnar: bool, cold_in: str | None = None) -> Any:
    """A run of ``text`` over ``path``; ``cold_in``: each run with a fresh index directory under it."""
    from openetw.probe.run.runner import ProbeRun

    program, files, scanned = probe_run(path, text, columnar=columnar)

    def run() -> int:
        if cold_in is not None:
            os.environ["OPENETW_INDEX_DIR"] = tempfile.mkdtemp(dir=cold_in)
        out: list[str] = []
        runner = ProbeRun(program, files, write=out.append, quiet=True, columnar=columnar, catalog=scanned)
        status = runner.run()
        assert status == 0, "".join(out)
        assert runner.ran_columnar == columnar
        return int(runner.firings)

    return run


def callback_header(path: str) -> int:
    counts: dict[str, int] = {}

    def on_event(record: Any, context: Any) -> None:
        if record.provider_guid_bytes is None:
            return
        key = str(record.provider_id)
        counts[key] = counts.get(key, 0) + 1

    trace = UserTrace(files=[path], manifests=[])
    trace.set_default_event_callback(on_event)
    trace.start()
    return sum(counts.values())


def callback_field(path: str) -> int:
    sums: dict[str, int] = {}
    wanted = uuid.UUID(IMAGE_ID).bytes_le[:4]
    seen = [0]

    def on_event(record: Any, context: Any) -> None:
        raw = record.provider_guid_bytes
        if raw is None or raw[:4] != wanted or record.opcode not in IMAGE_BASE_OPCODES:
            return
        seen[0] += 1
        key = str(record.provider_id)
        sums[key] = sums.get(key, 0) + context.parser_for(record).parse("ImageBase")

    trace = UserTrace(files=[path], manifests=[])
    trace.set_default_event_callback(on_event)
    trace.start()
    return seen[0]


def compile_time() -> float:
    from openetw.probe.lang.output import Output
    from openetw.probe.lang.program import compile_script

    lines = ["#pragma D option quiet", "typedef struct { uint32_t a; uint64_t b; } pair;", "BEGIN { n = 0; }"]
    body = []
    for i in range(30):
        body.append(f"    @c{i}[probemod, pid] = count(); self->t{i} = timestamp; this->x{i} = tid * {i + 1};")
        body.append(f"    if (this->x{i} > {i}) {{ n = n + 1; }} else {{ @s{i}[cpu] = sum(this->x{i}); }}")
        body.append(f'    @q{i} = quantize(this->x{i}); @l{i}[probename] = lquantize(cpu, 0, 64, 4);')
    lines += ["etw:::generic_event", "/pid != 0/", "{", *body[:90], "}"]
    lines += ["END", "{", '    printf("%d\\n", n);', "    printa(@c0);", "}"]
    text = "\n".join(lines)
    assert len(lines) >= 100, len(lines)
    env = {"_field": None, "_ld": None, "_execname": None, "_ppid": None, "_timestamp": None, "_walltime": None, "_ARG0": 0}

    def once() -> int:
        compile_script(text).load(env, Output(lambda s: None))
        return 1

    seconds, _ = best_of(once, 5, clock=time.process_time)
    return seconds


def process_cpu(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(CPU seconds of the child process, its stdout); fails when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def processes(path: str, scratch: str, repeat: int, firings: dict[str, int]) -> None:
    """Whole-process CPU time: the probe warm and cold, DuckDB over the Parquet export (each
    ``repeat`` times: the least and the most). The children run from compiled bytecode, as an
    installed package does (cached under ``scratch`` by a first run, whatever
    ``PYTHONDONTWRITEBYTECODE`` says here)."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    warm_dir = os.path.join(scratch, "warm-index")
    probe = [sys.executable, "-m", "openetw", "probe", "--file", path, "-q", "-f", "json", "-n"]
    for text in (HEADER_ONLY, ONE_FIELD):  # builds the warm index, compiles the modules both paths import
        process_cpu(probe + [text], {**env, "OPENETW_INDEX_DIR": warm_dir})
    out = os.path.join(scratch, "parquet")
    export_seconds, _ = process_cpu([sys.executable, "-m", "openetw", "export", path, "--to", "parquet", "-o", out],
                                    {**env, "OPENETW_INDEX_DIR": os.path.join(scratch, "export-index")})  # fmt: skip
    print(f"openetw export --to parquet: {export_seconds:.2f} s of CPU (counted in the last column)")
    tables = sorted(str(p) for p in Path(out).rglob("ImageID*.parquet"))
    header_sql = f"SELECT provider_id, count(*) FROM read_parquet('{out}/events.parquet') GROUP BY provider_id"
    field_sql = f"SELECT count(*), sum(ImageBase) FROM read_parquet({tables!r}, union_by_name=true) WHERE ImageBase IS NOT NULL"
    duck = [sys.executable, "-c", "import duckdb, sys; print(duckdb.sql(sys.argv[1]).fetchall())"]
    process_cpu(duck + ["SELECT 1"], env)  # (DuckDB's modules compiled too)
    pid_sql = f"SELECT pid, count(*) FROM read_parquet('{out}/events.parquet') GROUP BY pid"
    rows: list[list[object]] = []
    for name, text, sql in (("header only", HEADER_ONLY, header_sql), ("count by pid", BY_PID, pid_sql),
                            ("one decoded field", ONE_FIELD, field_sql)):  # fmt: skip
        times: dict[str, list[float]] = {}
        for label in ("warm", "cold"):
            times[label] = [
                process_cpu(probe + [text], {**env, "OPENETW_INDEX_DIR": warm_dir if label == "warm" else tempfile.mkdtemp(dir=scratch)})[0]
                for _ in range(repeat)
            ]
        times["duckdb"] = [process_cpu(duck + [sql], env)[0] for _ in range(repeat)]
        duck_best = min(times["duckdb"])
        for label in ("warm", "cold"):
            best = min(times[label])
            rows.append([f"{name}, probe {label}", f"{best:.2f} s", spread(times[label]), f"{firings[name] / best / 1e6:.2f} M/s",
                         f"{best / duck_best:.1f}x", f"{best / (duck_best + export_seconds):.2f}x"])  # fmt: skip
        rows.append([f"{name}, DuckDB over Parquet", f"{duck_best:.2f} s", spread(times["duckdb"]), f"{firings[name] / duck_best / 1e6:.2f} M/s",
                     "1x", ""])  # fmt: skip
    print(f"whole processes, {repeat} runs each (CPU time: least, and least-most):")
    print(table(["process", "CPU time", "range", "firings/s", "/ DuckDB", "/ (export + DuckDB)"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the relogged file (default 1 M)")
    parser.add_argument("--full", action="store_true", help="5 M events, the size the goals are stated for")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each row (the least and the most are shown; default 5)")
    parser.add_argument("--no-processes", action="store_true", help="skip the whole-process rows (probe CLI, DuckDB)")
    parser.add_argument("--no-records", action="store_true", help="skip the record-by-record and callback rows (the slow ones)")
    args = parser.parse_args()
    events = 5_000_000 if args.full else args.events
    print(machine_note())
    print(f"100-line script: parse + check + compile + load in {compile_time() * 1000:.1f} ms of CPU (goal 50 ms)")
    if not SOURCE.exists():
        print(f"skipped (corpus file missing): {SOURCE}")
        return
    with tempfile.TemporaryDirectory(prefix="openetw-bench-probe-") as scratch:
        os.environ.setdefault("OPENETW_INDEX_DIR", scratch)
        path = os.path.join(scratch, "big.etl")
        total = make_file(path, events)
        print(f"file: {total} events, {os.path.getsize(path) / 2**20:.0f} MiB")
        EtlIndex.open(path).ensure_built()  # every row after this loads the index
        started = time.process_time()
        field_run = run_probe(path, ONE_FIELD, columnar=False)
        print(f"catalog typing args-> (index and schemas) and compile: {time.process_time() - started:.2f} s of CPU (reported apart)")
        from openetw.probe.run.adapter import Catalog, TraceFiles

        catalog_seconds, _ = runs_of(lambda: len(Catalog.scan(TraceFiles([path], manifests=[])).entries), args.repeat)
        print(f"the catalog alone (Catalog.scan, index built): {spread(catalog_seconds)} of CPU over {args.repeat} runs")
        rows = []
        cold_dirs = os.path.join(scratch, "cold")
        os.makedirs(cold_dirs)
        warm_index = os.environ["OPENETW_INDEX_DIR"]
        cold_run = run_probe(path, HEADER_ONLY, columnar=True, cold_in=cold_dirs)

        def cold() -> int:
            try:
                return int(cold_run())
            finally:
                os.environ["OPENETW_INDEX_DIR"] = warm_index

        runs = [
            ("header only, column-wise", run_probe(path, HEADER_ONLY, columnar=True)),
            ("header only, column-wise, cold", cold),
            ("count by pid, column-wise", run_probe(path, BY_PID, columnar=True)),
            ("header only, per record", run_probe(path, HEADER_ONLY, columnar=False)),
            ("hand-written callback, header only", lambda: callback_header(path)),
            ("one decoded field, column-wise", run_probe(path, ONE_FIELD, columnar=True)),
            ("one decoded field, per record", field_run),
            ("hand-written callback, one decoded field", lambda: callback_field(path)),
            ("string field as key, column-wise", run_probe(path, STRING_KEY, columnar=True)),
            ("string field as key, per record", run_probe(path, STRING_KEY, columnar=False)),
        ]
        for name, run in runs:
            if args.no_records and ("per record" in name or "callback" in name):
                continue
            seconds, count = runs_of(run, args.repeat)
            rate, worst = count / min(seconds), count / max(seconds)
            goal = GOALS.get(name)
            verdict = "" if goal is None else ("meets goal, every run" if worst >= goal else "meets goal (best run)" if rate >= goal
                                                 else f"below goal {goal / 1e6:g}M")  # fmt: skip
            rows.append([name, count, f"{min(seconds):.2f} s", f"{rate / 1e6:.2f} M/s", f"{worst / 1e6:.2f}-{rate / 1e6:.2f} M/s", verdict])
        print(f"in process, {args.repeat} runs each (CPU time: least; firings/s: best, and worst-best):")
        print(table(["run", "firings", "CPU time", "firings/s", "range", "goal"], rows))
        if not args.no_processes:
            fired = {str(row[0]): int(str(row[1])) for row in rows}
            counts = {"header only": fired["header only, column-wise"], "count by pid": fired["count by pid, column-wise"],
                      "one decoded field": fired["one decoded field, column-wise"]}  # fmt: skip
            processes(path, scratch, args.repeat, counts)
        print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
