"""``RecordBatch``: one chunk's event records as columns, an ``EvtxRecord`` only when asked.

``EvtxReader.batches()`` gives the records ``records()`` yields, a chunk at a time, without an
object per record: their positions in the chunk, sizes, record ids, written times (FILETIME)
and XML texts, each a column. The compiled twin fills the columns in one call per run of
records it accepts; a record it leaves to the pure parser is kept as the ``EvtxRecord`` that
parser made (its ``xml`` entry is ``None``: ``xml_text(i)`` renders it, or raises the same
``EvtxFormatError`` as ``record(i).xml()``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from openetw.evtx.record import NATIVE_PARSED, EvtxRecord

if TYPE_CHECKING:
    from openetw.evtx.reader import ChunkState

__all__ = ["RecordBatch"]


class RecordBatch:
    """The records of one chunk, in walk order (record-id order inside the chunk)."""

    __slots__ = ("_chunk", "path", "positions", "sizes", "record_ids", "written_times", "xml", "_records")

    def __init__(self, chunk: ChunkState, path: str | None = None) -> None:
        self._chunk = chunk
        self.path = path
        self.positions = array("I")  # where each record starts in its chunk
        self.sizes = array("I")
        self.record_ids = array("Q")
        self.written_times = array("Q")
        self.xml: list[str | None] = []  # None: ``xml_text`` renders it (or says why it cannot)
        self._records: dict[int, EvtxRecord] = {}

    def extend_columns(self, positions: bytes, sizes: bytes, ids: bytes, written: bytes, xml: list[str | None]) -> None:
        """Adds a run of records: packed u32 positions and sizes, u64 ids and written times."""
        self.positions.frombytes(positions)
        self.sizes.frombytes(sizes)
        self.record_ids.frombytes(ids)
        self.written_times.frombytes(written)
        self.xml.extend(xml)

    def append_record(self, record: EvtxRecord) -> None:
        """Adds a record the reader made one at a time (kept as it is)."""
        self._records[len(self.xml)] = record
        self.positions.append(record._pos)
        self.sizes.append(record._size)
        self.record_ids.append(record.record_id)
        self.written_times.append(record.written_time)
        self.xml.append(record._xml)

    def __len__(self) -> int:
        return len(self.xml)

    @property
    def chunk_index(self) -> int:
        return self._chunk.index

    @property
    def chunk_offset(self) -> int:
        """Where the chunk starts in the file (a record's file offset is this plus its position)."""
        return self._chunk.offset

    def file_offsets(self) -> list[int]:
        base = self._chunk.offset
        return [base + pos for pos in self.positions]

    def record(self, i: int) -> EvtxRecord:
        """The ``EvtxRecord`` of row ``i`` (made on first request, then kept)."""
        record = self._records.get(i)
        if record is None:
            record = EvtxRecord(
                self._chunk, self.positions[i], self.sizes[i], self.record_ids[i], self.written_times[i],
                NATIVE_PARSED, self.path, None, self.xml[i],
            )  # fmt: skip
            self._records[i] = record
        return record

    def records(self) -> Iterator[EvtxRecord]:
        for i in range(len(self.xml)):
            yield self.record(i)

    def xml_text(self, i: int) -> str:
        """Row ``i`` as ``wevtutil qe /f:xml`` prints it; ``EvtxFormatError`` as ``record(i).xml()``."""
        text = self.xml[i]
        return text if text is not None else self.record(i).xml()

    def xml_texts(self) -> Iterator[str]:
        """Every row's XML in order (``EvtxFormatError`` at the first whose values are damaged)."""
        for i, text in enumerate(self.xml):
            yield text if text is not None else self.record(i).xml()

    def __repr__(self) -> str:
        return f"<RecordBatch chunk={self._chunk.index} records={len(self.xml)}>"
