"""The write side on the compiled core against the pure path, in one run.

(a) Cost of one 3-field event (UINT32, UINT64, 20-character string) in every write form
    (``TraceLoggingProvider.write(name, **fields)``, a declared event's ``write(v0, v1, v2)``,
    ``Provider.write(event, ...)``, an mc-generated ``write_<event>(...)``) into a file session on
    tmpfs, per engine: the calling thread's CPU (``time.thread_time``) plus the trace service's CPU
    (/proc/<pid>/stat, from before the batch to after the flush that hands every buffer to the
    file; counted in 10 ms ticks, so the mean over every batch), the caller's best of N, and the wall time including that flush beside it; ``logging.info`` to a
    FileHandler in the same process and run is the reference. Each engine runs in a process of its
    own (``OPENETW_PURE=1`` for the pure one), with a private service of that engine. Goal on the
    compiled core: <= 400 ns total and >= 15x ``logging.info``.
(b) 16 producer processes writing the TraceLogging event flat out into a file session on tmpfs
    with the default buffers (64 KB, up to 256 per producer), per engine: events attempted, written,
    in the file (counted by walking it), counted lost; exact when written = in file and attempted
    = in file + lost. Goal on the compiled core: <= 0.1% lost.
(c) The kernel session's reader: CPU per event read at the highest rate this machine offers
    (a getppid loop and more, see bench_kernel.py) next to ``perf record`` on the same
    tracepoints, run by bench_kernel.py's code (root and tracefs only), per engine. Before it,
    offline, the tracefs page decoder alone per engine: ``decode_batch`` over bench_kernel.py's
    captured pages (lean dicts, system calls column-wise, as the session decodes), and the same
    pages decoded, mapped and written to a file, in ns of the thread's CPU per event.

Usage: python benchmarks/bench_native_write.py [--writes 200000] [--repeat 3] [--seconds 5] [--parts abc]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import (
    DESCRIPTOR,
    FIELDS,
    MANIFEST_GUID,
    MANIFEST_XML,
    NAME,
    ProducerRun,
    events_in_file,
    quiet_logger,
    session_providers,
    wait_until,
)
from common import machine_note, private_service, process_cpu_seconds, table

ENGINES = ("native", "python")
FORMS = ("TraceLoggingProvider.write", "TraceLoggingEvent.write (declared)", "Provider.write (manifest)", "mc write_counted()")
TMPFS = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


def _engine_env(engine: str) -> dict[str, str]:
    env = dict(os.environ)
    if engine == "python":
        env["OPENETW_PURE"] = "1"
    else:
        env.pop("OPENETW_PURE", None)
    return env


# -- (a) write cost, one engine per process -------------------------------------------------------


def write_cost_child(writes: int, repeat: int) -> dict[str, Any]:
    """In a process of one engine: a private service, a file session on tmpfs, every form."""
    import openetw._native as native
    from openetw.controller import Session
    from openetw.manifest import parse_manifest
    from openetw.mc import generate_module, load_module
    from openetw.provider import Provider, TraceLoggingProvider

    results: dict[str, Any] = {"engine": native.engine(), "reason": native.reason()}
    with private_service() as (service, _directory), tempfile.TemporaryDirectory(dir=TMPFS) as out:
        tracelogging = TraceLoggingProvider("Bench.Enabled").register()
        manifest = Provider(MANIFEST_GUID, name="Bench.Manifest").register()
        event = manifest.event(DESCRIPTOR, FIELDS)
        source = generate_module(parse_manifest(MANIFEST_XML, "bench.man").manifest, 0, MANIFEST_XML, "bench.man", "bench_generated").source
        generated = load_module(source, "bench_generated").provider.register()
        session = Session.start(
            "BenchNativeWrite", output=Path(out) / "write.etl",
            providers=[("*Bench.Enabled", {"level": 5}), (MANIFEST_GUID, {"level": 5}), (generated.guid, {"level": 5})],
        )  # fmt: skip
        if not wait_until(lambda: tracelogging.enabled and manifest.enabled and generated.counted_enabled):
            sys.exit("the providers were not enabled")
        declared = tracelogging.event("Counted", level=4, keyword=0x10, fields=(("count", "uint32"), ("total", "uint64"), ("name", "string")))

        def tl(n: int) -> None:
            write = tracelogging.write
            for i in range(n):
                write("Counted", level=4, keyword=0x10, count=i, total=i, name=NAME)

        def dec(n: int) -> None:
            write = declared.write
            for i in range(n):
                write(i, i, NAME)

        def man(n: int) -> None:
            write = manifest.write
            for i in range(n):
                write(event, i, i, NAME)

        def gen(n: int) -> None:
            write = generated.write_counted
            for i in range(n):
                write(i, i, NAME)

        log_dir = Path(out)
        logger = quiet_logger("openetw.bench.native", logging.FileHandler(log_dir / "logging.log"), logging.INFO)

        def log(n: int) -> None:
            info = logger.info
            for i in range(n):
                info("count=%d total=%d name=%s", i, i, NAME)

        batches = dict(zip(FORMS, (tl, dec, man, gen), strict=True))
        batches["logging.info -> FileHandler"] = log
        best: dict[str, list[float]] = {name: [float("inf"), 0.0, 0.0, float("inf")] for name in batches}  # caller, service, total, wall
        service_total = dict.fromkeys(batches, 0.0)
        for warm_up in batches.values():
            warm_up(1000)  # the first writes make the generated writers
        session.flush()
        for _ in range(repeat):
            for name, batch in batches.items():
                gc.collect()
                service_before = process_cpu_seconds(service.pid)
                wall_start = time.perf_counter()
                cpu_start = time.thread_time()
                batch(writes)
                caller = time.thread_time() - cpu_start
                if name != "logging.info -> FileHandler":
                    session.flush()  # every buffer taken and in the file when this returns
                wall = time.perf_counter() - wall_start
                service_total[name] += process_cpu_seconds(service.pid) - service_before
                best[name][0] = min(best[name][0], caller / writes * 1e9)
                best[name][3] = min(best[name][3], wall / writes * 1e9)
        for name, row in best.items():
            # /proc counts the service's CPU in clock ticks (10 ms): its share is the mean over every batch.
            row[1] = service_total[name] / (writes * repeat) * 1e9
            row[2] = row[0] + row[1]
        stats = session.stop()
        results["rows"] = best
        results["lost"] = stats["events_lost"]
        for provider in (tracelogging, manifest, generated):
            provider.unregister()
    return results


def write_cost(writes: int, repeat: int) -> None:
    by_engine = {}
    for engine in ENGINES:
        done = subprocess.run(
            [sys.executable, __file__, "--child", "cost", "--writes", str(writes), "--repeat", str(repeat)],
            env=_engine_env(engine), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode:
            print(f"(a) {engine}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        by_engine[engine] = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for result in by_engine.values():
        reference = result["rows"]["logging.info -> FileHandler"][2]
        for name, (caller, serviced, total, wall) in result["rows"].items():
            is_log = name.startswith("logging")
            goal = "" if is_log or result["engine"] != "native" else ("yes" if total <= 400 and reference / total >= 15 else "NO")
            rows.append([result["engine"], name, f"{caller:.0f}", "" if is_log else f"{serviced:.0f}", f"{total:.0f}", f"{wall:.0f}",
                         f"{reference / total:.1f}x", goal])  # fmt: skip
    print(f"\n(a) one 3-field event, {writes} writes per batch, best of {repeat}; file session on {TMPFS or 'the temp dir'}; "
          "CPU = calling thread + trace service (until the flush that puts every buffer in the file)")  # fmt: skip
    print(table(["engine", "write form", "caller ns", "service ns", "total CPU ns", "wall ns (incl. flush)", "vs logging.info",
                 "<= 400 ns, >= 15x"], rows))  # fmt: skip
    # A pool that found no free buffer dropped events (counted): the service then had fewer buffers to move.
    print("events lost (counted) per engine, every form and batch: " + ", ".join(f"{r['engine']} {r['lost']:,}" for r in by_engine.values()))


# -- (b) 16 producers flat out ------------------------------------------------------------------------


def producers_flat_out(count: int, seconds: float, runs: int) -> None:
    from openetw.controller import Session

    rows = []
    saved = os.environ.get("OPENETW_PURE")
    try:
        for engine in ENGINES:
            if engine == "python":
                os.environ["OPENETW_PURE"] = "1"  # the service and the producers are started from here
            else:
                os.environ.pop("OPENETW_PURE", None)
            for run_number in range(1, runs + 1):
                with private_service() as (service, _), tempfile.TemporaryDirectory(dir=TMPFS) as out:
                    output = Path(out) / "load.etl"
                    session = Session.start("BenchFlatOut", output=output, providers=session_providers())
                    try:
                        with ProducerRun(service.pid, "TraceLogging", count, 0, seconds) as run:
                            run.run()
                            producer_cpu, service_cpu = run.cpu()
                    finally:
                        stats = session.stop()
                    in_file = events_in_file(output)
                lost = stats["events_lost"]
                exact = run.written == in_file and run.attempted == in_file + lost
                share = 100 * lost / max(run.attempted, 1)
                rows.append([
                    engine, run_number, f"{run.attempted / run.elapsed:,.0f}", f"{run.attempted:,}", f"{run.written:,}", f"{in_file:,}",
                    f"{lost:,}", f"{share:.3f}%", "yes" if exact else "NO", f"{producer_cpu / max(run.attempted, 1) * 1e9:.0f}",
                    f"{service_cpu / max(run.attempted, 1) * 1e9:.0f}", ("yes" if share <= 0.1 else "NO") if engine == "native" else "",
                ])  # fmt: skip
    finally:
        if saved is None:
            os.environ.pop("OPENETW_PURE", None)
        else:
            os.environ["OPENETW_PURE"] = saved
    print(f"\n(b) {count} producer processes writing the TraceLogging event flat out for {seconds:g} s; default buffers; file on "
          f"{TMPFS or 'the temp dir'}")  # fmt: skip
    print(table(["engine", "run", "events/s", "attempted", "written", "in file", "lost", "lost %", "exact", "producer CPU ns/event",
                 "service CPU ns/event", "<= 0.1%"], rows))  # fmt: skip


# -- (c) kernel reader against perf record -------------------------------------------------------------


def decoder_cost_child(repeat: int) -> dict[str, float]:
    """This process's engine: ns of thread CPU per event of the page decoder, and of decode + map + write."""
    import bench_kernel as K

    from openetw.kernel import KernelEventMapper
    from openetw.kernel.ringbuffer import FixedLayouts

    parser, decoder = K.P.captured_parser(), K.P.captured_decoder()
    lean = type(decoder)(decoder.formats.values(), fields=KernelEventMapper(K.FLAGS).fields_used())
    fixed = FixedLayouts(lean, KernelEventMapper(K.FLAGS).fixed_events())
    by_cpu: dict[int, list[bytes]] = {}
    for cpu, raw in K.P.captured_pages() * K.COPIES:
        by_cpu.setdefault(cpu, []).append(raw)

    def decode(with_fixed: Any) -> Any:
        def run() -> int:
            out: list[Any] = []
            events = 0
            for cpu, pages in by_cpu.items():
                result = parser.decode_batch(pages, cpu, lean, out, with_fixed)
                events += 0 if result.fixed is None else len(result.fixed)
            return events + len(out)
        return run

    def decode_map_write() -> int:
        writer = K._writer()
        mapper = KernelEventMapper(K.FLAGS)
        out: list[Any] = []
        events = 0
        for cpu, pages in by_cpu.items():
            result = parser.decode_batch(pages, cpu, lean, out, fixed)
            if result.fixed is not None:
                block, row_size, timestamps = mapper.map_fixed(result.fixed)
                events += writer.write_block(block, cpu, row_size, timestamps)
        out.sort(key=lambda event: event[0])
        mapper.map_events(out, writer.write, writer.write_raw)
        writer.close()
        return events + len(out)

    costs = {}
    for label, fn in (("decode, system calls column-wise", decode(fixed)), ("decode, every event a dict", decode(None)),
                      ("decode + map + write to a file", decode_map_write)):  # fmt: skip
        seconds, events = K.best_of(fn, repeat, clock=time.thread_time)
        costs[label] = seconds / events * 1e9
    return costs


def kernel_reader(seconds: float, repeat: int) -> None:
    import bench_kernel as K

    from openetw.kernel import find_tracefs

    offline: dict[str, dict[str, float]] = {}
    for engine in ENGINES:
        done = subprocess.run(
            [sys.executable, __file__, "--child", "decoder", "--repeat", str(repeat)],
            env=_engine_env(engine), capture_output=True, text=True, check=False,
        )  # fmt: skip
        offline[engine] = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    rows = [[label, f"{offline['native'].get(label, 0):,.0f}", f"{offline['python'].get(label, 0):,.0f}",
             f"{offline['python'].get(label, 0) / max(offline['native'].get(label, 1), 1e-9):.1f}x"]
            for label in offline["python"]]  # fmt: skip
    print("\n(c) the tracefs page decoder offline (captured pages), thread CPU ns per event")
    print(table(["work", "native", "pure", "pure/native"], rows))
    if os.geteuid() != 0 or find_tracefs() is None:
        print("\n(c) kernel reader: skipped (needs root and tracefs)")
        return
    rows = []
    for engine in ENGINES:
        for flag_set in ("no syscall", "all"):
            done = subprocess.run(
                [sys.executable, K.__file__, "--live-one", "boosted", "--flag-set", flag_set, "--seconds", str(seconds), "--rate", "0"],
                capture_output=True, text=True, start_new_session=True, check=False, env=_engine_env(engine),
            )  # fmt: skip
            label = f"KernelSession ({flag_set}), {engine}"
            if done.returncode:
                rows.append([label, "failed", "", "", "", ""])
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            total = r["events_read"] + r["events_lost"]
            read_rate = r["events_read"] / r["duration"]
            per_event = r["cpu_percent"] / 100 / read_rate * 1e9 if read_rate else 0.0
            rows.append([label, f"{total / r['duration'] / 1e3:,.0f}k", f"{read_rate / 1e3:,.0f}k",
                         f"{100 * r['events_lost'] / max(total, 1):.2f}%", f"{r['cpu_percent']:.0f}%", f"{per_event:.0f}"])  # fmt: skip
    for tool in K.tools(seconds, 0):
        rows.append([f"{tool[0]} (tracepoints of 'all')", "", tool[1], tool[2], tool[4], ""])
    print(f"\n(c) kernel trace, the load flat out for {seconds:g} s (bench_kernel.py's load); CPU in % of one core")
    print(table(["reader", "offered/s", "read/s", "lost", "reader CPU", "CPU ns/event read"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200_000, help="writes per batch in (a)")
    parser.add_argument("--repeat", type=int, default=3, help="batches per form in (a); the cheapest counts")
    parser.add_argument("--producers", type=int, default=16, help="producer processes in (b)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of each run in (b) and (c)")
    parser.add_argument("--runs", type=int, default=1, help="runs per engine in (b)")
    parser.add_argument("--parts", default="abc", help="which measurements: any of a, b, c")
    parser.add_argument("--child", choices=("cost", "decoder"), help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.child == "cost":
        print(json.dumps(write_cost_child(args.writes, args.repeat)))
        return
    if args.child == "decoder":
        print(json.dumps(decoder_cost_child(args.repeat)))
        return
    print(f"write side, compiled core against the pure path; {machine_note()}")
    if "a" in args.parts:
        write_cost(args.writes, args.repeat)
    if "b" in args.parts:
        producers_flat_out(args.producers, args.seconds, args.runs)
    if "c" in args.parts:
        kernel_reader(args.seconds, args.repeat)


if __name__ == "__main__":
    main()
