"""The consumer: events per second through one ``UserTrace`` over uncompressed corpus files.

Rows, per file, all measured in the same run (best of N, indexes already built unless said):
the raw header walk (``EtlReader`` iteration, file order) as the baseline; the index pass
(``EtlIndex.build``: find every record and gather its header columns) and loading a built index;
callbacks behind a provider filter that parse one property, for a selective provider (few of the
file's events) and for the file's busiest provider (most of them); plain iteration
(``for event in trace.events()``, every event); the batch API over the index: opening a trace
and taking every row, the rows of an open trace, and behind a selective provider. Events/s counts
every record of the file (batches: the rows they hold), so a selective filter shows what
skipping records on the index buys.

Goals: callbacks with a provider filter >= 1M events/s, index pass >= 2M records/s, batches
>= 17.4M events/s.
Usage: python benchmarks/bench_consumer.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, best_of, machine_note, table  # noqa: E402

from openetw.consumer import EtlIndex, EventFilter, Provider, UserTrace  # noqa: E402
from openetw.consumer import predicates as P  # noqa: E402
from openetw.etl import EtlReader  # noqa: E402
from openetw.manifest import load_manifest  # noqa: E402

KERNEL_PROCESS_MANIFEST = CORPUS / "manifests" / "Win10-17134" / "Microsoft-Windows-Kernel-Process.xml"
GOALS = {"index pass": 2e6, "callbacks, selective provider": 1e6, "callbacks, busiest provider": 1e6, "batches": 17.4e6}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args, _ = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="openetw-bench-index-") as scratch:
        os.environ.setdefault("OPENETW_INDEX_DIR", scratch)  # corpus folders are read-only: indexes go here
        run_all(args.repeat)


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
        rows: list[list[object]] = []
        baseline = None
        for name, run in runs:
            seconds, count = best_of(run, repeat)
            rate = count / seconds
            baseline = baseline or rate
            goal = GOALS.get(name)
            verdict = "" if goal is None else ("meets goal" if rate >= goal else f"below goal {goal / 1e6:g}M")
            rows.append([name, f"{count}", f"{seconds * 1000:.1f} ms", f"{rate / 1e6:.2f} M/s", f"{rate / baseline:.1f}x", verdict])
        print(f"\n{case.path}")
        print(table(["case", "events", "time", "events/s", "vs raw walk", "goal"], rows))


if __name__ == "__main__":
    main()
