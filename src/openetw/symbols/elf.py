"""ELF symbol tables (``.symtab``, else ``.dynsym``), load segments and the GNU build id.

``read_elf(data)`` takes a whole ELF file's bytes (32 or 64 bits, either byte order) and gives
its function symbols as a ``SymbolTable`` of virtual addresses, the ``PT_LOAD`` segments that
map file offsets to those addresses, and the build id. A sampled address in a process maps back
with the image base openetw's kernel trace records (mapping start − file offset): the file
offset ``address − base`` becomes a virtual address through the segment that holds it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from openetw.errors import SymbolFormatError
from openetw.symbols.table import SymbolTable

__all__ = ["ElfSymbols", "build_id_of_head", "read_elf"]

_MAGIC = b"\x7fELF"
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOTE = 2, 11, 7
_PT_LOAD, _PT_NOTE = 1, 4
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_NT_GNU_BUILD_ID = 3
_MAX_SYMBOLS = 1 << 22


@dataclass(frozen=True, slots=True)
class ElfSymbols:
    symbols: SymbolTable
    segments: tuple[tuple[int, int, int], ...]  # (file offset, virtual address, file size) of each PT_LOAD
    build_id: str | None

    def address_of_offset(self, offset: int) -> int | None:
        """The virtual address that file offset ``offset`` is loaded at, if a segment holds it."""
        for file_offset, vaddr, size in self.segments:
            if file_offset <= offset < file_offset + size:
                return offset - file_offset + vaddr
        return None


def _fail(message: str, offset: int, structure: str) -> SymbolFormatError:
    return SymbolFormatError(message, offset=offset, structure=structure)


def read_elf(data: bytes) -> ElfSymbols:
    """Function symbols, load segments and build id of the ELF file ``data``."""
    if len(data) < 52 or data[:4] != _MAGIC:
        raise _fail("not an ELF file", 0, "ELF header")
    wide = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    if wide:
        if len(data) < 64:
            raise _fail("ELF header cut short", 0, "ELF header")
        phoff, shoff = struct.unpack_from(order + "QQ", data, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 54)
    else:
        phoff, shoff = struct.unpack_from(order + "II", data, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 42)
    segments: list[tuple[int, int, int]] = []
    notes: list[tuple[int, int]] = []
    for index in range(phnum):
        at = phoff + index * phentsize
        if at + (56 if wide else 32) > len(data):
            raise _fail("program header outside the file", at, "program header")
        if wide:
            kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(order + "IIQQQQ", data, at)
        else:
            kind, offset, vaddr, _paddr, filesz = struct.unpack_from(order + "IIIII", data, at)
        if kind == _PT_LOAD:
            segments.append((offset, vaddr, filesz))
        elif kind == _PT_NOTE:
            notes.append((offset, filesz))
    sections: list[tuple[int, int, int, int, int]] = []  # type, offset, size, link, entsize
    for index in range(shnum):
        at = shoff + index * shentsize
        if at + (64 if wide else 40) > len(data):
            raise _fail("section header outside the file", at, "section header")
        if wide:
            _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(order + "IIQQQQIIQQ", data, at)
        else:
            _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(order + "IIIIIIIIII", data, at)
        sections.append((kind, offset, size, link, entsize))
        if kind == _SHT_NOTE:
            notes.append((offset, size))
    table = [section for section in sections if section[0] == _SHT_SYMTAB] or [s for s in sections if s[0] == _SHT_DYNSYM]
    symbols: list[tuple[int, int, str]] = []
    for _kind, offset, size, link, entsize in table:
        if link >= len(sections) or entsize < (24 if wide else 16) or offset + size > len(data):
            raise _fail("symbol table outside the file", offset, "symbol table")
        _skind, str_offset, str_size, _l, _e = sections[link]
        if str_offset + str_size > len(data):
            raise _fail("string table outside the file", str_offset, "string table")
        strings = data[str_offset : str_offset + str_size]
        count = min(size // entsize, _MAX_SYMBOLS)
        for number in range(count):
            at = offset + number * entsize
            if wide:
                name_at, info, _other, shndx, value, sym_size = struct.unpack_from(order + "IBBHQQ", data, at)
            else:
                name_at, value, sym_size, info, _other, shndx = struct.unpack_from(order + "IIIBBH", data, at)
            if info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC) or not shndx or not value or name_at >= len(strings):
                continue
            end = strings.find(b"\0", name_at)
            name = strings[name_at : end if end >= 0 else len(strings)].decode("utf-8", "replace")
            if name:
                symbols.append((value, sym_size, name))
    return ElfSymbols(SymbolTable(symbols), tuple(segments), _build_id(data, notes, order))


def build_id_of_head(data: bytes) -> str | None:
    """The GNU build id from the start of an ELF file (its header, program headers and notes
    lie in the first pages); None when ``data`` holds no ELF header or no build id note."""
    if len(data) < 64 or data[:4] != _MAGIC:
        return None
    wide = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    if wide:
        (phoff,) = struct.unpack_from(order + "Q", data, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 54)
    else:
        (phoff,) = struct.unpack_from(order + "I", data, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 42)
    notes = []
    for index in range(phnum):
        at = phoff + index * phentsize
        if at + (56 if wide else 32) > len(data):
            break
        if wide:
            kind, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from(order + "IIQQQQ", data, at)
        else:
            kind, offset, _vaddr, _paddr, filesz = struct.unpack_from(order + "IIIII", data, at)
        if kind == _PT_NOTE:
            notes.append((offset, filesz))
    return _build_id(data, notes, order)


def _build_id(data: bytes, notes: list[tuple[int, int]], order: str) -> str | None:
    for offset, size in notes:
        at, end = offset, min(offset + size, len(data))
        while at + 12 <= end:
            namesz, descsz, kind = struct.unpack_from(order + "III", data, at)
            name_at = at + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            if desc_at + descsz > end:
                break
            if kind == _NT_GNU_BUILD_ID and data[name_at : name_at + namesz].rstrip(b"\0") == b"GNU":
                return data[desc_at : desc_at + descsz].hex()
            at = desc_at + ((descsz + 3) & ~3)
    return None
