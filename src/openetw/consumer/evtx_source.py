"""``.evtx`` files as a trace source: Windows Event Log records as ``EventRecord``s of kind ``evtx``.

The file is mapped, not read whole; its records come in record-id order (the order the log
wrote them, chunks of a wrapped log put back in order), which is time order up to the clock
adjustments of the machine that wrote them. The evtx package's damage policy decides which
records are kept (see ``openetw.evtx.reader``): what it skipped is in ``losses()``, what it only
counted (CRC32 mismatches, stale chunk headers) in ``notices()``, both in ``errors()``.
``batches()`` gives the same records a chunk at a time as columns, XML rendered by the compiled
core, without an object per record.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import Any

from openetw.consumer.evtx_files import is_evtx_file, map_file
from openetw.consumer.sources import Source
from openetw.consumer.stats import SourceStatistics
from openetw.errors import EvtxFormatError, InvalidArgument
from openetw.evtx import layout as EL
from openetw.evtx.reader import EvtxReader, RecordBatch
from openetw.evtx.record import EVTX_CONTEXT

__all__ = ["EvtxFileSource", "FileBytes", "chunk_order", "file_source", "is_evtx_file", "map_file"]


def file_source(path: str | os.PathLike[str], **options: Any) -> Source:
    """The source for a trace file of any known format (``openetw.consumer.formats``)."""
    from openetw.consumer.formats import open_source

    return open_source(path, **options)


class FileBytes:
    """A file's bytes read on demand (``len`` and slices, as the reader asks for them): a
    64 KiB chunk at a time, never the whole file, and no mapping a truncation could turn into
    SIGBUS (for a long-lived process reading a file someone else hands it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: slice) -> bytes:
        start, stop, _ = item.indices(self.size)
        return os.pread(self.fd, max(0, stop - start), start) if stop > start else b""


def chunk_order(reader: EvtxReader) -> list[int]:
    """Block indexes by their first record id (a wrapped log's oldest chunk first)."""
    firsts = []
    data = reader.data
    for index in range(reader.block_count):
        offset = EL.FILE_HEADER_SIZE + index * EL.CHUNK_SIZE
        head = bytes(data[offset : offset + 32])
        first = int.from_bytes(head[24:32], "little") if head[:8] == EL.CHUNK_MAGIC else 0
        firsts.append((first, index))
    return [index for _, index in sorted(firsts)]


class EvtxFileSource(Source):
    """Every record of an ``.evtx`` file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.name = self.path
        self.context = EVTX_CONTEXT
        self._data: Any = None
        self._reader: EvtxReader | None = None
        self._records = 0

    def open(self) -> None:
        self._data = map_file(self.path)
        self._reader = EvtxReader(self._data, path=self.path)

    def records(self) -> Iterator[Any]:
        reader = self._reader
        if reader is None:
            raise InvalidArgument("open() the source before reading its records")
        for index in self._chunk_order(reader):
            for record in reader.chunk_records(index):
                self._records += 1
                yield record

    def batches(self) -> Iterator[RecordBatch]:
        """The records of ``records()``, a chunk at a time as columns (``RecordBatch``: record
        ids, written times, positions, XML texts; an ``EvtxRecord`` only when asked for one)."""
        reader = self._reader
        if reader is None:
            raise InvalidArgument("open() the source before reading its records")
        for index in self._chunk_order(reader):
            batch = reader.chunk_batch(index)
            if batch is not None and len(batch):
                self._records += len(batch)
                yield batch

    _chunk_order = staticmethod(chunk_order)

    def statistics(self) -> SourceStatistics:
        stats = SourceStatistics()
        reader = self._reader
        if reader is not None:
            stats.buffers = reader.stats.chunks
            stats.records = stats.events_written = reader.stats.records
            stats.format_errors = len(reader.errors)
        return stats

    def errors(self) -> list[EvtxFormatError]:  # type: ignore[override]
        return list(self._reader.errors) if self._reader is not None else []

    def losses(self) -> list[EvtxFormatError]:
        """What cost a record or a chunk."""
        return self._reader.losses if self._reader is not None else []

    def notices(self) -> list[EvtxFormatError]:
        """What disagreed and was counted, nothing lost."""
        return list(self._reader.notices) if self._reader is not None else []

    def close(self) -> None:
        data, self._data = self._data, None
        self._reader = None
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:  # records still refer to it: the mapping goes with them
                pass

    def __repr__(self) -> str:
        return f"<EvtxFileSource {self.path}>"
