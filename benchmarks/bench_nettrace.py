"""Reading an EventPipe trace, every field decoded: the ``.nettrace`` path next to the ``.etl`` path.

The largest trace of ``corpus/nettrace`` (unzipped to a temporary folder) is read as
``NettraceFileSource`` gives it (container, ETW records, every payload decoded through the
shipped .NET layouts or the trace's own metadata), and its relog to ``.etl`` (the same events,
``openetw relog``) is read by ``EtlReader`` and decoded the same way. Each path runs in a fresh
process: the first read is cold (imports done, nothing else cached), the second warm (same
process: schemas compiled, file in the page cache). Rates are events per CPU second of the read;
the last column is the CPU time of the whole process (imports included).
Usage: python benchmarks/bench_nettrace.py [--trace NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, machine_note, table


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(kind: str, path: str) -> None:
    """In a fresh process: read ``path`` twice with every field decoded; print the two timings."""
    from openetw.tdh.context import DecodeContext
    from openetw.tdh.registry import SchemaRegistry

    registry = SchemaRegistry()

    def records() -> object:
        if kind == "nettrace":
            from openetw.consumer.nettrace_source import NettraceFileSource

            source = NettraceFileSource(path)
            source.open()
            return source.records()
        from openetw.etl.reader import EtlReader

        return (record for record in EtlReader(path).records(time_order=True) if record.kind == "event")

    def read() -> tuple[int, int]:
        context = DecodeContext(registry)
        events = fields = 0
        for record in records():  # type: ignore[attr-defined]
            schema = context.schema_for(record)
            if schema is not None:
                fields += len(dict(registry.decode(schema, record.user_data, record.pointer_size).items()))
            events += 1
        return events, fields

    passes = []
    for name in ("cold", "warm"):
        start = time.process_time()
        events, fields = read()
        passes.append({"pass": name, "events": events, "fields": fields, "cpu": time.process_time() - start})
    print(json.dumps({"passes": passes, "process_cpu": _process_cpu()}))


def _measure(kind: str, path: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, __file__, "--child", kind, path], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed: {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _largest() -> tuple[str, int]:
    sizes = []
    for archive in sorted((CORPUS / "nettrace").glob("*.zip")):
        with zipfile.ZipFile(archive) as opened:
            sizes.extend((info.file_size, info.filename, archive) for info in opened.infolist())
    size, name, _ = max(sizes)
    return name, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", help="a trace of corpus/nettrace (default: the largest)")
    args = parser.parse_args()
    name = args.trace or _largest()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="openetw-bench-nettrace-") as tmp:
        with zipfile.ZipFile(CORPUS / "nettrace" / f"{name}.zip") as archive:
            archive.extract(name, tmp)
        trace = os.path.join(tmp, name)
        relogged = os.path.join(tmp, "relogged.etl")
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "openetw", "relog", trace, "-o", relogged], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"relog failed: {done.stderr[-2000:]}")
        relog_seconds = time.monotonic() - start
        for kind, path in (("nettrace", trace), ("etl", relogged)):
            result = _measure(kind, path)
            for one in result["passes"]:  # type: ignore[attr-defined]
                rate = one["events"] / one["cpu"] if one["cpu"] else 0.0
                rows.append([f"{kind} ({os.path.getsize(path) / 1e6:.1f} MB)", one["pass"], f"{one['events']:,}", f"{one['fields']:,}",
                             f"{one['cpu']:.2f}", f"{rate:,.0f}", f"{result['process_cpu']:.2f}" if one["pass"] == "warm" else ""])  # fmt: skip
    print(f"trace: {name}; relog to .etl took {relog_seconds:.1f} s wall")
    print(table(["input", "pass", "events", "fields decoded", "CPU s", "events/s", "process CPU s"], rows))
    print(f"load average {os.getloadavg()[0]:.1f}; {machine_note()}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
