"""Rows held as columns: what a drain's walk hands the store, with no tuple per event. Pure.

``ColumnRows`` is a sequence of rows (each row a tuple of one value per column, as the store's
``append_*`` take them) kept as one list per column. Indexing gives a row, slicing gives
``ColumnRows``; ``flat(start, stop)`` gives the values of rows ``start:stop`` one row after the
other, the parameters of a multi-row ``INSERT``, laid out by slice assignment rather than
row by row (the store's fastest path, ``LogStore.append_records``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = ["ColumnRows"]


class ColumnRows(Sequence[tuple[Any, ...]]):
    """Rows as columns (lists of equal length)."""

    __slots__ = ("columns",)

    def __init__(self, columns: list[list[Any]]) -> None:
        if columns and any(len(column) != len(columns[0]) for column in columns):
            raise ValueError("columns of different lengths")
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> ColumnRows: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, ...] | ColumnRows:
        if isinstance(index, slice):
            return ColumnRows([column[index] for column in self.columns])
        return tuple(column[index] for column in self.columns)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return zip(*self.columns, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ColumnRows):
            return self.columns == other.columns
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def extend(self, other: ColumnRows) -> None:
        """Add ``other``'s rows after these (same columns)."""
        if len(other.columns) != len(self.columns):
            raise ValueError("rows of other columns")
        for mine, theirs in zip(self.columns, other.columns, strict=True):
            mine.extend(theirs)

    def flat(self, start: int, stop: int) -> list[Any]:
        """The values of rows ``start:stop``, row after row."""
        width = len(self.columns)
        out: list[Any] = [None] * ((stop - start) * width)
        for place, column in enumerate(self.columns):
            out[place::width] = column[start:stop]
        return out

    def __repr__(self) -> str:
        return f"ColumnRows({len(self)} rows of {len(self.columns)} columns)"
