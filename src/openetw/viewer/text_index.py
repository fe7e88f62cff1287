"""The viewer's full-text index: every event's searchable text, dictionary-encoded.

Events of a trace repeat themselves: the same provider, event and field values come again and
again (a thread's context switches, a loop's events, a trace relogged). The index holds each
distinct text once and, per row, the code of its text (an int32). A search tests the needle once
per distinct text and maps the answer to the rows with one numpy gather, so its cost follows the
number of distinct texts, not of events. What a needle found per distinct text is kept, and only
texts added since (a live source grows) are tested again.

Texts that do not repeat (a trace whose events carry unique values) are skipped by block: the
distinct texts are cut into blocks of ``BLOCK`` texts, and each block keeps a bitmap of the
trigrams (three UTF-8 bytes) its texts hold, hashed into ``BLOCK_BITS`` bits (a one-hash Bloom
filter: ``BLOCK_BITS / 8 / BLOCK`` bytes per distinct text). A needle of three bytes or more is
tested only in the blocks whose bitmap holds every trigram of the needle; a block without one of
them cannot hold the needle, so the answer stays exact. A shorter needle tests every text.

A row matches when the needle (lowercased) is a substring of its text, exactly as ``needle in
text`` over the list of texts would say: same rows, same order. This module does no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

__all__ = ["TextIndex"]

_KEPT_SEARCHES = 32  # needles whose answers per distinct text are kept
BLOCK = 128
"""Distinct texts per block of the trigram filter."""
BLOCK_BITS = 1 << 14
"""Bits of a block's trigram bitmap (2 KiB: 16 bytes per distinct text)."""
_SHIFT = 32 - 14


def _trigram_bits(data: bytes) -> np.ndarray:
    """The bit (of ``BLOCK_BITS``) of each trigram of ``data``, as uint32s (repeats kept)."""
    raw = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    if len(raw) < 3:
        return np.zeros(0, dtype=np.uint32)
    trigrams = raw[:-2] << 16 | raw[1:-1] << 8 | raw[2:]
    return (trigrams * np.uint32(0x9E3779B1)) >> np.uint32(_SHIFT)  # Fibonacci hashing, wrapping in 32 bits


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class TextIndex(Sequence[str]):
    """Each row's text (a ``Sequence[str]``), searchable by substring (see the module doc).

    ``append``/``extend`` add rows at the end (thread-safe against ``search`` as long as one
    writer appends: a search sees the rows added before it started)."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._distinct: list[str] = []
        self._code_of: dict[str, int] | None = {}
        self._codes = np.zeros(1024, dtype=np.int32)
        self._count = 0
        self._found: dict[str, np.ndarray] = {}
        self._bitmaps = np.zeros((16, BLOCK_BITS // 8), dtype=np.uint8)
        self._blocks = 0  # blocks whose bitmap is made (the distinct texts past them are tested whole)
        self.extend(texts)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, row: int) -> str: ...
    @overload
    def __getitem__(self, row: slice) -> list[str]: ...
    def __getitem__(self, row: int | slice) -> str | list[str]:
        codes = self._codes[: self._count]
        if isinstance(row, slice):
            return [self._distinct[code] for code in codes[row].tolist()]
        return self._distinct[int(codes[row])]

    def __iter__(self) -> Iterator[str]:
        distinct = self._distinct
        for code in self._codes[: self._count].tolist():
            yield distinct[code]

    @property
    def distinct(self) -> int:
        """How many different texts the rows hold."""
        return len(self._distinct)

    def freeze(self) -> None:
        """Let go of the table that finds a text's code (most of the index's memory when texts do
        not repeat) once no more rows will come; an ``append`` after this builds it again."""
        self._code_of = None

    def append(self, text: str) -> None:
        code_of = self._code_of
        if code_of is None:
            code_of = self._code_of = {text: code for code, text in enumerate(self._distinct)}
        code = code_of.get(text)
        if code is None:
            code = code_of[text] = len(self._distinct)
            self._distinct.append(text)
            if len(self._distinct) == (self._blocks + 1) * BLOCK:
                self._add_block()
        if self._count == len(self._codes):
            grown = np.zeros(2 * len(self._codes), dtype=np.int32)
            grown[: self._count] = self._codes  # a search holding the old array keeps its view
            self._codes = grown
        self._codes[self._count] = code
        self._count += 1

    def _add_block(self) -> None:
        first = self._blocks * BLOCK
        bits = _trigram_bits(_utf8("\0".join(self._distinct[first : first + BLOCK])))
        flags = np.zeros(BLOCK_BITS, dtype=bool)
        flags[bits] = True
        if self._blocks == len(self._bitmaps):
            grown = np.zeros((2 * len(self._bitmaps), BLOCK_BITS // 8), dtype=np.uint8)
            grown[: self._blocks] = self._bitmaps
            self._bitmaps = grown
        self._bitmaps[self._blocks] = np.packbits(flags, bitorder="little")
        self._blocks += 1

    def _test(self, needle: str, first: int, last: int) -> np.ndarray:
        """Whether each distinct text from ``first`` to ``last`` holds ``needle``."""
        distinct = self._distinct
        out = np.zeros(last - first, dtype=bool)
        blocks = min(self._blocks, last // BLOCK)
        bits = np.unique(_trigram_bits(_utf8(needle)))
        if not len(bits) or first // BLOCK >= blocks:
            blocks = first // BLOCK  # no block skipped: every text is tested
            runs = np.zeros((0, 2), dtype=np.int64)
        else:
            bitmaps = self._bitmaps[first // BLOCK : blocks]
            passing = np.ones(len(bitmaps), dtype=bool)
            for bit in bits.tolist():
                passing &= (bitmaps[:, bit >> 3] & (1 << (bit & 7))) != 0
            edges = np.flatnonzero(np.diff(np.concatenate([[False], passing, [False]]).astype(np.int8)))
            runs = (edges.reshape(-1, 2) + first // BLOCK) * BLOCK  # [start, stop) of each run of passing blocks
        for start, stop in runs.tolist():
            start = max(first, start)
            out[start - first : stop - first] = [needle in text for text in distinct[start:stop]]
        tail = max(first, blocks * BLOCK)
        if tail < last:
            out[tail - first :] = np.fromiter((needle in text for text in distinct[tail:last]), dtype=bool, count=last - tail)
        return out

    def extend(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.append(text)

    def search(self, needle: str) -> np.ndarray:
        """Whether each row's text holds ``needle`` (as given: the texts are lowercased, so a
        case-insensitive search lowercases its needle first), one boolean per row."""
        count = self._count
        codes = self._codes[:count]
        distinct = self._distinct
        known = len(distinct)
        found = self._found.get(needle)
        done = 0 if found is None else len(found)
        if done < known:
            added = self._test(needle, done, known)
            found = added if found is None else np.concatenate([found, added])
            if needle not in self._found and len(self._found) >= _KEPT_SEARCHES:
                self._found.pop(next(iter(self._found)), None)
            self._found[needle] = found
        if found is None or not len(found):
            return np.zeros(count, dtype=bool)
        return found[codes]

    def nbytes(self) -> int:
        """Bytes the index holds (the codes, the distinct texts, the blocks' trigram bitmaps and
        the table that finds a text's code; the answers kept per needle are one byte per distinct
        text each)."""
        texts = sum(sys.getsizeof(text) for text in self._distinct)
        pointers = 8 * len(self._distinct)
        table = 0 if self._code_of is None else sys.getsizeof(self._code_of)
        kept = sum(found.nbytes for found in self._found.values())
        return int(self._codes.nbytes + self._bitmaps.nbytes + texts + pointers + table + kept)
