"""Kernel trace: decode cost on captured tracefs pages, then live sessions under a mixed load.

Offline (captured pages from tests/kernel/data, repeated; thread CPU time, so run-queue waits
on a shared machine do not count): ring-buffer walk (headers only), payload decode per event to
full dicts, decode of whole sub-buffers (full and lean: only the fields the mapper reads, and the
one-pass walk + decode), lean decode + mapping to NT Kernel Logger records, and the whole file
path (decode, map, write into an EtlWriter) one event at a time against column-wise system
calls (decode_batch + map_fixed + write_block), in events/s, with the ratio of the two; and
the same two paths into the buffer pools of a trace service's kernel session (``PoolSink``).

Live (root and tracefs only): a kernel session with process, thread, cswitch, disk_io and
network flags ("no syscall"), then with syscall too ("all"), while a load runs in its own
session (autogroup): a getppid() loop (as fast as it goes, or paced with ``--rate`` events/s),
a fork loop, O_DIRECT dd writes and loopback TCP connections. The session decodes with the lean decoder and maps with ``map_events`` (its
normal path). Each run is a fresh child process (its own autogroup, so a boost does not carry
over) in one of these modes:

* ``default``: ``raise_priority=False``: the reader at normal priority;
* ``boosted``: the session as it is (:func:`openetw.kernel.priority.boost_reader` in the reader thread).

Reported: events offered
(read + dropped) and read per second, events the kernel dropped (and %), reader CPU per event
read (robust to how much load the shared machine let run), the reader process's CPU
(user + system time over the run / wall time, in % of one core) and the file size. ``perf
record`` on the same tracepoints and load is run for comparison when perf is installed, and
``trace-cmd record`` when it works here.

Real-time mode, same flags and load: a real-time kernel session of a private trace service
(its recorder process writes into the session's buffer pools) and a ``KernelTrace`` attached to
it whose callbacks count events, each run a fresh child process. Reported: offered and read
per second and the kernel ring's loss (the recorder's counters), the recorder process's CPU
over the load (from /proc) and per event read, events lost in the service (no free pool
buffer), events delivered to the callbacks per second, real-time buffers dropped, whether the
consumer got exactly what the session counts written, and the consumer's and
the service's CPU. ``--max-buffers`` sets the session's buffers (64 KB each), ``--boost-consumer``
gives the consumer's session (and the private service, started in it) the reader's priority.
Usage: python benchmarks/bench_kernel.py [--repeat 3] [--seconds 5] [--runs 2] [--rate 450000] [--offline-only]
       [--realtime-only] [--max-buffers 64] [--boost-consumer]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from operator import itemgetter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import best_of, machine_note, process_cpu_seconds, table  # noqa: E402

from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header  # noqa: E402
from openetw.kernel import KernelEventMapper, KernelSession, find_tracefs  # noqa: E402
from openetw.kernel.ringbuffer import FixedLayouts  # noqa: E402
from tests.kernel import pages as P  # noqa: E402

COPIES = 40
FLAGS = ("process", "thread", "cswitch", "disk_io", "network", "syscall")
FLAG_SETS = {"all": FLAGS, "no syscall": tuple(f for f in FLAGS if f != "syscall")}
LIVE_SETS = ("no syscall", "all")
MODES = ("default", "boosted")
KERNEL_BUFFER_KB = 4096  # the kernel ring buffer per CPU: KernelSession's default, for the real-time runs too
TRACEPOINTS_FOR_TOOLS = (
    "sched:sched_process_fork", "sched:sched_process_exec", "sched:sched_process_exit", "task:task_newtask",
    "sched:sched_switch", "block:block_rq_issue", "block:block_rq_complete", "sock:inet_sock_set_state",
    "sock:sock_send_length", "sock:sock_recv_length", "raw_syscalls:sys_enter", "raw_syscalls:sys_exit",
)

# os.getppid() in a loop, as fast as it goes, or paced at argv[2] events/s (a call is an enter and an exit).
GETPPID = textwrap.dedent(
    """
    import os, sys, time
    seconds, calls_per_s = float(sys.argv[1]), float(sys.argv[2]) / 2
    start = time.monotonic()
    done = 0
    while time.monotonic() - start < seconds:
        todo = min(int((time.monotonic() - start) * calls_per_s) - done, 5000) if calls_per_s else 1000
        if todo <= 0:
            time.sleep(0.0005)
            continue
        [os.getppid() for _ in range(todo)]
        done += todo
    """
)

LOAD = textwrap.dedent(
    """
    import os, socket, subprocess, sys, tempfile, time
    seconds, rate = float(sys.argv[1]), float(sys.argv[2])
    GETPPID = GETPPID_SOURCE
    end = time.time() + seconds
    tmp = tempfile.mkdtemp()
    procs = [
        subprocess.Popen([sys.executable, "-c", GETPPID, str(seconds), str(rate)]),
        subprocess.Popen(["/bin/sh", "-c", "end=$(( $(date +%%s) + %d )); while [ $(date +%%s) -lt $end ]; do /bin/true; done" % max(1, round(seconds))]),
        subprocess.Popen(["/bin/sh", "-c", "end=$(( $(date +%%s) + %d )); while [ $(date +%%s) -lt $end ]; do dd if=/dev/zero of=%s/dd bs=64k count=64 oflag=direct status=none; done" % (max(1, round(seconds)), tmp)]),
    ]
    server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(64)
    while time.time() < end:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.sendall(b"x" * 1000); peer.recv(4096)
        client.close(); peer.close()
        time.sleep(0.001)
    for p in procs:
        p.wait()
    """
).replace("GETPPID_SOURCE", repr(GETPPID))


# -- offline ---------------------------------------------------------------------------------------


def offline(repeat: int) -> list[list[object]]:
    parser, decoder = P.captured_parser(), P.captured_decoder()
    pages = [(cpu, raw) for cpu, raw in P.captured_pages()] * COPIES
    lean = type(decoder)(decoder.formats.values(), fields=KernelEventMapper(FLAGS).fields_used())

    def walk() -> int:
        return sum(len(parser.parse(raw).events) for _, raw in pages)

    def decode_per_event() -> int:
        n = 0
        for _, raw in pages:
            for event in parser.parse(raw).events:
                decoder.decode(raw[event.offset : event.offset + event.length])
                n += 1
        return n

    def decode_pages(chosen: Any) -> Any:
        def run() -> int:
            out: list[Any] = []
            for cpu, raw in pages:
                chosen.decode_events(parser.parse(raw), cpu, out)
            return len(out)
        return run

    def map_records() -> int:
        mapper = KernelEventMapper(FLAGS)
        events: list[Any] = []
        for cpu, raw in pages:
            parser.decode_into(raw, cpu, lean, events)
        mapper.map_events(events, lambda record: True)
        return len(events)

    by_cpu: dict[int, list[bytes]] = {}
    for cpu, raw in pages:
        by_cpu.setdefault(cpu, []).append(raw)

    def per_event(sink: Any) -> tuple[int, int]:
        """Every event decoded, merged and mapped one by one into ``sink``: (events, records written)."""
        mapper = KernelEventMapper(FLAGS)
        events: list[Any] = []
        for cpu, raw in pages:
            parser.decode_into(raw, cpu, lean, events)
        events.sort(key=itemgetter(0))
        return len(events), mapper.map_events(events, sink.write, sink.write_raw)

    def column_wise(sink: Any) -> tuple[int, int]:
        """System calls a CPU's pages at a time into ``sink.write_block``, the rest one by one:
        (events decoded one by one + system-call rows, records written)."""
        mapper = KernelEventMapper(FLAGS)
        fixed = FixedLayouts(lean, mapper.fixed_events())
        events: list[Any] = []
        rows = 0
        for cpu, cpu_pages in by_cpu.items():
            result = parser.decode_batch(cpu_pages, cpu, lean, events, fixed)
            if result.fixed is not None:
                block, row_size, timestamps = mapper.map_fixed(result.fixed)
                rows += sink.write_block(block, cpu, row_size, timestamps)
        events.sort(key=itemgetter(0))
        return len(events) + rows, rows + mapper.map_events(events, sink.write, sink.write_raw)

    def file_per_event() -> int:
        writer = _writer()
        events, _ = per_event(writer)
        writer.close()
        return events

    def file_column_wise() -> int:
        writer = _writer()
        events, _ = column_wise(writer)
        writer.close()
        return events

    def pools_per_event() -> int:
        sink, closing = _pool_sink(blocks=False)
        _, written = per_event(sink)
        closing()
        return written

    def pools_column_wise() -> int:
        sink, closing = _pool_sink(blocks=True)
        _, written = column_wise(sink)
        closing()
        return written

    def decode_one_pass() -> int:
        out: list[Any] = []
        for cpu, raw in pages:
            parser.decode_into(raw, cpu, lean, out)
        return len(out)

    cases: list[tuple[str, Any]] = [
        ("walk (headers)", walk), ("decode per event (full dict)", decode_per_event),
        ("walk + decode_events (full dict)", decode_pages(decoder)), ("walk + decode_events (lean dict)", decode_pages(lean)),
        ("decode_into (one pass, lean dict)", decode_one_pass), ("decode + map to records (lean)", map_records),
        ("file, per event: decode_into + map_events + write_raw", file_per_event),
        ("file, column-wise: decode_batch + map_fixed + write_block", file_column_wise),
        ("service pools, per event: decode_into + map_events + PoolSink.write_raw", pools_per_event),
        ("service pools, column-wise: decode_batch + map_fixed + PoolSink.write_block", pools_column_wise),
    ]  # fmt: skip
    against = {file_column_wise: file_per_event, pools_column_wise: pools_per_event}
    rows = []
    ns_of: dict[Any, float] = {}
    for label, fn in cases:
        seconds, events = best_of(fn, repeat, clock=time.thread_time)
        ns = ns_of[fn] = seconds / events * 1e9
        ratio = f"{ns_of[against[fn]] / ns:.1f}x" if fn in against else ""
        rows.append([label, events, f"{events / seconds / 1e3:,.0f}k", f"{ns:,.0f}", ratio])
    return rows


def _pool_sink(*, blocks: bool) -> tuple[Any, Any]:
    """A recorder's PoolSink over fresh pools (two CPUs, room for every captured page copied),
    with a second pool per CPU for system calls when ``blocks``; and what closes them."""
    from openetw.ipc.pool import BufferPool
    from openetw.service.kernel_recorder import PoolSink

    pools = [BufferPool.create(64 << 10, 64, logger_id=1, producer_pid=0, flush_interval_ms=0) for _ in range(4 if blocks else 2)]
    writers = [pool.writer() for pool in pools]
    sink = PoolSink(writers[:2], block_writers=writers[2:])

    def closing() -> None:
        sink.close()
        for pool in pools:
            pool.close()

    return sink, closing


def _writer() -> EtlWriter:
    return EtlWriter(io.BytesIO(), header=new_logfile_header(clock=linux_trace_clock()))


# -- live: one run per child process ---------------------------------------------------------------


def live_one(mode: str, flag_set: str, seconds: float, rate: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "bench.etl"
        session = KernelSession(flags=FLAG_SETS[flag_set], output=output, name=f"bench_{os.getpid()}", rundown=False,
                                raise_priority=mode == "boosted")  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        session.start()
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds), str(rate)], start_new_session=True)
        load.wait()
        stats = session.stop()
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {
            "mode": mode, "note": stats["reader_priority"], "events_read": stats["events_read"], "events_lost": stats["events_lost"],
            "duration": stats["duration_s"], "cpu_percent": 100 * cpu / wall, "file_mb": output.stat().st_size / 1e6,
        }


def live(seconds: float, runs: int, rate: float) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in range(runs):
        for flag_set in LIVE_SETS:
            for mode in MODES:
                done = subprocess.run(
                    [sys.executable, __file__, "--live-one", mode, "--flag-set", flag_set, "--seconds", str(seconds), "--rate", str(rate)],
                    capture_output=True, text=True, start_new_session=True, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    rows.append([flag_set, mode, run + 1, "failed", done.stderr.strip().splitlines()[-1:] or "", "", "", "", "", ""])
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                if "skipped" in r:
                    rows.append([flag_set, mode, run + 1, r["skipped"], "", "", "", "", "", ""])
                    continue
                total = r["events_read"] + r["events_lost"]
                lost = 100 * r["events_lost"] / total if total else 0.0
                read_rate = r["events_read"] / r["duration"]
                per_event = r["cpu_percent"] / 100 / read_rate * 1e6 if read_rate else 0.0
                rows.append([flag_set, mode, run + 1, f"{total / r['duration'] / 1e3:,.0f}k", f"{read_rate / 1e3:,.0f}k",
                             r["events_lost"], f"{lost:.1f}%", f"{r['cpu_percent']:.0f}%", f"{per_event:.1f}", f"{r['file_mb']:.1f}"])  # fmt: skip
    return rows


# -- live, real-time: a kernel session of a private trace service and a consumer attached -------


def realtime_one(flag_set: str, seconds: float, rate: float, max_buffers: int, boost: bool) -> dict[str, Any]:
    """A real-time kernel session hosted by a private service, a ``KernelTrace`` attached to it
    that counts what its callbacks get, the same load as the file runs. ``boost``: this process's
    session (the consumer and the private service) gets the reader's priority too."""
    import threading

    from openetw.kernel.priority import boost_reader

    note = boost_reader() if boost else "not boosted"

    from common import private_service

    from openetw.consumer import KernelTrace
    from openetw.consumer.kernel_trace import KernelProvider
    from openetw.controller import ServiceClient, Session

    flags = FLAG_SETS[flag_set]
    with private_service("openetw-bench-kernel-") as (service, _):
        name = f"BenchKernelRT{os.getpid()}"
        session = Session.start(name, mode="realtime", kernel_flags=list(flags), kernel_buffer_size=KERNEL_BUFFER_KB,
                                max_buffers=max_buffers)  # fmt: skip
        recorder = int(session.info_at_start["kernel"]["recorder_pid"])
        trace = KernelTrace(sessions=[name], manifests=[])
        handled = [0]

        def count(record: Any, context: Any) -> None:
            handled[0] += 1

        guids = set()
        for flag in flags:
            provider = KernelProvider(flag)
            if provider.guid not in guids:  # thread and cswitch records share the Thread class
                guids.add(provider.guid)
                provider.add_on_event_callback(count)
                trace.enable(provider)
        trace.on_error(lambda error, record: None)
        consumer = threading.Thread(target=trace.start, name="bench-kernel-consumer")
        try:
            consumer.start()
            with ServiceClient() as client:
                deadline = time.monotonic() + 60
                while client.call("query", session=name)["session"].get("realtime_consumers") != 1:
                    if time.monotonic() > deadline or not consumer.is_alive():
                        raise RuntimeError("the consumer did not attach")
                    time.sleep(0.05)
                before = client.call("query", session=name)["session"]
            handled_before = handled[0]
            cpu = (time.process_time(), process_cpu_seconds(recorder), process_cpu_seconds(service.pid))
            started = time.monotonic()
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds), str(rate)], start_new_session=True)
            load.wait()
            loaded = time.monotonic()
            recorder_cpu = process_cpu_seconds(recorder) - cpu[1]  # before stop: the recorder exits with it
            session.stop()
            consumer.join(120)
            ended = time.monotonic()
            consumer_cpu, service_cpu = time.process_time() - cpu[0], process_cpu_seconds(service.pid) - cpu[2]
        finally:
            session.stop()
            trace.stop()
            consumer.join(30)
            trace.close()
        final, kernel = session.info(), session.info()["kernel"]
        stats = trace.query_stats()
    rt_lost = final["realtime_buffers_lost"] - before.get("realtime_buffers_lost", 0)
    return {
        "events_read": kernel["events_read"], "events_lost": kernel["events_lost"], "duration": kernel["duration_s"],
        "records_written": kernel["records_written"], "events_written": final["events_written"], "session_lost": final["events_lost"],
        "handled": handled[0] - handled_before, "consumer_read": stats["events_read"], "rt_buffers_lost": rt_lost,
        "handled_all": handled[0], "events_written_all": final["events_written"], "consumer_priority": note,
        "lost_in_run": final["events_lost"] - before.get("events_lost", 0),
        "load_s": loaded - started, "consumer_s": ended - started, "recorder_cpu": 100 * recorder_cpu / (loaded - started),
        "consumer_cpu": 100 * consumer_cpu / (ended - started), "service_cpu": 100 * service_cpu / (ended - started),
    }  # fmt: skip


def realtime(seconds: float, runs: int, rate: float, max_buffers: int, boost: bool) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in range(runs):
        for flag_set in LIVE_SETS:
            done = subprocess.run(
                [sys.executable, __file__, "--realtime-one", "--flag-set", flag_set, "--seconds", str(seconds), "--rate", str(rate),
                 "--max-buffers", str(max_buffers), *(["--boost-consumer"] if boost else [])],
                capture_output=True, text=True, start_new_session=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                rows.append([flag_set, run + 1, "failed", *(done.stderr.strip().splitlines()[-1:] or [""]), *[""] * 9])
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            offered = r["events_read"] + r["events_lost"]
            read_rate = r["events_read"] / r["duration"]
            rows.append([
                flag_set, run + 1, f"{offered / r['duration'] / 1e3:,.0f}k", f"{read_rate / 1e3:,.0f}k",
                f"{r['events_lost']} ({100 * r['events_lost'] / offered if offered else 0:.1f}%)",
                f"{r['recorder_cpu']:.0f}%", f"{r['recorder_cpu'] / 100 / read_rate * 1e6 if read_rate else 0:.1f}",
                r["lost_in_run"] - r["events_lost"], f"{r['handled'] / r['consumer_s'] / 1e3:,.0f}k", r["rt_buffers_lost"],
                "yes" if r["handled_all"] == r["events_written_all"] else f"NO ({r['handled_all'] - r['events_written_all']:+d})",
                f"{r['consumer_cpu']:.0f}%", f"{r['service_cpu']:.0f}%",
            ])  # fmt: skip
    return rows


# -- other tools on the same load --------------------------------------------------------------------


def tools(seconds: float, rate: float) -> list[list[object]]:
    rows: list[list[object]] = []
    if os.geteuid() != 0:
        return rows
    with tempfile.TemporaryDirectory() as tmp:
        if shutil.which("perf"):
            events = [arg for tp in TRACEPOINTS_FOR_TOOLS for arg in ("-e", tp)]
            command = ["perf", "record", "-a", "-m", "1024", *events, "-o", f"{tmp}/perf.data", "--", "sleep", str(seconds + 0.5)]
            rows.append(["perf record", *_run_tool(command, seconds, rate, _perf_counts)])
        if shutil.which("trace-cmd"):
            events = [arg for tp in TRACEPOINTS_FOR_TOOLS for arg in ("-e", tp)]
            command = ["trace-cmd", "record", "-d", "-B", f"bench{os.getpid()}", "-b", "4096", *events, "-o", f"{tmp}/tc.dat",
                       "sleep", str(seconds + 0.5)]  # fmt: skip
            rows.append(["trace-cmd record", *_run_tool(command, seconds, rate, _trace_cmd_counts)])
            instance = Path(find_tracefs() or "/sys/kernel/tracing") / "instances" / f"bench{os.getpid()}"
            if instance.exists():
                subprocess.run(["trace-cmd", "reset", "-B", instance.name], capture_output=True, check=False)
                try:
                    instance.rmdir()
                except OSError:
                    pass
    return rows


def _run_tool(command: list[str], seconds: float, rate: float, counts: Any) -> list[object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    tool = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.3)
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds), str(rate)], start_new_session=True)
    output, _ = tool.communicate()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the tool's CPU: the load is not waited for yet
    load.wait()
    events, lost = counts(output)
    if events is None:
        lines = output.strip().splitlines()
        refused = [f"{a.strip()} {b.strip()}" for a, b in zip(lines, lines[1:]) if "not permitted" in a]
        reason = refused[0] if refused else (lines[-1] if lines else f"exit {tool.returncode}")
        return ["failed: " + reason, "", "", "", ""]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [f"{events / wall / 1e3:,.0f}k", lost, "", f"{100 * cpu / wall:.0f}%", ""]


def _perf_counts(output: str) -> tuple[int | None, str]:
    samples = re.search(r"\((\d+) samples\)", output)
    lost = re.search(r"lost (\d+) chunks", output)
    return (int(samples.group(1)) if samples else None), (f"{lost.group(1)} chunks" if lost else "0")


def _trace_cmd_counts(output: str) -> tuple[int | None, str]:
    if "Operation not permitted" in output:
        return None, ""
    read = [int(n) for n in re.findall(r"read events:\s*(\d+)", output)]
    dropped = [int(n) for n in re.findall(r"(?:dropped events|overrun):\s*(\d+)", output)]
    return (sum(read) if read else None), str(sum(dropped))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--offline-only", action="store_true")
    parser.add_argument("--live-one", choices=MODES)
    parser.add_argument("--flag-set", choices=tuple(FLAG_SETS), default="all")
    parser.add_argument("--realtime-one", action="store_true")
    parser.add_argument("--boost-consumer", action="store_true",
                        help="real-time: the consumer's session (and the private service) boosted as the reader is")  # fmt: skip
    parser.add_argument("--max-buffers", type=int, default=64, help="the real-time session's buffers (64 KB each), shared by its pools")
    parser.add_argument("--realtime-only", action="store_true", help="skip the offline, file and other tools' runs")
    args, _ = parser.parse_known_args()
    if args.live_one:
        print(json.dumps(live_one(args.live_one, args.flag_set, args.seconds, args.rate)))
        return
    if args.realtime_one:
        print(json.dumps(realtime_one(args.flag_set, args.seconds, args.rate, args.max_buffers, args.boost_consumer)))
        return
    print(machine_note())
    if not args.realtime_only:
        print(table(["offline, captured pages (CPU time)", "events", "events/s", "ns/event", "vs per event"], offline(args.repeat)))
    if args.offline_only:
        return
    if os.geteuid() != 0 or find_tracefs() is None:
        print("live runs skipped: need root and tracefs")
        return
    paced = f"getppid at {args.rate / 1e3:,.0f}k events/s" if args.rate else "getppid loop"
    print(f"live: flags all = {'+'.join(FLAGS)}; load: {paced}, fork loop, O_DIRECT dd, loopback TCP; {args.seconds:g} s per run")
    if not args.realtime_only:
        result = live(args.seconds, args.runs, args.rate)
        print("file mode (KernelSession -> .etl):")
        print(table(["flags", "mode", "run", "offered/s", "read/s", "lost", "lost %", "reader CPU", "CPU µs/event", "file MB"], result))
    print("real-time mode (a kernel session of the trace service, a KernelTrace counting events in callbacks):")
    print(f"real-time: {args.max_buffers} buffers of 64 KB shared by the session's pools; consumer and service"
          f" {'boosted as the reader' if args.boost_consumer else 'at default priority'}, the recorder boosted (the default)")
    print(table(["flags", "run", "offered/s", "read/s (recorder)", "kernel lost", "recorder CPU", "recorder µs/event",
                 "lost in service", "delivered/s", "rt buffers lost", "delivered = written", "consumer CPU", "service CPU"],
                realtime(args.seconds, args.runs, args.rate, args.max_buffers, args.boost_consumer)))  # fmt: skip
    print("    offered = read + lost in the kernel ring; read/s over the recorder's session; lost in service: events"
          " the recorder found no free pool buffer for, and those of real-time buffers lost; delivered/s: events the"
          " consumer's callbacks got, from the load's start to the consumer's end; rt buffers lost: buffers the"
          " service dropped because the consumer was behind; delivered = written: the consumer got every event the"
          " session counts written (a real-time session counts what its consumer took); CPU in % of one core (recorder: over the load)")  # fmt: skip
    if args.realtime_only:
        return
    others = tools(args.seconds, args.rate)
    if others:
        print(table(["tool, same tracepoints and load", "events/s", "lost", "", "CPU", ""], others))


if __name__ == "__main__":
    main()
