"""The consumer's index: first pass (cold) and later passes (warm) beside the plain reader's walk.

Per trace (diaghub.etl, net.4.5.2.x64.etl, and a 1 GB trace made by repeating diaghub.etl's
buffers, ``openetw.testing.large``), each row measured in a fresh process (imports excluded),
all in the same run:

- ``EtlReader walk``: every record in file order, one header field touched (the baseline);
- ``index build, cold``: ``EtlIndex.open`` + the first pass with no index anywhere (the index is
  written beside the file);
- ``index read, warm``: every block of the stored index read back;
- ``header columns read, warm``: provider, id, level and pid of every row from the stored index
  (``EtlIndex.column_blocks``: only those columns read and inflated);
- ``callbacks, cold``: ``UserTrace`` with the busiest provider and a callback parsing one
  property, no index yet (events delivered while the index is built);
- ``callbacks, warm``: the same with the index stored;
- ``empty callback loop``: the same callback called by a plain Python ``for`` loop over the same
  records, as many calls as the callbacks rows make, each record primed with its schema entry as
  the consumer primes it (records and entries made beforehand, not timed): what calling the
  callback costs with no reading, planning or dispatch;
- ``dissect.etl iteration``: ``for event in ETL(file)`` over the same file (when installed).

Rates are records of the file per second of the child process's CPU time (``time.process_time``
in the child, imports excluded: the modules a trace imports on first use are imported before the
clock starts); the callback rows and the loop also say how many callbacks ran.
``loop / this`` is the empty loop's rate of calls over the callback rows' (same number of calls), ``x walk``
every row's over the walk's. The CPU time of every child whole (imports included) is taken from
``resource.getrusage(RUSAGE_CHILDREN)`` and shown beside. Peak RSS from ``VmHWM`` of each child;
index bytes per record from the index file. Goals: cold index build >= 20 M records/s; callbacks
within 1.5x of the empty loop; peak RSS <= 150 MB at any size; index <= 12 bytes per record.

Usage: python benchmarks/bench_index.py [--size-mb 1024] [--no-large]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, machine_note, table

DIAGHUB = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
NET = CORPUS / "etl" / "perfview" / "net.4.5.2.x64.etl"
BUSIEST = {"diaghub": ("b3e675d7-2554-4f18-830b-2762732560de", "ImageSize"), "net": ("ce1dbfb4-137e-4da6-87b0-3f59aa102cbc", "InstructionPointer")}

LAZY_IMPORTS = (
    "numpy.ma", "openetw.manifest.builtin", "openetw.manifest.store.manifests", "openetw.tdh.from_files", "openetw.tdh.tracelogging",
    "openetw.tdh.mof", "openetw.etl.lzxpress",
)  # fmt: skip

CHILD = r"""
import importlib.util, json, sys, time
what, path = sys.argv[1], sys.argv[2]
LAZY_IMPORTS = """ + repr(LAZY_IMPORTS) + r"""
import importlib
from openetw.consumer import EtlIndex, Provider, UserTrace
from openetw.etl import EtlReader
# what a trace imports on first use (manifests, schema sources, numpy's masked arrays that
# np.unique asks for): imports are left out of every row, these as well
for name in LAZY_IMPORTS:
    if importlib.util.find_spec(name) is not None:
        importlib.import_module(name)
start = time.process_time()
if what == "walk":
    n = 0
    with EtlReader(path) as reader:
        for record in reader:
            record.timestamp
            n += 1
elif what == "build":
    index = EtlIndex.open(path)
    assert index.built
    index.ensure_built()
    n = len(index)
elif what == "read":
    index = EtlIndex.open(path)
    assert not index.built
    n = sum(len(segment.records) for segment in index.segments())
elif what == "columns":
    index = EtlIndex.open(path)
    assert not index.built
    n = sum(len(columns["pid"]) for _, columns in index.column_blocks(["provider", "id", "level", "pid"]))
elif what == "dissect":
    from dissect.etl import ETL
    n = 0
    with open(path, "rb") as fh:
        for event in ETL(fh):
            n += 1
else:
    guid, prop = sys.argv[3], sys.argv[4]
    calls = 0
    def on_event(record, context):
        global calls
        calls += 1
        context.parser_for(record).try_parse(prop)
    trace = UserTrace(files=[path], manifests=None)
    provider = Provider(guid)
    if what == "loop":
        # the records and context the callbacks get, kept beforehand (not timed)
        records = []
        provider.add_on_event_callback(lambda record, context: records.append(record))
        trace.enable(provider)
        trace.start()
        context = trace._prepare().context
        pairs = [(record, context.delivery_entry(record)) for record in records]
        n = trace.query_stats()["events_read"]
        prime = context.prime
        start = time.process_time()
        for record, entry in pairs:
            prime(record, entry)
            on_event(record, context)
    else:
        provider.add_on_event_callback(on_event)
        trace.enable(provider)
        trace.start()
        n = trace.query_stats()["events_read"]
seconds = time.process_time() - start
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"records": n, "seconds": seconds, "rss_mb": peak_kb / 1024, "calls": calls if what in ("loop", "callbacks") else 0}))
"""


def child(what: str, path: Path, *extra: str, env: dict[str, str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", CHILD, what, str(path), *extra], capture_output=True, text=True, env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def has_dissect() -> bool:
    return importlib.util.find_spec("dissect") is not None and importlib.util.find_spec("dissect.etl") is not None


def measure(name: str, path: Path, busiest: tuple[str, str], work: Path) -> list[list[object]]:
    env = dict(os.environ, OPENETW_INDEX_DIR=str(work / "cache"), OPENETW_NO_AUTOSTART="1")
    index_file = Path(str(path) + ".idx")
    rows: list[list[object]] = []

    def row(label: str, result: dict[str, float], walk_rate: float | None, index_bytes: str = "", loop_rate: float | None = None) -> float:
        rate = result["records"] / result["seconds"] if result["seconds"] else float("inf")
        ratio = f"{rate / walk_rate:.2f}" if walk_rate else "1.00"
        calls = int(result.get("calls", 0))
        per_call = calls / result["seconds"] if calls and result["seconds"] else 0.0
        versus_loop = f"{loop_rate / per_call:.2f}" if loop_rate and per_call else ""
        rows.append([
            name, label, int(result["records"]), calls or "", f"{rate / 1e6:.2f} M/s", ratio, versus_loop, f"{result['seconds']:.3f}",
            f"{result['process_seconds']:.3f}", f"{result['rss_mb']:.0f}", index_bytes,
        ])  # fmt: skip
        return per_call or rate

    def clean() -> None:
        index_file.unlink(missing_ok=True)
        shutil.rmtree(work / "cache", ignore_errors=True)

    clean()
    walk = row("EtlReader walk", child("walk", path, env=env), None)
    if has_dissect():
        row("dissect.etl iteration", child("dissect", path, env=env), walk)
    built = child("build", path, env=env)
    per_record = (index_file if index_file.exists() else next((work / "cache").glob("*.idx"))).stat().st_size / built["records"]
    row("index build, cold", built, walk, f"{per_record:.2f}")
    row("index read, warm", child("read", path, env=env), walk)
    row("header columns read, warm", child("columns", path, env=env), walk)
    loop = row("empty callback loop", child("loop", path, *busiest, env=env), walk)
    clean()
    row("callbacks, cold", child("callbacks", path, *busiest, env=env), walk, loop_rate=loop)
    row("callbacks, warm", child("callbacks", path, *busiest, env=env), walk, loop_rate=loop)
    clean()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the repeated trace (default 1024)")
    parser.add_argument("--no-large", action="store_true", help="only the corpus files")
    args = parser.parse_args()
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="openetw-bench-index-") as temp:
        work = Path(temp)
        for name, source in (("diaghub.etl", DIAGHUB), ("net.4.5.2.x64.etl", NET)):
            copy = work / source.name  # a writable folder: the index goes beside the copy
            shutil.copy(source, copy)
            rows += measure(name, copy, BUSIEST["diaghub" if "diaghub" in name else "net"], work)
            copy.unlink()
        if not args.no_large:
            from openetw.testing.large import repeat_buffers

            large = work / "large.etl"
            if shutil.disk_usage(work).free < (args.size_mb + 512) << 20:
                print(f"skipped the {args.size_mb} MB trace: not enough free disk space")
            else:
                repeat_buffers(DIAGHUB, large, args.size_mb << 20)
                rows += measure(f"{args.size_mb} MB repeated", large, BUSIEST["diaghub"], work)
                large.unlink()
    print(table(
        ["trace", "row", "records", "callbacks", "rate (CPU)", "x walk", "loop / this", "CPU s", "process CPU s", "peak RSS MB", "index B/record"], rows,
    ))  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}; {machine_note()}")


if __name__ == "__main__":
    main()
