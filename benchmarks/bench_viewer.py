"""The viewer at 1,000,000 events: server time per interaction next to DuckDB over the Parquet
export, write-to-screen latency of a live session, and the page's JS heap.

* A trace of over 1M events: diaghub.etl's buffers repeated (``openetw.testing.large``). Its
  index is built once when the viewer opens it (reported, not counted as an interaction).
* Server time (measured at the client, over HTTP, best of ``--repeat``) for the first page, the
  facet counts and a filtered page in the middle of the set; DuckDB answers the same questions
  over ``openetw export``'s ``events.parquet`` of the same trace (export time reported once).
* A provider in another process writes 1,000 events/s to a real-time session (4 KB buffers: a
  buffer is handed over when it fills, or at the 1 s flush timer) that the viewer tails in
  Chromium; latency = the frame after the page put the event in its table minus the time the
  provider wrote into the event (same machine clock).
* The page's JS heap (Chrome DevTools Protocol ``Runtime.getHeapUsage``) after scrolling the
  1M-event table.

* A log filled with 1M events (``LogStore.append``, 1 GiB circular): the viewer's server time for
  the same questions, next to the log's own SQLite answering them (``LogStore.query`` with an
  XPath for the pages, ``GROUP BY`` on its connection for the counts).

Usage: python benchmarks/bench_viewer.py [--events 1000000] [--repeat 5] [--rate 1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, REPO, StdioChild, machine_note, private_service, table

sys.path.insert(0, str(REPO / "src"))

DIAGHUB = CORPUS / "etl" / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
GOAL_MS, LATENCY_GOAL_MS, HEAP_GOAL_MB = 200, 250, 300

_PRODUCER = """
import json, sys, time
from openetw import TraceLoggingProvider
provider = TraceLoggingProvider("Bench.ViewerLatency")
provider.register()
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    word = line.strip()
    if word == "exit":
        break
    rate, seconds = (float(x) for x in word.split())
    deadline = time.monotonic() + 10
    while not provider.enabled and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    count = int(rate * seconds)
    for n in range(count):
        due = start + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        provider.write("Tick", level=4, n=n, sent_us=int(time.time() * 1e6))
    print(json.dumps({"written": count}), flush=True)
"""

# Installed before the page's script: times each tail message at the frame after the page's own handler ran.
_WATCH = """
window.__latency = [];
const add = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, listener, options) {
  const wrapped = function (message) {
    listener.call(this, message);
    const rows = JSON.parse(message.data).rows;
    requestAnimationFrame(() => {  // the frame that shows them
      const now = Date.now();
      for (const row of rows) {
        const sent = Number(row.fields.sent_us);
        if (sent) window.__latency.push(now - sent / 1000);
      }
    });
  };
  return add.call(this, type, wrapped, options);
};
"""


class Client:
    def __init__(self, server: Any) -> None:
        self.port = server.port
        self.headers = server.client_headers()

    def get(self, path: str) -> tuple[float, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        started = time.perf_counter()
        connection.request("GET", path, headers=self.headers)
        response = connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        connection.close()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {body[:200]!r}")
        return elapsed, json.loads(body)


def best(fn: Any, repeat: int) -> tuple[float, Any]:
    results = [fn() for _ in range(repeat)]
    return min(seconds for seconds, _ in results), results[-1][1]


def make_trace(workdir: Path, events: int) -> tuple[Path, int, float]:
    from openetw.testing.large import repeat_buffers

    target = workdir / "million.etl"
    started = time.perf_counter()
    per_copy = repeat_buffers(DIAGHUB, target, 0)
    copies = max(1, -(-events // per_copy))
    count = repeat_buffers(DIAGHUB, target, copies * target.stat().st_size)
    return target, count, time.perf_counter() - started


def viewer_questions(path: Path, repeat: int) -> tuple[dict[str, float], dict[str, Any], Any]:
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    viewer = Viewer()
    started = time.perf_counter()
    source = viewer.open(str(path))
    server = ViewerServer(viewer).start()
    client = Client(server)
    _, info = client.get(f"/api/s/{source.id}/rows?limit=1")
    index_seconds = time.perf_counter() - started
    times: dict[str, float] = {"index build + columns (once)": index_seconds}
    times["first page (100 rows)"], first = best(lambda: client.get(f"/api/s/{source.id}/rows?offset=0&limit=100"), repeat)
    times["facet counts (9 facets)"], facets = best(lambda: client.get(f"/api/s/{source.id}/facets"), repeat)
    event = facets["facets"]["event"][1]
    process = facets["facets"]["process"][0]
    filtered = f"event={event['value']}&process={process['value']}"
    _, head = client.get(f"/api/s/{source.id}/rows?{filtered}&limit=1")
    middle = head["total"] // 2
    times["filtered page (middle, 100 rows)"], page = best(lambda: client.get(f"/api/s/{source.id}/rows?{filtered}&offset={middle}&limit=100"), repeat)
    times["timeline (300 bins)"], _ = best(lambda: client.get(f"/api/s/{source.id}/timeline?bins=300"), repeat)
    last = max(0, info["total"] - 100)
    times["jump to row 999,999"], _ = best(lambda: client.get(f"/api/s/{source.id}/rows?offset={last}&limit=100"), repeat)
    answers = {"events": info["total"], "last": last, "filtered": head["total"], "event": event["label"], "pid": process["value"], "middle": middle,
               "first_rows": [row["time"] for row in first["rows"][:3]], "page_rows": [row["time"] for row in page["rows"][:3]]}  # fmt: skip
    return times, answers, server


_PROVIDERS = ("Service Control Manager", "Microsoft-Windows-Kernel-General", "Sample Driver", "EventLog", "Microsoft-Windows-DNS-Client")


def fill_log(workdir: Path, events: int) -> tuple[Path, float]:
    from openetw.eventlog import LogConfig, LogStore, NewEvent

    directory = workdir / "logs"
    store = LogStore(directory)
    store.create("System", LogConfig(max_size=1 << 30))
    started = time.perf_counter()
    base = 133_000_000_000_000_000
    batch = 50_000
    for first in range(0, events, batch):
        store.append("System", [
            NewEvent(time_created=base + n * 10_000, provider=_PROVIDERS[n % 5], event_id=7000 + n % 40, record=b"\0" * 32,
                     level=1 + n % 5, task=n % 3, opcode=n % 2, keywords=0x8000000000000000 | (1 << (n % 8)), channel="System",
                     pid=4 + n % 97, tid=8 + n % 13, fields={"param1": f"service {n % 300}", "param2": "running"},
                     message=f"The service {n % 300} entered the running state.")
            for n in range(first, min(events, first + batch))
        ])  # fmt: skip
    return directory, time.perf_counter() - started


def log_questions(directory: Path, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    from openetw.eventlog import LogStore
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    os.environ["OPENETW_LOGS_DIR"] = str(directory)
    viewer = Viewer()
    started = time.perf_counter()
    source = viewer.open_log("System")
    opened = time.perf_counter() - started
    times: dict[str, float] = {"open (columns read once)": opened}
    with ViewerServer(viewer) as server:
        client = Client(server)
        total = len(source.columns())
        times["first page (100 rows)"], _ = best(lambda: client.get(f"/api/s/{source.id}/rows?offset=0&limit=100"), repeat)
        times["facet counts (9 facets)"], facets = best(lambda: client.get(f"/api/s/{source.id}/facets"), repeat)
        provider = facets["facets"]["provider"][0]
        level = facets["facets"]["level"][0]
        filtered = f"provider={provider['value']}&level={level['value']}"
        _, head = client.get(f"/api/s/{source.id}/rows?{filtered}&limit=1")
        middle = head["total"] // 2
        times["filtered page (middle, 100 rows)"], _ = best(lambda: client.get(f"/api/s/{source.id}/rows?{filtered}&offset={middle}&limit=100"), repeat)
        times["jump to row 999,999"], _ = best(lambda: client.get(f"/api/s/{source.id}/rows?offset={max(0, total - 100)}&limit=100"), repeat)
    store = LogStore(directory)

    def timed(work: Any) -> tuple[float, Any]:
        started = time.perf_counter()
        result = work()
        return time.perf_counter() - started, result

    sqlite: dict[str, float] = {}
    sqlite["first page (100 rows)"], _ = best(lambda: timed(lambda: list(store.query("System", count=100))), repeat)

    def counts() -> Any:
        db = store.open("System")
        try:
            return [db.execute(f"SELECT {c}, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 200").fetchall()
                    for c in ("level", "provider", "event_id", "task", "opcode", "keywords", "pid", "channel", "user_sid")]  # fmt: skip
        finally:
            db.close()

    sqlite["facet counts (9 facets)"], _ = best(lambda: timed(counts), repeat)
    xpath = f"*[System[Provider[@Name='{provider['label']}'] and Level={level['value']}]]"

    def filtered_page() -> Any:
        events = store.query("System", xpath=xpath)
        for _ in range(middle):  # the log's query has no offset: step over the rows before
            next(events)
        return [next(events) for _ in range(100)]

    sqlite["filtered page (middle, 100 rows)"], _ = best(lambda: timed(filtered_page), repeat)
    last_id = store.info("System").next_record_id - 1
    sqlite["jump to row 999,999"], _ = best(lambda: timed(lambda: list(store.query("System", after_record_id=last_id - 100, count=100))), repeat)
    return times, sqlite


def duckdb_questions(path: Path, workdir: Path, answers: dict[str, Any], repeat: int) -> dict[str, float]:
    import duckdb

    from openetw.export import export_files

    out = workdir / "parquet"
    started = time.perf_counter()
    export_files([str(path)], str(out))
    times = {"export to Parquet (once)": time.perf_counter() - started}
    events = str(out / "events.parquet")
    db = duckdb.connect()
    db.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{events}')")

    def timed(sql: str, *params: Any) -> tuple[float, Any]:
        started = time.perf_counter()
        rows = db.execute(sql, list(params)).fetchall()
        return time.perf_counter() - started, rows

    times["first page (100 rows)"], _ = best(lambda: timed("SELECT * FROM events ORDER BY record LIMIT 100"), repeat)
    facets = ["level", "provider_name", "event_name", "task", "opcode", "pid", "channel", "keyword", "process_name"]

    def facet_counts() -> tuple[float, Any]:
        total, last = 0.0, None
        for column in facets:
            seconds, last = timed(f"SELECT {column}, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 200")
            total += seconds
        return total, last

    times["facet counts (9 facets)"], _ = best(facet_counts, repeat)
    provider, _, name = answers["event"].partition("/")
    sql = ("SELECT * FROM events WHERE provider_name = ? AND coalesce(event_name, '') = ? AND pid = ? ORDER BY record "
           "LIMIT 100 OFFSET ?")  # fmt: skip
    times["filtered page (middle, 100 rows)"], rows = best(lambda: timed(sql, provider, name, answers["pid"], answers["middle"]), repeat)
    # the row's number is its record (every record of the trace is a row): DuckDB's idiomatic seek
    times["jump to row 999,999"], _ = best(lambda: timed("SELECT * FROM events WHERE record >= ? ORDER BY record LIMIT 100", answers["last"]), repeat)
    times["(filtered rows found)"] = float(len(rows))
    return times


def browser_numbers(server: Any, events: int, rate: float, seconds: float) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    from openetw.controller import Session
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    out: dict[str, float] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # Playwright's waiting predicates are strings the page's Content-Security-Policy refuses
        context = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
        page = context.new_page()
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']", timeout=600_000)
        for row in (events // 4, events // 2, events - 1, 0):
            page.fill("#goto", str(row))
            page.press("#goto", "Enter")
            page.wait_for_selector(f"#rows .row[data-index='{row}']", timeout=60_000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("HeapProfiler.collectGarbage")
        heap = cdp.send("Runtime.getHeapUsage")
        out["JS heap used at 1M events (MB)"] = heap["usedSize"] / 2**20
        out["rows in the page's DOM"] = float(page.evaluate("window.__viewer.renderedRows()"))
        page.close()

        with private_service("openetw-bench-viewer-"):
            producer = StdioChild([sys.executable, "-c", _PRODUCER])
            try:
                producer.read()
                with Session.start("BenchViewerTail", mode="realtime", flush_timer=1, buffer_size=4, providers=["Bench.ViewerLatency"]), \
                        ViewerServer(Viewer()) as live:  # fmt: skip
                    page = context.new_page()
                    page.add_init_script(_WATCH)
                    page.goto(live.url)
                    page.wait_for_selector("#tree li[data-session='BenchViewerTail']", timeout=30_000)
                    page.click("#tree li[data-session='BenchViewerTail']")
                    page.wait_for_function("window.__viewer.state.tail !== null", timeout=30_000)
                    producer.tell(f"{rate} {seconds}")
                    written = producer.read(timeout=seconds * 10 + 60)["written"]
                    page.wait_for_function(f"window.__latency.length >= {written}", timeout=60_000)
                    latencies = sorted(page.evaluate("window.__latency"))
                    out["events tailed"] = float(len(latencies))
                    out["write-to-screen median (ms)"] = statistics.median(latencies)
                    out["write-to-screen p95 (ms)"] = latencies[int(len(latencies) * 0.95) - 1]
                    out["write-to-screen max (ms)"] = latencies[-1]
                    page.goto("about:blank")
            finally:
                producer.close()
        browser.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s the live provider writes")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long it writes")
    parser.add_argument("--no-browser", action="store_true", help="skip the latency and heap measurements")
    parser.add_argument("--no-duckdb", action="store_true", help="skip the Parquet export and DuckDB's answers")
    parser.add_argument("--no-log", action="store_true", help="skip the log of 1M events")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="openetw-bench-viewer-") as temp:
        workdir = Path(temp)
        os.environ["OPENETW_INDEX_DIR"] = str(workdir / "index")
        path, count, make_seconds = make_trace(workdir, args.events)
        print(f"trace: {count} events, {path.stat().st_size >> 20} MB, made in {make_seconds:.1f} s ({machine_note()})")
        viewer_times, answers, server = viewer_questions(path, args.repeat)
        try:
            duck_times = {"export to Parquet (once)": 0.0, "(filtered rows found)": 0.0} if args.no_duckdb else \
                duckdb_questions(path, workdir, answers, args.repeat)  # fmt: skip
            rows = []
            for name, seconds in viewer_times.items():
                duck = duck_times.get(name)
                once = "(once)" in name
                goal = "" if once else ("ok" if seconds * 1000 <= GOAL_MS else f"over {GOAL_MS} ms")
                ratio = f"{duck / seconds:.2f}x" if duck and seconds and not once else ""
                rows.append([name, f"{seconds * 1000:.1f} ms", "" if duck is None else f"{duck * 1000:.1f} ms", ratio, goal])
            rows.append(["export to Parquet (once)", "", f"{duck_times['export to Parquet (once)']:.1f} s", "", ""])
            print(table(["question (1M events)", "viewer server", "DuckDB/Parquet", "DuckDB time / viewer time", f"goal ≤ {GOAL_MS} ms"], rows))
            print(f"filtered set: {answers['event']} in pid {answers['pid']}: {answers['filtered']} events "
                  f"(DuckDB page found {int(duck_times['(filtered rows found)'])} rows)")  # fmt: skip
            if not args.no_log:
                directory, fill_seconds = fill_log(workdir, args.events)
                log_times, sqlite_times = log_questions(directory, args.repeat)
                rows = [["fill (LogStore.append, once)", "", f"{fill_seconds:.1f} s", ""]]
                for name, seconds in log_times.items():
                    once = "(" in name and "once" in name
                    goal = "" if once else ("ok" if seconds * 1000 <= GOAL_MS else f"over {GOAL_MS} ms")
                    theirs = sqlite_times.get(name)
                    rows.append([name, f"{seconds * 1000:.1f} ms", "" if theirs is None else f"{theirs * 1000:.1f} ms", goal])
                print(table([f"question (log of {args.events} events)", "viewer server", "the log's SQLite", f"goal ≤ {GOAL_MS} ms"], rows))
            if not args.no_browser and os.path.exists(CHROMIUM):
                numbers = browser_numbers(server, count, args.rate, args.seconds)
                rows = []
                for name, value in numbers.items():
                    goal = ""
                    if name.startswith("write-to-screen") and "max" not in name:
                        goal = "ok" if value <= LATENCY_GOAL_MS else f"over {LATENCY_GOAL_MS} ms"
                    if name.startswith("JS heap"):
                        goal = "ok" if value < HEAP_GOAL_MB else f"over {HEAP_GOAL_MB} MB"
                    rows.append([name, f"{value:.1f}", goal])
                print(table(["page", "value", "goal"], rows))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
