"""The consumer: events per second through one ``UserTrace``, over corpus files and live.

Rows, per file, all measured in the same run (best of N, indexes already built unless said):
the raw header walk (``EtlReader`` iteration, file order) as the baseline; the index pass
(``EtlIndex.build``: find every record and gather its header columns) and loading a built index;
callbacks behind a provider filter that parse one property, for a selective provider (few of the
file's events) and for the file's busiest provider (most of them); plain iteration
(``for event in trace.events()``, every event); the batch API over the index: opening a trace
and taking every row, the rows of an open trace, and behind a selective provider. Events/s counts
every record of the file (batches: the rows they hold), so a selective filter shows what
skipping records on the index buys. Rates are the process's CPU time (best of N), which decides
the goals: on a shared machine time spent waiting for a CPU is not the reader's; the best wall
time of another N runs is shown beside it.

Beside them, on the same records: the busiest provider's callback called by a plain Python loop
(``empty callback loop``: as many calls, over the records it gets, each primed with its schema
entry as the consumer does; counted as the file's records so the rates compare the same work;
``loop / this`` is how much slower the consumer is), and dissect.etl iterating the same file.

Goals: callbacks with a provider filter >= 1M events/s and the busiest provider's within 1.5x of
the empty loop, index pass >= 20M records/s, batches >= 17.4M events/s.

Then, live (``--live-seconds``, default 5; ``--no-live`` skips it, ``--live`` runs only it):
a private trace service, producer processes writing a 3-field TraceLogging event at target
rates (50k, 100k, 200k events/s, rate-limited, one process per 80k events/s), a real-time
session, and a ``UserTrace`` attached to it that parses one property of every event: with a
callback (a lagging consumer leaves buffers queued at the service, which drops them past its
limit: lost by the service) and with ``events(when_full="drop")`` (the hand-off queue drops:
dropped by the consumer). The consumer takes the session's buffers whole and processes each
batch of waiting buffers on its columns, as an indexed file (``openetw.consumer._engine.buffer_index``);
a batch that begins with a full buffer waits up to 20 ms for the buffers behind it; the
iterator gets the events in chunks, at the latest at the end of each batch. Printed per rate:
what producers wrote and at what rate, what the consumer handled and at what rate (from the
producers' start to the consumer's end), events dropped by the consumer, events lost by the
service (pools with no free buffer, real-time buffers nobody could take), whether handled +
dropped + lost = written, and the CPU time of each party per event written (consumer, service,
producers). Producers, service and consumer share the machine's cores: on 2 cores the higher
rates measure the contention (``--live-repeat`` runs every rate several times).

Usage: python benchmarks/bench_consumer.py [--repeat 3] [--live-seconds 5] [--live-repeat 1] [--no-live | --live]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, StdioChild, best_of, machine_note, private_service, process_cpu_seconds, table  # noqa: E402

from openetw.consumer import EtlIndex, EventFilter, Provider, UserTrace  # noqa: E402
from openetw.consumer import predicates as P  # noqa: E402
from openetw.etl import EtlReader  # noqa: E402
from openetw.manifest import load_manifest  # noqa: E402

KERNEL_PROCESS_MANIFEST = CORPUS / "manifests" / "Win10-17134" / "Microsoft-Windows-Kernel-Process.xml"
LOOP = "empty callback loop (busiest provider's calls)"
GOALS = {"index pass": 20e6, "callbacks, selective provider": 1e6, "callbacks, busiest provider": 1e6, "batches": 17.4e6}


@dataclass(frozen=True)
class Case:
    """A file and what its providers are: a selective one, the busiest one, a property of each."""

    path: str
    selective: tuple[str, Callable[[Provider], None], str]  # (provider, configure, property)
    busiest: tuple[str, Callable[[Provider], None], str]


def _no_change(provider: Provider) -> None:
    return None


CASES = [
    Case(
        "perfview/diaghub-dotnetcore3.1-win-x64-diagsession/diaghub.etl",
        ("9b79ee91-b5fd-41c0-a243-4248e266e9d0", _no_change, "SystemDirectory"),  # SysConfig: 13 events
        ("b3e675d7-2554-4f18-830b-2762732560de", _no_change, "ImageSize"),  # ImageID: 62341 events
    ),
    Case(
        "tx/Process.etl",
        ("Microsoft-Windows-Kernel-Process", lambda p: p.event_ids([1, 2]), "ImageName"),  # starts/stops: 8 events
        ("Microsoft-Windows-Kernel-Process", _no_change, "ProcessID"),  # every event but the header
    ),
]


def raw_walk(path: str) -> int:
    n = 0
    with EtlReader(path) as reader:
        for record in reader:
            record.timestamp  # noqa: B018 - touch a header field, as a consumer would
            n += 1
    return n


def index_pass(path: str) -> int:
    return len(EtlIndex.build(path))


def index_load(path: str) -> int:
    return len(EtlIndex.open(path))


def callbacks(path: str, manifests: list[object], provider_name: str, configure: Callable[[Provider], None], prop: str) -> Callable[[], int]:
    def run() -> int:
        trace = UserTrace(files=[path], manifests=manifests)
        provider = Provider(provider_name)
        configure(provider)

        def on_event(record: object, context: object) -> None:
            context.parser_for(record).try_parse(prop)  # type: ignore[attr-defined]

        provider.add_on_event_callback(on_event)
        trace.enable(provider)
        trace.start()
        return int(trace.query_stats()["events_read"])

    return run


def callback_loop(path: str, manifests: list[object], provider_name: str, configure: Callable[[Provider], None], prop: str) -> Callable[[], int]:
    """The busiest provider's callback called by a plain ``for`` loop, as many times as the trace
    calls it, over the records it gets, each primed with its schema entry as the consumer primes
    it (records and entries made here, not timed). Counts the file's records, as the callbacks
    rows do, so that the rates compare the same work."""
    trace = UserTrace(files=[path], manifests=manifests)
    provider = Provider(provider_name)
    configure(provider)
    records: list[object] = []
    provider.add_on_event_callback(lambda record, context: records.append(record))
    trace.enable(provider)
    trace.start()
    context = trace._prepare().context
    pairs = [(record, context.delivery_entry(record)) for record in records]
    read = int(trace.query_stats()["events_read"])

    def on_event(record: object, context: object) -> None:
        context.parser_for(record).try_parse(prop)  # type: ignore[attr-defined]

    def run() -> int:
        prime = context.prime
        for record, entry in pairs:
            prime(record, entry)
            on_event(record, context)
        return read

    return run


def dissect_iteration(path: str) -> int:
    """dissect.etl over the same file: ``for event in ETL(file)`` (its parse of every record)."""
    from dissect.etl import ETL

    n = 0
    with open(path, "rb") as fh:
        for _ in ETL(fh):
            n += 1
    return n


def iteration(path: str) -> int:
    trace = UserTrace(files=[path], manifests=[])
    n = 0
    for _ in trace.events():
        n += 1
    return n


def batches(path: str, manifests: list[object], provider_name: str | None = None) -> Callable[[], int]:
    """Open a trace and take its batches: rows counted (behind a provider: every record scanned)."""

    def run() -> int:
        trace = UserTrace(files=[path], manifests=manifests)
        if provider_name is not None:
            trace.enable(Provider(provider_name))
        n = 0
        for batch in trace.batches():
            n += len(batch)
        return n if provider_name is None else len(trace.indexes()[0])

    return run


def batches_open_trace(path: str) -> Callable[[], int]:
    """Batches of a trace already open (its index loaded): the steady state of repeated queries."""
    trace = UserTrace(files=[path], manifests=[])
    trace.open()

    def run() -> int:
        n = 0
        for batch in trace.batches():
            n += len(batch)
        return n

    return run


def filter_callbacks(path: str, manifests: list[object], provider_name: str, prop: str) -> Callable[[], int]:
    """An EventFilter on one event id (decided on the index) with a parsing callback."""

    def run() -> int:
        trace = UserTrace(files=[path], manifests=manifests)
        provider = Provider(provider_name)
        only = EventFilter(P.id_is(5))
        only.add_on_event_callback(lambda record, context: context.parser_for(record).try_parse(prop))
        provider.add_filter(only)
        trace.enable(provider)
        trace.start()
        return int(trace.query_stats()["events_read"])

    return run


# -- live: a private service, rate-limited producer processes, a consumer of a real-time session --

LIVE_RATES = (50_000, 100_000, 200_000)
LIVE_PROVIDER = "Bench.Live"
LIVE_TEXT = "twenty characters..!"
# One Python producer writes ~100k events/s flat out here (alone): a process per 80k leaves headroom.
PER_PRODUCER_RATE = 80_000
LIVE_FORMS = ("callback", "events(when_full='drop')")
ITERATOR_QUEUE = 4096
START_TIMEOUT = 20.0


def producer_main(rate: float, seconds: float) -> None:
    """A producer process: register, say when enabled, write on "go" at ``rate`` events/s for
    ``seconds``, report, then stay alive (its pool with it) until told to exit."""
    from openetw.provider import TraceLoggingProvider

    provider = TraceLoggingProvider(LIVE_PROVIDER).register()
    deadline = time.monotonic() + START_TIMEOUT
    while not provider.enabled and time.monotonic() < deadline:
        time.sleep(0.005)
    print(json.dumps({"enabled": provider.enabled}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    write = provider.write
    chunk = max(50, min(5000, int(rate / 200)))  # about 5 ms of events between looks at the clock
    attempted = written = 0
    start = now = time.perf_counter()
    while now - start < seconds:
        for i in range(attempted, attempted + chunk):
            written += write("Counted", level=4, keyword=0x10, count=i, total=i, name=LIVE_TEXT)
        attempted += chunk
        now = time.perf_counter()
        ahead = start + attempted / rate - now
        if ahead > 0:
            time.sleep(ahead)
            now = time.perf_counter()
    print(json.dumps({"attempted": attempted, "written": written, "seconds": now - start}), flush=True)
    sys.stdin.readline()
    provider.unregister()


class LiveProducer(StdioChild):
    """This script run with ``--producer``, steered over its stdin."""

    def __init__(self, rate: float, seconds: float) -> None:
        super().__init__([sys.executable, __file__, "--producer", "--rate", str(rate), "--live-seconds", str(seconds)])


@dataclass
class LiveResult:
    form: str
    rate: int
    producers: int
    attempted: int
    written: int
    producing_seconds: float
    consumer_seconds: float
    drain_seconds: float
    cpu_seconds: float  # this process's (the consumer's) CPU time over the run
    service_cpu_seconds: float
    producers_cpu_seconds: float
    stats: dict[str, Any]
    final: dict[str, int]


def live_run(number: int, form: str, rate: int, seconds: float, service_pid: int) -> LiveResult:
    """One rate, one consumer form: a real-time session, producers, a trace attached to it."""
    from openetw.controller import Session

    name = f"BenchLive{number}"
    count = max(1, math.ceil(rate / PER_PRODUCER_RATE))
    producers = [LiveProducer(rate / count, seconds) for _ in range(count)]
    try:
        session = Session.start(name, mode="realtime", flush_timer=1, providers=[(LIVE_PROVIDER, {"level": 5})])
        trace = UserTrace(sessions=[name], manifests=[])
        try:
            provider = Provider(LIVE_PROVIDER)
            if form == "callback":
                provider.add_on_event_callback(lambda record, context: context.parser_for(record).parse("count"))
                consume: Callable[[], None] = trace.process
            else:

                def consume() -> None:
                    for event in trace.events(queue_size=ITERATOR_QUEUE, when_full="drop"):
                        event.parse("count")

            trace.enable(provider)
            trace.on_error(lambda error, record: None)  # drops are counted in query_stats(), read below
            trace.open()
            for producer in producers:
                if not producer.read(START_TIMEOUT + 10).get("enabled"):
                    raise RuntimeError("a producer was not enabled")
            consumer = threading.Thread(target=consume, name="bench-consumer")
            consumer.start()
            producers_cpu = sum(process_cpu_seconds(producer.pid) for producer in producers)
            start, cpu_start, service_cpu = time.perf_counter(), time.process_time(), process_cpu_seconds(service_pid)
            for producer in producers:
                producer.tell("go")
            reports = [producer.read(seconds + 120) for producer in producers]
            produced = time.perf_counter()
            producers_cpu = sum(process_cpu_seconds(producer.pid) for producer in producers) - producers_cpu
            final = session.stop()  # the last buffers go to the consumer, then the end of the session
            consumer.join()
            ended, cpu_end, service_cpu = time.perf_counter(), time.process_time(), process_cpu_seconds(service_pid) - service_cpu
        finally:
            session.stop()
            trace.stop()
            trace.close()
    finally:
        for producer in producers:
            producer.close()
    return LiveResult(
        form, rate, count, sum(r["attempted"] for r in reports), sum(r["written"] for r in reports),
        max(r["seconds"] for r in reports), ended - start, ended - produced, cpu_end - cpu_start, service_cpu, producers_cpu,
        trace.query_stats(), final,
    )  # fmt: skip


def run_live(rates: list[int], seconds: float, repeat: int = 1) -> None:
    print(f"\nlive: producers write for {seconds:g} s at each rate; load average before: "
          f"{', '.join(f'{load:.1f}' for load in os.getloadavg())}")  # fmt: skip
    rows: list[list[object]] = []
    with private_service("openetw-bench-live-") as (service, _):
        number = 0
        for form in LIVE_FORMS:
            for rate in rates:
                for _ in range(repeat):
                    number += 1
                    rows.append(_live_row(live_run(number, form, rate, seconds, service.pid)))
    print(table(
        ["consumer", "target/s", "producers", "written", "written/s", "handled", "handled/s", "consumer CPU us/event",
         "drain after", "dropped (consumer)", "lost (service)", "handled+dropped+lost = written",
         "CPU us/event written: consumer, service, producers"],
        rows,
    ))  # fmt: skip
    print("    written: events producers wrote (a pool with no free buffer drops some: counted as lost by the"
          " service); handled/s: from the producers' start to the consumer's end; consumer CPU: this process's"
          " CPU time per event read; drain after: how long the consumer went on once the producers stopped;"
          " rt buffers: real-time buffers the service dropped because the consumer was too far behind;"
          f" load average after: {', '.join(f'{load:.1f}' for load in os.getloadavg())}")  # fmt: skip


def _live_row(result: LiveResult) -> list[object]:
    stats, final = result.stats, result.final
    handled, dropped, lost = stats["events_handled"], stats["events_dropped"], final["events_lost"]
    balance = "yes" if handled + dropped + lost == result.attempted else f"NO ({result.attempted - handled - dropped - lost:+d})"
    read = max(1, stats["events_read"])
    cpu_seconds = (result.cpu_seconds, result.service_cpu_seconds, result.producers_cpu_seconds)
    per_written = [cpu / max(1, result.attempted) * 1e6 for cpu in cpu_seconds]
    return [
        result.form, f"{result.rate / 1000:g}k", result.producers, result.attempted,
        f"{result.attempted / result.producing_seconds / 1000:.0f}k", handled,
        f"{handled / result.consumer_seconds / 1000:.0f}k", f"{result.cpu_seconds / read * 1e6:.1f}",
        f"{result.drain_seconds:.1f} s", dropped, f"{lost} ({final['realtime_buffers_lost']} rt buffers)", balance,
        ", ".join(f"{cpu:.1f}" for cpu in per_written),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--live-seconds", type=float, default=5.0, help="how long producers write at each rate")
    parser.add_argument("--live-rates", default=",".join(str(rate) for rate in LIVE_RATES), help="target events/s, comma-separated")
    parser.add_argument("--live-repeat", type=int, default=1, help="runs of each live rate")
    live = parser.add_mutually_exclusive_group()
    live.add_argument("--no-live", action="store_true", help="only the file part")
    live.add_argument("--live", action="store_true", help="only the live part (by default it runs after the file part)")
    parser.add_argument("--producer", action="store_true", help=argparse.SUPPRESS)  # a producer process of the live part
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.producer:
        producer_main(args.rate, args.live_seconds)
        return
    if not args.live:
        with tempfile.TemporaryDirectory(prefix="openetw-bench-index-") as scratch:
            os.environ.setdefault("OPENETW_INDEX_DIR", scratch)  # corpus folders are read-only: indexes go here
            run_all(args.repeat)
    if not args.no_live:
        run_live([int(rate) for rate in args.live_rates.split(",") if rate.strip()], args.live_seconds, args.live_repeat)


def run_all(repeat: int) -> None:
    manifests = [load_manifest(KERNEL_PROCESS_MANIFEST).manifest] if KERNEL_PROCESS_MANIFEST.exists() else []
    print(machine_note())
    for case in CASES:
        path = str(CORPUS / "etl" / case.path)
        if not os.path.exists(path):
            print(f"skipped (corpus file missing): {path}")
            continue
        EtlIndex.open(path)  # later runs load it: what every row but "index pass" sees
        (sel_name, sel_configure, sel_prop), (busy_name, busy_configure, busy_prop) = case.selective, case.busiest
        runs: list[tuple[str, Callable[[], int]]] = [
            ("raw header walk (EtlReader)", lambda: raw_walk(path)),
            ("index pass", lambda: index_pass(path)),
            ("index load", lambda: index_load(path)),
            ("callbacks, selective provider", callbacks(path, manifests, sel_name, sel_configure, sel_prop)),
            ("callbacks, busiest provider", callbacks(path, manifests, busy_name, busy_configure, busy_prop)),
            ("plain iteration (events())", lambda: iteration(path)),
            ("batches (open the trace, then all rows)", batches(path, manifests)),
            ("batches", batches_open_trace(path)),
            ("batches, selective provider", batches(path, manifests, sel_name)),
        ]
        if case.path.endswith("Process.etl"):
            runs.insert(5, ("callbacks, EventFilter(id_is(5))", filter_callbacks(path, manifests, busy_name, busy_prop)))
        runs.insert(3, (LOOP, callback_loop(path, manifests, busy_name, busy_configure, busy_prop)))
        if importlib.util.find_spec("dissect") is not None and importlib.util.find_spec("dissect.etl") is not None:
            runs.insert(1, ("dissect.etl iteration", lambda: dissect_iteration(path)))
        rows: list[list[object]] = []
        baseline = None
        loop_rate = None
        for name, run in runs:
            # CPU time decides (on a shared machine, time spent waiting for a CPU is not the
            # reader's); wall time is shown beside it.
            seconds, count = best_of(run, repeat, clock=time.process_time)
            wall, _ = best_of(run, repeat)
            rate = count / seconds
            baseline = baseline or rate
            goal = GOALS.get(name)
            verdict = "" if goal is None else ("meets goal" if rate >= goal else f"below goal {goal / 1e6:g}M")
            if name == LOOP:
                loop_rate = rate
            versus_loop = ""
            if name == "callbacks, busiest provider" and loop_rate:
                versus_loop = f"{loop_rate / rate:.2f}"
                verdict = "within 1.5x of the loop" if loop_rate / rate <= 1.5 else "more than 1.5x the loop"
            rows.append([
                name, f"{count}", f"{seconds * 1000:.1f} ms", f"{rate / 1e6:.2f} M/s", f"{count / wall / 1e6:.2f} M/s", f"{rate / baseline:.1f}x",
                versus_loop, verdict,
            ])  # fmt: skip
        print(f"\n{case.path}")
        print(table(["case", "events", "CPU time", "events/s (CPU)", "events/s (wall)", "vs raw walk", "loop / this", "goal"], rows))


if __name__ == "__main__":
    main()
