"""Traces as timelines: events/s exported to Perfetto and Chrome JSON, cold and warm, against what a
user would otherwise write with Python's own tools.

Inputs:

* ``diaghub.etl`` (the corpus' .NET Core user-mode trace) with its buffers repeated to about
  ``--diaghub-events`` events (``openetw.testing.large.repeat_buffers``, as ``bench_columnar``
  makes it), decoded with the corpus' .NET manifest: Chrome JSON and Perfetto of it are written from columns;
* ``net.4.5.2.x64.etl`` (the corpus' mixed .NET and kernel trace, compressed buffers), decoded
  with the corpus' .NET manifest;
* a relogged kernel trace (``diaghub.kernel.1.etl`` and a made-up kernel trace with context
  switches, disk I/O and process lifetimes, relogged together as ``bench_export`` makes it) of
  ``--size-mb`` (default 64), and the same at a quarter of that size: the peak memory of the two
  shows whether it stays flat.

Rows, each run in child processes (CPU time of the child from ``getrusage(RUSAGE_CHILDREN)``, so
interpreter start-up and imports count; never wall clock alone):

* ``cold``: a fresh process runs one export (nothing imported, no cache: the timeline export
  keeps none);
* ``warm``: a fresh process runs the export twice; the row is the second run's CPU time
  (``process_time`` in that process: modules imported, registry built, the file in the page
  cache).

Tools compared, on the same decoded events:

* ``openetw``: ``export_timeline`` (``openetw export --to perfetto|chrome``): every record decoded,
  slices paired, CPU scheduling, samples with named stacks, counters; Chrome JSON and Perfetto
  traces of a trace without samples from the file's index (``timeline.chrome_columns``,
  ``timeline.perfetto_columns``);
* ``openetw per record``: the same export record by record (``columns=False``, the reference the
  columns give byte for byte);
* ``stdlib json``: the same records decoded by the read model (``events.decoded.decode_records``)
  and each written as a Chrome instant event with ``json.dumps`` (less work than the timeline: no
  slices, scheduling or stacks);
* ``perfetto lib``: the same decoded records, each a ``TracePacket`` with a ``TrackEvent`` instant
  (name, category, debug annotations) written by the Perfetto Python library's
  ``StreamingTraceProtoBuilder`` (``pip install perfetto``; the row is left out without it).

Goal: 1 M events/s. Usage:
python benchmarks/bench_timeline.py [--size-mb 64] [--formats perfetto,chrome] [--skip-large] [--workdir DIR]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import CLR_MANIFEST, KERNEL_FILE, NET_FILE, make_large_trace
from common import REPO, machine_note, table

sys.path.insert(0, str(REPO))
DIAGHUB = KERNEL_FILE.parent / "diaghub.etl"

# One tool's export, `runs` times in one fresh interpreter; prints each run's CPU time and the
# process's peak RSS as JSON.
_CHILD = r"""
import json, resource, sys, time
tool, source, output, fmt, runs, manifests = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]


def openetw_export(columns=True):
    from openetw.export.timeline import export_timeline
    from openetw.events.registry import build_registry
    summary = export_timeline([source], output, fmt, registry=build_registry(manifests, installed=False), columns=columns)
    return summary.stats.records


def decoded():
    from openetw.etl.reader import EtlReader
    from openetw.events.decoded import decode_records
    from openetw.events.registry import build_registry
    registry = build_registry(manifests, installed=False)
    with EtlReader(source, strict=False) as reader:
        for event in decode_records(reader.records(time_order=True), registry):
            record = event.record
            yield (record.filetime - 116444736000000000) * 100, record.pid, record.tid, event.provider_label, event.event_name or "event", event.properties


def stdlib_json():
    count = 0
    with open(output, "w", encoding="utf-8") as out:
        out.write('{"traceEvents":[\n')
        for ts, pid, tid, category, name, args in decoded():
            out.write(("," if count else "") + json.dumps({"ph": "i", "s": "t", "name": name, "cat": category, "ts": ts / 1000,
                                                         "pid": pid, "tid": tid, "args": args}, default=str, ensure_ascii=False) + "\n")
            count += 1
        out.write("]}\n")
    return count


def perfetto_lib():
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    count = 0
    tracks = set()
    with open(output, "wb") as out:
        builder = StreamingTraceProtoBuilder(out)
        for ts, pid, tid, category, name, args in decoded():
            pid, tid = (pid if pid < 1 << 31 else 0), (tid if tid < 1 << 31 else 0)  # int32 fields; 0xFFFFFFFF: none
            track = (pid & 0xFFFFFFFF) << 32 | (tid & 0xFFFFFFFF)
            if track not in tracks:
                tracks.add(track)
                packet = builder.create_packet()
                packet.track_descriptor.uuid = track
                packet.track_descriptor.thread.pid = pid
                packet.track_descriptor.thread.tid = tid
                builder.write_packet(packet)
            packet = builder.create_packet()
            packet.timestamp = ts
            packet.trusted_packet_sequence_id = 1
            event = packet.track_event
            event.type = TrackEvent.TYPE_INSTANT
            event.track_uuid = track
            event.name = name
            event.categories.append(category)
            for key, value in args.items():
                annotation = event.debug_annotations.add()
                annotation.name = key
                if type(value) is int and 0 <= value < 1 << 64:
                    annotation.uint_value = value
                elif type(value) is int and -(1 << 63) <= value < 0:
                    annotation.int_value = value
                elif type(value) is float:
                    annotation.double_value = value
                else:
                    annotation.string_value = value if isinstance(value, str) else str(value)
            builder.write_packet(packet)
            count += 1
    return count


run = {"openetw": openetw_export, "openetw per record": lambda: openetw_export(False), "stdlib json": stdlib_json,
       "perfetto lib": perfetto_lib}[tool]
times = []
for _ in range(runs):
    cpu = time.process_time()
    events = run()
    times.append(time.process_time() - cpu)
print(json.dumps({"events": events, "cpu": times, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child_export(tool: str, source: Path, output: Path, fmt: str, manifests: list[str], runs: int) -> dict[str, Any]:
    """One fresh process running ``tool`` ``runs`` times: its per-run CPU, its whole CPU (children's
    rusage), peak RSS and the output's size."""
    output.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", _CHILD, tool, str(source), str(output), fmt, str(runs), *manifests],
                          capture_output=True, text=True)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} on {source.name} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["bytes"] = output.stat().st_size
    output.unlink()
    return result


def _tools(fmt: str) -> list[str]:
    if fmt == "chrome":
        return ["openetw", "openetw per record", "stdlib json"]
    tools = ["openetw", "openetw per record"]
    return [*tools, "perfetto lib"] if importlib.util.find_spec("perfetto") is not None else tools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=64, help="size of the large relogged trace")
    parser.add_argument("--formats", default="perfetto,chrome", help="comma-separated: perfetto, chrome")
    parser.add_argument("--skip-large", action="store_true", help="net.4.5.2 and the quarter-size trace only")
    parser.add_argument("--diaghub-events", type=int, default=1_100_000,
                        help="events of the repeated diaghub.etl (.NET user-mode; 0: leave it out)")  # fmt: skip
    parser.add_argument("--only-diaghub", action="store_true", help="the repeated diaghub.etl only")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the traces here")
    args = parser.parse_args()
    formats = [item for item in args.formats.split(",") if item]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="openetw-bench-timeline-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {machine_note()}", flush=True)
    try:
        inputs: list[tuple[str, Path, list[str]]] = []
        if args.diaghub_events:
            from openetw.testing.large import repeat_buffers

            repeated = work / "diaghub-repeated.etl"
            per_copy = repeat_buffers(DIAGHUB, repeated, 0)
            copies = max(1, -(-args.diaghub_events // per_copy))
            repeat_buffers(DIAGHUB, repeated, copies * repeated.stat().st_size)
            inputs.append((f"diaghub.etl x{copies}", repeated, [str(CLR_MANIFEST)]))
        if not args.only_diaghub:
            inputs.append(("net.4.5.2.x64.etl", NET_FILE, [str(CLR_MANIFEST)]))
            quarter = make_large_trace(work, max(1, args.size_mb // 4))
            inputs.append((f"relogged kernel, {quarter.stat().st_size / 2**20:.0f} MB", quarter, []))
        if not args.skip_large and not args.only_diaghub:
            large = make_large_trace(work, args.size_mb)
            inputs.append((f"relogged kernel, {large.stat().st_size / 2**20:.0f} MB", large, []))
        rows = []
        for label, source, manifests in inputs:
            for fmt in formats:
                rates: dict[tuple[str, str], float] = {}
                for tool in _tools(fmt):
                    output = work / f"out-{source.stem}.{fmt}"
                    cold = child_export(tool, source, output, fmt, manifests, 1)
                    warm = child_export(tool, source, output, fmt, manifests, 2)
                    events = cold["events"]
                    for run, cpu, rss in (("cold", cold["process_cpu"], cold["rss_mb"]), ("warm", warm["cpu"][-1], warm["rss_mb"])):
                        rate = events / cpu
                        rates[(tool, run)] = rate
                        ratio = rate / rates[("openetw", run)]
                        rows.append([
                            label, fmt, tool, run, f"{events:,}", f"{cpu:.2f}", f"{rate:,.0f}",
                            "1.00" if tool == "openetw" else f"{1 / ratio:.2f}", f"{rss:.0f}",
                            f"{cold['bytes'] / 2**20:.1f}",
                        ])  # fmt: skip
                    print(f"  {label} {fmt} {tool}: cold {cold['process_cpu']:.2f} s, warm {warm['cpu'][-1]:.2f} s", flush=True)
        print()
        print("Export to timelines (CPU s of every process: cold = the whole fresh process, imports included; warm = a")
        print("second export in one process; events/s on that CPU time; 'openetw x' = openetw's rate / the tool's; goal 1 M/s)")
        print(table(["input", "format", "tool", "run", "events", "CPU s", "events/s", "openetw x", "peak RSS MB", "output MB"], rows))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
