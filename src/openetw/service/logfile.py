"""A session's log file, written from whole ETL buffers as the pools hand them over.

Buffer 0 is the header buffer (the logfile header record); it is written first, so a service
killed at any time leaves a file that reads up to its last complete buffer, and written again on
every flush and at the end with BuffersWritten, EventsLost, BuffersLost and EndTime. Every other
buffer is a pool buffer, appended as it is.

The file's descriptor comes from the controller; this module never opens a path. A new-file
session gets each next file from ``open_next(sequence)``, which the service provides.

Modes:

* sequential: append; with a maximum size, a buffer that would pass it is not written and
  counts as a log buffer lost (its events as events lost), as ETW does once the file is full;
* circular: when the next buffer would pass the maximum size, writing goes on at the first
  buffer after the header, overwriting the oldest. The header's BuffersWritten counts the
  buffers the file holds (the header buffer included), so that readers that trust it (dissect.etl)
  read the file to its end and no further; the session's statistics count every buffer ever
  written. A reader wanting time order sorts buffers by their timestamps;
* new file: when the next buffer would pass the maximum size, the file is finished and the
  next one (``%d`` replaced by 1, 2, ...) begins with its own header buffer.

Buffers reach the disk from a writer thread of the file's own: ``write`` decides where a buffer
goes and queues it, so the service's loop never waits for the disk and keeps taking buffers out
of the pools while a write stalls. At most ``max_queued_bytes`` (64 MB) wait; past that ``write``
waits for the disk. ``flush()`` and ``close()`` return once everything queued is written. A
queued write that fails is raised by the next ``write``, ``flush`` or ``close``; the buffers it
and the writes queued after it held count as lost in the file's header (``buffers_written``
goes down by as many); ``take_failed_writes`` tells the session which of them it had counted
written. Buffers queued one after the other go to the disk in one ``pwritev``.

A regular file whose buffer size is a multiple of 4 KiB is written with ``O_DIRECT`` (set on the
descriptor), from page-aligned copies: through the page cache a 64 KB buffer cost the service
15-220 us of kernel time on a loaded machine (allocating and accounting dirty pages), directly
about 6 us, and the file's bytes are the same. A file system that refuses ``O_DIRECT``, or a
write it refuses with EINVAL, makes the file go on through the page cache.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from openetw.etl import framing as F
from openetw.etl.clock import TraceClock
from openetw.etl.writer import header_buffer, new_logfile_header

__all__ = ["LogFile", "WriteResult", "count_records", "header_buffer"]

_u32 = struct.Struct("<I").unpack_from
_BYTES = [bytes((value,)) for value in range(256)]
_WORTHWHILE_RUN = 8  # a shorter run costs more than walking it
_RECORDS_START, _OFFSET_AT, _TIMESTAMP_AT = F.RECORDS_START, F.BUFFER_OFFSET_AT, F.BUFFER_TIMESTAMP_AT
_MIN_SIZE, _PAD, _ALIGN = F.MIN_RECORD_SIZE, F.RECORD_ALIGNMENT - 1, -F.RECORD_ALIGNMENT
# Pool buffers hold producer records only, whose Size is their first u16: a walk reads the u16
# at each record's start (see framing.PRODUCER_SIZE_AT).
assert F.PRODUCER_SIZE_AT == 0
MAX_QUEUED_BYTES = 64 << 20
_DIRECT_ALIGNMENT = 4096  # O_DIRECT wants offsets, lengths and memory aligned to the block size


def count_records(buffer: bytes | mmap.mmap) -> int:
    """How many records a pool buffer holds: a walk over their sizes, nothing decoded.

    This runs for every buffer the service takes, so it is the service's main cost per event.
    Pool buffers hold producer records (EVENT_HEADER, EVENT_TRACE_HEADER), whose Size comes
    first; ``framing.walk`` is the reference this count is tested against.
    A producer often writes the same event again and again: when the next record has the size
    of the last one, the records that follow with that size are counted at once, in C (the
    size's two bytes at every stride, see ``_same_size_run``). Walking on is the same count,
    only slower; runs are no longer tried in a buffer once one turns out short.
    """
    used = min(_u32(buffer, _OFFSET_AT)[0], len(buffer))
    last = used - _MIN_SIZE  # where the last record that can be counted starts, at the latest
    with memoryview(buffer) as view, view[: len(buffer) & ~1].cast("H") as sizes:
        position, count = _RECORDS_START, 0
        try_runs = True
        while position <= last:
            size = sizes[position >> 1]
            if size < _MIN_SIZE:
                break
            step = (size + _PAD) & _ALIGN
            position += step
            count += 1
            if try_runs and position <= last and sizes[position >> 1] == size:
                run = _same_size_run(buffer, position, last, step, size)
                position += run * step
                count += run
                try_runs = run >= _WORTHWHILE_RUN
    return count


def _same_size_run(buffer: bytes | mmap.mmap, position: int, last: int, step: int, size: int) -> int:
    """How many records of ``size`` follow one another from ``position`` (at most up to
    ``last``): the sizes' low bytes at every ``step`` and their high bytes, each stripped of
    the expected byte; the shorter of the two matching prefixes is the run."""
    low = buffer[position : last + 1 : step]
    high = buffer[position + 1 : last + 2 : step]
    low_byte, high_byte = _BYTES[size & 0xFF], _BYTES[size >> 8]
    if low == low_byte * len(low) and high == high_byte * len(high):  # the usual case: one compare each
        return min(len(low), len(high))
    matching_low = len(low) - len(low.lstrip(low_byte))
    matching_high = len(high) - len(high.lstrip(high_byte))
    return min(matching_low, matching_high)


def buffer_timestamp(buffer: bytes | mmap.mmap) -> int:
    timestamp: int = struct.unpack_from("<q", buffer, _TIMESTAMP_AT)[0]
    return timestamp


@dataclass(frozen=True, slots=True)
class WriteResult:
    written: bool
    new_file: bool = False  # a new-file session moved on to its next file


class LogFile:
    """Writes one session's buffers to the descriptor it owns (closed by ``close``)."""

    def __init__(
        self,
        fd: int,
        *,
        session_name: str,
        file_name: str,
        logger_id: int,
        buffer_size: int,
        log_file_mode: int,
        max_file_mb: int = 0,
        circular: bool = False,
        clock: TraceClock,
        open_next: Callable[[int], tuple[int, str]] | None = None,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self.fd = fd
        self.file_name = file_name
        self.logger_id = logger_id
        self.buffer_size = buffer_size
        self.circular = circular
        self.open_next = open_next
        self.max_bytes = 0
        self.set_max_size(max_file_mb)
        self.header = new_logfile_header(
            clock=clock,
            buffer_size=buffer_size,
            logger_name=session_name,
            logfile_name=file_name,
            log_file_mode=log_file_mode,
            maximum_file_size=max_file_mb,
        )
        self.sequence = 1
        self.files_finished: list[str] = []
        self.buffers_in_file = 1
        self.buffers_written = 0  # pool buffers, over every file
        self.events_lost = 0
        self.buffers_lost = 0
        self._failed_writes = (0, 0)  # (buffers, events) for take_failed_writes
        self._next_slot = 1
        self._last_timestamp: int | None = None  # the latest event's timestamp, once there is one
        self._writer = _QueuedWriter(max_queued_bytes)
        self.direct = _try_direct(fd, buffer_size)
        self._write_header()

    def set_max_size(self, max_file_mb: int) -> None:
        """The size limit in MB (0: none); always room for the header buffer and one more."""
        self.max_bytes = max(max_file_mb << 20, 2 * self.buffer_size) if max_file_mb else 0

    # -- writing -------------------------------------------------------------------------------
    def spare_buffer(self) -> mmap.mmap:
        """Page-aligned memory for one buffer, for ``write(..., owned=True)`` (a pool's
        ``take_into``): the queue keeps it as it is, no copy made."""
        return self._writer.spare(self.buffer_size)

    def write(self, buffer: bytes | mmap.mmap, events: int | None = None, *, counted_written: bool = False, owned: bool = False) -> WriteResult:
        """Append one pool buffer; False when the file is full (the caller counts the loss).

        ``events`` is how many records it holds (counted here when a queued write fails, if
        not given). ``counted_written``: the caller counts the buffer written to the session
        whatever becomes of it here (a real-time consumer got it too), so a failed write of it
        is left out of ``take_failed_writes``. ``owned``: ``buffer`` came from ``spare_buffer``
        and is the file's from now on (queued as it is, or taken back when not written)."""
        new_file = False
        if self.max_bytes and (self._next_slot + 1) * self.buffer_size > self.max_bytes:
            if self.circular:
                self._next_slot = 1
            elif self.open_next is not None:
                self._next_file()
                new_file = True
            else:
                if owned:
                    self._writer.give_back(buffer)  # type: ignore[arg-type]
                return WriteResult(False)
        self._check_queued_writes()
        self._writer.queue(self.fd, buffer, self._next_slot * self.buffer_size, events, counted_written, owned=owned)
        self._next_slot += 1
        self.buffers_in_file = max(self.buffers_in_file, self._next_slot)
        self.buffers_written += 1
        timestamp = buffer_timestamp(buffer)
        if self._last_timestamp is None or timestamp > self._last_timestamp:
            self._last_timestamp = timestamp
        return WriteResult(True, new_file)

    def note_lost(self, events: int = 0, buffers: int = 0) -> None:
        self.events_lost += events
        self.buffers_lost += buffers

    def flush(self, *, wait: bool = True) -> None:
        """Rewrite the header buffer with the counts so far (ETW's flush makes the file current).

        With ``wait`` (a controller's FLUSH) this returns once every buffer written before it
        and the header are in the file; without it (a periodic flush) the header is queued
        behind them and this never waits for the disk."""
        if wait:
            self._writer.wait_idle()
            self._check_queued_writes()
            self._write_header()
        else:
            self._check_queued_writes()
            self._writer.queue(self.fd, self._header_bytes(), 0)

    def take_failed_writes(self) -> tuple[int, int]:
        """(buffers, events) that ``write`` accepted and a failed queued write then lost (not
        those written with ``counted_written``), counted once: after the error was raised, the
        session moves them from written to lost, as this file's header does."""
        failed, self._failed_writes = self._failed_writes, (0, 0)
        return failed

    @property
    def queued_bytes(self) -> int:
        """Bytes queued for the writer thread and not written yet."""
        return self._writer.queued_bytes

    def close(self) -> None:
        """Everything queued written, final header, data on disk, descriptor closed."""
        if self.fd < 0:
            return
        try:
            self._writer.stop()
            try:
                self._check_queued_writes()
            except OSError:
                try:  # the header still tells what the file holds and what it lost
                    self._write_header()
                except OSError:
                    pass
                raise
            self._write_header()
            try:
                os.fsync(self.fd)
            except OSError:
                pass  # a pipe or a special file: nothing to sync
        finally:
            os.close(self.fd)
            self.fd = -1

    # -- internals -----------------------------------------------------------------------------
    def _header_bytes(self) -> bytes:
        header = self.header.with_(
            buffers_written=self.buffers_in_file if not self.circular else min(self.buffers_written + 1, self.buffers_in_file),
            events_lost=self.events_lost,
            buffers_lost=self.buffers_lost,
            end_time=self.header.clock.to_filetime(self.header.reference_timestamp if self._last_timestamp is None else self._last_timestamp),
            logfile_name=self.file_name,
        )
        return header_buffer(header, self.logger_id)

    def _write_header(self) -> None:
        data = self._header_bytes()
        _pwrite_all(self.fd, _aligned_copy(data) if self.direct else data, 0)

    def _check_queued_writes(self) -> None:
        """Raise the error of a queued write that failed (now and on every later call: nothing
        more is written); its buffers, and those queued after it, are lost."""
        if not self._writer.failed:
            return
        failure = self._writer.take_failure()
        if failure is None:
            return
        error, buffers, events, uncounted_buffers, uncounted_events = failure
        self.buffers_written -= buffers
        self.note_lost(events=events, buffers=buffers)
        failed_buffers, failed_events = self._failed_writes
        self._failed_writes = (failed_buffers + uncounted_buffers, failed_events + uncounted_events)
        raise error

    def _next_file(self) -> None:
        """Finish this file on the writer thread (its last buffers, final header, fsync, close)
        and go on in the next one at once: the service's loop never waits for the disk here."""
        assert self.open_next is not None
        self._check_queued_writes()
        self._writer.queue(self.fd, self._header_bytes(), 0, _CLOSE_AFTER_WRITE)
        self.fd = -1
        self.files_finished.append(self.file_name)
        self.sequence += 1
        self.fd, self.file_name = self.open_next(self.sequence)
        self.direct = _try_direct(self.fd, self.buffer_size)
        self.buffers_in_file = 1
        self._next_slot = 1
        self._write_header()


def _sync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass  # a pipe or a special file: nothing to sync
    try:
        os.close(fd)
    except OSError:
        pass


def _try_direct(fd: int, buffer_size: int) -> bool:
    """Set ``O_DIRECT`` on a regular file's descriptor when its buffers can be written so."""
    if buffer_size % _DIRECT_ALIGNMENT:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError:
        return False  # the file system has no direct I/O
    return True


def _drop_direct(fd: int) -> bool:
    """Clear ``O_DIRECT``; False when it was not set (or cannot be cleared)."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
    except OSError:
        return False
    return True


def _page_aligned(size: int) -> mmap.mmap:
    """Writable memory starting on a page boundary, as ``O_DIRECT`` needs."""
    return mmap.mmap(-1, size)


def _aligned_copy(data: bytes) -> mmap.mmap:
    copy = _page_aligned(len(data))
    copy[:] = data
    return copy


def _pwrite_all(fd: int, data: bytes | memoryview | mmap.mmap, offset: int) -> None:
    _pwritev_all(fd, [data], offset)


def _pwritev_all(fd: int, parts: list[bytes] | list[bytearray] | list[mmap.mmap] | list[bytes | memoryview | mmap.mmap], offset: int) -> None:
    """``parts`` one after the other from ``offset``, however little each system call writes.
    A write ``O_DIRECT`` refuses (EINVAL: a short write left the next one unaligned) is made
    again through the page cache. The ``OSError`` of a write that fails (a full disk) says in
    ``written`` how many bytes reached the file before it: the parts wholly in them are there."""
    views = [memoryview(part) for part in parts]
    written = 0
    while views:
        try:
            done = _pwritev(fd, views, offset)
        except OSError as exc:
            if exc.errno == errno.EINVAL and _drop_direct(fd):
                continue
            exc.written = written  # type: ignore[attr-defined]
            raise
        offset += done
        written += done
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if views and done:
            views[0] = views[0][done:]


_pwritev = os.pwritev  # the one system call that writes files here
_MAX_RUN = 64  # buffers one system call writes at most
# A woken writer waits this long before it writes, so that the buffers the service's loop takes
# in one go reach the disk in one system call, and the two threads trade the interpreter's lock
# once per batch rather than once per buffer.
_GATHER_SECONDS = 0.02
# The ``events`` of a job that writes a finished file's final header: the thread then syncs
# and closes that descriptor.
_CLOSE_AFTER_WRITE = -1


class _QueuedWriter:
    """One file's writer thread: ``queue`` hands it (fd, bytes, offset) and returns at once
    (unless ``limit`` bytes already wait); the thread writes in order. After a failed write it
    writes nothing more: the failure and what was lost with it wait for ``take_failure``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queued_bytes = 0
        # (fd, bytes, offset, events or None, counted written elsewhere); offset 0: the header
        self._jobs: deque[tuple[int, mmap.mmap, int, int | None, bool]] = deque()
        self._spare: list[mmap.mmap] = []  # written copies (page-aligned, for O_DIRECT), for the next buffers
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._error: OSError | None = None
        self._lost_buffers = 0
        self._lost_events = 0
        self._uncounted_buffers = 0  # of those lost, the ones no other destination got
        self._uncounted_events = 0

    def spare(self, size: int) -> mmap.mmap:
        """Memory of ``size`` bytes for a later ``queue(..., owned=True)``."""
        with self._changed:
            if self._spare and len(self._spare[-1]) == size:
                return self._spare.pop()
        return _page_aligned(size)

    def give_back(self, data: mmap.mmap) -> None:
        with self._changed:
            self._spare.append(data)

    def queue(self, fd: int, data: bytes | mmap.mmap, offset: int, events: int | None = None, counted_written: bool = False, *, owned: bool = False) -> None:
        """Queue one write. ``owned``: ``data`` came from ``spare`` and is queued as it is."""
        with self._changed:
            while self._jobs and self.queued_bytes + len(data) > self.limit:
                self._changed.wait()
            if owned and isinstance(data, mmap.mmap):
                copy = data
            else:
                # A copy into memory this writer keeps: freeing each buffer only after the disk
                # took it made the allocator give memory back and fault it in again, buffer after buffer.
                copy = self._spare.pop() if self._spare and len(self._spare[-1]) == len(data) else _page_aligned(len(data))
                copy[:] = data
            self._jobs.append((fd, copy, offset, events, counted_written))
            self.queued_bytes += len(data)
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="openetw-logfile-writer", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def wait_idle(self) -> None:
        """Return once everything queued is written (or lost to a failure)."""
        with self._changed:
            while self._jobs:
                self._changed.wait()

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    @property
    def failed(self) -> bool:
        """Whether a write failed (read without the lock: the thread sets it once)."""
        return self._error is not None

    def take_failure(self) -> tuple[OSError, int, int, int, int] | None:
        """After a failed write: (the error, buffers lost, their events, and of those the
        buffers and events not written elsewhere too), the losses counted once (zeros
        afterwards); ``None`` while every write succeeded."""
        with self._changed:
            if self._error is None:
                return None
            while self._jobs:  # the rest is dropped quickly: count it too
                self._changed.wait()
            failure = (self._error, self._lost_buffers, self._lost_events, self._uncounted_buffers, self._uncounted_events)
            self._lost_buffers = self._lost_events = self._uncounted_buffers = self._uncounted_events = 0
            return failure

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._jobs and not self._stopping:
                    self._changed.wait()
                if not self._jobs:
                    return
                gather = not self._stopping and len(self._jobs) == 1
            if gather:  # let the service's loop queue the rest of what it is taking now
                time.sleep(_GATHER_SECONDS)
            with self._changed:
                run = self._contiguous_jobs()  # the thread's own: queue() appends, nothing else changes them
                failed = self._error is not None
            fd, _, offset, _, _ = run[0]
            reached = 0  # bytes of this run that are in the file even when the write failed
            if not failed:
                try:
                    _pwritev_all(fd, [job[1] for job in run], offset)
                except OSError as exc:
                    failed = True
                    reached = getattr(exc, "written", 0)
                    with self._changed:
                        self._error = exc
            if run[0][3] == _CLOSE_AFTER_WRITE:
                _sync_and_close(fd)
            with self._changed:
                for _, data, offset, events, counted_written in run:
                    self._jobs.popleft()
                    self.queued_bytes -= len(data)
                    in_file = reached >= len(data)  # a buffer the file got whole is not lost
                    reached = max(0, reached - len(data))
                    if failed and offset != 0 and not in_file:  # offset 0: a header buffer
                        lost_events = count_records(data) if events is None else events
                        self._lost_buffers += 1
                        self._lost_events += lost_events
                        if not counted_written:
                            self._uncounted_buffers += 1
                            self._uncounted_events += lost_events
                    self._spare.append(data)
                self._changed.notify_all()

    def _contiguous_jobs(self) -> list[tuple[int, mmap.mmap, int, int | None, bool]]:
        """The jobs at the front that one ``pwritev`` writes: same file, each where the last ends."""
        jobs = self._jobs
        run = [jobs[0]]
        fd, data, offset, events, _ = jobs[0]
        if events == _CLOSE_AFTER_WRITE:
            return run
        end = offset + len(data)
        for index in range(1, min(len(jobs), _MAX_RUN)):
            job = jobs[index]
            if job[0] != fd or job[2] != end or job[3] == _CLOSE_AFTER_WRITE:
                break
            run.append(job)
            end += len(job[1])
        return run
