"""Aggregation buckets and values: what ``quantize``, ``lquantize`` and ``llquantize`` keep.

Each aggregation is a plain dict (key -> value) that compiled clauses update directly; the
distribution functions keep a dict (bucket -> count) per key. The rules are documented in
``docs/probe.md``.
"""

from __future__ import annotations

import math
from typing import Any

_MASK64 = (1 << 64) - 1

__all__ = ["add_count", "aggregate_value", "value_is_unsigned", "wrap64", "llquantize_bucket", "lquantize_bucket", "quantize_bucket", "bucket_ranges"]


def add_count(data: dict[Any, Any], key: Any, count: int, drops: list[int], aggsize: int) -> None:
    """``count`` more for ``key`` of a counting aggregation; a new key past ``aggsize`` keys is
    dropped, and counted in ``drops[0]``."""
    old = data.get(key)
    if old is not None:
        data[key] = old + count
    elif len(data) < aggsize:
        data[key] = count
    else:
        drops[0] += count


def quantize_bucket(value: int) -> int:
    """The power-of-two bucket of ``value``: 0, or ±(the largest power of two not above |value|)."""
    if value == 0:
        return 0
    if value > 0:
        return 1 << (value.bit_length() - 1)
    return -(1 << ((-value).bit_length() - 1))


def lquantize_bucket(value: int, low: int, high: int, step: int) -> int:
    """``low - 1`` below ``low``, ``high`` at or above ``high``, else the step's lower bound."""
    if value < low:
        return low - 1
    if value >= high:
        return high
    return low + (value - low) // step * step


def llquantize_bucket(value: int, factor: int, low: int, high: int, steps: int) -> int:
    """-1 below ``factor**low``; ``factor**(high+1)`` at or above it; else, inside the magnitude
    ``factor**m <= value < factor**(m+1)``, the lower bound of its ``steps``-wide linear step."""
    floor: int = factor**low
    if value < floor:
        return -1
    top: int = factor ** (high + 1)
    if value >= top:
        return top
    magnitude = floor
    while magnitude * factor <= value:
        magnitude *= factor
    width = max(1, magnitude * factor // steps)
    return max(magnitude, value // width * width)


def wrap64(value: int, unsigned: bool = False) -> int:
    """``value`` as D keeps an aggregation's integer: 64 bits, wrapped, signed unless the value is
    of a 64-bit unsigned type (``uint64_t``, a pointer)."""
    value &= _MASK64
    return value if unsigned or value < 1 << 63 else value - (1 << 64)


def value_is_unsigned(size: int, signed: bool) -> bool:
    """Whether an aggregation of values of an integer type of ``size`` bytes keeps them unsigned:
    only 64-bit unsigned types (smaller ones promote to ``int64_t``, as in C)."""
    return size >= 8 and not signed


def aggregate_value(func: str, value: Any, normal: int = 1, unsigned: bool = False) -> Any:
    """The number an aggregation shows for one key (avg: integer mean, stddev: integer deviation).

    Every path that fills an aggregation (record by record, column-wise, indexed or streamed,
    compiled or pure reading) may keep its sums unbounded or wrapped at 64 bits: the value shown
    is decided here, once, by D's rule (:func:`wrap64`), so all of them show the same."""
    if func == "avg":
        return wrap64(value[1], unsigned) // value[0] // normal if value[0] else 0
    if func == "stddev":
        count, total, squares = value
        if not count:
            return 0
        mean = total / count
        return int(math.sqrt(max(0.0, squares / count - mean * mean))) // normal
    if func in ("quantize", "lquantize", "llquantize"):
        return value
    if func == "count":
        return value // normal if normal != 1 else value
    value = wrap64(value, unsigned)
    return value // normal if normal != 1 else value


def bucket_ranges(func: str, buckets: dict[int, int], params: tuple[int, ...]) -> list[tuple[int | None, int | None, int]]:
    """(lowest value, highest value, count) of each bucket in order (``None``: unbounded)."""
    out: list[tuple[int | None, int | None, int]] = []
    for key in sorted(buckets):
        count = buckets[key]
        if func == "quantize":
            if key == 0:
                out.append((0, 0, count))
            elif key > 0:
                out.append((key, key * 2 - 1, count))
            else:
                out.append((key * 2 + 1, key, count))
        elif func == "lquantize":
            low, high, step = params
            if key == low - 1:
                out.append((None, low - 1, count))
            elif key == high:
                out.append((high, None, count))
            else:
                out.append((key, min(key + step, high) - 1, count))
        else:
            factor, low, high, steps = params
            if key == -1:
                out.append((None, factor**low - 1, count))
            elif key == factor ** (high + 1):
                out.append((key, None, count))
            else:
                magnitude = factor**low
                while magnitude * factor <= key:
                    magnitude *= factor
                width = max(1, magnitude * factor // steps)
                end = min((key // width + 1) * width, magnitude * factor)
                out.append((key, end - 1, count))
    return out
