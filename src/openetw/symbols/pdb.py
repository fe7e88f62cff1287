"""PDB (MSF 7.0) files: the identity (GUID and age) and the public symbols, as RVAs.

Only what naming a frame needs is read, each structure bounded by the file:

* the MSF superblock, the stream directory and its block map;
* the PDB info stream (stream 1): version, signature, age and GUID, which a trace's
  ``ImageID/DbgID_RSDS`` record names the PDB by;
* the DBI stream (3): the public-symbol and symbol-record stream numbers, and from its optional
  debug header the section-header stream, whose ``IMAGE_SECTION_HEADER``s turn a public's
  ``segment:offset`` into an RVA;
* the publics stream's hash records, each the offset of an ``S_PUB32`` record in the symbol
  record stream (flags, offset, segment, name).

Names stay as the linker wrote them (decorated, ``?main@@YAHXZ``). OMAP (binaries reordered
after linking) is not applied.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from openetw.errors import SymbolFormatError
from openetw.symbols.table import SymbolTable

__all__ = ["PdbFile", "PublicSymbol", "read_pdb"]

_MAGIC = b"Microsoft C/C++ MSF 7.00\r\n\x1aDS\0\0\0"
_SUPERBLOCK = struct.Struct("<IIIIII")
_INFO_STREAM, _DBI_STREAM = 1, 3
_DBI_HEADER = struct.Struct("<iIIHHHHHHiiiiiIiiHHI")
_SECTION_HEADER_SLOT = 5  # in the DBI's optional debug header: the section headers' stream
_PUBLICS_HEADER = struct.Struct("<IIIIHHII")
_GSI_HEADER = struct.Struct("<IIII")
_S_PUB32 = 0x110E
_NIL_STREAM = 0xFFFFFFFF
_NO_STREAM = 0xFFFF
_MAX_STREAMS = 1 << 16
_FLAG_CODE, _FLAG_FUNCTION = 1, 2


@dataclass(frozen=True, slots=True)
class PublicSymbol:
    name: str
    segment: int
    offset: int
    flags: int
    record_offset: int

    @property
    def is_code(self) -> bool:
        return bool(self.flags & (_FLAG_CODE | _FLAG_FUNCTION))


@dataclass(frozen=True, slots=True)
class PdbFile:
    guid: uuid.UUID
    age: int
    dbi_age: int
    signature: int
    publics: tuple[PublicSymbol, ...]
    section_rvas: tuple[int, ...]

    def rva(self, symbol: PublicSymbol) -> int | None:
        if not 1 <= symbol.segment <= len(self.section_rvas):
            return None
        return self.section_rvas[symbol.segment - 1] + symbol.offset

    def symbols(self) -> SymbolTable:
        """The public symbols as a table of RVAs (code and data alike: the nearest below wins)."""
        table = []
        for symbol in self.publics:
            rva = self.rva(symbol)
            if rva is not None:
                table.append((rva, 0, symbol.name))
        return SymbolTable(table)


class _Msf:
    def __init__(self, data: bytes) -> None:
        if len(data) < len(_MAGIC) + _SUPERBLOCK.size or not data.startswith(_MAGIC):
            raise SymbolFormatError("not an MSF 7.00 file", offset=0, structure="MSF superblock")
        self.data = data
        block_size: int
        block_size, _free, blocks, directory_bytes, _unknown, map_block = _SUPERBLOCK.unpack_from(data, len(_MAGIC))
        if block_size not in (512, 1024, 2048, 4096, 8192, 16384, 32768) or blocks * block_size > len(data) + block_size:
            raise SymbolFormatError(f"block size {block_size} or count {blocks} does not fit the file", offset=len(_MAGIC), structure="MSF superblock")
        self.block_size = block_size
        directory_blocks = -(-directory_bytes // block_size)
        map_at = self._block(map_block)
        if map_at + 4 * directory_blocks > len(data):
            raise SymbolFormatError("directory block map outside the file", offset=map_at, structure="MSF directory")
        numbers = struct.unpack_from(f"<{directory_blocks}I", data, map_at)
        directory = self._gather(numbers, directory_bytes)
        if len(directory) < 4:
            raise SymbolFormatError("empty stream directory", offset=map_at, structure="MSF directory")
        (count,) = struct.unpack_from("<I", directory)
        if count > _MAX_STREAMS or 4 + 4 * count > len(directory):
            raise SymbolFormatError(f"{count} streams do not fit the directory", offset=map_at, structure="MSF directory")
        sizes = struct.unpack_from(f"<{count}I", directory, 4)
        at = 4 + 4 * count
        self.streams: list[tuple[tuple[int, ...], int]] = []
        for size in sizes:
            if size == _NIL_STREAM:
                self.streams.append(((), 0))
                continue
            used = -(-size // block_size)
            if at + 4 * used > len(directory):
                raise SymbolFormatError("stream block list outside the directory", offset=at, structure="MSF directory")
            self.streams.append((struct.unpack_from(f"<{used}I", directory, at), size))
            at += 4 * used

    def _block(self, number: int) -> int:
        at = number * self.block_size
        if at >= len(self.data):
            raise SymbolFormatError(f"block {number} outside the file", offset=at, structure="MSF block")
        return at

    def _gather(self, numbers: tuple[int, ...], size: int) -> bytes:
        parts = []
        for number in numbers:
            at = self._block(number)
            parts.append(self.data[at : at + self.block_size])
        return b"".join(parts)[:size]

    def stream(self, index: int) -> bytes:
        if not 0 <= index < len(self.streams):
            raise SymbolFormatError(f"no stream {index}", stream=index, structure="MSF directory")
        numbers, size = self.streams[index]
        return self._gather(numbers, size)


def read_pdb(data: bytes) -> PdbFile:
    """The identity and public symbols of the PDB file ``data``."""
    msf = _Msf(data)
    info = msf.stream(_INFO_STREAM)
    if len(info) < 28:
        raise SymbolFormatError("PDB info stream cut short", stream=_INFO_STREAM, offset=len(info), structure="PDB info")
    _version, signature, age = struct.unpack_from("<III", info)
    guid = uuid.UUID(bytes_le=info[12:28])
    dbi = msf.stream(_DBI_STREAM)
    if len(dbi) < _DBI_HEADER.size:
        raise SymbolFormatError("DBI stream cut short", stream=_DBI_STREAM, offset=len(dbi), structure="DBI header")
    header = _DBI_HEADER.unpack_from(dbi)
    dbi_age, publics_stream, records_stream = header[2], header[5], header[7]
    module_info, contributions, section_map, source_info, type_servers, _mfc, optional_size, ec_size = header[9:17]
    optional_at = _DBI_HEADER.size + module_info + contributions + section_map + source_info + type_servers + ec_size
    if optional_size < 0 or optional_at < _DBI_HEADER.size or optional_at + optional_size > len(dbi):
        raise SymbolFormatError("optional debug header outside the DBI stream", stream=_DBI_STREAM, offset=optional_at, structure="DBI header")
    section_rvas: tuple[int, ...] = ()
    if optional_size >= 2 * (_SECTION_HEADER_SLOT + 1):
        (sections_stream,) = struct.unpack_from("<H", dbi, optional_at + 2 * _SECTION_HEADER_SLOT)
        if sections_stream != _NO_STREAM:
            sections = msf.stream(sections_stream)
            section_rvas = tuple(struct.unpack_from("<I", sections, at + 12)[0] for at in range(0, len(sections) - 39, 40))
    publics: list[PublicSymbol] = []
    if publics_stream != _NO_STREAM and records_stream != _NO_STREAM:
        publics = _publics(msf.stream(publics_stream), msf.stream(records_stream), publics_stream)
    return PdbFile(guid, age, dbi_age, signature, tuple(publics), section_rvas)


def _publics(stream: bytes, records: bytes, index: int) -> list[PublicSymbol]:
    if len(stream) < _PUBLICS_HEADER.size + _GSI_HEADER.size:
        raise SymbolFormatError("publics stream cut short", stream=index, offset=len(stream), structure="publics header")
    _signature, _version, hash_size, _buckets = _GSI_HEADER.unpack_from(stream, _PUBLICS_HEADER.size)
    at = _PUBLICS_HEADER.size + _GSI_HEADER.size
    if at + hash_size > len(stream):
        raise SymbolFormatError("hash records outside the publics stream", stream=index, offset=at, structure="GSI hash")
    out = []
    for record_at in range(at, at + hash_size - 7, 8):
        (offset,) = struct.unpack_from("<I", stream, record_at)
        offset -= 1  # stored plus one
        if offset < 0 or offset + 4 > len(records):
            raise SymbolFormatError("public symbol outside the record stream", stream=index, offset=record_at, structure="GSI hash")
        length, kind = struct.unpack_from("<HH", records, offset)
        if kind != _S_PUB32 or offset + 2 + length > len(records) or length < 12:
            continue
        flags, sym_offset, segment = struct.unpack_from("<IIH", records, offset + 4)
        raw = records[offset + 14 : offset + 2 + length]
        end = raw.find(b"\0")
        name = raw[: end if end >= 0 else len(raw)].decode("utf-8", "replace")
        out.append(PublicSymbol(name, segment, sym_offset, flags, offset))
    return out
