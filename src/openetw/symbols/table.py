"""A sorted table of symbols: the function that holds an address (its start at or below it)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

__all__ = ["SymbolTable"]


class SymbolTable:
    """Symbols ``(address, size, name)``; ``size`` 0 means "up to the next symbol".

    Addresses are whatever the maker chose (RVAs for a PDB, virtual addresses for ELF, absolute
    addresses for kallsyms and perf maps); ``lookup`` answers in the same space.
    """

    __slots__ = ("addresses", "sizes", "names")

    def __init__(self, symbols: Iterable[tuple[int, int, str]]) -> None:
        ordered = sorted(set(symbols))
        self.addresses = [address for address, _size, _name in ordered]
        self.sizes = [size for _address, size, _name in ordered]
        self.names = [name for _address, _size, name in ordered]

    def __len__(self) -> int:
        return len(self.addresses)

    def lookup(self, address: int) -> tuple[str, int] | None:
        """``(name, offset into it)`` of the symbol holding ``address``, else None."""
        index = bisect.bisect_right(self.addresses, address) - 1
        if index < 0:
            return None
        start, size = self.addresses[index], self.sizes[index]
        if size and address >= start + size:
            # a sized symbol that ends before the address: an earlier one of the same start may hold it
            while index > 0 and self.addresses[index - 1] == start:
                index -= 1
                if address < start + self.sizes[index]:
                    return self.names[index], address - start
            return None
        return self.names[index], address - start
