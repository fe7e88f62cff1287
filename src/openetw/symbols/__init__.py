"""Symbol files, read from bytes: PDB public symbols, ELF symbol tables, perf JIT maps, kallsyms.

A pure layer: every reader takes the file's bytes (or text) and gives a ``SymbolTable``; opening
files is the caller's business (``openetw.events.frames``). Modules are imported by name.
"""

__all__: list[str] = []
