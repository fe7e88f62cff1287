"""Where a trace's records come from: files and live sessions, one interface.

A ``Source`` gives ``EventRecord``s in time order (``records()``), its statistics, and errors it
met (loss is data: a damaged buffer is skipped, counted and reported, never silently dropped).
A trace merges its sources by wall-clock time, as ``openetw relog`` does.

A live real-time session is one more ``Source`` (``openetw.consumer.live``): it yields the
records of the ETL buffers the trace service delivers, as they come, and ends when the session
stops or ``stop()`` is called (``records_from_buffer`` turns one buffer into records for
sources that receive bare buffers).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from openetw.consumer._engine.index_walk import single_buffer, walk_chains
from openetw.consumer.index import EtlIndex
from openetw.consumer.stats import SourceStatistics
from openetw.errors import EtlFormatError
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.logfile import LogfileHeader
from openetw.etl.reader import EtlReader
from openetw.etl.record import RECORD_CLASSES, EventRecord, MessageRecord, RecordContext, UnknownRecord

__all__ = ["FileSource", "RecordSource", "Source", "records_from_buffer"]


class Source:
    """One stream of records for a trace."""

    name: str = "<source>"
    live: bool = False
    header: LogfileHeader | None = None
    context: RecordContext | None = None
    index: EtlIndex | None = None

    def open(self) -> None:
        """Get ready to give records (read headers, connect); errors raise here."""

    def records(self) -> Iterator[EventRecord]:
        """Every record, in time order."""
        raise NotImplementedError

    def statistics(self) -> SourceStatistics:
        return SourceStatistics()

    def errors(self) -> list[EtlFormatError]:
        """What went wrong so far (damage that was skipped)."""
        return []

    def losses(self) -> list[Any]:
        """What cost records (a command reading the source fails on these after its output)."""
        return list(self.errors())

    def notices(self) -> list[Any]:
        """What disagreed and was only counted, nothing lost (a command warns)."""
        return []

    def stop(self) -> None:
        """Ask a live source to end its record stream (files end by themselves)."""

    def close(self) -> None:
        """Release files and connections."""


class FileSource(Source):
    """An ``.etl`` file, read through its index (``index=True``; kept in the user's cache, or
    beside the file with ``index_beside=True``) or streamed with ``EtlReader``."""

    def __init__(
        self, path: str | os.PathLike[str], *, index: bool = True, index_dir: str | os.PathLike[str] | None = None, index_beside: bool | None = None,
    ) -> None:  # fmt: skip
        self.path = os.fspath(path)
        self.name = self.path
        self.use_index = index
        self.index_dir = index_dir
        self.index_beside = index_beside
        self._reader: EtlReader | None = None
        self._stream_errors: list[EtlFormatError] = []
        self._streamed: Any = None

    def open(self) -> None:
        if self.use_index:
            self.index = EtlIndex.open(self.path, cache_dir=self.index_dir, beside=self.index_beside)
            self.header, self.context = self.index.header, self.index.context
        else:
            with EtlReader(self.path, strict=False) as reader:
                self.header, self.context = reader.header, reader.context

    def records(self) -> Iterator[EventRecord]:
        """The records in time order (through the index when there is one)."""
        if self.index is not None:
            for segment in self.index.segments():
                yield from segment.loader().records(np.arange(len(segment)))
            return
        reader = EtlReader(self.path, strict=False)
        self._reader = reader
        try:
            yield from reader.records(time_order=True)
        finally:
            self._stream_errors = list(reader.stats.errors)
            self._streamed = reader.stats
            reader.close()

    def statistics(self) -> SourceStatistics:
        header = self.header
        stats = SourceStatistics()
        if header is not None:
            stats.events_lost = header.events_lost
            stats.buffers_written = header.buffers_written
            stats.log_buffers_lost = header.buffers_lost
        if self.index is not None and not self.index.complete:
            return stats  # counted once the first pass is done
        if self.index is not None:
            counted = self.index.read_stats
            stats.buffers = counted.get("buffers", 0)
            stats.records = stats.events_written = counted.get("records", 0)
            stats.unknown_records = counted.get("unknown_records", 0)
            stats.skipped_bytes = counted.get("skipped_bytes", 0)
            stats.buffers_with_events_lost_flag = counted.get("buffers_with_events_lost_flag", 0)
            stats.format_errors = len(self.index.errors)
        else:
            streamed = self._reader.stats if self._reader is not None else self._streamed
            if streamed is not None:
                stats.buffers = streamed.buffers
                stats.records = stats.events_written = streamed.records
                stats.unknown_records = streamed.unknown_records
                stats.skipped_bytes = streamed.skipped_bytes
                stats.buffers_with_events_lost_flag = streamed.buffers_with_events_lost_flag
                stats.format_errors = len(streamed.errors)
        return stats

    def errors(self) -> list[EtlFormatError]:
        if self.index is not None:
            if not self.index.complete:
                return []  # known once the first pass is done
            return self.index.format_errors()
        if self._reader is not None:
            return list(self._reader.stats.errors)
        return list(self._stream_errors)

    def close(self) -> None:
        """Close the trace file the index read buffers from (statistics stay readable; a later
        read opens it again)."""
        if self.index is not None:
            self.index.file_buffers.close()

    def __repr__(self) -> str:
        return f"<FileSource {self.path}{' (indexed)' if self.index is not None else ''}>"


class RecordSource(Source):
    """Records already in memory (built by ``openetw.testing``, or kept from elsewhere)."""

    def __init__(self, records: Any, name: str = "<records>") -> None:
        self._records = list(records)
        self.name = name

    def records(self) -> Iterator[EventRecord]:
        return iter(self._records)

    def statistics(self) -> SourceStatistics:
        return SourceStatistics(records=len(self._records), events_written=len(self._records))


def records_from_buffer(data: bytes, context: RecordContext, index: int = 0) -> Iterator[EventRecord]:
    """The records of one uncompressed ETL buffer (header included), in buffer order.

    Damage ends the buffer's records: what follows an unreadable size is skipped (an
    ``UnknownRecord`` keeps bytes that do not start with a record header).
    """
    buffers = single_buffer(data, index)
    chains = walk_chains(buffers)
    cpu = buffers.infos[0].cpu
    for offset, size in zip(chains.offsets.tolist(), chains.sizes.tolist(), strict=True):
        row = F.kind_of_marker(int.from_bytes(buffers.blob[offset : offset + 4], "little"))
        cls = RECORD_CLASSES.get(row.header_type) if row is not None and row is not F.MESSAGE_KIND else None
        if cls is not None:
            yield cls(cls.layout.unpack_from(data, offset), data, offset, size, cpu, context, index)  # type: ignore[union-attr]
        else:
            yield MessageRecord(L.MESSAGE_TRACE_HEADER.unpack_from(data, offset), data, offset, size, cpu, context, index)
    for offset, size, _, reason in chains.unknown:
        yield UnknownRecord(data, offset, size, cpu, context, index, reason)
