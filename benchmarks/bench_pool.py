"""The EventWrite hot path: nanoseconds per record copied into a shared-memory buffer pool,
against ``logging.info`` to a FileHandler measured in the same run.

Records of 64 and 256 bytes, one thread and two threads sharing the pool's writer; a pool big
enough for a whole batch, so no write is dropped. The service's side (take, release) runs
between batches, outside the timing. The "pool full" line is the cost of a write that finds no
FREE buffer and is counted lost.
Usage: python benchmarks/bench_pool.py [--writes 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, machine_note, table  # noqa: E402

from openetw.ipc.pool import BufferPool  # noqa: E402

BUFFER_SIZE = 64 * 1024
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def run_threads(threads: int, writes: int, body: Callable[[int], None]) -> int:
    """``body(count)`` in ``threads`` threads sharing ``writes``; returns ``writes``."""
    if threads == 1:
        body(writes)
        return writes
    workers = [threading.Thread(target=body, args=(writes // threads,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return writes


def best_untimed_reset(batch: Callable[[], int], reset: Callable[[], None], repeat: int) -> float:
    """Best seconds of ``batch()`` over ``repeat`` runs, ``reset()`` before each, outside the timing."""
    best = float("inf")
    for _ in range(repeat):
        reset()
        gc.collect()
        start = time.perf_counter()
        batch()
        best = min(best, time.perf_counter() - start)
    reset()
    return best


def pool_writes(size: int, threads: int, writes: int, repeat: int) -> float:
    """Best ns per write into a pool with room for the whole batch."""
    count = min(960, writes * ((size + 7) & ~7) // (BUFFER_SIZE - 0x48) + 2 * threads + 2)
    with BufferPool.create(BUFFER_SIZE, count, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=1000) as pool:
        writer = pool.writer()
        record = bytes(size)

        def body(n: int) -> None:
            write = writer.write
            for timestamp in range(n):
                write(record, timestamp, 0)

        def drain() -> None:
            writer.flush()
            for index in pool.full_buffers():
                pool.take(index)
                pool.release(index)

        seconds = best_untimed_reset(lambda: run_threads(threads, writes, body), drain, repeat)
        if pool.events_lost:
            sys.exit(f"the pool dropped {pool.events_lost} records: it is too small for the batch")
    return seconds / writes * 1e9


def pool_full_writes(size: int, writes: int, repeat: int) -> float:
    """Best ns per write into a pool whose buffers are all FULL (every write is dropped)."""
    with BufferPool.create(BUFFER_SIZE, 1, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=1000) as pool:
        writer = pool.writer()
        record = bytes(size)
        while writer.write(record, 0, 0):
            pass

        def batch() -> int:
            write = writer.write
            for timestamp in range(writes):
                write(record, timestamp, 0)
            return writes

        seconds, done = best_of(batch, repeat)
    return seconds / done * 1e9


def logging_writes(size: int, threads: int, writes: int, repeat: int, directory: str) -> float:
    """Best ns per ``logging.info`` of a ``size``-character message to a FileHandler."""
    root = logging.getLogger()
    handler = logging.FileHandler(os.path.join(directory, f"bench-{size}-{threads}.log"))
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    saved_level, saved_handlers = root.level, root.handlers[:]
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    message = "x" * size
    try:

        def body(n: int) -> None:
            info = logging.info
            for _ in range(n):
                info(message)

        seconds, done = best_of(lambda: run_threads(threads, writes, body), repeat)
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        handler.close()
    return seconds / done * 1e9


def empty_calls(writes: int, repeat: int) -> float:
    """Best ns per call of a function that does nothing with the same arguments: the floor."""

    def write(record: bytes, timestamp: int, cpu: int = 0) -> bool:
        return True

    record = bytes(64)

    def batch() -> int:
        for timestamp in range(writes):
            write(record, timestamp, 0)
        return writes

    seconds, done = best_of(batch, repeat)
    return seconds / done * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=20000, help="writes per batch")
    parser.add_argument("--repeat", type=int, default=5, help="batches per case; the fastest counts")
    args = parser.parse_args()

    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as directory:
        for threads in (1, 2):
            for size in (64, 256):
                pool_ns = pool_writes(size, threads, args.writes, args.repeat)
                log_ns = logging_writes(size, threads, args.writes, args.repeat, directory)
                rows.append([f"{size} B", threads, f"{pool_ns:.0f}", f"{log_ns:.0f}", f"{log_ns / pool_ns:.1f}x"])
    full_ns = pool_full_writes(64, args.writes, args.repeat)
    floor_ns = empty_calls(args.writes, args.repeat)

    print(f"BufferPool write vs logging.info to a FileHandler ({LOG_FORMAT!r}); "
          f"{args.writes} writes per batch, best of {args.repeat}; {machine_note()}")
    print(table(["record", "threads", "pool ns/write", "logging.info ns", "pool faster by"], rows))
    print(f"pool full (write dropped, counted lost), 64 B: {full_ns:.0f} ns/write")
    print(f"empty Python call with the same arguments (the floor): {floor_ns:.0f} ns/call")


if __name__ == "__main__":
    main()
