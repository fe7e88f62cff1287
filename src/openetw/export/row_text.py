"""Rows of text from columns: each row the concatenation of its pieces (constants, numbers, texts
taken from a buffer or a table), as the JSON lines export writes them.

``rows(n, pieces, end)`` gives the ``n`` rows as one ``bytes``, each followed by ``end``;
``rows_with_offsets`` also gives where each row starts (``n + 1`` int64). Pieces are made with
``constant``, ``integers``, ``texts``, ``codes`` and ``filetimes``; row ``i`` of a piece writes its
prefix, its value and its suffix, or its ``null`` text instead where ``valid[i]`` is false (nothing
when ``null`` is ``None``). The compiled core writes them when it runs (``_native/_text.c``);
``_pure_rows`` below is the reference it is tested against.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.errors import InvalidArgument
from openetw.etl.intypes import filetime_iso

__all__ = ["Piece", "codes", "constant", "filetimes", "integers", "rows", "rows_with_offsets", "table", "texts"]

Piece = tuple[int, bytes, bytes, Any, Any, Any, Any, "bytes | None"]
_CONST, _INT, _UINT, _TEXT, _CODE, _FILETIME = range(6)
_NATIVE = native_module("_text")


def _valid(valid: np.ndarray | None) -> np.ndarray | None:
    return None if valid is None else np.ascontiguousarray(valid, dtype=np.uint8)


def constant(text: bytes) -> Piece:
    return (_CONST, text, b"", None, None, None, None, None)


def integers(
    values: np.ndarray,
    prefix: bytes = b"",
    suffix: bytes = b"",
    valid: np.ndarray | None = None,
    null: bytes | None = None,
) -> Piece:
    """Decimal integers (signed or unsigned 64-bit once widened)."""
    unsigned = values.dtype.kind == "u"
    wide = np.ascontiguousarray(values, dtype=np.uint64 if unsigned else np.int64).view(np.int64)
    return (_UINT if unsigned else _INT, prefix, suffix, wide, None, None, _valid(valid), null)


def texts(
    starts: np.ndarray, ends: np.ndarray, data: Any, prefix: bytes = b"", suffix: bytes = b"",
    valid: np.ndarray | None = None, null: bytes | None = None,
) -> Piece:  # fmt: skip
    """Row ``i``'s text is ``data[starts[i]:ends[i]]``."""
    return (
        _TEXT, prefix, suffix, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64),
        data, _valid(valid), null,
    )  # fmt: skip


def table(entries: list[bytes]) -> tuple[np.ndarray, bytes]:
    """Texts laid end to end: (``len(entries) + 1`` offsets, the bytes)."""
    offsets = np.zeros(len(entries) + 1, dtype=np.int64)
    np.cumsum([len(entry) for entry in entries], out=offsets[1:])
    return offsets, b"".join(entries)


def codes(
    numbers: np.ndarray, entries: list[bytes], prefix: bytes = b"", suffix: bytes = b"",
    valid: np.ndarray | None = None, null: bytes | None = None,
) -> Piece:  # fmt: skip
    """Row ``i``'s text is ``entries[numbers[i]]``."""
    offsets, data = table(entries)
    return (_CODE, prefix, suffix, np.ascontiguousarray(numbers, dtype=np.int64), offsets, data, _valid(valid), null)


def filetimes(
    ticks: np.ndarray,
    prefix: bytes = b"",
    suffix: bytes = b"",
    valid: np.ndarray | None = None,
    null: bytes | None = None,
) -> Piece:
    """FILETIMEs as ``EventRecord.time_iso`` writes them (``FILETIME(<n>)`` outside the years 1-9999)."""
    return (_FILETIME, prefix, suffix, np.ascontiguousarray(ticks, dtype=np.int64), None, None, _valid(valid), null)


def rows(n: int, pieces: list[Piece], end: bytes = b"\n") -> bytes:
    if _NATIVE is not None:
        done: bytes = _NATIVE.rows(n, pieces, end, False)
        return done
    return _pure_rows(n, pieces, end)[0]


def rows_with_offsets(n: int, pieces: list[Piece], end: bytes = b"") -> tuple[bytes, np.ndarray]:
    if _NATIVE is not None:
        text, offsets = _NATIVE.rows(n, pieces, end, True)
        return text, np.frombuffer(offsets, dtype=np.int64)
    return _pure_rows(n, pieces, end)


def _filetime_text(ticks: int) -> bytes:
    try:
        return filetime_iso(ticks).encode("ascii")
    except OverflowError:
        return f"FILETIME({ticks})".encode("ascii")


def _pure_rows(n: int, pieces: list[Piece], end: bytes) -> tuple[bytes, np.ndarray]:
    """The reference: the compiled ``rows`` row by row."""
    prepared = []
    for kind, prefix, suffix, a, b, c, valid, null in pieces:
        if kind not in range(6):
            raise InvalidArgument(f"piece: unknown kind {kind}")
        column = None if kind == _CONST else np.asarray(a).view(np.int64)
        if column is not None and len(column) < n:
            raise InvalidArgument("piece: a is shorter than the rows")
        if valid is not None and len(valid) < n:
            raise InvalidArgument("piece: valid is shorter than the rows")
        prepared.append((kind, prefix, suffix, column, b, bytes(c) if c is not None else b"", valid, null))
    out: list[bytes] = []
    offsets = np.zeros(n + 1, dtype=np.int64)
    size = 0
    for i in range(n):
        offsets[i] = size
        for kind, prefix, suffix, column, b, data, valid, null in prepared:
            if valid is not None and not valid[i]:
                if null is not None:
                    out.append(null)
                    size += len(null)
                continue
            if kind == _CONST:
                value = b""
            elif kind == _INT:
                value = str(int(column[i])).encode()  # type: ignore[index]
            elif kind == _UINT:
                value = str(int(column[i]) & 0xFFFFFFFFFFFFFFFF).encode()  # type: ignore[index]
            elif kind == _TEXT:
                start, stop = int(column[i]), int(b[i])  # type: ignore[index]
                if start < 0 or stop < start or stop > len(data):
                    raise InvalidArgument(f"row {i}: text [{start}, {stop}) outside its {len(data)} bytes")
                value = data[start:stop]
            elif kind == _CODE:
                code = int(column[i])  # type: ignore[index]
                if code < 0 or code + 1 >= len(b):
                    raise InvalidArgument(f"row {i}: code {code} outside its table of {max(len(b) - 1, 0)}")
                start, stop = int(b[code]), int(b[code + 1])
                if start < 0 or stop < start or stop > len(data):
                    raise InvalidArgument(f"table entry {code}: [{start}, {stop}) outside its {len(data)} bytes")
                value = data[start:stop]
            else:
                value = _filetime_text(int(column[i]))  # type: ignore[index]
            piece = prefix + value + suffix
            out.append(piece)
            size += len(piece)
        out.append(end)
        size += len(end)
    offsets[n] = size
    return b"".join(out), offsets
