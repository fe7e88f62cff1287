"""The trace service end to end, against ``logging`` (and structlog when installed), in one run.

A private service is started in a temporary directory (as the tests do) and stopped at the end;
nothing is left running. Four measurements:

(a)/(b) time the calling thread's CPU (``time.thread_time``: user + system), best of N.

(a) the disabled path: ``if provider.enabled: provider.write(...)`` and
    ``provider.is_enabled(level, keyword)`` against ``Logger.debug`` below the logger's level.
    Goal: at most 0.5x logging's cost (net of the loop, the same for every case);
(b) an enabled 3-field event (UINT32, UINT64, 20-character string) written into a file session,
    TraceLogging (``write(name, **fields)`` and a declared event's positional ``event.write``)
    and manifest, against ``logging.info`` to a FileHandler and structlog writing
    JSON lines to a file. Goal: at least 10x faster than logging to a file;
(c) the service's CPU time as a share of the producers' at saturation (one producer process
    writing as fast as it can, TraceLogging then manifest events; ``utime + stime`` from
    /proc/<pid>/stat of both). Goal: <= 10%;
(d) events lost at 200,000 events/s sustained for ``--duration`` seconds (default 30) with the
    default buffers (64 KB, at most 64 per producer): rate-limited producer processes writing
    manifest events, two when one cannot reach the rate. Goal: none lost.

Usage: python benchmarks/bench_service.py [--duration 30] [--runs 1] [--writes 50000] [--repeat 5] [--parts abcd]
(``--runs 4``: four sustained-rate runs, one row each; ``--parts bd``: only (b) and (d)).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import StdioChild, machine_note, private_service, table  # noqa: E402

from openetw.manifest.winmeta import InType  # noqa: E402

NAME = "twenty characters..!"
FIELDS = [("count", InType.UINT32), ("total", InType.UINT64), ("name", InType.UNICODESTRING)]
MANIFEST_GUID = uuid.UUID("6a2b9c3e-0b0e-4f6e-9a59-2f4b1c7d8e91")
DESCRIPTOR = (1, 0, 16, 4, 0, 1, 0x10)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT = 20.0

Batch = Callable[[int], None]


# -- the private service -----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def best_ns(batches: dict[str, Batch], writes: int, repeat: int) -> dict[str, float]:
    """Best ns per call of each batch, in CPU time of the calling thread (user + system, so a
    FileHandler's write calls count): on a shared 2-core machine wall time mostly measures the
    other processes. The cases take turns, so a noisy moment hits them all alike."""
    best = dict.fromkeys(batches, float("inf"))
    for _ in range(repeat):
        for name, batch in batches.items():
            gc.collect()
            start = time.thread_time()
            batch(writes)
            best[name] = min(best[name], (time.thread_time() - start) / writes * 1e9)
    return best


def quiet_logger(name: str, handler: logging.Handler, level: int) -> logging.Logger:
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(level)
    return logger


def ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference > 0 else "-"


# -- (a) the disabled path ---------------------------------------------------------------------


def disabled_path(writes: int, repeat: int) -> None:
    from openetw.provider import TraceLoggingProvider

    provider = TraceLoggingProvider("Bench.Disabled").register()
    assert not provider.enabled, "nobody enables Bench.Disabled"
    logger = quiet_logger("openetw.bench.disabled", logging.NullHandler(), logging.INFO)

    def empty_loop(n: int) -> None:
        for _ in range(n):
            pass

    def guarded(n: int) -> None:
        for i in range(n):
            if provider.enabled:
                provider.write("Counted", level=5, keyword=1, count=i, total=i, name=NAME)

    def unguarded(n: int) -> None:
        for i in range(n):
            provider.write("Counted", level=5, keyword=1, count=i, total=i, name=NAME)

    def is_enabled(n: int) -> None:
        for _ in range(n):
            provider.is_enabled(5, 1)

    def debug(n: int) -> None:
        for i in range(n):
            logger.debug("count=%d total=%d name=%s", i, i, NAME)

    cases = {
        "if provider.enabled: provider.write(...)": guarded,
        "provider.is_enabled(5, 0x1)": is_enabled,
        "provider.write(...) unguarded": unguarded,
        "Logger.debug below its level": debug,
        "empty loop (subtracted)": empty_loop,
    }
    calls = writes * 20  # cheap calls: long enough batches to time
    results = best_ns(cases, calls, repeat)
    provider.unregister()
    floor = results.pop("empty loop (subtracted)")
    reference = results["Logger.debug below its level"] - floor
    rows = []
    for name, ns in results.items():
        net = ns - floor
        goal = ("yes" if net <= 0.5 * reference else "NO") if name.startswith(("if provider", "provider.is_enabled")) else ""
        rows.append([name, f"{ns:.1f}", f"{net:.1f}", ratio(net, reference), goal])
    print(f"\n(a) disabled path: {calls} calls per batch, best of {repeat}; loop floor {floor:.1f} ns")
    print(table(["call", "ns/call", "net ns", "of logging's cost", "<= 0.5x"], rows))


# -- (b) an enabled event into a file session ---------------------------------------------------


def structlog_batch(path: Path) -> Batch | None:
    """structlog's usual production setup: level, ISO time, JSON lines, written and flushed per
    line (as a FileHandler does). ``None`` when structlog is not installed."""
    try:
        import structlog
    except ImportError:
        return None
    stream = open(path, "w")  # noqa: SIM115 - lives as long as the benchmark
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    log = structlog.get_logger("openetw.bench")

    def batch(n: int) -> None:
        stream.seek(0)
        stream.truncate()
        for i in range(n):
            log.info("counted", count=i, total=i, name=NAME)

    return batch


def enabled_path(directory: Path, writes: int, repeat: int) -> None:
    from openetw.controller import Session
    from openetw.provider import Provider, TraceLoggingProvider

    tracelogging = TraceLoggingProvider("Bench.Enabled").register()
    manifest = Provider(MANIFEST_GUID, name="Bench.Manifest").register()
    event = manifest.event(DESCRIPTOR, FIELDS)
    output = directory / "enabled.etl"
    session = Session.start("BenchEnabled", output=output, providers=[("Bench.Enabled", {"level": 5}), (MANIFEST_GUID, {"level": 5})])
    if not wait_until(lambda: tracelogging.enabled and manifest.enabled):
        sys.exit("the providers were not enabled")

    def tracelogging_batch(n: int) -> None:
        write = tracelogging.write
        for i in range(n):
            write("Counted", level=4, keyword=0x10, count=i, total=i, name=NAME)

    declared = tracelogging.event("Counted", level=4, keyword=0x10, fields=(("count", "uint32"), ("total", "uint64"), ("name", "string")))

    def declared_batch(n: int) -> None:
        write = declared.write
        for i in range(n):
            write(i, i, NAME)

    def manifest_batch(n: int) -> None:
        write = manifest.write
        for i in range(n):
            write(event, i, i, NAME)

    log_path = directory / "logging.log"
    logger = quiet_logger("openetw.bench.enabled", logging.FileHandler(log_path, delay=False), logging.INFO)

    def logging_batch(n: int) -> None:
        info = logger.info
        for i in range(n):
            info("count=%d total=%d name=%s", i, i, NAME)

    logging_name = "logging.info -> FileHandler"
    cases: dict[str, Batch] = {
        "TraceLoggingProvider.write (file session)": tracelogging_batch,
        "TraceLoggingEvent.write, declared fields (file session)": declared_batch,
        "Provider.write, manifest event (file session)": manifest_batch,
        logging_name: logging_batch,
    }
    structlog_case = structlog_batch(directory / "structlog.log")
    if structlog_case is not None:
        cases["structlog -> JSON lines to a file"] = structlog_case
    results = best_ns(cases, writes, repeat)
    stats = session.stop()
    tracelogging.unregister()
    manifest.unregister()
    for handler in logger.handlers:
        handler.close()
    reference = results[logging_name]
    rows = []
    for name, ns in results.items():
        goal = ("yes" if reference / ns >= 10 else "NO") if "session" in name else ""
        rows.append([name, f"{ns:.0f}", f"{reference / ns:.1f}x", goal])
    if structlog_case is None:
        rows.append(["structlog", "not installed", "", ""])
    print(f"\n(b) enabled 3-field event (UINT32, UINT64, {len(NAME)}-char string): {writes} writes per batch, best of {repeat}")
    print(table(["writer", "ns/event", "faster than logging to a file", ">= 10x"], rows))
    print(f"    session: events_written={stats['events_written']} events_lost={stats['events_lost']}"
          f" buffers_written={stats['buffers_written']}")  # fmt: skip


# -- producer processes (c, d) ------------------------------------------------------------------

KINDS = ("TraceLogging", "manifest")


class ProducerProcess(StdioChild):
    """This script run with ``--producer KIND``: it registers, says ready, writes on ``go``,
    reports, and exits on ``exit`` (so its CPU time can be read while it is still alive)."""

    def __init__(self, kind: str, rate: float, seconds: float) -> None:
        super().__init__([sys.executable, __file__, "--producer", kind, "--rate", str(rate), "--seconds", str(seconds)])


def event_writer(kind: str) -> tuple[Any, Callable[[int], bool]]:
    """(provider, write(i)) for the 3-field event of one kind, the provider registered."""
    from openetw.provider import Provider, TraceLoggingProvider

    if kind == "manifest":
        manifest = Provider(MANIFEST_GUID, name="Bench.Manifest").register()
        event = manifest.event(DESCRIPTOR, FIELDS)
        write_manifest = manifest.write
        return manifest, lambda i: write_manifest(event, i, i, NAME)
    tracelogging = TraceLoggingProvider("Bench.Load").register()
    write_tracelogging = tracelogging.write
    return tracelogging, lambda i: write_tracelogging("Counted", level=4, keyword=0x10, count=i, total=i, name=NAME)


def session_providers() -> list[Any]:
    return [("Bench.Load", {"level": 5}), (MANIFEST_GUID, {"level": 5})]


def producer_main(kind: str, rate: float, seconds: float) -> None:
    """Write the 3-field event for ``seconds``, at ``rate`` events/s (0: flat out)."""
    provider, write = event_writer(kind)
    wait_until(lambda: provider.enabled, timeout=15)
    print(json.dumps({"ready": os.getpid(), "enabled": provider.enabled}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    chunk = 500 if rate <= 0 else max(50, int(rate / 200))  # a rate-limited chunk is ~5 ms of events
    attempted = written = 0
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        for i in range(attempted, attempted + chunk):
            written += write(i)
        attempted += chunk
        now = time.perf_counter()
        if rate > 0:
            ahead = start + attempted / rate - now
            if ahead > 0:
                time.sleep(ahead)
                now = time.perf_counter()
    elapsed = now - start
    print(json.dumps({"attempted": attempted, "written": written, "seconds": elapsed}), flush=True)
    sys.stdin.readline()  # "exit"
    provider.unregister()


class ProducerRun:
    """``count`` producer processes writing at ``rate / count`` events/s each (0: flat out), and
    the CPU seconds (/proc/<pid>/stat) the service and they spent from ``go`` on."""

    def __init__(self, service_pid: int, kind: str, count: int, rate: float, seconds: float) -> None:
        self.service_pid = service_pid
        self.producers = [ProducerProcess(kind, rate / count if rate else 0, seconds) for _ in range(count)]
        self.seconds = seconds
        self.reports: list[dict[str, Any]] = []

    def __enter__(self) -> ProducerRun:
        return self

    def __exit__(self, *exc: object) -> None:
        for producer in self.producers:
            producer.close()

    def run(self) -> None:
        for producer in self.producers:
            if not producer.read(timeout=30).get("enabled"):
                raise RuntimeError("a producer was not enabled")
        self._producers_before = [cpu_seconds(p.pid) for p in self.producers]
        self._service_before = cpu_seconds(self.service_pid)
        for producer in self.producers:
            producer.tell("go")
        self.reports = [producer.read(timeout=self.seconds + 60) for producer in self.producers]

    def cpu(self) -> tuple[float, float]:
        """(producers' CPU seconds, service's CPU seconds) since ``go``; read while all live."""
        producers = sum(cpu_seconds(p.pid) - before for p, before in zip(self.producers, self._producers_before))
        return producers, cpu_seconds(self.service_pid) - self._service_before

    @property
    def attempted(self) -> int:
        return sum(r["attempted"] for r in self.reports)

    @property
    def written(self) -> int:
        return sum(r["written"] for r in self.reports)

    @property
    def elapsed(self) -> float:
        return max(r["seconds"] for r in self.reports)


def events_in_file(path: Path) -> int:
    """Records in a session file, counted by walking every buffer's records (buffer 0, the
    header, left out): a reading of the file, independent of the service's statistics."""
    from openetw.service.logfile import count_records

    with open(path, "rb") as file:
        first = file.read(4)
        if len(first) < 4:
            return 0
        buffer_size = int.from_bytes(first, "little")
        file.seek(buffer_size)
        total = 0
        while True:
            data = file.read(buffer_size)
            if len(data) < buffer_size:
                return total
            total += count_records(data)


# -- (c) service CPU at saturation --------------------------------------------------------------


def saturation(service_pid: int, directory: Path, seconds: float) -> dict[str, float]:
    """One producer process flat out, per event kind; returns each kind's rate (events/s), for
    (d) to choose its process count."""
    from openetw.controller import Session

    rows, rates, shares = [], {}, []
    for kind in KINDS:
        output = directory / "saturation.etl"
        session = Session.start("BenchSaturation", output=output, providers=session_providers())
        try:
            with ProducerRun(service_pid, kind, 1, 0, seconds) as run:
                run.run()
                stats = session.flush()  # the service has taken every buffer when this returns
                producer_cpu, service_cpu = run.cpu()
        finally:
            final = session.stop()
            output.unlink(missing_ok=True)
        rates[kind] = run.attempted / run.elapsed
        share = service_cpu / producer_cpu if producer_cpu else float("nan")
        shares.append(share)
        rows.append([
            kind, f"{rates[kind]:,.0f}", f"{run.written:,}", f"{final['events_lost']:,}",
            f"{producer_cpu:.2f}", f"{producer_cpu / max(run.attempted, 1) * 1e6:.2f}",
            f"{service_cpu:.2f}", f"{service_cpu / max(stats['events_written'], 1) * 1e6:.3f}",
            f"{share * 100:.1f}%", "yes" if share <= 0.10 else "NO",
        ])  # fmt: skip
    print(f"\n(c) service CPU at saturation: one producer process writing flat out for {seconds:.0f} s; CPU from /proc/<pid>/stat")
    print(table(["event", "events/s", "written", "lost", "producer CPU s", "us/event", "service CPU s", "us/event",
                 "service share", "<= 10%"], rows))  # fmt: skip
    return rates


# -- (d) sustained rate -------------------------------------------------------------------------


def sustained(service_pid: int, directory: Path, rate: float, seconds: float, rates: dict[str, float], runs: int = 1) -> None:
    """Rate-limited producers writing manifest events (the cheaper write, so the rate is within
    reach of fewer processes); one process if it can do 1.25x the rate flat out (or when (c) did
    not run), else two. ``runs`` runs one after the other, a row each."""
    kind = "manifest"
    count = 1 if not rates or rates[kind] >= 1.25 * rate else 2  # one without (c) to say otherwise
    rows = []
    short = False
    for number in range(1, runs + 1):
        row, achieved = sustained_run(service_pid, directory, kind, count, rate, seconds)
        rows.append([number, *row])
        short = short or achieved < 0.95 * rate
    print(f"\n(d) sustained {rate:,.0f} {kind} events/s for {seconds:.0f} s; default buffers (64 KB, 4..64 per producer),"
          f" flush timer 1 s")  # fmt: skip
    print(table(["run", "target/s", "producers", "s", "achieved/s", "attempted", "written", "in file", "lost", "service CPU",
                 "zero lost"], rows))  # fmt: skip
    if short:
        print("    a run below 95% of the target: this machine had no more CPU for the producers")


def sustained_run(service_pid: int, directory: Path, kind: str, count: int, rate: float, seconds: float) -> tuple[list[Any], float]:
    from openetw.controller import Session

    output = directory / "sustained.etl"
    session = Session.start("BenchSustained", output=output, providers=session_providers())
    try:
        with ProducerRun(service_pid, kind, count, rate, seconds) as run:
            run.run()
            producer_cpu, service_cpu = run.cpu()
    finally:
        stats = session.stop()
    in_file = events_in_file(output)
    output.unlink(missing_ok=True)
    lost = stats["events_lost"]
    achieved = run.attempted / run.elapsed
    ok = lost == 0 and run.attempted == run.written == in_file == stats["events_written"]
    row = [
        f"{rate:,.0f}", count, f"{run.elapsed:.1f}", f"{achieved:,.0f}", f"{run.attempted:,}", f"{run.written:,}",
        f"{in_file:,}", f"{lost:,}", f"{service_cpu / max(producer_cpu, 1e-9) * 100:.1f}%", "yes" if ok else "NO",
    ]  # fmt: skip
    return row, achieved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of the sustained-rate run (d)")
    parser.add_argument("--rate", type=float, default=200_000, help="events/s of the sustained-rate run (d)")
    parser.add_argument("--saturation", type=float, default=5.0, help="seconds of the saturation run (c)")
    parser.add_argument("--writes", type=int, default=50_000, help="writes per batch in (a) and (b)")
    parser.add_argument("--repeat", type=int, default=5, help="batches per case in (a) and (b); the fastest counts")
    parser.add_argument("--runs", type=int, default=1, help="sustained-rate runs (d), one after the other")
    parser.add_argument("--parts", default="abcd", help="which measurements to make: any of a, b, c, d")
    parser.add_argument("--producer", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.producer:
        producer_main(args.producer, args.rate, args.seconds)
        return
    print(f"trace service benchmark; {machine_note()}")
    with private_service() as (service, directory):
        if "a" in args.parts:
            disabled_path(args.writes, args.repeat)
        if "b" in args.parts:
            enabled_path(directory, args.writes, args.repeat)
        rates = saturation(service.pid, directory, args.saturation) if "c" in args.parts else {}
        if "d" in args.parts:
            sustained(service.pid, directory, args.rate, args.duration, rates, args.runs)


if __name__ == "__main__":
    main()
