"""EventPipe traces (``.nettrace``, ``.netperf``) as a trace source: their events as ETW ``EventRecord``s.

The file is mapped, not read whole; ``openetw.nettrace`` reads the container and turns each
event into an EVENT_HEADER record (see ``openetw.nettrace.records``), in time order. On the
compiled core the rows of versions 1-3 come from the compiled walk as columns and the records
are made from those (``RecordBuilder.column_records``); the per-event path is the reference. The
runtime's events get their header's task and opcode from the .NET layouts openetw ships, so
they read as the same events on ETW would. Damage: what cost events is in ``losses()`` (every
good event before it was kept), what was only counted (events the runtime dropped, payloads
cut to ETW's 64 KiB) in ``notices()``.
"""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from openetw.consumer.evtx_files import map_file
from openetw.consumer.sources import Source
from openetw.consumer.stats import SourceStatistics
from openetw.errors import InvalidArgument, NettraceFormatError
from openetw.etl.record import EventRecord

__all__ = ["NettraceFileSource", "shipped_layout"]

_REGISTRY: Any = None


def shipped_layout(provider: uuid.UUID, event_id: int, version: int) -> Any:
    """The schema openetw ships for a .NET runtime event (or ``None``)."""
    global _REGISTRY
    if _REGISTRY is None:
        from openetw.tdh.registry import SchemaRegistry

        _REGISTRY = SchemaRegistry(kernel=False, builtin=True)
    probe = SimpleNamespace(kind="event", flags=0, provider_guid_bytes=provider.bytes_le, provider_id=provider, id=event_id, version=version)
    return _REGISTRY.schema_for(probe)


class NettraceFileSource(Source):
    """Every event of an EventPipe trace file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.name = self.path
        self._data: Any = None
        self._reader: Any = None
        self._builder: Any = None
        self._records = 0
        self._notices: list[NettraceFormatError] = []

    def open(self) -> None:
        from openetw.nettrace.reader import NettraceReader
        from openetw.nettrace.records import RecordBuilder

        try:
            self._data = map_file(self.path)
        except InvalidArgument:
            raise InvalidArgument(f"no such file: {self.path}") from None
        self._reader = NettraceReader(self._data, path=self.path)
        self._builder = RecordBuilder(self._reader.info, source=self.path, describe=shipped_layout)
        self.context = self._builder.context

    @property
    def info(self) -> Any:
        """The trace's Trace object (``openetw.nettrace.TraceInfo``)."""
        return self._reader.info if self._reader is not None else None

    def facts(self) -> dict[str, Any]:
        """What the Trace object says, in the terms of an ``.etl`` logfile header (``openetw info``)."""
        info = self.info
        if info is None:
            return {}
        from openetw.etl.clock import filetime_to_iso

        return {
            "logger_name": "EventPipe", "version": f"{'nettrace' if info.nettrace else 'netperf'} {info.version}",
            "pointer_size": info.pointer_size, "number_of_processors": info.processors, "clock": "QPC", "clock_type": 1,
            "perf_freq": info.qpc_frequency, "start_time": filetime_to_iso(info.sync_time_filetime), "process_id": info.process_id,
        }  # fmt: skip

    def records(self) -> Iterator[EventRecord]:
        reader, builder = self._reader, self._builder
        if reader is None:
            raise InvalidArgument("open() the source before reading its records")
        record = builder.record
        try:
            if reader.has_row_columns:  # versions 1-3 on the compiled walk: records made from its columns
                for made in builder.column_records(reader):
                    self._records += 1
                    yield made
                return
            for event in reader.events():
                self._records += 1
                yield record(event)
        finally:
            self._notices = list(reader.notices)
            if builder.truncated:
                self._notices.append(
                    NettraceFormatError(f"{builder.truncated} event payloads were cut to ETW's 64 KiB record size", structure="event payload", path=self.path)
                )

    def statistics(self) -> SourceStatistics:
        stats = SourceStatistics()
        reader = self._reader
        if reader is not None:
            stats.buffers = reader.stats.blocks
            stats.records = stats.events_written = self._records
            stats.events_lost = reader.stats.dropped
            stats.format_errors = len(reader.losses)
        return stats

    def errors(self) -> list[NettraceFormatError]:  # type: ignore[override]
        return [*self.losses(), *self.notices()]

    def losses(self) -> list[NettraceFormatError]:
        """What cost events (the rest of a block, the rest of the file)."""
        return list(self._reader.losses) if self._reader is not None else []

    def notices(self) -> list[NettraceFormatError]:
        """What was counted, nothing of the file lost (events the runtime dropped, cut payloads)."""
        return list(self._notices)

    def close(self) -> None:
        data, self._data = self._data, None
        if self._reader is not None:
            self._reader.data = b""  # its statistics and losses stay readable
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:
                pass

    def __repr__(self) -> str:
        return f"<NettraceFileSource {self.path}>"
