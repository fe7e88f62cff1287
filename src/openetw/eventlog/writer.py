"""The Event Log's store thread: the rows of taken buffers stored while the loop walks the next.

The service's loop takes a drain's buffers from a producer's pool, walks them into rows (one
list per log) and hands them here as one ``StoreBatch``; this thread appends each log's rows in
one transaction (with the events refused on their way and the pool's mark, see
``LogStore.append_rows``), and only then gives the buffers back to the pool (``release``): a
service killed before that leaves them TAKEN, for the producer to hand to the next service,
which skips what the log's marks say is stored. At most ``DEPTH`` batches wait: a loop that
walks faster than SQLite stores waits for it, while the producer's pool holds the burst.

SQLite works without the interpreter's lock, so its part of the cost overlaps the walk of the
next batch on another core. When the thread falls behind, the batches waiting for it are stored
together (``_group``): one transaction per log for all of them, consecutive runs of one source
joined into one, each pool's mark kept, the buffers of all given back once it is committed;
fewer commits, each rewriting the pages at the end of the table and its indexes once.

Test hooks: when ``$OPENETW_EVENTLOG_PAUSE_AFTER_COMMIT`` names a file in the service's
environment, the thread creates that file after its first batch of events is committed and then
sleeps instead of giving the buffers back, so that a test can kill the service in that window;
``$OPENETW_EVENTLOG_PAUSE_BEFORE_COMMIT`` likewise, before the first batch is stored at all.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import EventLogError, EventLogWriteError
from openetw.eventlog.records import Run
from openetw.eventlog.rows import ColumnRows
from openetw.eventlog.store import LogStore, RecordSource

__all__ = ["DEPTH", "PAUSE_AFTER_COMMIT_ENV", "PAUSE_BEFORE_COMMIT_ENV", "StoreBatch", "StoreWriter"]

DEPTH = 4  # batches that may wait for the thread
PAUSE_AFTER_COMMIT_ENV = "OPENETW_EVENTLOG_PAUSE_AFTER_COMMIT"
PAUSE_BEFORE_COMMIT_ENV = "OPENETW_EVENTLOG_PAUSE_BEFORE_COMMIT"


@dataclass
class StoreBatch:
    """The rows of some buffers of one producer, by log, and what to do once they are stored."""

    rows: dict[str, list[Run]] = field(default_factory=dict)  # log -> runs of rows (``records.collect_rows``)
    computer: str = ""
    uid: int | None = None  # the writer's
    refused: dict[str, int] = field(default_factory=dict)
    mark: tuple[str, int] | None = None  # (pool identity, SequenceNumber of its last buffer here)
    release: Callable[[], None] | None = None  # gives the buffers back to the pool (on this thread)
    forget: str | None = None  # a pool nobody hands over any more: its marks go
    forget_logs: tuple[str, ...] = ()


class StoreWriter:
    """One thread appending ``StoreBatch``es in order through its own ``LogStore``."""

    def __init__(self, store: LogStore, *, on_stored: Callable[[], None] | None = None, log: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.on_stored = on_stored
        self._log = log or (lambda message: None)
        self._queue: queue.Queue[StoreBatch] = queue.Queue(maxsize=DEPTH)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pause = os.environ.get(PAUSE_AFTER_COMMIT_ENV) or None
        self._pause_before = os.environ.get(PAUSE_BEFORE_COMMIT_ENV) or None
        self._failing: dict[str, int] = {}  # log -> events counted lost since it last stored

    def submit(self, batch: StoreBatch, *, wait: bool = False) -> None:
        """Queue ``batch`` (waiting while ``DEPTH`` batches wait); ``wait``: return once stored."""
        self._start()
        self._queue.put(batch)
        if wait:
            self.wait()

    def wait(self) -> None:
        """Return once every batch submitted so far is stored and its buffers given back."""
        if self._thread is not None:
            self._queue.join()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="openetw-eventlog-store", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batches = self._group()
            try:
                self._store(batches)
            except Exception as exc:  # noqa: BLE001 - the thread goes on; the buffers go back below
                self._log(f"event log: storing: {exc}")
            finally:
                for batch in batches:
                    try:
                        if batch.release is not None:
                            batch.release()
                    except Exception as exc:  # noqa: BLE001 - a pool closed meanwhile: nothing to give back
                        self._log(f"event log: giving buffers back: {exc}")
                    self._queue.task_done()

    def _group(self) -> list[StoreBatch]:
        """The next batch and those waiting behind it, up to ``DEPTH`` (a batch that forgets a
        pool's marks ends the group: they go after its rows are stored, as they went in)."""
        batches = [self._queue.get()]
        while len(batches) < DEPTH and batches[-1].forget is None:
            try:
                batches.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batches

    def _store(self, batches: list[StoreBatch]) -> None:
        store = self.store
        with_rows = any(batch.rows for batch in batches)
        if self._pause_before is not None and with_rows:
            _pause(self._pause_before, 0)
        stored = 0
        for log in sorted(set().union(*(set(batch.rows) | set(batch.refused) for batch in batches))):
            runs, refused, marks = _joined(batches, log)
            if not runs and not refused:
                continue
            try:
                stored += store.append_records(log, runs, refused=refused, marks=marks).stored
            except EventLogWriteError as exc:  # counted lost in the log's books; said once per spell
                if log not in self._failing:
                    self._log(f"event log: {exc} (until it stores again)")
                self._failing[log] = self._failing.get(log, 0) + exc.lost
                continue
            except EventLogError as exc:
                self._log(f"event log: {exc}")
                continue
            lost = self._failing.pop(log, None)
            if lost is not None:
                self._log(f"event log: the log {log!r} stores again; {lost} events were counted lost meanwhile")
        for batch in batches:
            if batch.forget is not None:
                for log in batch.forget_logs:
                    try:
                        store.forget_marks(log, [batch.forget])
                    except EventLogError as exc:
                        self._log(f"event log: {exc}")
        if with_rows and self.on_stored is not None:
            self.on_stored()
        if self._pause is not None and with_rows:
            _pause(self._pause, stored)


def _joined(batches: list[StoreBatch], log: str) -> tuple[list[tuple[RecordSource, Sequence[Any]]], int, list[tuple[str, int]]]:
    """The runs ``batches`` hold for ``log`` in order (consecutive runs of one source, held as
    columns, joined into one: longer multi-row inserts), the events refused on their way, and
    the marks of the batches that have either."""
    runs: list[tuple[RecordSource, Sequence[Any]]] = []
    made: set[int] = set()  # places in ``runs`` of runs joined here (new columns, no batch's own)
    refused = 0
    marks: list[tuple[str, int]] = []
    for batch in batches:
        mine = [(RecordSource(route.provider_name, route.provider_guid, log, batch.computer, batch.uid), rows)
                for route, rows in batch.rows.get(log, ()) if rows]  # fmt: skip
        refused_here = batch.refused.get(log, 0)
        if not mine and not refused_here:
            continue
        refused += refused_here
        if batch.mark is not None:
            marks.append(batch.mark)
        for source, rows in mine:
            last = runs[-1][1] if runs else None
            if runs and runs[-1][0] == source and isinstance(last, ColumnRows) and isinstance(rows, ColumnRows):
                if len(runs) - 1 not in made:
                    last = ColumnRows([list(column) for column in last.columns])
                    runs[-1] = (source, last)
                    made.add(len(runs) - 1)
                last.extend(rows)
            else:
                runs.append((source, rows))
    return runs, refused, marks


def _pause(path: str, stored: int) -> None:
    """The test hooks' pause: say so in ``path``, then sleep until the test kills the service."""
    with open(path, "w") as marker:
        marker.write(f"{stored}\n")
    while True:
        time.sleep(3600)
