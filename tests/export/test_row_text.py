"""The compiled row writer (``_native/_text.c``) against its pure twin (``export/row_text``): the
same bytes for every kind of piece, nulls, extreme numbers and FILETIMEs; bad indexes refused."""

from __future__ import annotations

import numpy as np
import pytest

from openetw._native import module as native_module
from openetw.etl.record import EventRecord
from openetw.export import row_text as T
from openetw.export.row_text import _pure_rows

NATIVE = native_module("_text")
needs_native = pytest.mark.skipif(NATIVE is None, reason="compiled core not built")


def _pieces() -> tuple[int, list[T.Piece]]:
    rng = np.random.default_rng(7)
    n = 200
    signed = rng.integers(-(1 << 63), (1 << 63) - 1, n, dtype=np.int64, endpoint=True)
    signed[:4] = [0, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    unsigned = rng.integers(0, (1 << 64) - 1, n, dtype=np.uint64, endpoint=True)
    unsigned[:2] = [0, (1 << 64) - 1]
    ticks = rng.integers(-(1 << 62), 1 << 62, n, dtype=np.int64)
    ticks[:8] = [0, -1, -10_000_001, 132_445_973_972_118_091, 2_650_467_743_999_999_999, 2_650_467_744_000_000_000,
                 np.iinfo(np.int64).min, np.iinfo(np.int64).max]  # fmt: skip
    valid = rng.integers(0, 2, n).astype(bool)
    words = [b"", b"a", b'"quoted"', "caf\u00e9".encode()]
    offsets, data = T.table(words)
    pick = rng.integers(0, len(words), n)
    pieces = [
        T.constant(b"{"),
        T.integers(signed, b'"s": '),
        T.integers(unsigned, b', "u": ', valid=valid, null=b', "u": null'),
        T.integers(unsigned.astype(np.uint8), b', "b": ', valid=~valid),
        T.filetimes(ticks, b', "t": "', b'"'),
        T.codes(pick, words, b', "w": "', b'"', valid=valid),
        T.texts(offsets[pick], offsets[pick + 1], data, b', "x": ', b"!"),
        T.constant(b"}"),
    ]
    return n, pieces


@needs_native
def test_compiled_rows_are_the_pure_ones() -> None:
    n, pieces = _pieces()
    text, offsets = _pure_rows(n, pieces, b"\n")
    assert NATIVE.rows(n, pieces, b"\n", False) == text
    native_text, native_offsets = NATIVE.rows(n, pieces, b"\n", True)
    assert native_text == text and np.array_equal(np.frombuffer(native_offsets, dtype=np.int64), offsets)
    assert len(text.splitlines()) == n and offsets[-1] == len(text)


def test_filetimes_read_as_a_records_time() -> None:
    ticks = np.array([0, 132_445_973_972_118_091, -1, 1 << 62], dtype=np.int64)
    text = T.rows(len(ticks), [T.filetimes(ticks)]).decode().splitlines()
    assert text == [EventRecord.time_iso.fget(_Timed(int(value))) for value in ticks]  # type: ignore[attr-defined]
    assert text[0] == "1601-01-01T00:00:00.0000000Z" and text[3].startswith("FILETIME(")


class _Timed:
    def __init__(self, filetime: int) -> None:
        self.filetime = filetime


@pytest.mark.parametrize("engine", ["pure", pytest.param("native", marks=needs_native)])
def test_indexes_outside_their_buffers_are_refused(engine: str) -> None:
    write = (
        (lambda n, pieces: _pure_rows(n, pieces, b""))
        if engine == "pure"
        else (lambda n, pieces: NATIVE.rows(n, pieces, b""))
    )
    with pytest.raises(ValueError):
        write(2, [T.codes(np.array([0, 2]), [b"a", b"b"])])
    with pytest.raises(ValueError):
        write(1, [T.texts(np.array([0]), np.array([5]), b"abc")])
    with pytest.raises(ValueError):
        write(1, [T.texts(np.array([2]), np.array([1]), b"abc")])
    with pytest.raises(ValueError):
        write(3, [T.integers(np.array([1, 2]))])
