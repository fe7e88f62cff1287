"""The store thread (``eventlog.writer``): batches that wait for it are stored together, one
transaction per log, with what each would have stored alone (rows in order, refused counts, every
pool's mark), and every batch's buffers given back."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from openetw.eventlog import LogConfig
from openetw.eventlog.records import Route
from openetw.eventlog.rows import ColumnRows
from openetw.eventlog.store import LogStore
from openetw.eventlog.writer import StoreBatch, StoreWriter

ROUTE = Route("L", "P", "{6c1f0d2e-5b7a-4e43-9d1c-2f8e4a7b9c00}", None, None, True)
OTHER = Route("L", "Q", "{6c1f0d2e-5b7a-4e43-9d1c-2f8e4a7b9c01}", None, None, True)


def rows(first: int, count: int, *, activity: bool = False) -> ColumnRows:
    """``count`` rows of ``store.VARYING_COLUMNS``; ``activity``: every other one has an id."""
    ids = range(first, first + count)
    return ColumnRows([
        [133_000_000_000_000_000 + n for n in ids], [n % 7 for n in ids], [0] * count, [4] * count, [0] * count, [0] * count,
        [-(1 << 63)] * count, [100] * count, [200] * count,
        [f"00000000-0000-0000-0000-{n:012x}" if activity and n % 2 else None for n in ids], [bytearray(n.to_bytes(4, "little")) for n in ids],
    ])  # fmt: skip


def stored(store: LogStore) -> list[Any]:
    db = sqlite3.connect(store.path("L"))
    try:
        return db.execute("SELECT record_id, provider, event_id, activity_id, record, uid FROM events ORDER BY record_id").fetchall()
    finally:
        db.close()


def test_waiting_batches_are_stored_together_as_each_alone(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs", keep_open=True)
    store.create("L", LogConfig(max_size=64 << 20))
    commits: list[int] = []
    inside, hold = threading.Event(), threading.Event()

    def on_stored() -> None:  # the first batch's: holds the thread until the others wait
        commits.append(len(stored(store)))
        inside.set()
        assert hold.wait(10)

    writer = StoreWriter(store, on_stored=on_stored)
    released: list[int] = []

    def release(n: int) -> Any:
        return lambda: released.append(n)

    batches = [
        StoreBatch(rows={"L": [(ROUTE, rows(0, 300))]}, computer="h", uid=0, mark=("pool-a", 3), release=release(0)),
        StoreBatch(rows={"L": [(ROUTE, rows(300, 300, activity=True)), (OTHER, rows(600, 5))]}, computer="h", uid=0,
                   refused={"L": 2}, mark=("pool-a", 5), release=release(1)),
        StoreBatch(rows={"L": [(OTHER, rows(605, 10))]}, computer="h", uid=0, mark=("pool-b", 9), release=release(2)),
        StoreBatch(rows={"L": [(ROUTE, rows(615, 600))]}, computer="h", uid=0, refused={"L": 1}, mark=("pool-a", 4), release=release(3)),
    ]  # fmt: skip
    writer.submit(batches[0])
    assert inside.wait(10)
    for batch in batches[1:]:  # they wait while the thread is held
        writer.submit(batch)
    hold.set()
    writer.wait()

    assert released == [0, 1, 2, 3]
    assert commits == [300, 1215]  # the three that waited: one transaction
    alone = LogStore(tmp_path / "alone")
    alone.create("L", LogConfig(max_size=64 << 20))
    one = StoreWriter(alone)
    for batch in batches:
        batch.release = None
        one.submit(batch, wait=True)
    assert stored(store) == stored(alone)
    assert [row[0] for row in stored(store)] == list(range(1, 1216))
    assert sum(row[3] is not None for row in stored(store)) == 150
    assert store.marks("L") == alone.marks("L") == {"pool-a": 5, "pool-b": 9}
    info = store.info("L")
    assert (info.written, info.stored, info.refused, info.lost) == (1218, 1215, 3, 0)
    store.close()
