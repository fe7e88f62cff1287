"""ETL writer: records into per-processor buffers, buffers into an uncompressed file, as Windows does.

Buffer 0 is the header buffer holding the logfile header record; it is written first (so a file
cut short by a crash still reads) and written again on ``close()`` with the final counts.
Every buffer has the same size; the unused tail is filled with 0xFF.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from openetw import hostinfo
from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock, unix_ns_to_filetime
from openetw.etl.framing import aligned
from openetw.etl.logfile import LogfileHeader, encode_logfile_header
from openetw.etl.record import DEFAULT_CONTEXT, EventRecord, UnknownRecord
from openetw.safeio import create_output

DEFAULT_BUFFER_SIZE = 64 * 1024
MIN_BUFFER_SIZE = 1024
MAX_BUFFER_SIZE = 16 << 20
_BH_SIZE = L.BUFFER_HEADER_SIZE
_WINDOWS_TIMER_RESOLUTION = 156_250  # 15.625 ms in 100 ns units, what Windows reports


def linux_trace_clock() -> TraceClock:
    """QPC = CLOCK_MONOTONIC in nanoseconds (PerfFreq 1e9), anchored to the wall clock now."""
    mono = time.monotonic_ns()
    wall = time.time_ns()
    return TraceClock(L.CLOCK_QPC, unix_ns_to_filetime(wall), mono, 1_000_000_000)


def header_buffer(header: LogfileHeader, logger_id: int, buffer_size: int | None = None) -> bytes:
    """Buffer 0 of a file: the logfile header record in a header-type buffer of ``buffer_size``
    bytes (the header's own BufferSize unless given)."""
    size = header.buffer_size if buffer_size is None else buffer_size
    payload = encode_logfile_header(header)
    header_type = L.HEADER_TYPE_SYSTEM64 if header.header_record_pointer_size == 8 else L.HEADER_TYPE_SYSTEM32
    record_size = L.SYSTEM_TRACE_HEADER.size + len(payload)
    record = L.SYSTEM_TRACE_HEADER.pack(2, header_type, L.MARKER_FLAGS_TYPED, record_size, 0, 0, os.getpid(), header.reference_timestamp, 0, 0) + payload
    used = _BH_SIZE + aligned(len(record))
    if used > size:
        raise InvalidArgument(f"buffer size {size} cannot hold the logfile header record ({used} bytes)")
    data = bytearray(b"\xff") * size
    data[_BH_SIZE : _BH_SIZE + len(record)] = record
    data[_BH_SIZE + len(record) : used] = bytes(used - _BH_SIZE - len(record))
    data[:_BH_SIZE] = L.WMI_BUFFER_HEADER.pack(
        size, used, used, 0, header.reference_timestamp, 0, 0, 0, logger_id, 3, used,
        L.BUFFER_FLAG_PROCESSOR_INDEX, L.BUFFER_TYPE_HEADER, bytes(16),
    )
    return bytes(data)


def new_logfile_header(
    *,
    clock: TraceClock,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    pointer_size: int = 8,
    logger_name: str = "openetw",
    logfile_name: str = "",
    number_of_processors: int | None = None,
    log_file_mode: int = L.EVENT_TRACE_FILE_MODE_SEQUENTIAL,
    maximum_file_size: int = 0,
    os_version: tuple[int, int, int, int] = (10, 0, 1, 5),
    provider_version: int = 0,
    boot_time: int = 0,
    cpu_speed_mhz: int | None = None,
) -> LogfileHeader:
    major, minor, sub, subminor = os_version
    return LogfileHeader(
        buffer_size=buffer_size,
        version=major | minor << 8 | sub << 16 | subminor << 24,
        provider_version=provider_version,
        number_of_processors=number_of_processors or os.cpu_count() or 1,
        end_time=0,
        timer_resolution=_WINDOWS_TIMER_RESOLUTION,
        maximum_file_size=maximum_file_size,
        log_file_mode=log_file_mode,
        buffers_written=0,
        start_buffers=0,
        pointer_size=pointer_size,
        events_lost=0,
        cpu_speed_mhz=cpu_speed_mhz or hostinfo.cpu_speed_mhz(),
        boot_time=boot_time,
        perf_freq=clock.perf_freq,
        start_time=clock.start_time,
        clock_type=clock.clock_type,
        buffers_lost=0,
        logger_name=logger_name,
        logfile_name=logfile_name,
        reference_timestamp=clock.reference_timestamp,
        header_record_pointer_size=pointer_size,
        logger_name_ptr=1,
        logfile_name_ptr=2,
    )


class _OpenBuffer:
    __slots__ = ("data", "pos", "last_timestamp", "events_lost_before")

    def __init__(self, size: int) -> None:
        self.data = bytearray(b"\xff") * size
        self.pos = _BH_SIZE
        self.last_timestamp = 0
        self.events_lost_before = False


def _opener(mode: int) -> Callable[[str, int], int]:
    def opener(path: str, flags: int) -> int:
        return create_output(path, mode, flags & ~(os.O_CREAT | os.O_TRUNC))

    return opener


class EtlWriter:
    """Writes records to an ``.etl`` file.

    ``EtlWriter(path_or_file, header=new_logfile_header(clock=linux_trace_clock()))``; then
    ``write(record)`` for each record (records keep their own header type, so 32- and 64-bit
    records can share a file), ``add_lost(...)``, ``flush()``, ``close()``. Records from another
    clock are converted to this file's clock through their wall-clock time.
    """

    def __init__(
        self, target: str | os.PathLike[str] | BinaryIO, *, header: LogfileHeader, logger_id: int = 1, file_mode: int | None = None
    ) -> None:
        if not MIN_BUFFER_SIZE <= header.buffer_size <= MAX_BUFFER_SIZE or header.buffer_size % 8:
            raise InvalidArgument(f"buffer size {header.buffer_size} must be a multiple of 8 from {MIN_BUFFER_SIZE} to {MAX_BUFFER_SIZE}")
        if header.pointer_size not in (4, 8):
            raise InvalidArgument(f"pointer size must be 4 or 8, not {header.pointer_size}")
        if isinstance(target, (str, os.PathLike)):
            # ``file_mode``: the file's permissions at most, also when it existed (0o600 for traces of others' processes).
            self._file: BinaryIO = open(target, "wb", opener=None if file_mode is None else _opener(file_mode))  # noqa: SIM115 - closed in close()
            self._owns_file = True
        else:
            self._file = target
            self._owns_file = False
        self.header = header
        self.clock = header.clock
        self.buffer_size = header.buffer_size
        self.logger_id = logger_id
        self._open: dict[int, _OpenBuffer] = {}
        self._open_blocks: dict[int, _OpenBuffer] = {}  # write_block()'s own per-processor buffers
        self._sequence = 0
        self._buffers_written = 0
        self._events_lost = header.events_lost
        self._buffers_lost = header.buffers_lost
        self._max_timestamp: int | None = None  # the latest record's timestamp: EndTime
        self._loss_flags = 0  # BufferFlag bits the next buffer written carries
        self.records_written = 0
        self.records_refused = 0
        self._closed = False
        self._header_offset = self._tell()
        self._write_header_buffer()

    # -- public -------------------------------------------------------------------------------
    def write(self, record: EventRecord) -> bool:
        """Append one record. Returns False (and counts the event lost) when it cannot fit a buffer.

        A record read from another file is moved to this file's clock; a record built without a
        context (``DEFAULT_CONTEXT``) is taken to carry this file's clock already.
        """
        if isinstance(record, UnknownRecord):
            self.records_refused += 1
            return False
        if record.context is not DEFAULT_CONTEXT and record.context.clock != self.clock:
            record = record.with_timestamp(self.clock.from_filetime(record.filetime))
        return self.write_raw(record.raw, record.cpu, record.timestamp)

    def write_raw(self, raw: bytes, cpu: int, timestamp: int) -> bool:
        """Append a record given as its bytes (header included), on processor ``cpu``."""
        size = len(raw)
        aligned = (size + 7) & ~7
        if aligned > self.buffer_size - _BH_SIZE or size < 8:
            self._events_lost += 1
            self.records_refused += 1
            buffer = self._buffer_for(cpu)
            buffer.events_lost_before = True
            return False
        buffer = self._buffer_for(cpu)
        if buffer.pos + aligned > self.buffer_size:
            self._flush_buffer(cpu, buffer)
            buffer = self._open[cpu] = _OpenBuffer(self.buffer_size)
        pos = buffer.pos
        buffer.data[pos : pos + size] = raw
        if aligned != size:
            buffer.data[pos + size : pos + aligned] = bytes(aligned - size)
        buffer.pos = pos + aligned
        buffer.last_timestamp = timestamp
        if self._max_timestamp is None or timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        self.records_written += 1
        return True

    def write_block(self, block: bytes, cpu: int, row_size: int, timestamps: Sequence[int]) -> int:
        """Append ``len(block) // row_size`` records of processor ``cpu`` given as one block:
        every record ``row_size`` bytes (a multiple of 8, its padding included), in time order,
        ``timestamps`` theirs. Returns how many were written (all, or none when ``row_size``
        cannot be a record here).

        These records go to per-processor buffers of their own, apart from :meth:`write`'s:
        each buffer stays in time order, and readers merge buffers by time as ETW's do.
        """
        count = len(block) // row_size if row_size > 0 else 0
        if row_size < 8 or row_size % 8 or row_size > self.buffer_size - _BH_SIZE:
            self._events_lost += count
            self.records_refused += count
            return 0
        if not count:
            return 0
        view = memoryview(block)
        blocks = self._open_blocks
        buffer = blocks.get(cpu)
        if buffer is None:
            buffer = blocks[cpu] = _OpenBuffer(self.buffer_size)
        done = 0
        while done < count:
            room = (self.buffer_size - buffer.pos) // row_size
            if room == 0:
                self._flush_buffer(cpu, buffer)
                buffer = blocks[cpu] = _OpenBuffer(self.buffer_size)
                continue
            take = min(room, count - done)
            pos = buffer.pos
            buffer.data[pos : pos + take * row_size] = view[done * row_size : (done + take) * row_size]
            buffer.pos = pos + take * row_size
            done += take
            buffer.last_timestamp = int(timestamps[done - 1])
        last = int(timestamps[count - 1])
        if self._max_timestamp is None or last > self._max_timestamp:
            self._max_timestamp = last
        self.records_written += count
        return count

    def write_all(self, records: Iterable[EventRecord]) -> int:
        written = 0
        for record in records:
            written += self.write(record)
        return written

    def add_lost(self, events: int = 0, buffers: int = 0) -> None:
        """Count events or buffers lost upstream; the next buffer written carries the loss flags."""
        self._events_lost += events
        self._buffers_lost += buffers
        if events:
            self._loss_flags |= L.BUFFER_FLAG_EVENTS_LOST
        if buffers:
            self._loss_flags |= L.BUFFER_FLAG_BUFFER_LOST

    def flush(self) -> None:
        """Write every partly filled buffer now (a flush-timer tick), then refresh the header."""
        for buffers in (self._open, self._open_blocks):
            for cpu, buffer in list(buffers.items()):
                if buffer.pos > _BH_SIZE:
                    self._flush_buffer(cpu, buffer)
                    buffers[cpu] = _OpenBuffer(self.buffer_size)
        self._rewrite_header_buffer()
        self._file.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for buffers in (self._open, self._open_blocks):
            for cpu in sorted(buffers):
                buffer = buffers[cpu]
                if buffer.pos > _BH_SIZE:
                    self._flush_buffer(cpu, buffer)
            buffers.clear()
        self._rewrite_header_buffer()
        self._file.flush()
        if self._owns_file:
            self._file.close()

    def __enter__(self) -> EtlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def buffers_written(self) -> int:
        """Buffers in the file, the header buffer included."""
        return self._buffers_written

    @property
    def events_lost(self) -> int:
        return self._events_lost

    # -- buffers ------------------------------------------------------------------------------
    def _tell(self) -> int:
        try:
            return self._file.tell()
        except (OSError, AttributeError):
            return 0

    def _buffer_for(self, cpu: int) -> _OpenBuffer:
        buffer = self._open.get(cpu)
        if buffer is None:
            buffer = self._open[cpu] = _OpenBuffer(self.buffer_size)
        return buffer

    def _buffer_header(self, *, used: int, cpu: int, timestamp: int, flags: int, buffer_type: int) -> bytes:
        self._sequence += 1
        return L.WMI_BUFFER_HEADER.pack(
            self.buffer_size, used, used, 0, timestamp, self._sequence, 0, cpu & 0xFFFF,
            self.logger_id, 3, used, flags, buffer_type, b"\0" * 16,
        )

    def _flush_buffer(self, cpu: int, buffer: _OpenBuffer) -> None:
        flags = L.BUFFER_FLAG_PROCESSOR_INDEX | (L.BUFFER_FLAG_EVENTS_LOST if buffer.events_lost_before else 0) | self._loss_flags
        self._loss_flags = 0
        header = self._buffer_header(used=buffer.pos, cpu=cpu, timestamp=buffer.last_timestamp, flags=flags, buffer_type=L.BUFFER_TYPE_GENERIC)
        buffer.data[:_BH_SIZE] = header
        self._file.write(buffer.data)
        self._buffers_written += 1

    def _header_buffer_bytes(self) -> bytes:
        header = self.header.with_(
            buffers_written=self._buffers_written if self._closed or self._buffers_written else 1,
            events_lost=self._events_lost,
            buffers_lost=self._buffers_lost,
            end_time=self.clock.to_filetime(self._max_timestamp) if self._max_timestamp is not None else self.header.end_time,
        )
        return header_buffer(header, self.logger_id, self.buffer_size)

    def _write_header_buffer(self) -> None:
        self._buffers_written = 1
        self._file.write(self._header_buffer_bytes())
        self._file.flush()  # on disk at once: a writer killed before its first flush leaves a readable file

    def _rewrite_header_buffer(self) -> None:
        try:
            position = self._file.tell()
            self._file.seek(self._header_offset)
            self._file.write(self._header_buffer_bytes())
            self._file.seek(position)
        except (OSError, AttributeError, ValueError):
            pass  # not seekable (a pipe): the header keeps its opening values


def relog_header(first: LogfileHeader, *, buffer_size: int, events_lost: int, buffers_lost: int, clock: TraceClock, logfile_name: str = "") -> LogfileHeader:
    """The header of a relogged file: the first input's facts, uncompressed, relog mode, new counts."""
    major, minor, _, _ = first.os_version
    mode = (first.log_file_mode & ~L.EVENT_TRACE_COMPRESSED_MODE) | L.EVENT_TRACE_RELOG_MODE
    return first.with_(
        buffer_size=buffer_size,
        version=major | minor << 8 | 2 << 16,
        log_file_mode=mode,
        events_lost=events_lost,
        buffers_lost=buffers_lost,
        buffers_written=0,
        perf_freq=clock.perf_freq,
        start_time=clock.start_time,
        clock_type=clock.clock_type,
        reference_timestamp=clock.reference_timestamp,
        logfile_name=logfile_name or first.logfile_name,
    )

