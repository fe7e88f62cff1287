"""The compiled core against the pure path and dissect.etl: header-level reads, LZXPRESS, the index
pass, consumer callbacks. Each row runs in a fresh process per engine (``OPENETW_PURE=1`` for the
pure path); "cold" is the first run in that process (imports done, nothing read yet: no stored
index, buffers not yet seen), "warm" the best of the next ``--repeat`` runs.

Equal work on both sides of a read row: every record yielded, its time as an integer FILETIME and
its provider read (openetw: ``record.filetime``, ``record.provider_id``; dissect.etl:
``header._etl.get_filetime_for_event(header.time_delta)`` -- the integer its ``header.timestamp``
datetime is built from -- and ``header.provider_id``).

Times are CPU time (``time.process_time``) of the one process doing the work, so a shared
machine's waiting for a core is left out; ratios are printed against dissect.etl and between the
two engines.

Goals on the native path: read >= 30x dissect.etl on diaghub.etl and >= 15x on net.4.5.2.x64.etl;
LZXPRESS >= 300 MB/s; index pass >= 20 M records/s cold; callbacks with a provider filter parsing
one property into a dict >= 3 M events/s cold on diaghub.etl's busiest provider (the callback
uses ``try_parse``: ``parse`` that gives None for the provider's events without the property).
Events/s of the callbacks row counts every record of the file, as bench_consumer.py does. Beside
each callbacks row, over diaghub.etl's and net.4.5.2.x64.etl's busiest providers: the same callback
called by a plain loop (``empty callback loop``), in a fresh process of its own, as many calls over
the same records, each primed with the entry the trace primes it with
(``TraceContext.delivery_entry``), the records gathered by a trace before the clock starts; "cold"
there is the loop's first run. The callbacks row shows its time over the loop's (goal: 1.5x, cold).
The last column is each child's CPU time whole (imports, every run, the loop's gathering of
records), from ``RUSAGE_CHILDREN``.
Usage: python benchmarks/bench_native.py [--repeat 3] [--tasks read,lzx,index,callbacks]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, machine_note, table

DIAGHUB = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
NET = CORPUS / "etl" / "perfview" / "net.4.5.2.x64.etl"
BUSIEST = ("b3e675d7-2554-4f18-830b-2762732560de", "ImageSize")  # diaghub.etl's ImageID provider: 62341 events
NET_BUSIEST = ("ce1dbfb4-137e-4da6-87b0-3f59aa102cbc", "InstructionPointer")  # net.4.5.2.x64.etl's PerfInfo samples: 79530 events
# what a trace imports on first use (manifests, schema sources, LZXPRESS): imported before any clock starts
LAZY_IMPORTS = (
    "numpy.ma", "openetw.manifest.builtin", "openetw.manifest.store.manifests", "openetw.tdh.from_files", "openetw.tdh.tracelogging",
    "openetw.tdh.mof", "openetw.etl.lzxpress",
)  # fmt: skip

CHILD = r'''
import gc, json, os, shutil, sys, tempfile, time
task, impl, path, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = {}  # the callbacks' values: how many calls the last run made
import importlib, importlib.util
for name in ''' + repr(LAZY_IMPORTS) + r''':
    if importlib.util.find_spec(name) is not None:
        importlib.import_module(name)

def openetw_read():
    from openetw.etl import EtlReader
    def run():
        n = 0
        with EtlReader(path) as reader:
            for record in reader:
                record.filetime
                record.provider_id
                n += 1
        return n
    return run, "records"

def dissect_read():
    from dissect.etl import ETL
    def run():
        n = 0
        with open(path, "rb") as f:
            for record in ETL(f):
                header = record.header
                header._etl.get_filetime_for_event(header.time_delta)
                header.provider_id
                n += 1
        return n
    return run, "records"

def lzx():
    from openetw.etl import lzxpress
    from tests.native.cases import compressed_streams
    streams = compressed_streams(open(path, "rb").read(), limit=1 << 30)
    decompress = lzxpress.decompress
    def run():
        return sum(len(decompress(s, n)) for s, n in streams)
    return run, "bytes"

def index():
    from openetw.consumer._engine.index_build import build_index_data
    return (lambda: len(build_index_data(path).records)), "records"

def callbacks():
    from openetw.consumer import Provider, UserTrace
    provider_name, prop = sys.argv[5], sys.argv[6]
    where = tempfile.mkdtemp(prefix="openetw-bench-native-")
    copy = os.path.join(where, os.path.basename(path))
    shutil.copyfile(path, copy)
    os.environ["OPENETW_INDEX_DIR"] = where  # nothing stored yet: the first run builds the index
    def on_event(record, context):
        value = context.parser_for(record).try_parse(prop)  # parse, None where the event lacks it
        seen[value] = seen.get(value, 0) + 1
    def trace_of(callback):
        trace = UserTrace(files=[copy], manifests=[])
        provider = Provider(provider_name)
        provider.add_on_event_callback(callback)
        trace.enable(provider)
        return trace
    if task == "callbacks":
        def run():
            seen.clear()
            trace = trace_of(on_event)
            trace.start()
            return int(trace.query_stats()["events_read"])
        return run, "events"
    # "loop": the same callback, as many calls, over the same records and context the trace hands
    # it, each primed with its schema entry as the trace primes it; the records are gathered by a
    # trace before the clock starts (that trace is not timed)
    records = []
    trace = trace_of(lambda record, context: records.append(record))
    trace.start()
    context = trace._prepare().context
    pairs = [(record, context.delivery_entry(record)) for record in records]
    read = int(trace.query_stats()["events_read"])
    prime = context.prime
    def run():
        seen.clear()
        for record, entry in pairs:
            prime(record, entry)
            on_event(record, context)
        return read
    return run, "events"

make = {"read": openetw_read if impl == "openetw" else dissect_read, "lzx": lzx, "index": index, "callbacks": callbacks, "loop": callbacks}[task]
run, unit = make()
times = []
count = 0
for i in range(1 + repeat):
    gc.collect()
    start = time.process_time()
    count = run()
    times.append(time.process_time() - start)
import openetw._native as native
print(json.dumps({"cold": times[0], "warm": min(times[1:]), "count": count, "unit": unit, "calls": sum(seen.values()),
                  "engine": native.engine() if impl == "openetw" else "-"}))
'''


def measure(task: str, impl: str, path: Path, repeat: int, engine: str, *extra: str) -> dict[str, object] | None:
    root = Path(__file__).resolve().parents[1]
    paths = [str(root / "src"), str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "OPENETW_PURE": "1" if engine == "python" else "0", "PYTHONPATH": os.pathsep.join(paths)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", CHILD, task, impl, str(path), str(repeat), *extra], env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        print(f"  {task} {impl} {engine} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def rate(result: dict[str, object], which: str) -> float:
    return float(result["count"]) / float(result[which])  # type: ignore[arg-type]


def human(value: float, unit: str) -> str:
    return f"{value / 1e6:.1f} MB/s" if unit == "bytes" else f"{value / 1e6:.2f} M {unit}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", default="read,lzx,index,callbacks", help="which rows, comma-separated")
    args = parser.parse_args()
    tasks = set(args.tasks.split(","))
    rows: list[list[object]] = []
    plan = [
        ("read", DIAGHUB, ()), ("read", NET, ()), ("lzx", NET, ()), ("index", DIAGHUB, ()), ("index", NET, ()),
        ("callbacks", DIAGHUB, BUSIEST), ("callbacks", NET, NET_BUSIEST),
    ]  # fmt: skip
    for task, path, extra in (item for item in plan if item[0] in tasks):
        results = {engine: measure(task, "openetw", path, args.repeat, engine, *extra) for engine in ("native", "python")}
        if task == "read":
            results["dissect.etl"] = measure(task, "dissect", path, args.repeat, "native")
        loops = {engine: measure("loop", "openetw", path, args.repeat, engine, *extra) for engine in results} if task == "callbacks" else {}
        base = results.get("dissect.etl")
        for name, result in results.items():
            if result is None:
                continue
            unit = str(result["unit"])
            row: list[object] = [task, path.name, name if name == "dissect.etl" else f"openetw {result['engine']}", result["count"]]
            pure = results.get("python")
            loop = loops.get(name)
            for which in ("cold", "warm"):
                ratio = f" ({rate(result, which) / rate(base, which):.1f}x dissect)" if base is not None and name != "dissect.etl" else ""
                if name == "native" and pure is not None:
                    ratio += f" ({rate(result, which) / rate(pure, which):.1f}x pure)"
                if loop is not None:
                    ratio += f" (x{float(result[which]) / float(loop[which]):.2f} the loop's time)"  # type: ignore[arg-type]
                row.append(human(rate(result, which), unit) + ratio)
            row.append(f"{float(result['process']):.2f} s")  # type: ignore[arg-type]
            rows.append(row)
            if loop is not None:
                loop_row: list[object] = ["empty callback loop", path.name, f"openetw {loop['engine']}", loop["count"]]
                loop_row += [human(rate(loop, which), unit) for which in ("cold", "warm")] + [f"{float(loop['process']):.2f} s"]  # type: ignore[arg-type]
                rows.append(loop_row)
                if loop["calls"] != result["calls"]:
                    print(f"  {path.name} {name}: the loop made {loop['calls']} calls, the trace {result['calls']}", file=sys.stderr)
    print("CPU time of each process (time.process_time, imports excluded); cold = first run in a fresh process, warm = best of the next runs;"
          " child CPU: the whole child process (imports, every run, and the loop's untimed gathering of records included), from RUSAGE_CHILDREN")
    print(table(["task", "file", "engine", "count", "cold", "warm", "child CPU"], rows))
    print(machine_note())


if __name__ == "__main__":
    main()
