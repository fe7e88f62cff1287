"""Damaged copies of files, from a seed: what a crash, a bad disk or a hostile user leaves of a
file (truncated, bits flipped, a page overwritten, the header changed). The fuzz tests and the
fuzz scripts use them on log databases and other files made with the test kit."""

from __future__ import annotations

import random

__all__ = ["DAMAGES", "damaged"]

DAMAGES = ("truncated", "flipped", "page", "header")


def damaged(original: bytes, rng: random.Random, *, page_size: int = 4096) -> tuple[str, bytes]:
    """One damaged copy of ``original``, and which damage it took."""
    data = bytearray(original)
    kind = rng.choice(DAMAGES)
    if kind == "truncated" or len(data) < 2 * page_size:
        return "truncated", bytes(data[: rng.randrange(max(1, len(data)))])
    if kind == "flipped":
        for _ in range(rng.randrange(1, 64)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "page":  # a whole page but the first overwritten with noise
        page = rng.randrange(1, len(data) // page_size)
        data[page * page_size : (page + 1) * page_size] = rng.randbytes(page_size)
    else:
        start = rng.randrange(100)
        data[start : start + 8] = rng.randbytes(8)
    return kind, bytes(data)
