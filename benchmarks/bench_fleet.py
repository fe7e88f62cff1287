"""Sessions streamed to a replicated JetStream stream and out through the collector, in one run.

A private 3-node JetStream cluster (``openetw.testing.nats_cluster``, loopback ports, a
temporary store) and a private trace service are started and removed at the end. Measured:

(a) the raw ceiling: ``nats-py`` alone publishing messages of one buffer's size (64 KB) into an
    R3 file stream with the publisher's window (32 acknowledgements outstanding), messages/s;
(b) one host at full rate: a user provider writing as fast as it can into a streamed session
    (64 KB buffers), the collector (``openetw collect``, its own process) writing .etl files:
    buffers/s and events/s from the first to the last buffer the collector made durable, next
    to (a); also the rate at which the stream acknowledged them (the publisher's own, without
    the collector: the session's stream state polled every 0.1 s); events written, collected and
    counted lost. With ``--kernel`` (root, tracefs) a
    kernel session (cswitch, process, thread) streamed alongside. Goal: >= 80% of (a), none lost;
(c) CPU of every process (the producer, the service, the three nats-servers, the collector) per
    event for the same full-rate workload into a file session and into a file session that also
    streams (the stream's share of the service is the difference), cold (the service's first
    session of each kind, 1/5 of the events) and warm (the same again): the producer writes far
    faster than the stream takes, so the session's backlog is held in the service's memory; and
    sustained: a producer paced at ``--sustained`` events/s for ``--duration`` s, below what the
    stream takes (no backlog). Goal: streaming adds <= 25% to the service's CPU;
(d) end-to-end latency: a producer at ``--rate`` events/s writing its wall clock in each event;
    the collector (in this process) notes when each commit made events durable: p50/p99/max
    from write to durable;
(e) failover: in the same run the stream's leader node is killed (SIGKILL), then the next
    leader is put in lame duck mode (a planned stop), each restarted 3 s later; the longest time
    the session's acknowledgements stood still (the publish stall), next to nats-py alone
    publishing through a leader killed the same way. Goal: <= 2 s.

Usage: python benchmarks/bench_fleet.py [--duration 10] [--rate 5000] [--kernel]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import itertools

from common import machine_note, private_service, process_cpu_seconds, table

BUFFER_KB = 64
WINDOW = 32

PRODUCER = r"""
import json, os, sys, time
from openetw.provider import TraceLoggingProvider
name, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
provider = TraceLoggingProvider(name).register(wait=5.0)
deadline = time.monotonic() + 10
while not provider.enabled and time.monotonic() < deadline:
    time.sleep(0.01)
written, started = 0, time.monotonic()
step = max(1, int(rate // 100)) if rate > 0 else 1 << 30
for index in range(count):
    written += provider.write("Tick", level=4, keyword=1, index=index, wall=time.time_ns())
    if rate > 0 and (index + 1) % step == 0:
        ahead = started + (index + 1) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
print(json.dumps({"written": written, "seconds": time.monotonic() - started}), flush=True)
"""


def _producer(name: str, count: int, rate: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", PRODUCER, name, str(count), str(rate)], stdout=subprocess.PIPE)


def _written(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=600)
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


# -- (a) the raw ceiling ---------------------------------------------------------------------------
async def _raw_ceiling(urls: str, seconds: float, size: int, servers: list[int]) -> tuple[float, float, float]:
    """(acknowledged messages/s, this process's CPU seconds per message, the ``servers``' CPU
    seconds per message)."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    client = await nats.connect(urls.split(","))
    try:
        js = client.jetstream(timeout=10.0)
        await js.add_stream(StreamConfig(name="RAW", subjects=["raw.>"], storage=StorageType.FILE, num_replicas=3))
        payload = os.urandom(size)
        pending: set[asyncio.Task[Any]] = set()
        acked = 0
        sequence = 0
        started = time.monotonic()
        cpu_started = time.process_time()
        servers_started = _cpu_of(servers)
        while time.monotonic() - started < seconds:
            while len(pending) < WINDOW:
                sequence += 1
                pending.add(asyncio.ensure_future(js.publish("raw.x", payload, headers={"Nats-Msg-Id": f"raw:{sequence}"})))
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            acked += sum(1 for task in done if task.exception() is None)
        if pending:
            done, _ = await asyncio.wait(pending)
            acked += sum(1 for task in done if task.exception() is None)
        elapsed = time.monotonic() - started
        cpu = time.process_time() - cpu_started
        servers_cpu = _cpu_of(servers) - servers_started
        await js.delete_stream("RAW")
        return acked / elapsed, cpu / max(acked, 1), servers_cpu / max(acked, 1)
    finally:
        await client.close()


# -- helpers -----------------------------------------------------------------------------------------
def _cpu_of(pids: list[int]) -> float:
    return sum(process_cpu_seconds(pid) for pid in pids)


def _children_cpu() -> float:
    """CPU of this process's children that have ended (the producers, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _books(directory: Path) -> dict[str, Any]:
    from openetw.fleet.status import status_of_directory

    try:
        return status_of_directory(directory)
    except Exception:  # noqa: BLE001 - no books yet
        return {"hosts": {}, "sessions": []}


def _state(directory: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((directory / ".collector-state.json").read_text()))
    except (OSError, ValueError):
        return {"sessions": []}


def _wait_ended(directory: Path, name: str, timeout: float = 300.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for item in _state(directory)["sessions"]:
            if item["session"] == name and item["end_sequence"] is not None:
                return dict(item)
        time.sleep(0.2)
    raise RuntimeError(f"session {name} did not reach the collector")


def _acknowledged(session: Any, began: float) -> dict[str, float]:
    """Polled (every 0.1 s, little of the service's CPU) until the stream holds nothing of the
    session's: buffers acknowledged, and the time from ``began`` to the last acknowledgement seen."""
    count, changed = -1, time.time()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = session.stream_state() or {}
        now_count = int(state.get("buffers_acknowledged", 0))
        if now_count != count:
            count, changed = now_count, time.time()
        elif int(state.get("held_bytes", 1)) == 0:
            break
        time.sleep(0.1)
    return {"buffers": count, "seconds": max(changed - began, 1e-9)}


def _collector(urls: str, directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "openetw", "collect", urls, "-o", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


# -- (b)/(c) full rate --------------------------------------------------------------------------------
def _full_rate(urls: str, service_pid: int, servers: list[int], socket: Path, work: Path, count: int, kernel: bool,
               sustained: float, seconds: float) -> dict[str, Any]:  # fmt: skip
    from openetw.controller import Session

    out = work / "full"
    collector = _collector(urls, out)
    try:
        results: dict[str, Any] = {}
        # Cold: the service's first session of each kind (its first stream loads the publisher); warm: the same again;
        # sustained: a producer paced below what the stream takes, so that no backlog builds up.
        for temperature, streamed in itertools.product(("cold", "warm", "sustained"), (False, True)):
            label = ("stream" if streamed else "file") + ("" if temperature == "warm" else f"-{temperature}")
            events = {"cold": max(count // 5, 1), "warm": count, "sustained": max(int(sustained * seconds), 1)}[temperature]
            rate = sustained if temperature == "sustained" else 0
            extra: dict[str, Any] = {"stream": urls, "spool_size": 256} if streamed else {}
            before = process_cpu_seconds(service_pid)
            servers_before, collector_before, producer_before = _cpu_of(servers), process_cpu_seconds(collector.pid), _children_cpu()
            session = Session.start(f"Full-{label}", str(work / f"full-{label}.etl"), providers=["*Bench.Fleet"], buffer_size=BUFFER_KB,
                                    max_buffers=256, socket=socket, **extra)  # fmt: skip
            kernel_session = None
            if streamed and kernel and temperature == "warm":
                kernel_session = Session.start("Kernel-stream", kernel_flags="cswitch,process,thread", buffer_size=BUFFER_KB, stream=urls,
                                               spool_size=256, socket=socket)  # fmt: skip
            began = time.time()
            report = _written(_producer("Bench.Fleet", events, rate))
            if streamed and temperature == "warm":  # the publisher's own rate: to the stream's acknowledgement, not the collector
                results["acknowledged"] = _acknowledged(session, began)
            final = session.stop()
            kernel_final = kernel_session.stop() if kernel_session is not None else None
            producer_cpu = _children_cpu() - producer_before
            if streamed:
                books = _wait_ended(out, f"Full-{label}")
                books["began"] = began
                results["collected" if temperature == "warm" else f"collected-{temperature}"] = books
                if kernel_final is not None:
                    results["kernel"] = {"final": kernel_final, "books": _wait_ended(out, "Kernel-stream")}
            # Every process's CPU over the same work: the stream's side counted until the collector holds the session.
            cpu = process_cpu_seconds(service_pid) - before
            results[label] = {
                "written": report["written"], "producer_seconds": report["seconds"], "final": final, "service_cpu": cpu,
                "producer_cpu": producer_cpu, "servers_cpu": _cpu_of(servers) - servers_before,
                "collector_cpu": process_cpu_seconds(collector.pid) - collector_before,
            }  # fmt: skip
        return results
    finally:
        collector.terminate()
        collector.wait(30)


# -- (d)/(e) paced: latency and failover -------------------------------------------------------------
async def _purge(urls: str) -> None:
    import nats

    client = await nats.connect(urls.split(","))
    try:
        await client.jsm().purge_stream("ETW")
    finally:
        await client.close()


def _paced(cluster: Any, socket: Path, work: Path, rate: float, seconds: float) -> dict[str, Any]:
    from openetw.controller import Session
    from openetw.fleet.collector import collect
    from openetw.fleet.connect import StreamOptions
    from openetw.fleet.store import FleetStore

    asyncio.run(_purge(cluster.urls))  # the full-rate run's messages: not this collector's backlog
    out = work / "paced"
    store = FleetStore(out, rotate_bytes=1 << 30)
    commits: list[tuple[float, int]] = []
    stopping = threading.Event()

    def on_commit(books: FleetStore) -> None:
        events = sum(b.events for b in books.sessions.values() if b.session == "Paced")
        if not commits or events != commits[-1][1]:
            commits.append((time.time(), events))

    collector = threading.Thread(target=lambda: asyncio.run(collect(
        StreamOptions.build(cluster.urls), store, durable="bench-paced", stop=stopping.is_set, on_commit=on_commit)), daemon=True)
    collector.start()
    session = Session.start("Paced", providers=["*Bench.Paced"], buffer_size=BUFFER_KB, stream=cluster.urls, socket=socket)
    count = int(rate * (seconds + 18))
    producer = _producer("Bench.Paced", count, rate)
    acks: list[tuple[float, int]] = []
    began = time.monotonic()
    # A crash (SIGKILL) of the stream's leader, then a planned stop (lame duck mode) of the next one.
    failovers: list[dict[str, Any]] = [{"how": "killed", "at": began + seconds}, {"how": "lame duck", "at": began + seconds + 9}]
    killed_time = float("inf")  # time.time() of the first failover: latency is measured before it
    while producer.poll() is None:
        state = session.stream_state() or {}
        now = time.monotonic()
        acks.append((now, int(state.get("buffers_acknowledged", 0))))
        for failover in failovers:
            if "node" not in failover and now >= failover["at"]:
                leader = cluster.stream_leader()
                if leader is None:
                    continue
                failover.update(node=leader, started=now)
                killed_time = min(killed_time, time.time())
                node = cluster.node(leader)
                if failover["how"] == "killed":
                    node.kill()
                else:
                    node.process.send_signal(signal.SIGUSR2)  # nats-server's lame duck mode
                threading.Timer(3.0, lambda node=node: (node.kill(), node.start())).start()
        time.sleep(0.02)
    written = _written(producer)["written"]
    session.stop()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(b.ended for b in store.sessions.values() if b.session == "Paced"):
        time.sleep(0.2)
    stopping.set()
    collector.join(30)
    store.close()

    # Write time of every collected event, in the order written (one producer: buffers in order).
    from openetw.etl import EtlReader
    from openetw.etl.relog import is_logfile_header_record
    from openetw.tdh import decode_all, schema_from_record

    walls = []
    for path in sorted(out.glob("*/Paced/*.etl")):
        with EtlReader(path) as reader:
            for record in reader:
                if is_logfile_header_record(record):
                    continue
                schema = schema_from_record(record)
                if schema is not None and schema.event_name == "Tick":
                    values = decode_all(schema, record.user_data)
                    walls.append((int(values["index"]), int(values["wall"]) / 1e9))
    walls.sort()
    latencies = []
    position = 0
    for number, (_, wall) in enumerate(walls, start=1):
        while position < len(commits) and commits[position][1] < number:
            position += 1
        if position == len(commits):
            break
        if wall < killed_time - 1.0:  # before the failover: what the path costs when all is well
            latencies.append(commits[position][0] - wall)
    latencies.sort()
    for failover in failovers:
        failover["stall"] = _stall(acks, failover.get("started"))
    return {
        "written": written,
        "collected": len(walls),
        "unique": len({index for index, _ in walls}),
        "latency": latencies,
        "failovers": failovers,
    }


def _stall(acks: list[tuple[float, int]], started: float | None) -> float | None:
    """The longest time the acknowledgements stood still from 1 s before ``started`` to 7 s after."""
    if started is None:
        return None
    window = [(t, n) for t, n in acks if started - 1.0 <= t <= started + 7.0]
    stall, last_change = 0.0, window[0][0] if window else started
    for (_, previous), (t, n) in itertools.pairwise(window):
        if n != previous:
            stall = max(stall, t - last_change)
            last_change = t
    return stall


async def _raw_failover(cluster: Any) -> float:
    """nats-py alone: the longest gap between acknowledged publishes when the leader of an R3
    stream is killed (SIGKILL), the node restarted afterwards."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    async def quiet(_error: Exception) -> None:
        return None

    client = await nats.connect(cluster.urls.split(","), reconnect_time_wait=0.1, max_reconnect_attempts=-1, error_cb=quiet)
    try:
        js = client.jetstream()
        await js.add_stream(StreamConfig(name="FAILOVER", subjects=["failover.>"], storage=StorageType.FILE, num_replicas=3))
        for _ in range(10):
            await js.publish("failover.x", b"x" * 1024)
        leader = (await js.stream_info("FAILOVER")).cluster.leader
        node = cluster.node(leader)
        node.kill()
        started = last = time.monotonic()
        worst = 0.0
        while time.monotonic() - started < 12:
            try:
                await js.publish("failover.x", b"x" * 1024, timeout=0.5)
            except Exception:  # noqa: BLE001 - no leader yet
                await asyncio.sleep(0.02)
                continue
            now = time.monotonic()
            worst, last = max(worst, now - last), now
            if worst > 0 and now - started > worst + 1:
                break
        node.start()
        for _ in range(50):  # the node back in its cluster: the stream goes
            try:
                await js.delete_stream("FAILOVER")
                break
            except Exception:  # noqa: BLE001 - not yet
                await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        return worst
    finally:
        await client.close()


def _gaps(books: dict[str, Any]) -> int:
    held = sum(last - first + 1 for first, last in books["seen"])
    return int(books["end_sequence"]) + 1 - held


def _percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))] if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="Seconds of the raw ceiling and of each half of the paced run.")
    parser.add_argument("--events", type=int, default=1_000_000, help="Events the full-rate producer writes.")
    parser.add_argument("--rate", type=float, default=5000.0, help="Events/s of the paced producer.")
    parser.add_argument("--kernel", action="store_true", help="Also stream a kernel session (root, tracefs).")
    parser.add_argument("--sustained", type=float, default=50_000.0,
                        help="Events/s of the sustained file and file + stream sessions (--duration seconds each).")  # fmt: skip
    args = parser.parse_args()

    from openetw.testing.nats_cluster import NatsCluster, find_nats_server

    if find_nats_server() is None:
        print("nats-server is not installed: nothing measured")
        return 1
    work = Path(tempfile.mkdtemp(prefix="openetw-bench-fleet-"))
    cluster = NatsCluster(work / "nats", 3)
    try:
        cluster.start()
        cluster.wait_ready()
        servers = [node.process.pid for node in cluster.nodes if node.process is not None]
        raw, raw_cpu, raw_servers_cpu = asyncio.run(_raw_ceiling(cluster.urls, args.duration, BUFFER_KB << 10, servers))
        raw_failover = asyncio.run(_raw_failover(cluster))
        with private_service("openetw-bench-fleet-service-") as (service, directory):
            socket = directory / "control.sock"
            full = _full_rate(cluster.urls, service.pid, servers, socket, work, args.events, args.kernel, args.sustained, args.duration)
            paced = _paced(cluster, socket, work, args.rate, args.duration)
    finally:
        cluster.kill()
        shutil.rmtree(work, ignore_errors=True)

    books = full["collected"]
    span = max(books["last_received"] - books["began"], 1e-9)  # from the producer's start to the last buffer collected
    buffers_per_second = books["buffers"] / span
    streamed = full["stream"]
    acked = full["acknowledged"]
    print(f"Fleet streaming ({machine_note()}); 3-node JetStream cluster on loopback, replicas 3, {BUFFER_KB} KB buffers")
    rows = [
        ["raw nats-py publish, R3, window 32", f"{raw:,.0f} msg/s", f"{raw * BUFFER_KB / 1024:,.1f} MB/s",
         f"{raw_cpu * 1e6:,.0f} us CPU/msg", f"nats-servers {raw_servers_cpu * 1e6:,.0f} us CPU/msg", ""],
        ["openetw host -> stream acknowledged (user, full rate)", f"{acked['buffers'] / acked['seconds']:,.0f} buffers/s", "",
         f"{100 * acked['buffers'] / acked['seconds'] / raw:.0f}% of raw", "", ""],
        ["openetw host -> collector (user, full rate)", f"{buffers_per_second:,.0f} buffers/s", f"{books['events'] / span:,.0f} events/s",
         f"{100 * buffers_per_second / raw:.0f}% of raw", f"{streamed['written']:,} written / {books['events']:,} collected",
         f"{books['events_lost']:,} counted lost, {_gaps(books)} gaps"],
    ]  # fmt: skip
    if "kernel" in full:
        kernel_books = full["kernel"]["books"]
        kernel_span = max(kernel_books["last_received"] - kernel_books["first_received"], 1e-9)
        rows.append(["openetw host -> collector (kernel cswitch,process,thread)", f"{kernel_books['buffers'] / kernel_span:,.0f} buffers/s",
                     f"{kernel_books['events'] / kernel_span:,.0f} events/s", "", f"{kernel_books['events']:,} collected",
                     f"{kernel_books['events_lost']:,} counted lost"])  # fmt: skip
    print(table(["path", "rate", "", "vs ceiling", "events", "loss"], rows))
    print()
    cpu_rows: list[list[object]] = []
    for label in ("file-cold", "stream-cold", "file", "stream", "file-sustained", "stream-sustained"):
        run = full[label]
        events = max(run["written"], 1)
        parts = [run["producer_cpu"], run["service_cpu"], run["servers_cpu"], run["collector_cpu"]]
        name = ("file + stream" if label.startswith("stream") else "file") + ", " + (label.split("-", 1)[1] if "-" in label else "warm")
        cpu_rows.append([name, f"{events:,}", *(f"{part / events * 1e6:.2f}" for part in parts), f"{sum(parts) / events * 1e6:.2f}"])
    print(table(["CPU, us/event", "events", "producer", "service", "3 nats-servers", "collector", "all"], cpu_rows))
    for temperature, suffix in (("cold", "-cold"), ("warm", ""), (f"sustained at {args.sustained:,.0f} events/s", "-sustained")):
        service_ratio = (full["stream" + suffix]["service_cpu"] / max(full["stream" + suffix]["written"], 1)) / max(
            full["file" + suffix]["service_cpu"] / max(full["file" + suffix]["written"], 1), 1e-12)
        print(f"{temperature}: streaming adds {100 * (service_ratio - 1):+.0f}% to the service's CPU per event (goal <= +25%)")
    for suffix, name in (("", "warm"), ("-sustained", "sustained")):
        run_books = full["collected" + suffix] if suffix else books
        per_event = {label: full[label + suffix]["service_cpu"] / max(full[label + suffix]["written"], 1) for label in ("file", "stream")}
        events_per_buffer = run_books["events"] / max(run_books["buffers"], 1)
        print(f"{name}: the stream's share of the service {(per_event['stream'] - per_event['file']) * events_per_buffer * 1e6:.0f} us"
              f" per buffer ({events_per_buffer:.0f} events); {full['stream' + suffix]['written']:,} written / {run_books['events']:,}"
              f" collected / {run_books['events_lost']:,} counted lost")  # fmt: skip
    print(f"nats-py's own publish {raw_cpu * 1e6:.0f} us per message; rate {100 * buffers_per_second / raw:.0f}% of nats-py's ceiling"
          " (goal >= 80%)")
    latency = paced["latency"]
    print()
    print(table(["paced run", "value"], [
        ["events written / collected / distinct", f"{paced['written']:,} / {paced['collected']:,} / {paced['unique']:,}"],
        ["write -> durable at the collector p50", f"{_percentile(latency, 0.5) * 1000:.0f} ms"],
        ["write -> durable p99", f"{_percentile(latency, 0.99) * 1000:.0f} ms"],
        ["write -> durable max", f"{(latency[-1] if latency else float('nan')) * 1000:.0f} ms"],
        *[[f"publish stall, stream leader {f.get('node')} {f['how']}", "not measured" if f.get("stall") is None else f"{f['stall']:.2f} s"]
          for f in paced["failovers"]],
        ["raw nats-py: longest publish gap, leader killed", f"{raw_failover:.2f} s"],
    ]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
