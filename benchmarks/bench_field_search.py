"""The Event Log's full-text index over field values, at ``--stored`` events (1M by default).

(a) search: a selective field value (about 1% of events), a common one (a third), each through
    the index (``fieldtext.matching``) and through the viewer's whole search over a log
    (``LogSource.search``: messages and fields, then the rows mask), beside the full scan the
    index avoids (``fields LIKE``). Best of ``--repeat``, warm.
(b) migration: a log written before the index existed (its index dropped) opened by a writer:
    the time to make and fill it.
(c) cost: ``--cost`` events stored unrendered then rendered into a full circular log, with and
    without the index's write steps, in CPU seconds of this process.

Usage: python benchmarks/bench_field_search.py [--stored 1000000] [--cost 60000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, best_of, machine_note, table

sys.path.insert(0, str(REPO / "src"))

from openetw.eventlog import LogConfig, LogStore, NewEvent, fieldtext

BASE_TIME = 134_000_000_000_000_000
NAMES = ("apple", "pear", "plum")
_FIELDS = {"name": "apple pear", "index": 5, "path": "C:\\Windows\\System32\\drivers\\x.sys", "status": "0x0", "flag": True}


def made(count: int, start: int, seed: int) -> list[NewEvent]:
    rng = random.Random(seed)
    return [NewEvent(time_created=BASE_TIME + (start + n) * 10_000, provider="Bench", event_id=rng.randrange(1, 12), record=rng.randbytes(40),
                     level=rng.choice((2, 3, 4)), channel="Bench", computer="host", pid=rng.randrange(100, 110),
                     fields={"index": start + n, "name": rng.choice(NAMES), "code": f"E{(start + n) % 100:02d}x"},
                     message=f"Event number {start + n} about disks") for n in range(count)]  # fmt: skip


def measure(store: LogStore, source: Any, word: str, repeat: int) -> list[object]:
    """[found, index ms, viewer search ms, found by a scan, scan ms] for one word."""
    db = store.open("Bench")
    try:
        indexed, found = best_of(lambda: len(fieldtext.matching(db, f'"{word}"*')), repeat)
        scanned, scan_found = best_of(lambda: int(db.execute("SELECT count(*) FROM events WHERE fields LIKE ?", (f"%{word}%",)).fetchone()[0]), repeat)
    finally:
        db.close()
    viewer, _ = best_of(lambda: int(source.search(word).sum()), repeat)
    return [found, f"{indexed * 1000:.1f}", f"{viewer * 1000:.1f}", scan_found, f"{scanned * 1000:.1f}"]


def search_part(directory: Path, stored: int, repeat: int) -> tuple[list[list[object]], float]:
    from openetw.events.registry import LazyManifestRegistry
    from openetw.viewer.logs import LogSource

    store = LogStore(directory)
    store.create("Bench", LogConfig(max_size=8 << 30))
    for start in range(0, stored, 20_000):
        store.append("Bench", made(min(20_000, stored - start), start, start))
    source = LogSource("l1", directory, "Bench", LazyManifestRegistry([]))
    rows: list[list[object]] = []
    try:
        for label, word in (("selective (E07x, ~1%)", "E07x"), ("common (pear, ~1/3)", "pear")):
            rows.append([label, *measure(store, source, word, repeat)])
    finally:
        source.close()
    db = store.open("Bench")
    db.execute(f"DROP TABLE {fieldtext.TABLE}")
    db.close()
    began = time.perf_counter()
    store.open("Bench").close()  # a writer's open makes and fills it
    return rows, time.perf_counter() - began


def cost_part(directory: Path, count: int) -> list[list[object]]:
    from openetw.eventlog.store import RECORD_COLUMNS, row_of

    names = ("time_created", "provider", "provider_guid", "event_id", "version", "level", "task", "opcode", "keywords", "channel",
             "computer", "pid", "tid", "user_sid", "uid", "activity_id", "format", "record")  # fmt: skip
    batch = []
    for event in made(1000, 0, 1):
        values = dict(zip(names, row_of(event)[: len(names)], strict=True))
        batch.append(tuple(values[name] for name in RECORD_COLUMNS))
    kept = {name: getattr(fieldtext, name) for name in ("index_ids", "index_rendered", "index_after", "drop_upto")}
    out: list[list[object]] = []
    for label, indexed in (("without the field index", False), ("with the field index", True)):
        for name, function in kept.items():
            setattr(fieldtext, name, function if indexed else (lambda *args: None))
        store = LogStore(directory / label.replace(" ", "-"), keep_open=True)
        store.create("Circular", LogConfig(retention="circular", max_size=4 << 20))
        began = time.process_time()
        overwritten = 0
        for _ in range(count // len(batch)):
            overwritten += store.append_rows("Circular", batch, records=True).overwritten
            store.render_pending("Circular", lambda e: (_FIELDS, "a message of some words"), 2000)
        spent = time.process_time() - began
        store.close()
        out.append([label, count, overwritten, f"{count / spent:,.0f}"])
    for name, function in kept.items():
        setattr(fieldtext, name, function)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--cost", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="openetw-bench-fields-") as folder:
        rows, migration = search_part(Path(folder) / "search", args.stored, args.repeat)
        print(f"## Field search over {args.stored:,} stored events ({machine_note()})\n")
        print(table(["query", "found (index)", "index ms", "viewer search ms", "found (scan)", "full scan ms"], rows))
        print(f"\nMigration: a log of {args.stored:,} events written before the index, opened by a writer: {migration:.1f} s")
        size = sum(path.stat().st_size for path in (Path(folder) / "search").iterdir())
        print(f"Log files: {size / 1e6:.0f} MB\n")
        print("## Storing and rendering into a full circular log (4 MiB)\n")
        print(table(["", "events", "overwritten", "events per CPU-second"], cost_part(Path(folder), args.cost)))


if __name__ == "__main__":
    main()
