"""Inputs both engines are fed: every corpus .etl, mutated copies, generated traces, LZXPRESS streams.

Used by the equivalence tests (the pure path against the compiled one, in one process) and by the
sanitizer run, which feeds the same cases to a build of the C under AddressSanitizer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from openetw.errors import EtlFormatError, OpenEtwError
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.lzxpress import compress

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "etl"


def corpus_files() -> list[Path]:
    return sorted(CORPUS.rglob("*.etl"))


def mutated(data: bytes, seed: int, flips: int = 8, keep: int = 0x200) -> bytes:
    """``data`` with ``flips`` bytes set at random (past the first ``keep``), sometimes cut short."""
    rng = random.Random(seed)
    out = bytearray(data)
    for _ in range(flips):
        at = rng.randrange(min(keep, len(out) - 1), len(out))
        out[at] = rng.choice((0, 0xFF, 0xC0, 0x90, rng.randrange(256)))
    if rng.random() < 0.25:
        del out[rng.randrange(keep, len(out)) :]
    return bytes(out)


def compressed_streams(data: bytes, limit: int = 64) -> list[tuple[bytes, int]]:
    """(LZXPRESS stream, inflated size) of the file's compressed buffers (packed, each BufferSize long)."""
    out, at = [], 0
    bh = L.BUFFER_HEADER_SIZE
    flag_at = L.WMI_BUFFER_HEADER.offset("BufferFlag")
    while at + bh <= len(data) and len(out) < limit:
        size = int.from_bytes(data[at + F.BUFFER_SIZE_AT : at + F.BUFFER_SIZE_AT + 4], "little")
        end = int.from_bytes(data[at + F.BUFFER_OFFSET_AT : at + F.BUFFER_OFFSET_AT + 4], "little")
        flags = int.from_bytes(data[at + flag_at : at + flag_at + 2], "little")
        if size < bh:
            break
        if flags & L.BUFFER_FLAG_COMPRESSED and end >= bh:
            out.append((data[at + bh : at + size], end - bh))
        at += size
    return out


def generated_streams(seed: int, count: int) -> Iterator[tuple[bytes, int]]:
    """Compressed runs of repetitive data, their damaged copies, and random bytes."""
    rng = random.Random(seed)
    for _ in range(count):
        plain = bytes(rng.choice(b"abcd\x00\xff") for _ in range(rng.randrange(0, 3000))) * rng.randrange(1, 4)
        stream = compress(plain)
        yield stream, len(plain)
        damaged = bytearray(stream)
        for _ in range(rng.randrange(1, 6)):
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        yield bytes(damaged), len(plain) + rng.choice((0, 0, -1, 1, 100))
        yield bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))), rng.randrange(0, 300)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call gives: its value, or its error's type, message and location."""
    try:
        return "value", call()
    except OpenEtwError as err:
        where = (err.offset, err.buffer_index, err.structure) if isinstance(err, EtlFormatError) else getattr(err, "offset", None)
        return type(err).__name__, (str(err), where)


def read_all(data: bytes, *, strict: bool, time_order: bool = False) -> tuple[Any, ...]:
    """Every record of a read (its class, header, bytes, place) and the read's statistics and error."""
    from openetw.etl.reader import EtlReader

    records: list[tuple[Any, ...]] = []
    try:
        reader = EtlReader(data, strict=strict)
    except EtlFormatError as err:
        return (), None, (str(err), err.offset, err.buffer_index, err.structure)
    error = None
    try:
        for r in reader.records(time_order=time_order):
            records.append((type(r).__name__, r._h, r.raw, r._pos, r.size, r.cpu, r.buffer_index, getattr(r, "reason", None)))
    except EtlFormatError as err:
        error = (str(err), err.offset, err.buffer_index, err.structure)
    s = reader.stats
    stats = (s.buffers, s.compressed_buffers, s.records, s.unknown_records, s.skipped_bytes, s.time_order_violations,
             [(str(e), e.offset, e.buffer_index, e.structure) for e in s.errors])  # fmt: skip
    return tuple(records), stats, error


def index_of(data: bytes) -> tuple[Any, ...]:
    """What the consumer's index pass makes of a file: rows, problems, counts."""
    from openetw.consumer._engine.index_build import build_index_data

    try:
        built = build_index_data(data)
    except EtlFormatError as err:
        return ("error", str(err), err.offset)
    return built.records.tobytes(), built.errors, built.unknown_reasons, built.read_stats, built.providers, built.buffers.tobytes()
