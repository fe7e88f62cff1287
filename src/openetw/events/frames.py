"""Frames named: module and function for each return address of a stack.

``FrameNamer`` names an address of a process at a time, from what the trace says and what the
caller lets it read:

1. the image that holds it (``TraceState.image_at``: the trace's Image DCStart/Load records)
   gives the module and the offset into it; then the function, when a symbol table is at hand:
   * a Windows image's PDB from ``symbol_dirs``, matched by the GUID and age the trace's
     ``ImageID/DbgID_RSDS`` record gives (a symbol store's ``NAME.pdb/GUIDAGE/NAME.pdb`` or a
     flat ``NAME.pdb``); the public symbols, by RVA (address − image base);
   * a Linux image (an absolute path): the file's ELF symbol table, the file offset
     (address − base, as openetw's kernel trace records bases) mapped through its load segments;
     not when the trace recorded the image's build id and the file's differs (another build);
   * the Linux kernel (``[kernel.kallsyms]`` and its modules): the kernel symbols the trace
     recorded (``KernelSymbols/Symbol``), else the kallsyms text given, when its ``_text`` is the
     base the trace recorded (the same boot);
2. else a .NET method JIT-compiled in that process (``TraceState.method_at``), as PerfView
   names them: ``Module!Namespace.Method``;
3. else a JIT's ``perf-PID.map`` in ``perf_map_dir``.

A frame that cannot be named keeps ``module!+0xoffset`` (``?!0xaddress`` outside any image).
Files are read once each; one that is missing, too large or malformed names nothing (counted
in ``stats.symbol_errors``).
"""

from __future__ import annotations

import ntpath
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from openetw.errors import OpenEtwError
from openetw.events.trace_state import ImageIdentity, TraceState, module_name
from openetw.safeio import read_regular_file
from openetw.symbols.table import SymbolTable

__all__ = ["Frame", "FrameNamer", "NamingStats"]

_KERNEL_IMAGE = "[kernel.kallsyms]"
_MAX_SYMBOL_FILE = 1 << 30
_KEPT_FRAMES = 1 << 20


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: ``module`` ("?" when no image holds it), ``function`` when named, the offset
    into the function (or into the module when not named), and how it was named (``source``)."""

    module: str
    function: str | None
    offset: int
    address: int
    source: str

    @property
    def label(self) -> str:
        """``module!function``, else ``module!+0xoffset``, else ``?!0xaddress``."""
        if self.function is not None:
            return f"{self.module}!{self.function}"
        if self.module == "?":
            return f"?!{self.address:#x}"
        return f"{self.module}!+{self.offset:#x}"


@dataclass(slots=True)
class NamingStats:
    """How many frames (counted once per distinct address of a process) each source named."""

    frames: int = 0
    in_images: int = 0
    named: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    symbol_files: int = 0
    symbol_errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "frames": self.frames, "in_images": self.in_images, "named": self.named,
            "image_share": self.in_images / self.frames if self.frames else 0.0,
            "named_share": self.named / self.frames if self.frames else 0.0,
            "by_source": dict(sorted(self.by_source.items())), "symbol_files": self.symbol_files,
            "symbol_errors": list(self.symbol_errors),
        }  # fmt: skip


def _read_elf_table(data: bytes) -> tuple[SymbolTable, Callable[[int], int | None], str | None]:
    from openetw.symbols.elf import read_elf

    elf = read_elf(data)
    return elf.symbols, elf.address_of_offset, elf.build_id


class FrameNamer:
    """Names frames of a trace's stacks (module doc). ``elf`` reads the ELF files a Linux trace
    names; ``kallsyms`` is the text of ``/proc/kallsyms`` (or None); ``perf_map_dir`` is where
    ``perf-PID.map`` files are looked for (None: not looked for)."""

    def __init__(
        self, state: TraceState, *, symbol_dirs: Iterable[str | os.PathLike[str]] = (), elf: bool = True,
        kallsyms: str | None = None, perf_map_dir: str | os.PathLike[str] | None = None,
    ) -> None:  # fmt: skip
        self.state = state
        self.symbol_dirs = [Path(path) for path in symbol_dirs]
        self.elf = elf
        self.kallsyms_text = kallsyms
        self.perf_map_dir = Path(perf_map_dir) if perf_map_dir is not None else None
        self.stats = NamingStats()
        self._frames: dict[tuple[int, int], Frame] = {}
        self._pdb_tables: dict[ImageIdentity, SymbolTable | None] = {}
        self._elf_tables: dict[str, tuple[SymbolTable, Callable[[int], int | None], str | None] | None] = {}
        self._mismatched: set[tuple[str, str]] = set()
        self._kallsyms: SymbolTable | None = None
        self._kallsyms_checked: set[int] = set()
        self._perf_maps: dict[int, SymbolTable | None] = {}

    # -- naming ------------------------------------------------------------------------------
    def name(self, pid: int, address: int, when: int | None = None) -> Frame:
        key = (pid, address)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._name(pid, address, when)
            if len(self._frames) >= _KEPT_FRAMES:
                self._frames.clear()
            self._frames[key] = frame
            stats = self.stats
            stats.frames += 1
            stats.by_source[frame.source] += 1
            if frame.module != "?":
                stats.in_images += 1
            if frame.function is not None:
                stats.named += 1
        return frame

    def names(self, pid: int, addresses: Iterable[int], when: int | None = None) -> list[Frame]:
        return [self.name(pid, address, when) for address in addresses]

    def _name(self, pid: int, address: int, when: int | None) -> Frame:
        state = self.state
        image = state.image_at(pid, address, when)
        if image is not None:
            module = module_name(image.file_name)
            path = image.file_name
            if image.pid == 0 and (path == _KERNEL_IMAGE or path.startswith("[")):
                recorded = state.kernel_symbols()
                found = recorded.lookup(address) if recorded is not None else None
                if found is not None:
                    return Frame(module, found[0], found[1], address, "kallsyms")
                table = self._kernel_table(image.base) if path == _KERNEL_IMAGE else None
                found = table.lookup(address) if table is not None else None
                if found is not None:
                    return Frame(module, found[0], found[1], address, "kallsyms-now")
            elif path.startswith("/"):
                elf = self._elf_table(path) if self.elf else None
                traced_id = state.build_id(image)
                if elf is not None and traced_id is not None and elf[2] != traced_id:
                    if (path, traced_id) not in self._mismatched:  # not the file that ran: its symbols would lie
                        self._mismatched.add((path, traced_id))
                        self.stats.symbol_errors.append(f"{path}: build id {elf[2]} is not the traced {traced_id}")
                    elf = None
                if elf is not None:
                    vaddr = elf[1](address - image.base)
                    found = elf[0].lookup(vaddr) if vaddr is not None else None
                    if found is not None:
                        return Frame(module, found[0], found[1], address, "elf")
            elif self.symbol_dirs:
                identity = state.identity(image)
                table = self._pdb_table(identity) if identity is not None else None
                found = table.lookup(address - image.base) if table is not None else None
                if found is not None:
                    return Frame(module, found[0], found[1], address, "pdb")
            return Frame(module, None, address - image.base, address, "image")
        method = state.method_at(pid, address, when)
        if method is not None:
            module_path = state.method_module(method)
            module = module_name(module_path) if module_path else "managed"
            return Frame(module, method.full_name, address - method.start, address, "managed")
        if self.perf_map_dir is not None:
            table = self._perf_map(pid)
            found = table.lookup(address) if table is not None else None
            if found is not None:
                return Frame(f"perf-{pid}.map", found[0], found[1], address, "perf-map")
        return Frame("?", None, address, address, "unknown")

    # -- symbol files ------------------------------------------------------------------------
    def _read(self, path: Path) -> bytes | None:
        try:
            data = read_regular_file(path, _MAX_SYMBOL_FILE)
        except (OSError, OpenEtwError) as error:
            self.stats.symbol_errors.append(f"{path}: {error}")
            return None
        self.stats.symbol_files += 1
        return data

    def _pdb_table(self, identity: ImageIdentity) -> SymbolTable | None:
        if identity in self._pdb_tables:
            return self._pdb_tables[identity]
        from openetw.symbols.pdb import read_pdb

        table = None
        base = ntpath.basename(identity.pdb_name)
        for directory in self.symbol_dirs:
            for candidate in (directory / base / identity.key / base, directory / base):
                if not candidate.is_file():
                    continue
                data = self._read(candidate)
                if data is None:
                    continue
                try:
                    pdb = read_pdb(data)
                except OpenEtwError as error:
                    self.stats.symbol_errors.append(f"{candidate}: {error}")
                    continue
                if pdb.guid == identity.guid and identity.age in (pdb.age, pdb.dbi_age):
                    table = pdb.symbols()
                    break
            if table is not None:
                break
        self._pdb_tables[identity] = table
        return table

    def _elf_table(self, path: str) -> tuple[SymbolTable, Callable[[int], int | None], str | None] | None:
        if path in self._elf_tables:
            return self._elf_tables[path]
        found = None
        if os.path.isfile(path):
            data = self._read(Path(path))
            if data is not None:
                try:
                    found = _read_elf_table(data)
                except OpenEtwError as error:
                    self.stats.symbol_errors.append(f"{path}: {error}")
        self._elf_tables[path] = found
        return found

    def _kernel_table(self, base: int) -> SymbolTable | None:
        if self.kallsyms_text is None:
            return None
        if self._kallsyms is None:
            from openetw.symbols.text_maps import read_kallsyms

            self._kallsyms = read_kallsyms(self.kallsyms_text)
        if base not in self._kallsyms_checked:
            found = self._kallsyms.lookup(base)
            if found is None or found[1] != 0:  # another boot: the kernel's text moved
                return None
            self._kallsyms_checked.add(base)
        return self._kallsyms

    def _perf_map(self, pid: int) -> SymbolTable | None:
        if pid in self._perf_maps:
            return self._perf_maps[pid]
        table = None
        assert self.perf_map_dir is not None
        path = self.perf_map_dir / f"perf-{pid}.map"
        if path.is_file():
            data = self._read(path)
            if data is not None:
                from openetw.symbols.text_maps import read_perf_map

                table = read_perf_map(data.decode("utf-8", "replace"))
        self._perf_maps[pid] = table
        return table
