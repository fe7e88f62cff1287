"""The Event Log against journald, in one run: ingest from another process, and queries over
1M stored events.

(a) ingest: a producer process writes ``--events`` manifest events to an Operational channel
    as fast as it can; no trace session is started: the service's channel session stores them.
    Events/s stored (from the first write to the last stored), events lost, CPU of the producer
    and of the service; then how fast, and at what CPU per event, the service renders what it
    stored first. Two bursts: cold (a fresh service, a new log) and warm (the same service, the
    log holding the first). Beside it, ``systemd-cat`` fed the same number of lines, until
    ``journalctl`` sees the last one (``systemd-journald`` is started by hand, and stopped after,
    when none runs); its CPU is systemd-cat's, journalctl's and systemd-journald's own. Ratios of
    rate and of total CPU against journald's. Goals: >= 200k events/s stored with nothing lost;
    >= journald's ingest rate.
(b) queries over ``--stored`` events in one log (appended directly) and the same number of
    journald entries: level + provider, a time window (``timediff``), message text; the newest
    100 matches each. Cold: a fresh process per query (the time of the query inside it, and
    the whole command); warm: the same query again in this process. Goal: indexed queries
    <= 50 ms.

Usage: python benchmarks/bench_eventlog.py [--events 200000] [--stored 1000000] [--repeat 3] [--parts ab]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_note, private_service, process_cpu_seconds, table

MANIFEST = """<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
 <instrumentation><events>
  <provider name="Bench-EventLog" guid="{4e0f7a1c-2b3d-4c5e-8f90-a1b2c3d4e5f6}" symbol="BENCH_EVENTLOG" resourceFileName="b" messageFileName="b">
   <channels><channel chid="OPS" name="Bench-EventLog/Operational" type="Operational" enabled="true"/></channels>
   <templates><template tid="T"><data name="Count" inType="win:UInt32"/><data name="Name" inType="win:UnicodeString"/></template></templates>
   <events><event value="1" symbol="Counted" channel="OPS" level="win:Informational" template="T" message="$(string.counted)"/></events>
  </provider>
 </events></instrumentation>
 <localization><resources culture="en-US"><stringTable><string id="counted" value="Counted %1 for %2"/></stringTable></resources></localization>
</instrumentationManifest>"""
LOG = "Bench-EventLog/Operational"
PRODUCER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import bench_eventlog as events
count = int(sys.argv[2])
provider = events.provider
provider.register()
deadline = time.monotonic() + 10
while not provider.counted_enabled and time.monotonic() < deadline:
    time.sleep(0.01)
write = provider.write_counted
start = time.time()
written = sum(write(i, "twenty characters..!") for i in range(count))
provider.unregister()
print(json.dumps({"written": written, "start": start}))
"""
TAG = "openetw-bench"


def openetw(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "openetw", *args], check=True, capture_output=True, text=True).stdout


# -- (a) ingest --------------------------------------------------------------------------------------
def ingest(count: int, work: Path, journald_pid: int | None) -> tuple[list[list[object]], list[str]]:
    """Two bursts into one log: cold (a fresh service, a new log) and warm (the same service, the
    log holding the first burst); then journald fed the same lines. Every process's CPU counted."""
    from openetw.eventlog import LogStore

    (work / "bench.man").write_text(MANIFEST)
    os.environ["OPENETW_DATA_DIR"] = str(work / "data")
    os.environ["OPENETW_LOGS_DIR"] = str(work / "data" / "logs")  # the store read below, whatever the caller set
    openetw("manifest", "install", str(work / "bench.man"))
    openetw("mc", str(work / "bench.man"), "-o", str(work / "gen"))
    rows: list[list[object]] = []
    totals: dict[str, float] = {}
    with private_service() as (service, _):
        openetw("log", "set", LOG, "--max-size", str(4 << 30))
        store = LogStore(work / "data" / "logs")
        for burst, label in enumerate(("cold", "warm")):
            service_cpu = process_cpu_seconds(service.pid)
            before = os.times()
            producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(work / "gen"), str(count)], stdout=subprocess.PIPE, text=True)
            out, _ = producer.communicate(timeout=600)
            after = os.times()
            producer_cpu = after.children_user + after.children_system - before.children_user - before.children_system
            report = json.loads(out)
            while (info := store.info(LOG)).written < count * (burst + 1):
                time.sleep(0.02)
            stored_at = time.time()
            stored_cpu = process_cpu_seconds(service.pid) - service_cpu
            while store.pending(LOG):
                time.sleep(0.05)
            rendered_at = time.time()
            render_cpu = process_cpu_seconds(service.pid) - service_cpu - stored_cpu
            seconds = stored_at - report["start"]
            stored = info.stored - count * burst
            per_event = (producer_cpu + stored_cpu) / count * 1e6
            rows.append([f"openetw {label}: producer -> channel session -> log", count, stored, info.lost, f"{seconds:.2f}",
                         f"{stored / seconds:,.0f}", f"{producer_cpu:.2f}", f"{stored_cpu:.2f}", f"{per_event:.1f}"])  # fmt: skip
            rows.append([f"openetw {label}: the service renders what it stored", count, stored, "-", f"{rendered_at - stored_at:.2f}",
                         f"{stored / max(rendered_at - stored_at, 1e-3):,.0f}", "-", f"{render_cpu:.2f}", f"{render_cpu / count * 1e6:.1f}"])  # fmt: skip
            totals[label] = producer_cpu + stored_cpu + render_cpu
            totals[label + " rate"] = stored / seconds
    journal_row, journal_cpu, journal_rate = journald_ingest(count, journald_pid)
    rows.append(journal_row)
    notes = [
        f"{label}: stored {totals[label + ' rate'] / journal_rate:.1f}x journald's rate; CPU of every process (producer, service"
        f" storing and rendering) {totals[label]:.2f} s = {totals[label] / max(journal_cpu, 1e-3):.1f}x journald's"
        f" (systemd-cat, journald, journalctl: {journal_cpu:.2f} s)"
        for label in ("cold", "warm")
    ]  # fmt: skip
    return rows, notes


def journald_ingest(count: int, journald_pid: int | None, tag: str = TAG + "-ingest") -> tuple[list[object], float, float]:
    """``systemd-cat`` fed ``count`` lines until ``journalctl`` sees the last: the row, the CPU of
    every process (systemd-cat and journalctl as children, systemd-journald by its /proc), the rate."""
    journald_before = process_cpu_seconds(journald_pid) if journald_pid is not None else 0.0
    start = time.time()
    before = os.times()
    cat = subprocess.Popen(["systemd-cat", "-t", tag, "-p", "info"], stdin=subprocess.PIPE, text=True)
    assert cat.stdin is not None
    for i in range(count):
        cat.stdin.write(f"Counted {i} for twenty characters..!\n")
    cat.stdin.close()
    cat.wait()
    while True:
        last = subprocess.run(["journalctl", "-q", "-t", tag, "-n", "1", "-o", "cat", "--no-pager"], capture_output=True, text=True).stdout
        if last.startswith(f"Counted {count - 1} "):
            break
        time.sleep(0.05)
    seconds = time.time() - start
    after = os.times()
    children = after.children_user + after.children_system - before.children_user - before.children_system
    journald_cpu = process_cpu_seconds(journald_pid) - journald_before if journald_pid is not None else 0.0
    cpu = children + journald_cpu
    row: list[object] = ["journald: systemd-cat -> journal", count, count, "-", f"{seconds:.2f}", f"{count / seconds:,.0f}",
                         f"{children:.2f} (cat + journalctl)", f"{journald_cpu:.2f} (journald)", f"{cpu / count * 1e6:.1f}"]  # fmt: skip
    return row, cpu, count / seconds


def journald_pid_of(started: subprocess.Popen[bytes] | None) -> int | None:
    """The running systemd-journald's pid (read from /proc), for its CPU time."""
    if started is not None:
        return started.pid
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="ascii", errors="replace") as comm:
                    if comm.read().strip() == "systemd-journal":
                        return int(entry)
            except OSError:
                continue
    return None


# -- (b) queries -------------------------------------------------------------------------------------
QUERIES = [
    ("level + provider", {"xpath": "*[System[Provider[@Name='Beta'] and Level=2]]"}, ["-p", "err", "-t", TAG + "-Beta"]),
    ("time window (timediff 1 h)", {"xpath": "*[System[TimeCreated[timediff(@SystemTime) <= 3600000]]]"}, ["-t", TAG + "-Beta", "--since", "-1h"]),
    ("message text", {"text": "printers"}, ["-t", TAG + "-Beta", "-g", "printers"]),
]
QUERY_PROGRAM = """
import json, sys, time
from openetw.eventlog import LogStore
options = json.loads(sys.argv[2])
start = time.perf_counter()
found = list(LogStore(sys.argv[1]).query("Bench", count=100, reverse=True, **options))
print(json.dumps({"seconds": time.perf_counter() - start, "found": len(found)}))
"""


def fill(store: Any, total: int) -> float:
    sys.path.insert(0, str(REPO))
    from openetw.eventlog import LogConfig
    from openetw.eventlog.store import now_filetime
    from tests.eventlog.events import made_events

    store.create("Bench", LogConfig(max_size=16 << 30))
    batch = 10_000
    start_time = now_filetime() - total * 10_000_000 // 100  # 100 events a second, the newest now
    started = time.perf_counter()
    for first in range(0, total, batch):
        events = made_events(batch, seed=first)
        for index, event in enumerate(events):
            event.time_created = start_time + (first + index) * 100_000
        store.append("Bench", events)
    return time.perf_counter() - started


def journald_fill(total: int) -> float:
    """The same level / provider / message mix as ``made_events``, one identifier per provider."""
    sys.path.insert(0, str(REPO))
    from tests.eventlog.events import made_events

    started = time.perf_counter()
    cats = {}
    for provider in ("Alpha", "Beta", "Microsoft-Windows-Gamma"):
        cats[provider] = subprocess.Popen(["systemd-cat", "-t", f"{TAG}-{provider}", "--level-prefix=true"], stdin=subprocess.PIPE, text=True)
    for first in range(0, total, 10_000):
        for event in made_events(10_000, seed=first):
            stdin = cats[event.provider].stdin
            assert stdin is not None
            stdin.write(f"<{min(event.level + 1, 7)}>{event.message}\n")
    for cat in cats.values():
        assert cat.stdin is not None
        cat.stdin.close()
        cat.wait()
    while int(subprocess.run(["journalctl", "-q", "-t", f"{TAG}-Beta", "-t", f"{TAG}-Alpha", "-t", f"{TAG}-Microsoft-Windows-Gamma",
                              "-o", "cat", "--no-pager"], capture_output=True, text=True).stdout.count("\n")) < total * 0.99:  # fmt: skip
        time.sleep(0.5)
    return time.perf_counter() - started


def queries(total: int, repeat: int, work: Path) -> list[list[object]]:
    from openetw.eventlog import LogStore

    store = LogStore(work / "logs")
    fill_seconds = fill(store, total)
    journal_seconds = journald_fill(total)
    rows: list[list[object]] = [
        [f"fill: {total:,} events appended directly (LogStore.append)", f"{fill_seconds:.1f} s", f"{total / fill_seconds:,.0f}/s", "", ""],
        [f"fill: {total:,} lines through systemd-cat", f"{journal_seconds:.1f} s", f"{total / journal_seconds:,.0f}/s", "", ""],
    ]
    for name, options, journal_args in QUERIES:
        cold_inner, cold_wall, found = [], [], 0
        for _ in range(repeat):
            started = time.perf_counter()
            command = [sys.executable, "-c", QUERY_PROGRAM, str(work / "logs"), json.dumps(options)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            cold_wall.append(time.perf_counter() - started)
            answer = json.loads(out)
            cold_inner.append(answer["seconds"])
            found = answer["found"]
        warm = []
        for _ in range(repeat):
            started = time.perf_counter()
            list(store.query("Bench", count=100, reverse=True, **options))  # type: ignore[arg-type]
            warm.append(time.perf_counter() - started)
        journal = []
        for _ in range(repeat):
            started = time.perf_counter()
            lines = subprocess.run(["journalctl", "-q", "-r", "-n", "100", "-o", "cat", "--no-pager", *journal_args], capture_output=True, text=True).stdout
            journal.append(time.perf_counter() - started)
        rows.append([f"openetw {name} ({found} found)", f"{min(cold_inner) * 1000:.1f} ms", f"{min(cold_wall) * 1000:.0f} ms",
                     f"{min(warm) * 1000:.1f} ms", ""])  # fmt: skip
        rows.append([f"journalctl {' '.join(journal_args)} ({lines.count(chr(10))} found)", "-", f"{min(journal) * 1000:.0f} ms", "-",
                     f"{min(journal) / min(cold_wall):.2f}x openetw's command"])  # fmt: skip
    return rows


# -- journald ----------------------------------------------------------------------------------------
def journald() -> subprocess.Popen[bytes] | None:
    """``systemd-journald`` started by hand (root) when none runs; ``None`` when one runs."""
    if shutil.which("systemd-cat") is None or shutil.which("journalctl") is None:
        raise SystemExit("journald's tools (systemd-cat, journalctl) are not installed")
    if os.path.exists("/run/systemd/journal/stdout"):
        probe = subprocess.run(["systemd-cat", "-t", TAG + "-probe", "true"], capture_output=True)
        if probe.returncode == 0:
            return None
    binary = next((p for p in ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald") if os.path.exists(p)), None)
    if binary is None or os.geteuid() != 0:
        raise SystemExit("no systemd-journald runs, and it can be started by hand only as root")
    process = subprocess.Popen([binary], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists("/run/systemd/journal/stdout"):
        if time.monotonic() > deadline:
            raise SystemExit("systemd-journald did not start")
        time.sleep(0.05)
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", default="ab")
    args = parser.parse_args()
    started = journald()
    work = Path(tempfile.mkdtemp(prefix="openetw-bench-eventlog-"))
    # the service, the CLI and this process use private logs and stores, never the caller's
    os.environ["OPENETW_DATA_DIR"] = str(work / "data")
    os.environ["OPENETW_LOGS_DIR"] = str(work / "data" / "logs")
    try:
        print(f"The Event Log against journald ({machine_note()}; load average {os.getloadavg()[0]:.1f})")
        if "a" in args.parts:
            print(f"\n(a) ingest: {args.events:,} events from another process (goals: >= 200k/s stored, none lost, >= journald)")
            ingest_rows, notes = ingest(args.events, work, journald_pid_of(started))
            print(table(["pipeline", "written", "stored", "lost", "seconds", "events/s", "producer CPU s", "service CPU s", "CPU us/event"], ingest_rows))
            print("\n".join(notes))
        if "b" in args.parts:
            print(f"\n(b) queries over {args.stored:,} stored events, newest 100 matches (goal: indexed <= 50 ms)")
            print(table(["query", "cold: in a fresh process", "cold: whole command", "warm", "vs"], queries(args.stored, args.repeat, work)))
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started is not None:
            started.terminate()
            started.wait(timeout=10)


if __name__ == "__main__":
    main()
