"""The Event Log's store thread: the rows of taken buffers stored while the loop walks the next.

The service's loop takes a drain's buffers from a producer's pool, walks them into rows (one
list per log) and hands them here as one ``StoreBatch``; this thread appends each log's rows in
one transaction (with the events refused on their way and the pool's mark, see
``LogStore.append_rows``), and only then gives the buffers back to the pool (``release``): a
service killed before that leaves them TAKEN, for the producer to hand to the next service,
which skips what the log's marks say is stored. At most ``DEPTH`` batches wait: a loop that
walks faster than SQLite stores waits for it, while the producer's pool holds the burst.

SQLite works without the interpreter's lock, so its part of the cost overlaps the walk of the
next batch on another core.

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
from collections.abc import Callable
from dataclasses import dataclass, field

from openetw.errors import EventLogError, EventLogWriteError
from openetw.eventlog.records import Run
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
    stored: int = 0  # rows stored, once done


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
            batch = self._queue.get()
            try:
                self._store(batch)
            except Exception as exc:  # noqa: BLE001 - the thread goes on; the buffers go back below
                self._log(f"event log: storing: {exc}")
            finally:
                try:
                    if batch.release is not None:
                        batch.release()
                except Exception as exc:  # noqa: BLE001 - a pool closed meanwhile: nothing to give back
                    self._log(f"event log: giving buffers back: {exc}")
                self._queue.task_done()

    def _store(self, batch: StoreBatch) -> None:
        store = self.store
        if self._pause_before is not None and batch.rows:
            _pause(self._pause_before, 0)
        for log in sorted(set(batch.rows) | set(batch.refused)):
            runs = [(RecordSource(route.provider_name, route.provider_guid, log, batch.computer, batch.uid), rows)
                    for route, rows in batch.rows.get(log, []) if rows]  # fmt: skip
            refused = batch.refused.get(log, 0)
            if not runs and not refused:
                continue
            try:
                batch.stored += store.append_records(log, runs, refused=refused, mark=batch.mark).stored
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
        if batch.forget is not None:
            for log in batch.forget_logs:
                try:
                    store.forget_marks(log, [batch.forget])
                except EventLogError as exc:
                    self._log(f"event log: {exc}")
        if batch.rows and self.on_stored is not None:
            self.on_stored()
        if self._pause is not None and batch.rows:
            _pause(self._pause, batch.stored)


def _pause(path: str, stored: int) -> None:
    """The test hooks' pause: say so in ``path``, then sleep until the test kills the service."""
    with open(path, "w") as marker:
        marker.write(f"{stored}\n")
    while True:
        time.sleep(3600)
