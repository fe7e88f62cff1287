"""The viewer's full-text index: every event's searchable text, dictionary-encoded.

Events of a trace repeat themselves: the same provider, event and field values come again and
again (a thread's context switches, a loop's events, a trace relogged). The index holds each
distinct text once and, per row, the code of its text (an int32). A search tests the needle once
per distinct text and maps the answer to the rows with one numpy gather, so its cost follows the
number of distinct texts, not of events. What a needle found per distinct text is kept, and only
texts added since (a live source grows) are tested again.

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
        if self._count == len(self._codes):
            grown = np.zeros(2 * len(self._codes), dtype=np.int32)
            grown[: self._count] = self._codes  # a search holding the old array keeps its view
            self._codes = grown
        self._codes[self._count] = code
        self._count += 1

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
            added = np.fromiter((needle in text for text in distinct[done:known]), dtype=bool, count=known - done)
            found = added if found is None else np.concatenate([found, added])
            if needle not in self._found and len(self._found) >= _KEPT_SEARCHES:
                self._found.pop(next(iter(self._found)))
            self._found[needle] = found
        if found is None or not len(found):
            return np.zeros(count, dtype=bool)
        return found[codes]

    def nbytes(self) -> int:
        """Bytes the index holds (the codes, the distinct texts and the table that finds a text's
        code; the answers kept per needle are one byte per distinct text each)."""
        texts = sum(sys.getsizeof(text) for text in self._distinct)
        pointers = 8 * len(self._distinct)
        table = 0 if self._code_of is None else sys.getsizeof(self._code_of)
        kept = sum(found.nbytes for found in self._found.values())
        return int(self._codes.nbytes + texts + pointers + table + kept)
