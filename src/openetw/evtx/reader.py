"""Reading ``.evtx`` bytes: the file header, every chunk, every event record.

The reader trusts no count: it visits every 64 KiB block after the header (dirty files keep
valid chunks past the header's chunk count), walks each chunk's records up to the free-space
offset and one record past it when the chunk was left dirty, and resynchronises on the next
record signature after damage.

The damage policy (the one every path that reads an ``.evtx`` follows): a record is kept when
its own framing holds: its signature, its size and the copy of it at its end (a record whose
copy differs is kept only when its BinXml parses and ends where it should), and BinXml that
parses (the template instances naming the definitions they point at). A chunk header is stale
in a dirty file by definition, so neither its CRC32s nor its record-id range decide anything:
a mismatch is counted (``crc_mismatches``, ``records_outside_header``) and reported in
``notices``, never a reason to drop. What is skipped is reported as ``EvtxFormatError`` (file
offset, chunk index, structure) in ``losses``; ``errors`` holds both, in file order.
Bytes in, records out: no I/O here (pass ``bytes``, a ``memoryview`` or an ``mmap``).

On the native engine (``openetw._native``) a chunk's records are parsed and rendered by the
compiled twin (``_native/_evtx.c``) as long as it accepts them; the pure parser catches up, in
the same order, when a record's nodes are asked for, and takes over the rest of the chunk at the
first record the twin leaves to it (damage included), so results, errors and counts are the same.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openetw._native import module as native_module
from openetw.errors import EvtxFormatError
from openetw.evtx import layout as L
from openetw.evtx.batch import RecordBatch
from openetw.evtx.binxml import BinXmlError, ChunkParser
from openetw.evtx.record import NATIVE_PARSED, EvtxRecord
from openetw.evtx.render import Renderer, check_expansion

_u32 = struct.Struct("<I").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_RECORD = L.RECORD_HEADER.struct.unpack_from
_NATIVE = native_module("_evtx")
_ZERO_CHUNK = bytes(L.CHUNK_SIZE)

__all__ = ["ChunkInfo", "EvtxReader", "FileHeader", "ReadStatistics", "RecordBatch", "read_file_header"]


@dataclass(frozen=True)
class FileHeader:
    """The facts of the file header (``checksum_ok`` compares the stored CRC32 with the bytes)."""

    first_chunk_number: int
    last_chunk_number: int
    next_record_identifier: int
    header_size: int
    minor_version: int
    major_version: int
    header_block_size: int
    number_of_chunks: int
    flags: int
    checksum: int
    checksum_ok: bool

    @property
    def dirty(self) -> bool:
        return bool(self.flags & L.FILE_FLAG_DIRTY)

    @property
    def full(self) -> bool:
        return bool(self.flags & L.FILE_FLAG_FULL)


@dataclass
class ChunkInfo:
    """What the reader learnt of one 64 KiB block."""

    index: int
    offset: int
    state: str  # "ok", "unused" (all zero) or "damaged"
    first_record_id: int = 0
    last_record_id: int = 0
    free_space_offset: int = 0
    flags: int = 0
    header_checksum_ok: bool = True
    records_checksum_ok: bool = True
    records: int = 0
    damaged_records: int = 0


@dataclass
class ReadStatistics:
    chunks: int = 0
    chunks_unused: int = 0
    chunks_damaged: int = 0
    records: int = 0
    records_damaged: int = 0
    records_torn: int = 0  # kept, though their size is not repeated at their end (a dirty write)
    crc_mismatches: int = 0
    records_outside_header: int = 0  # kept, though their id is outside their chunk header's range
    errors: list[EvtxFormatError] = field(default_factory=list)  # notices and losses, in file order
    notices: list[EvtxFormatError] = field(default_factory=list)  # what was counted, nothing lost

    @property
    def losses(self) -> list[EvtxFormatError]:
        """The errors that cost a record or a chunk (the notices aside)."""
        noticed = {id(notice) for notice in self.notices}
        return [error for error in self.errors if id(error) not in noticed]


def read_file_header(data: Any, path: str | None = None) -> FileHeader:
    """The file header; ``EvtxFormatError`` when the bytes are not an EVTX file."""
    if len(data) < L.FILE_HEADER_FIELDS_SIZE:
        raise EvtxFormatError(f"{len(data)} bytes are too few for a file header", offset=0, structure="file header", path=path)
    head = bytes(data[: L.FILE_HEADER_FIELDS_SIZE])
    fields = L.FILE_HEADER.unpack_from(head)
    if fields["Signature"] != L.FILE_MAGIC:
        raise EvtxFormatError(f"signature {fields['Signature']!r} is not {L.FILE_MAGIC!r}", offset=0, structure="file header", path=path)
    return FileHeader(
        first_chunk_number=fields["FirstChunkNumber"],
        last_chunk_number=fields["LastChunkNumber"],
        next_record_identifier=fields["NextRecordIdentifier"],
        header_size=fields["HeaderSize"],
        minor_version=fields["MinorVersion"],
        major_version=fields["MajorVersion"],
        header_block_size=fields["HeaderBlockSize"],
        number_of_chunks=fields["NumberOfChunks"],
        flags=fields["FileFlags"],
        checksum=fields["Checksum"],
        checksum_ok=L.file_header_checksum(head) == fields["Checksum"],
    )


class ChunkState:
    """One chunk's bytes with its BinXml parser and renderer (records keep a reference).

    ``native`` is the compiled twin's chunk while it decides (``resting`` while the pure parser
    takes a record it left); ``pending_positions`` and ``pending_sizes`` list the records it
    accepted in walk order, which ``nodes_at`` parses with the pure parser, in that order, when a
    record's nodes are needed."""

    __slots__ = (
        "index", "offset", "data", "parser", "renderer", "native", "resting", "pending_positions", "pending_sizes", "caught",
        "parsed",
    )  # fmt: skip

    def __init__(self, index: int, offset: int, data: bytes) -> None:
        self.index = index
        self.offset = offset
        self.data = data
        self.parser = ChunkParser(data)
        self.renderer = Renderer(self.parser)
        self.native: Any = _NATIVE.Chunk(data) if _NATIVE is not None else None
        self.resting: Any = None
        self.pending_positions = array("I")
        self.pending_sizes = array("I")
        self.caught = 0
        self.parsed: dict[int, list[Any]] = {}

    def catch_up(self, upto: int | None = None) -> None:
        """Parse the records the twin accepted (up to the one at ``upto``), as the walk would have."""
        parser, positions, sizes = self.parser, self.pending_positions, self.pending_sizes
        while self.caught < len(positions):
            pos, size = positions[self.caught], sizes[self.caught]
            self.caught += 1
            parser.work = 0
            try:
                self.parsed[pos] = parser.parse(pos + L.RECORD_HEADER_SIZE, pos + size - L.RECORD_TRAILER_SIZE)[0]
            finally:
                parser.work = 0
            if pos == upto:
                return

    def nodes_at(self, pos: int) -> list[Any]:
        """The nodes of the record at ``pos``, which the twin accepted."""
        nodes = self.parsed.get(pos)
        if nodes is None:
            self.catch_up(pos)
            nodes = self.parsed[pos]
        return nodes

    def go_pure(self) -> None:
        """The pure parser decides, in the twin's state: the template definitions the twin cached
        (all a walk of the accepted records would have cached; the records themselves are parsed
        when their nodes are asked for, which gives the same nodes)."""
        parser = self.parser
        try:
            for offset in self.native.templates():
                if offset not in parser.templates:
                    parser.work = 0
                    parser.template_at(offset, 0)
        except (BinXmlError, struct.error, IndexError, ValueError):
            self.catch_up()  # not expected (the twin parsed each one): the walk's own way, then
        finally:
            parser.work = 0
        self.native, self.resting = None, self.native

    def resume(self) -> None:
        """The twin decides again once its state is the pure parser's: the same template
        definitions cached (what the pure parser took since cached no other)."""
        resting = self.resting
        if resting is not None and set(resting.templates()) == self.parser.templates.keys():
            self.native, self.resting = resting, None


class EvtxReader:
    """Every record of an ``.evtx`` image, in file order (record-id order inside each chunk)."""

    def __init__(self, data: Any, *, path: str | None = None) -> None:
        self.data = data
        self.path = path
        self.header = read_file_header(data, path)
        self.stats = ReadStatistics()
        self.chunk_infos: list[ChunkInfo] = []
        if not self.header.checksum_ok:
            self._crc_mismatch(0, None, "file header", f"stored CRC32 0x{self.header.checksum:08x} does not match the header")

    @property
    def errors(self) -> list[EvtxFormatError]:
        """Everything reported: ``losses`` and ``notices`` in file order."""
        return self.stats.errors

    @property
    def losses(self) -> list[EvtxFormatError]:
        """The errors that cost a record or a chunk."""
        return self.stats.losses

    @property
    def notices(self) -> list[EvtxFormatError]:
        """What disagreed and was counted, nothing lost (CRC32 mismatches, stale chunk headers)."""
        return self.stats.notices

    @property
    def block_count(self) -> int:
        return max(0, (len(self.data) - L.FILE_HEADER_SIZE) // L.CHUNK_SIZE)

    def _error(self, message: str, offset: int, chunk: int | None, structure: str, record_id: int | None = None) -> None:
        self.stats.errors.append(
            EvtxFormatError(message, offset=offset, chunk_index=chunk, structure=structure, record_id=record_id, path=self.path)
        )

    def _crc_mismatch(self, offset: int, chunk: int | None, structure: str, message: str) -> None:
        self.stats.crc_mismatches += 1
        self._notice(f"CRC32 mismatch: {message}", offset, chunk, structure)

    def _notice(self, message: str, offset: int, chunk: int | None, structure: str) -> None:
        self._error(message, offset, chunk, structure)
        self.stats.notices.append(self.stats.errors[-1])

    def records(self, *, damaged: bool = False) -> Iterator[EvtxRecord]:
        """Every record; ``damaged=True`` also yields framed records whose BinXml is damaged
        (their ``damage`` says where; only their record header is known)."""
        for index in range(self.block_count):
            yield from self.chunk_records(index, damaged=damaged)

    def batches(self, *, damaged: bool = False, system: bool = True, data: bool = True) -> Iterator[RecordBatch]:
        """Every chunk's records as columns (``RecordBatch``), the same records ``records()``
        yields, with the same counts and errors; a block without records yields nothing.
        ``system=False`` / ``data=False``: the compiled walk does not read the ``<System>`` facts
        / the EventData fields (a reader of the XML alone does not pay for them; the batch then
        takes them from the pure tree when asked)."""
        for index in range(self.block_count):
            batch = self.chunk_batch(index, damaged=damaged, system=system, data=data)
            if batch is not None and len(batch):
                yield batch

    def chunk(self, index: int) -> ChunkState | None:
        """Block ``index`` checked and ready to parse, or ``None`` when it holds no chunk."""
        offset = L.FILE_HEADER_SIZE + index * L.CHUNK_SIZE
        data = bytes(self.data[offset : offset + L.CHUNK_SIZE])
        info = ChunkInfo(index, offset, "ok")
        self.chunk_infos.append(info)
        self.stats.chunks += 1
        if len(data) < L.CHUNK_SIZE:
            info.state = "damaged"
            self.stats.chunks_damaged += 1
            self._error(f"chunk of {len(data)} bytes (the file ends inside it)", offset, index, "chunk header")
            return None
        if data[:8] != L.CHUNK_MAGIC:
            if data == _ZERO_CHUNK:
                info.state = "unused"
                self.stats.chunks_unused += 1
                return None
            info.state = "damaged"
            self.stats.chunks_damaged += 1
            self._error(f"signature {data[:8]!r} is not {L.CHUNK_MAGIC!r}", offset, index, "chunk header")
            return None
        fields = L.CHUNK_HEADER.unpack_from(data)
        info.first_record_id = fields["FirstEventRecordIdentifier"]
        info.last_record_id = fields["LastEventRecordIdentifier"]
        info.free_space_offset = fields["FreeSpaceOffset"]
        info.flags = fields["Flags"]
        if L.chunk_header_checksum(data) != fields["Checksum"]:
            info.header_checksum_ok = False
            self._crc_mismatch(offset, index, "chunk header", f"stored 0x{fields['Checksum']:08x}")
        free = fields["FreeSpaceOffset"]
        if L.CHUNK_HEADER_SIZE <= free <= L.CHUNK_SIZE and L.chunk_records_checksum(data, free) != fields["EventRecordsChecksum"]:
            info.records_checksum_ok = False
            self._crc_mismatch(offset, index, "event records", f"stored 0x{fields['EventRecordsChecksum']:08x} over 0x200..0x{free:x}")
        return ChunkState(index, offset, data)

    def chunk_records(self, index: int, *, damaged: bool = False) -> Iterator[EvtxRecord]:
        state = self.chunk(index)
        if state is None:
            return
        path = self.path
        for item in self._chunk_walk(state, damaged):
            if isinstance(item, EvtxRecord):
                yield item
                continue
            run = RecordBatch(state, path)  # the walk's columns, <System> facts included
            run.extend_columns(*item)
            yield from run.records()

    def chunk_batch(self, index: int, *, damaged: bool = False, system: bool = True, data: bool = True) -> RecordBatch | None:
        """Block ``index``'s records as columns (``None`` when it holds no chunk); what
        ``chunk_records`` yields, walked to the end, counted and reported the same."""
        state = self.chunk(index)
        if state is None:
            return None
        batch = RecordBatch(state, self.path)
        for item in self._chunk_walk(state, damaged, system, data):
            if isinstance(item, EvtxRecord):
                batch.append_record(item)
            else:
                batch.extend_columns(*item)
        return batch

    def _chunk_walk(
        self, state: ChunkState, damaged: bool, system: bool = True, data: bool = True
    ) -> Iterator[EvtxRecord | tuple[Any, ...]]:
        info = self.chunk_infos[-1]
        free = min(max(info.free_space_offset, L.CHUNK_HEADER_SIZE), L.CHUNK_SIZE)
        outside: list[int] = []  # ids the stale chunk header does not cover (kept when framed)
        try:
            yield from self._walk(state, info, free, damaged, outside, system, data)
        finally:
            if outside:
                self.stats.records_outside_header += len(outside)
                self._notice(
                    f"{len(outside)} records (ids {min(outside)}..{max(outside)}) are outside the chunk header's "
                    f"{info.first_record_id}..{info.last_record_id} (a stale header; their framing decided)",
                    state.offset, state.index, "chunk header",
                )

    def _walk(
        self, state: ChunkState, info: ChunkInfo, free: int, damaged: bool, outside: list[int], system: bool, fields: bool
    ) -> Iterator[EvtxRecord | tuple[Any, ...]]:
        """The chunk's records: the twin's runs as columns (positions, sizes, ids, written
        times, XML texts, ``<System>`` and EventData columns), the others one ``EvtxRecord`` at a time."""
        data, base, index = state.data, state.offset, state.index
        pos = L.CHUNK_HEADER_SIZE
        previous_id: int | None = None
        while pos + L.MIN_RECORD_SIZE <= L.CHUNK_SIZE:
            if state.resting is not None:
                state.resume()
            if state.native is not None:
                # The twin takes the common records in one call; it stops at any other.
                positions, sizes, ids, written, xmls, outside_ids, pos, rejected, facts, values = state.native.walk(
                    pos, free, info.first_record_id, info.last_record_id, previous_id, system, fields
                )
                if xmls:
                    state.pending_positions.frombytes(positions)
                    state.pending_sizes.frombytes(sizes)
                    count = len(xmls)
                    info.records += count
                    self.stats.records += count
                    outside.extend(outside_ids)
                    previous_id = memoryview(ids).cast("Q")[-1]
                    yield positions, sizes, ids, written, xmls, facts, values
                if rejected:
                    state.go_pure()
                if pos + L.MIN_RECORD_SIZE > L.CHUNK_SIZE:
                    break
            problem = _frame_problem(data, pos)
            if problem is not None:
                if pos >= free:
                    break
                self._damaged_record(info, problem, base + pos, index, None)
                pos = _resync(data, pos + 1, free)
                if pos < 0:
                    break
                continue
            _, size, record_id, written = _RECORD(data, pos)
            continuing = previous_id is not None and record_id == previous_id + 1
            if pos >= free and not continuing:
                break  # stale bytes past the free-space offset, not a record this chunk finished
            # A dirty file's chunk header is stale: an id outside its range is counted, not judged.
            outside_header = not info.first_record_id <= record_id <= info.last_record_id
            torn = _u32(data, pos + size - 4)[0] != size
            end = pos + size - L.RECORD_TRAILER_SIZE
            damage = None
            xml = None
            accepted = state.native.record(pos + L.RECORD_HEADER_SIZE, end) if state.native is not None else None
            if accepted is not None:
                parsed_end, xml = accepted
                state.pending_positions.append(pos)
                state.pending_sizes.append(size)
                info.records += 1
                self.stats.records += 1
                if torn:
                    self.stats.records_torn += 1
                if outside_header:
                    outside.append(record_id)
                yield EvtxRecord(state, pos, size, record_id, written, NATIVE_PARSED, self.path, None, xml)
                previous_id = record_id
                if torn and _frame_problem(data, pos + size) is not None:
                    resume = _resync(data, parsed_end, max(free, pos + 1))
                    if resume < 0:
                        break
                    pos = resume
                    continue
                pos += size
                continue
            if state.native is not None:
                state.go_pure()
            try:
                nodes, parsed_end = state.parser.parse(pos + L.RECORD_HEADER_SIZE, end)
                check_expansion(data, nodes)
            except BinXmlError as error:
                where = error.pos if pos <= error.pos < L.CHUNK_SIZE else pos
                damage = self._damaged_record(info, error.message, base + where, index, record_id, "BinXml")
                nodes = None
            except (struct.error, IndexError, ValueError) as error:
                damage = self._damaged_record(info, f"{type(error).__name__}: {error}", base + pos, index, record_id, "BinXml")
                nodes = None
            state.parser.work = 0
            if damage is not None and damaged:
                yield EvtxRecord(state, pos, size, record_id, written, None, self.path, damage)
            if nodes is not None:
                info.records += 1
                self.stats.records += 1
                if torn:
                    self.stats.records_torn += 1
                if outside_header:
                    outside.append(record_id)
                yield EvtxRecord(state, pos, size, record_id, written, nodes, self.path)
            previous_id = record_id
            if torn and (nodes is None or _frame_problem(data, pos + size) is not None):
                # The size is not repeated: trust it only as far as the next record signature.
                resume = _resync(data, (parsed_end if nodes is not None else pos + 1), max(free, pos + 1))
                if resume < 0:
                    break
                pos = resume
                continue
            pos += size

    def _damaged_record(
        self, info: ChunkInfo, message: str, offset: int, chunk: int, record_id: int | None, structure: str = "event record"
    ) -> EvtxFormatError:
        info.damaged_records += 1
        self.stats.records_damaged += 1
        self._error(message, offset, chunk, structure, record_id)
        return self.stats.errors[-1]


def _frame_problem(data: bytes, pos: int) -> str | None:
    """Why the bytes at ``pos`` are not a framed event record (``None`` when they are)."""
    if pos + L.MIN_RECORD_SIZE > L.CHUNK_SIZE:
        return "no room for a record"
    if data[pos : pos + 4] != L.RECORD_MAGIC:
        return f"signature {bytes(data[pos : pos + 4])!r} is not {L.RECORD_MAGIC!r}"
    size = _u32(data, pos + 4)[0]
    if size < L.MIN_RECORD_SIZE or pos + size > L.CHUNK_SIZE:
        return f"record size {size} does not fit the chunk"
    return None


def _resync(data: bytes, start: int, free: int) -> int:
    """The next framed record from ``start`` before the free-space offset, or -1."""
    pos = data.find(L.RECORD_MAGIC, start, free)
    while pos >= 0:
        if _frame_problem(data, pos) is None and _u32(data, pos + _u32(data, pos + 4)[0] - 4)[0] == _u32(data, pos + 4)[0]:
            return pos
        pos = data.find(L.RECORD_MAGIC, pos + 1, free)
    return -1
