"""Symbols in text: ``/proc/kallsyms`` and a JIT's ``perf-PID.map``.

kallsyms: ``address type name [module]`` per line, sorted by address, no sizes (a symbol runs to
the next one); only text symbols (types ``t``/``T``, and ``w``/``W``) are kept. A perf map:
``start size name`` per line, hexadecimal, as JITs write for ``perf`` (``/tmp/perf-PID.map``).
"""

from __future__ import annotations

from openetw.symbols.table import SymbolTable

__all__ = ["read_kallsyms", "read_perf_map"]

_TEXT_TYPES = frozenset("tTwW")


def read_kallsyms(text: str) -> SymbolTable:
    """The kernel's text symbols; empty when the addresses are hidden (all zero)."""
    symbols: list[tuple[int, int, str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] not in _TEXT_TYPES:
            continue
        try:
            address = int(parts[0], 16)
        except ValueError:
            continue
        if address:
            symbols.append((address, 0, parts[2]))
    return SymbolTable(symbols)


def read_perf_map(text: str) -> SymbolTable:
    """The JIT-compiled functions a ``perf-PID.map`` lists."""
    symbols: list[tuple[int, int, str]] = []
    for line in text.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) < 3:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        symbols.append((start, size, parts[2].strip()))
    return SymbolTable(symbols)
