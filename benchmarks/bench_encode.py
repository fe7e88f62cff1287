"""The EventWrite encoders: nanoseconds per record of a 3-field event (UINT32, UINT64, 20-character
string), manifest and TraceLogging, against ``logging.Logger.info`` formatting the same three
values into a StreamHandler over ``io.StringIO``, measured in the same run.

Rows: the manifest encoder; the same with a (non-null) activity id; the TraceLogging encoder; the
TraceLogging shape cache (values passed as a dict, the encoder looked up per write); an empty
function called the same way (the floor); the logger. The cases take turns, best of N each.
Target: at most 1.5 us per 3-field encode for the precompiled encoders. The encoders return the
record bytes; copying them into a buffer pool is ``bench_pool.py``'s business.
Usage: python benchmarks/bench_encode.py [--writes 50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import io
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_note, table  # noqa: E402

from openetw.manifest.winmeta import InType  # noqa: E402
from openetw.provider.encode import ManifestEventEncoder, TraceLoggingEncoderCache, TraceLoggingEventEncoder  # noqa: E402

FIELDS = [("count", InType.UINT32), ("total", InType.UINT64), ("name", InType.UNICODESTRING)]
NAME = "twenty characters..!"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
TARGET_NS = 1500  # for the precompiled encoders; the shape cache adds its lookup
TARGETED = ("manifest", "manifest, activity id set", "TraceLogging")


Batch = Callable[[int], None]


def encoder_batch(encode: Callable[..., bytes], **ids: object) -> Batch:
    """``encode((i, i, NAME), timestamp=i, ...)`` ``writes`` times."""
    pid, tid = os.getpid(), threading.get_native_id()

    def batch(writes: int) -> None:
        for i in range(writes):
            encode((i, i, NAME), timestamp=i, pid=pid, tid=tid, **ids)

    return batch


def cache_batch() -> Batch:
    """Writes through the TraceLogging shape cache (a dict of values per write)."""
    encode = TraceLoggingEncoderCache("Contoso.Bench").encode
    pid, tid = os.getpid(), threading.get_native_id()

    def batch(writes: int) -> None:
        for i in range(writes):
            encode("Counted", {"count": i, "total": i, "name": NAME}, timestamp=i, pid=pid, tid=tid)

    return batch


def logging_batch() -> Batch:
    """``Logger.info`` of the same three values to a StreamHandler over StringIO."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger("openetw.bench.encode")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    info = logger.info

    def batch(writes: int) -> None:
        stream.seek(0)
        stream.truncate()
        for i in range(writes):
            info("count=%d total=%d name=%s", i, i, NAME)

    return batch


def best_ns(batches: dict[str, Batch], writes: int, repeat: int) -> dict[str, float]:
    """Best ns per call of each batch; the cases take turns, so a noisy moment hits them all alike."""
    best = dict.fromkeys(batches, float("inf"))
    for _ in range(repeat):
        for name, batch in batches.items():
            gc.collect()
            start = time.perf_counter()
            batch(writes)
            best[name] = min(best[name], (time.perf_counter() - start) / writes * 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=50000, help="encodes per batch")
    parser.add_argument("--repeat", type=int, default=5, help="batches per case; the fastest counts")
    args, _ = parser.parse_known_args()

    provider = uuid.UUID("6a2b9c3e-0b0e-4f6e-9a59-2f4b1c7d8e90")
    manifest = ManifestEventEncoder(provider, (1, 0, 16, 4, 0, 1, 0x10), FIELDS)
    tracelogging = TraceLoggingEventEncoder("Contoso.Bench", "Counted", FIELDS)
    logger = "logging.Logger.info -> StreamHandler(StringIO)"
    batches = {
        "manifest": encoder_batch(manifest.encode),
        "manifest, activity id set": encoder_batch(manifest.encode, activity_id=uuid.uuid4()),
        "TraceLogging": encoder_batch(tracelogging.encode),
        "TraceLogging shape cache (dict)": cache_batch(),
        "empty call, same arguments (floor)": encoder_batch(lambda values, **ids: b""),
        logger: logging_batch(),
    }
    results = best_ns(batches, args.writes, args.repeat)
    log = results.pop(logger)
    rows: list[list[object]] = [
        [name, f"{ns:.0f}", f"{log / ns:.1f}x", ("yes" if ns <= TARGET_NS else "NO") if name in TARGETED else ""]
        for name, ns in results.items()
    ]
    rows.append([logger, f"{log:.0f}", "1.0x", ""])
    print(f"3-field event (UINT32, UINT64, {len(NAME)}-char string); {args.writes} encodes per batch, "
          f"best of {args.repeat}; {machine_note()}")  # fmt: skip
    print(table(["encoder", "ns/record", "faster than logging", f"<= {TARGET_NS} ns"], rows))


if __name__ == "__main__":
    main()
