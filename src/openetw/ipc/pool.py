"""The shared-memory buffer pool between one producer process and the trace service.

A pool is one ``memfd``: a 4 KiB pool header, then ``buffer_count`` buffers of ``buffer_size``
bytes. Every buffer is an ETL buffer (WMI_BUFFER_HEADER, then the records); the service frames
the header again and fills the tail after the records with 0xFF as it copies a taken buffer out,
so what leaves the pool is a complete ETL buffer. In the pool the tail is zero: a record's
padding to 8 bytes is already there and the producer never writes it.

Each buffer has a u32 state word in the pool header. The producer only moves FREE → FILLING →
FULL, the service only FULL → TAKEN → FREE, so a word is only ever written by the side that owns
the buffer in that state and no atomic read-modify-write is needed. The producer copies a
record's bytes first and then stores the buffer's ``Offset``: the ``Offset`` of a FILLING buffer is
always the end of whole records, which is what lets the service rescue the buffer of a producer
that died.

The service trusts nobody: the memfd is sealed against resizing (a producer that shrank it would
make the service's mapping fault), and the WMI_BUFFER_HEADER of a buffer the service takes is
checked and framed again by the service before the bytes leave the pool.

Python has no memory fences: the other process sees these plain stores in program order on
x86-64 (TSO), which is what the protocol relies on; weaker CPUs (arm64) would need one.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from time import sleep
from typing import Protocol

from openetw._native import module
from openetw.errors import InvalidArgument, ServiceError
from openetw.etl import layouts as L
from openetw.etl.layouts import Layout

__all__ = [
    "FILLING", "FREE", "FULL", "POOL_HEADER", "POOL_HEADER_SIZE", "STATE_OFFSET", "TAKEN",
    "BufferPool", "PoolStats", "PoolWriter",
]

POOL_MAGIC = b"OETWPOOL"
POOL_VERSION = 1
POOL_HEADER_SIZE = 4096
STATE_OFFSET = 0x100  # the state words start here, one u32 per buffer
MAX_BUFFER_COUNT = (POOL_HEADER_SIZE - STATE_OFFSET) // 4
MIN_BUFFER_SIZE = 1024
MAX_BUFFER_SIZE = 16 << 20
MAX_RECORD_SIZE = 0xFFFF  # every record header holds its size in a u16

FREE, FILLING, FULL, TAKEN = 0, 1, 2, 3
STATE_NAMES = {FREE: "FREE", FILLING: "FILLING", FULL: "FULL", TAKEN: "TAKEN"}

POOL_HEADER = Layout(
    "OETW_POOL_HEADER",
    [
        ("Magic", "8s"),
        ("Version", "I"),
        ("HeaderSize", "I"),
        ("BufferSize", "I"),
        ("BufferCount", "I"),
        ("LoggerId", "I"),
        ("ProducerPid", "I"),
        ("FlushIntervalMs", "I"),
        ("StateOffset", "I"),
        ("EventsLost", "Q"),  # written by the producer only
        ("EventsRefused", "Q"),  # written by the producer only
        ("BuffersCompleted", "Q"),  # the producer's last SequenceNumber
        ("LossesCounted", "Q"),  # written by the service only: how much of the two above it counted
        ("Identity", "Q"),  # random, chosen by the service that made the pool: names it for good
    ],
)

_BH = L.WMI_BUFFER_HEADER
_BH_SIZE = L.BUFFER_HEADER_SIZE
_BUFFER_STATE_WRITTEN = 3  # WMI_BUFFER_HEADER.State of every buffer in a file
# Index of a header field in a ``cast("q")`` / ``cast("I")`` view of the whole mapping.
_LOST_Q = POOL_HEADER.offset("EventsLost") // 8
_REFUSED_Q = POOL_HEADER.offset("EventsRefused") // 8
_COMPLETED_Q = POOL_HEADER.offset("BuffersCompleted") // 8
_COUNTED_Q = POOL_HEADER.offset("LossesCounted") // 8
_IDENTITY_Q = POOL_HEADER.offset("Identity") // 8
_TIMESTAMP_AT = _BH.offset("TimeStamp")
_OFFSET_AT = _BH.offset("Offset")
_SEQUENCE_AT = _BH.offset("SequenceNumber")
_u16_into = struct.Struct("<H").pack_into
_u32_into = struct.Struct("<I").pack_into
_PROCESSOR_AT = _BH.offset("ProcessorIndex")
_FLAGS_AT = _BH.offset("BufferFlag")
# BufferFlag bits a producer may set; anything else (COMPRESSED above all) would misframe the file.
_PRODUCER_FLAGS = L.BUFFER_FLAG_FLUSH_MARKER | L.BUFFER_FLAG_EVENTS_LOST | L.BUFFER_FLAG_BUFFER_LOST
_FREE_WORD = bytes(4)
# Positions in an unpacked WMI_BUFFER_HEADER, looked up once.
_OFFSET_I, _FLAGS_I, _TIMESTAMP_I = _BH.index("Offset"), _BH.index("BufferFlag"), _BH.index("TimeStamp")
_SEQUENCE_I, _PROCESSOR_I = _BH.index("SequenceNumber"), _BH.index("ProcessorIndex")
_NO_KERNEL_POINTERS = bytes(16)


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Buffers by state, and the producer's loss counters, as the service sees them now."""

    free: int
    filling: int
    full: int
    taken: int
    invalid: int  # state words holding no known state: a producer scribbled on the header
    events_lost: int
    events_refused: int
    buffers_repaired: int  # taken buffers whose Offset the service had to discard


def _blank_buffer(buffer_size: int) -> bytes:
    """A buffer as the service hands it back: zeroed, but for Offset = 0x48."""
    data = bytearray(buffer_size)
    struct.pack_into("<I", data, _OFFSET_AT, _BH_SIZE)
    return bytes(data)


class BufferPool:
    """One pool mapped into this process: ``create`` in the service, ``attach`` in the producer.

    The service side moves FULL buffers out (``full_buffers``, ``take``, ``release``) and rescues
    a dead producer's FILLING buffers (``take_filling_after_death``). The producer side writes
    through ``writer()``.
    """

    def __init__(self, fd: int, mapping: mmap.mmap, buffer_size: int, buffer_count: int, logger_id: int, producer_pid: int, flush_interval_ms: int) -> None:
        self._fd = fd
        self._map = mapping
        self.buffer_size = buffer_size
        self.buffer_count = buffer_count
        self.logger_id = logger_id
        self.producer_pid = producer_pid
        self.flush_interval_ms = flush_interval_ms
        self.view = memoryview(mapping)
        self.words = self.view.cast("I")
        self.qwords = self.view.cast("q")
        self.states = self.view[STATE_OFFSET : STATE_OFFSET + 4 * buffer_count].cast("I")
        self.buffers_repaired = 0
        self._blank: bytes | None = None
        self._tail: memoryview | None = None  # 0xFF bytes, for the tail of a buffer copied out
        self._writer: PoolWriter | None = None
        self._compiled_writers: list[Callable[[], None]] = []
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(cls, buffer_size: int, buffer_count: int, *, logger_id: int, producer_pid: int, flush_interval_ms: int) -> BufferPool:
        """A new pool in a new sealed memfd, every buffer FREE (service side)."""
        if not MIN_BUFFER_SIZE <= buffer_size <= MAX_BUFFER_SIZE or buffer_size % 8:
            raise InvalidArgument(f"buffer size {buffer_size} must be a multiple of 8 from {MIN_BUFFER_SIZE} to {MAX_BUFFER_SIZE}")
        if not 1 <= buffer_count <= MAX_BUFFER_COUNT:
            raise InvalidArgument(f"buffer count {buffer_count} must be from 1 to {MAX_BUFFER_COUNT}")
        if not 0 <= logger_id <= 0xFFFF:
            raise InvalidArgument(f"logger id {logger_id} does not fit WMI_BUFFER_HEADER.LoggerId")
        if not 0 <= producer_pid <= 0xFFFFFFFF or not 0 <= flush_interval_ms <= 0xFFFFFFFF:
            raise InvalidArgument("producer pid and flush interval must be u32 values")
        size = POOL_HEADER_SIZE + buffer_count * buffer_size
        fd = os.memfd_create("openetw-pool", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            mapping = mmap.mmap(fd, size)
        except OSError as exc:
            os.close(fd)
            raise ServiceError(f"cannot create a {size}-byte buffer pool: {exc.strerror}") from exc
        POOL_HEADER.pack_into(
            mapping, 0, POOL_MAGIC, POOL_VERSION, POOL_HEADER_SIZE, buffer_size, buffer_count, logger_id,
            producer_pid, flush_interval_ms, STATE_OFFSET, 0, 0, 0, 0, int.from_bytes(os.urandom(8), "little"),
        )
        pool = cls(fd, mapping, buffer_size, buffer_count, logger_id, producer_pid, flush_interval_ms)
        # The memfd is all zeros already: a FREE buffer only needs its Offset. Writing that one
        # word (not the whole buffer) leaves the memfd's pages unused until a producer fills
        # them, so a pool's maximum costs memory only as far as its bursts reach.
        for index in range(buffer_count):
            _u32_into(mapping, pool.buffer_offset(index) + _OFFSET_AT, _BH_SIZE)
        return pool

    @classmethod
    def attach(cls, fd: int) -> BufferPool:
        """Map a pool the service passed us (producer side). The pool owns ``fd`` from now on;
        a refused one is closed."""
        mapping = None
        try:
            size = os.fstat(fd).st_size
            if size < POOL_HEADER_SIZE:
                raise ServiceError(f"not a buffer pool: {size} bytes, shorter than the {POOL_HEADER_SIZE}-byte pool header")
            mapping = mmap.mmap(fd, size)
            header = POOL_HEADER.as_dict(POOL_HEADER.unpack_from(mapping, 0))
            problem = _header_problem(header, size)
            if problem:
                raise ServiceError(f"refusing the buffer pool: {problem}")
            return cls(fd, mapping, header["BufferSize"], header["BufferCount"], header["LoggerId"], header["ProducerPid"], header["FlushIntervalMs"])
        except BaseException as exc:
            if mapping is not None:
                mapping.close()
            os.close(fd)
            if isinstance(exc, OSError):
                raise ServiceError(f"cannot attach the buffer pool: {exc.strerror or exc}") from exc
            raise

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        """Unmap and close the memfd (a writer made from this pool must not be used after)."""
        if self._closed:
            return
        self._closed = True
        for release in self._compiled_writers:
            release()  # a compiled writer holds the mapping: it lets go first
        for view in (self.states, self.qwords, self.words, self.view):
            view.release()
        self._map.close()
        os.close(self._fd)

    def __enter__(self) -> BufferPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writer(self, *, doorbell: Doorbell | None = None, on_full: Callable[[int], None] | None = None) -> PoolWriter:
        """The producer's write path over this pool. There is one per mapping: a second writer
        would open a second FILLING buffer and strand the first, so later calls return the same
        writer (its doorbell or ``on_full`` replaced when one is given)."""
        if self._writer is None:
            self._writer = PoolWriter(self, doorbell=doorbell, on_full=on_full)
        elif on_full is not None or doorbell is not None:
            self._writer.on_full = _full_hook(doorbell, on_full)
        return self._writer

    # -- shared counters ------------------------------------------------------------------
    @property
    def events_lost(self) -> int:
        """Events dropped because no buffer was FREE."""
        return self.qwords[_LOST_Q]

    @property
    def events_refused(self) -> int:
        """Records refused because no buffer could ever hold them (or not records at all)."""
        return self.qwords[_REFUSED_Q]

    @property
    def buffers_completed(self) -> int:
        """Buffers the producer has marked FULL: the last SequenceNumber it gave."""
        return self.qwords[_COMPLETED_Q]

    @property
    def losses_counted(self) -> int:
        """The producer's losses and refusals the service has counted so far (kept in the pool,
        so that a service taking over a dead one's pool counts only the rest)."""
        return int(self.qwords[_COUNTED_Q])

    @losses_counted.setter
    def losses_counted(self, value: int) -> None:
        self.qwords[_COUNTED_Q] = value

    @property
    def identity(self) -> str:
        """The pool's name for good (random, given when it was made; the producer's pid first), as
        a service that took it over from a dead one finds it: what a log records it by."""
        return f"{self.producer_pid}-{self.qwords[_IDENTITY_Q] & 0xFFFFFFFFFFFFFFFF:016x}"

    def buffer_offset(self, index: int) -> int:
        """Where buffer ``index`` starts in the memfd."""
        return POOL_HEADER_SIZE + index * self.buffer_size

    def stats(self) -> PoolStats:
        counts = [0, 0, 0, 0]
        invalid = 0
        for state in self.states.tolist():
            if 0 <= state <= TAKEN:
                counts[state] += 1
            else:
                invalid += 1
        free, filling, full, taken = counts
        return PoolStats(free, filling, full, taken, invalid, self.events_lost, self.events_refused, self.buffers_repaired)

    # -- service side ---------------------------------------------------------------------
    def full_share(self) -> float:
        """The share of the pool's buffers that are FULL (waiting for the service) now."""
        return self.states.tolist().count(FULL) / self.buffer_count

    def full_buffers(self) -> list[int]:
        """Indices of the FULL buffers, in the order the producer filled them (SequenceNumber)."""
        full = [index for index, state in enumerate(self.states.tolist()) if state == FULL]
        if len(full) > 1:
            sequence_at = _BH.offset("SequenceNumber") // 8
            qwords, base, step = self.qwords, POOL_HEADER_SIZE // 8, self.buffer_size // 8
            full.sort(key=lambda index: qwords[base + index * step + sequence_at])
        return full

    def take(self, index: int) -> bytes:
        """FULL → TAKEN; returns the buffer's bytes, a complete ETL buffer."""
        self._check_index(index)
        state = self.states[index]
        if state != FULL:
            raise ServiceError(f"buffer {index} cannot be taken: it is {_state_name(state)}, not FULL")
        self.states[index] = TAKEN
        return self._copy_out(index, sequence=None)

    def take_into(self, index: int, out: mmap.mmap | bytearray) -> None:
        """``take``, with the buffer's bytes written into ``out`` (``buffer_size`` bytes of the
        caller's) rather than returned: one copy fewer where the bytes go to memory the caller
        keeps anyway (a log file's write queue)."""
        self._check_takeable_into(index, out)
        self.states[index] = TAKEN
        header, base, used = self._framed_header(index, None)
        out[:_BH_SIZE] = header
        out[_BH_SIZE:used] = self.view[base + _BH_SIZE : base + used]
        out[used:] = self._tail_bytes()[used:]

    def _check_takeable_into(self, index: int, out: mmap.mmap | bytearray) -> None:
        """``index`` names a FULL buffer and ``out`` holds exactly one buffer."""
        self._check_index(index)
        if len(out) != self.buffer_size:
            raise InvalidArgument(f"a buffer is {self.buffer_size} bytes, not {len(out)}")
        state = self.states[index]
        if state != FULL:
            raise ServiceError(f"buffer {index} cannot be taken: it is {_state_name(state)}, not FULL")

    def take_release_into(self, index: int, out: mmap.mmap | bytearray) -> None:
        """``take_into`` then ``release``: the buffer's bytes into ``out`` and the buffer FREE
        again (one compiled call where the compiled core runs)."""
        if _native is None:
            self.take_into(index, out)
            self.release(index)
            return
        self._check_takeable_into(index, out)
        if _native.take_release_into(self._map, index, self.buffer_size, self.logger_id, out):
            self.buffers_repaired += 1

    def release(self, index: int) -> None:
        """TAKEN → FREE, after resetting the buffer (zeroed, Offset = 0x48)."""
        self._check_index(index)
        state = self.states[index]
        if state != TAKEN:
            raise ServiceError(f"buffer {index} cannot be released: it is {_state_name(state)}, not TAKEN")
        self._reset(index)
        self.states[index] = FREE

    def take_filling_after_death(self) -> list[bytes]:
        """The FILLING buffers of a producer that is gone, as complete ETL buffers (normally at
        most one). Each holds every record whose write returned; the service fills in the
        header. Empty ones are returned to FREE; the others are left TAKEN, for ``release``.

        Only call this once the producer cannot write any more (its control connection closed).
        Take the FULL buffers first: these come after them in the producer's sequence.
        """
        return [data for _, data in self._take_filling()]

    def _take_filling(self) -> list[tuple[int, bytes]]:
        """(index, bytes) of ``take_filling_after_death``. A buffer's SequenceNumber is written
        in the pool too, before it turns TAKEN: whoever takes the pool over after a taker that
        died finds the same number."""
        taken = []
        for index, state in enumerate(self.states.tolist()):
            if state != FILLING:
                continue
            base = self.buffer_offset(index)
            if self.words[(base + _OFFSET_AT) // 4] == _BH_SIZE:
                self.states[index] = TAKEN
                self.release(index)
                continue
            sequence = self.qwords[_COMPLETED_Q] + 1
            self.qwords[(base + _SEQUENCE_AT) // 8] = sequence
            self.qwords[_COMPLETED_Q] = sequence
            self.states[index] = TAKEN
            taken.append((index, self._copy_out(index, sequence=None)))
        return taken

    def take_all_after_service_death(self) -> list[bytes]:
        """Every buffer holding records of a pool whose service died, in the producer's order:
        TAKEN ones (the dead service took them but never released them: not stored), FULL ones,
        then the FILLING one. Each is FREE again after. Only call this once the producer
        writes no more into the pool."""
        for index, state in enumerate(self.states.tolist()):
            if state == TAKEN:
                self.states[index] = FULL
        taken = []
        for index in self.full_buffers():
            taken.append(self.take(index))
            self.release(index)
        taken += self.take_filling_after_death()
        for index, state in enumerate(self.states.tolist()):
            if state == TAKEN:
                self.release(index)
        return taken

    def hold_all_after_service_death(self) -> list[tuple[int, bytes]]:
        """``take_all_after_service_death`` for a taker that gives the buffers back only once it
        stored them (``release``): (index, bytes) of each, in the producer's order, every one
        left TAKEN. The FILLING one gets the next SequenceNumber in the pool too (before it
        turns TAKEN), so that a service taking the pool over after this one died finds every
        buffer in the same order, with the same numbers."""
        for index, state in enumerate(self.states.tolist()):
            if state == TAKEN:
                self.states[index] = FULL
        return [(index, self.take(index)) for index in self.full_buffers()] + self._take_filling()

    def _copy_out(self, index: int, *, sequence: int | None) -> bytes:
        """The buffer's bytes with a WMI_BUFFER_HEADER the service vouches for: the producer's
        timestamp, processor and sequence kept, every framing field set from the pool's facts."""
        header, base, used = self._framed_header(index, sequence)
        with self.view[base + _BH_SIZE : base + used] as records:
            return b"".join((header, records, self._tail_bytes()[used:]))  # one copy of the records

    def _tail_bytes(self) -> memoryview:
        if self._tail is None:
            self._tail = memoryview(b"\xff" * self.buffer_size)
        return self._tail

    def _framed_header(self, index: int, sequence: int | None) -> tuple[bytes, int, int]:
        """(the WMI_BUFFER_HEADER a taken buffer leaves with, where the buffer starts, its used size)."""
        base = self.buffer_offset(index)
        h = _BH.unpack_from(self.view, base)  # read once: the producer's later stores change nothing here
        used = h[_OFFSET_I]
        if not _BH_SIZE <= used <= self.buffer_size or used % 8:
            used = _BH_SIZE  # the records cannot be framed: the buffer goes out empty
            self.buffers_repaired += 1
        flags = (h[_FLAGS_I] & _PRODUCER_FLAGS) | L.BUFFER_FLAG_PROCESSOR_INDEX
        header = _BH.pack(
            self.buffer_size, used, used, 0, h[_TIMESTAMP_I], h[_SEQUENCE_I] if sequence is None else sequence, 0,
            h[_PROCESSOR_I], self.logger_id, _BUFFER_STATE_WRITTEN, used, flags, L.BUFFER_TYPE_GENERIC, _NO_KERNEL_POINTERS,
        )
        return header, base, used

    def _reset(self, index: int) -> None:
        if self._blank is None:
            self._blank = _blank_buffer(self.buffer_size)
        base = self.buffer_offset(index)
        self.view[base : base + self.buffer_size] = self._blank

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.buffer_count:
            raise InvalidArgument(f"buffer index {index} is not in 0..{self.buffer_count - 1}")


def _header_problem(header: dict[str, object], size: int) -> str | None:
    """Why a pool header cannot be trusted, or ``None``."""
    if header["Magic"] != POOL_MAGIC:
        return f"magic {header['Magic']!r} is not {POOL_MAGIC!r}"
    if header["Version"] != POOL_VERSION:
        return f"layout version {header['Version']} is not {POOL_VERSION}"
    if header["HeaderSize"] != POOL_HEADER_SIZE or header["StateOffset"] != STATE_OFFSET:
        return f"header size {header['HeaderSize']} / state offset {header['StateOffset']:#x} are not {POOL_HEADER_SIZE} / {STATE_OFFSET:#x}"
    buffer_size, count = header["BufferSize"], header["BufferCount"]
    assert isinstance(buffer_size, int) and isinstance(count, int)
    if not MIN_BUFFER_SIZE <= buffer_size <= MAX_BUFFER_SIZE or buffer_size % 8:
        return f"buffer size {buffer_size} is not a multiple of 8 from {MIN_BUFFER_SIZE} to {MAX_BUFFER_SIZE}"
    if not 1 <= count <= MAX_BUFFER_COUNT:
        return f"buffer count {count} is not from 1 to {MAX_BUFFER_COUNT}"
    if not isinstance(header["LoggerId"], int) or header["LoggerId"] > 0xFFFF:
        return f"logger id {header['LoggerId']} does not fit a u16"
    expected = POOL_HEADER_SIZE + count * buffer_size
    if size != expected:
        return f"the memfd holds {size} bytes, the header describes {expected}"
    return None


def _state_name(state: int) -> str:
    return STATE_NAMES.get(state, f"in unknown state {state}")


class WriteFn(Protocol):
    """Copy one record into the pool (any bytes-like record: a memoryview saves the caller a copy)."""

    def __call__(self, record: bytes | memoryview, timestamp: int, cpu: int = 0) -> bool: ...


class Doorbell(Protocol):
    """What a writer rings when a buffer becomes FULL: the producer's control channel
    (``openetw.ipc.protocol.Channel``, whose ``notice`` sends the one-byte FULL notice)."""

    def notice(self) -> bool: ...


class PoolWriter:
    """The producer's write path: records into the FILLING buffer, never blocking, never waiting.

    ``write(record, timestamp, cpu=0)`` copies one record (8-byte aligned, zero padded) into the
    pool and returns False when it is dropped (no FREE buffer: ``events_lost``) or refused (no
    buffer can hold it, or it is shorter than a record header's first 8 bytes:
    ``events_refused``). ``flush()`` marks a non-empty FILLING buffer FULL and returns whether it
    did. Each time a buffer becomes FULL, outside the guarded section, the writer rings its
    ``doorbell`` (the channel that delivered the pool: the one-byte notice to the service) or
    calls ``on_full(index)``; ``became_full`` counts those buffers. The write path so stays in
    this package: it never calls back into the provider that owns it.

    Make it with ``BufferPool.writer()``: one per mapping; threads share it (a token that one
    thread at a time holds guards the write path, see ``_new_turn``). The processor index is recorded per buffer: the ``cpu`` of the write that opened
    it. In a child made by ``fork`` the writer is orphaned: its writes return False and count
    nothing, as the pool and its counters belong to the parent (the child registers anew).
    """

    write: WriteFn
    flush: Callable[[], bool]

    def __init__(self, pool: BufferPool, *, doorbell: Doorbell | None = None, on_full: Callable[[int], None] | None = None, engine: str | None = None) -> None:
        self.pool = pool
        self.on_full = _full_hook(doorbell, on_full)
        self.became_full = 0
        compiled = _native if engine is None else module("_write") if engine == "native" else None
        if compiled is not None:
            native = compiled.PoolWriter(pool._map, pool.buffer_size, pool.buffer_count, pool.logger_id, _became_full(self))
            self.write, self.flush, self._orphan = native.write, native.flush, native.orphan
            pool._compiled_writers.append(native.release)
        else:
            self.write, self.flush, self._orphan = _write_path(pool, self)
        _LIVE_WRITERS.add(self)


_native = module("_write")


def _became_full(writer: PoolWriter) -> Callable[[int], None]:
    """What the compiled writer calls after a write that made a buffer FULL: the count, then
    ``on_full`` (a weak reference: the writer owns the compiled one, not the other way)."""
    ref = weakref.ref(writer)

    def full(index: int) -> None:
        owner = ref()
        if owner is not None:
            owner.became_full += 1
            if owner.on_full is not None:
                owner.on_full(index)

    return full


def _full_hook(doorbell: Doorbell | None, on_full: Callable[[int], None] | None) -> Callable[[int], None] | None:
    if on_full is not None or doorbell is None:
        return on_full
    ring = doorbell.notice

    def rang(_index: int) -> None:
        ring()

    return rang


_LIVE_WRITERS: weakref.WeakSet[PoolWriter] = weakref.WeakSet()


def _orphan_writers_after_fork() -> None:
    for writer in list(_LIVE_WRITERS):
        writer._orphan()


os.register_at_fork(after_in_child=_orphan_writers_after_fork)


def _write_path(pool: BufferPool, writer: PoolWriter) -> tuple[WriteFn, Callable[[], bool], Callable[[], None]]:
    """The writer's ``write``, ``flush`` and ``orphan`` (for a forked child) as closures over its state.

    This is EventWrite's hot path: closure variables cost a fraction of attribute lookups, and
    ``mmap`` slice assignment is cheaper than a memoryview's, so the fast path is one token taken and given back, one
    copy and two stores (the padding after a record is zero in a FREE buffer already). Everything that changes buffers lives in ``write_slow``.
    """
    mapping, qwords, words, states = pool._map, pool.qwords, pool.words, pool.states
    buffer_size, count, logger_id = pool.buffer_size, pool.buffer_count, pool.logger_id
    max_record = min(buffer_size - _BH_SIZE, MAX_RECORD_SIZE)
    states_end, find = STATE_OFFSET + 4 * count, mapping.find
    take, give = _new_turn()
    # The FILLING buffer, as absolute positions in the mapping. With none, limit is -1 so every
    # write falls through to write_slow.
    index = -1
    base = cursor = 0
    limit = -1
    timestamp_q = offset_w = 0  # the buffer's TimeStamp and Offset in the qwords / words views
    buffer_cpu = buffer_flags = 0
    pending_flags = 0  # loss flags for the next buffer opened
    orphaned = False

    def write(record: bytes | memoryview, timestamp: int, cpu: int = 0) -> bool:
        nonlocal cursor
        size = len(record)
        try:
            take()
        except IndexError:
            wait_for_turn()
        try:
            start = cursor
            end = start + size
            if end <= limit and size >= 8:  # a buffer that small holds no record over max_record
                mapping[start:end] = record  # the padding after it is zero already
                aligned = (end + 7) & ~7
                qwords[timestamp_q] = timestamp
                words[offset_w] = aligned - base  # last: now the record is in
                cursor = aligned
                return True
            written, full = write_slow(record, timestamp, cpu)
        finally:
            give(True)
        if full >= 0 and writer.on_full is not None:
            writer.on_full(full)
        return written

    def write_big(record: bytes | memoryview, timestamp: int, cpu: int = 0) -> bool:
        """``write`` for buffers over 64 KB: the record's size is checked as well."""
        nonlocal cursor
        size = len(record)
        try:
            take()
        except IndexError:
            wait_for_turn()
        try:
            start = cursor
            end = start + size
            if end <= limit and 8 <= size <= max_record:
                mapping[start:end] = record
                aligned = (end + 7) & ~7
                qwords[timestamp_q] = timestamp
                words[offset_w] = aligned - base
                cursor = aligned
                return True
            written, full = write_slow(record, timestamp, cpu)
        finally:
            give(True)
        if full >= 0 and writer.on_full is not None:
            writer.on_full(full)
        return written

    def flush() -> bool:
        try:
            take()
        except IndexError:
            wait_for_turn()
        try:
            full = complete() if index >= 0 and cursor > base + _BH_SIZE else -1
        finally:
            give(True)
        if full >= 0 and writer.on_full is not None:
            writer.on_full(full)
        return full >= 0

    def wait_for_turn() -> None:
        """Another thread holds the turn (the interpreter switched threads inside its few
        statements): let it run until it gives the turn back."""
        while True:
            sleep(0)
            try:
                take()
                return
            except IndexError:
                pass

    def write_slow(record: bytes | memoryview, timestamp: int, cpu: int) -> tuple[bool, int]:
        """Refuse; or complete the FILLING buffer, open the next FREE one and write; or drop.
        Returns (written, index of the buffer that became FULL or -1)."""
        nonlocal cursor
        if orphaned:
            return False, -1
        size = len(record)
        if not 8 <= size <= max_record:
            qwords[_REFUSED_Q] += 1
            flag_loss()
            return False, -1
        full = complete() if index >= 0 else -1
        free = find_free()
        if free < 0:
            qwords[_LOST_Q] += 1
            flag_loss()
            return False, full
        open_buffer(free, cpu)
        end = cursor + size
        mapping[cursor:end] = record
        aligned = (end + 7) & ~7
        qwords[timestamp_q] = timestamp
        words[offset_w] = aligned - base
        cursor = aligned
        return True, full

    def flag_loss() -> None:
        """EVENTS_LOST goes on the FILLING buffer, or on the next one opened."""
        nonlocal buffer_flags, pending_flags
        if index >= 0:
            buffer_flags |= L.BUFFER_FLAG_EVENTS_LOST
            _u16_into(mapping, base + _FLAGS_AT, buffer_flags)
        else:
            pending_flags |= L.BUFFER_FLAG_EVENTS_LOST

    def find_free() -> int:
        """The lowest FREE buffer; -1 when none is. Lowest first, not round robin: the pool's
        memory in use follows what the producer needs (a steady writer cycles through the first
        few buffers; only a burst the service has not drained yet reaches further), so a large
        maximum costs the pages of the bursts it absorbed, not the whole pool.

        A search in C for four zero bytes, as a full pool makes every write search: four zero
        bytes always hold the first byte of a state word, and a state word whose first byte is
        zero is FREE, as states are below 256 (checked anyway)."""
        found = find(_FREE_WORD, STATE_OFFSET, states_end)
        while found >= 0:
            candidate = (found - STATE_OFFSET + 3) // 4
            if states[candidate] == FREE:
                return candidate
            found = find(_FREE_WORD, STATE_OFFSET + 4 * candidate + 1, states_end)
        return -1

    def open_buffer(new_index: int, cpu: int) -> None:
        """FREE → FILLING. The service reset the buffer when it released it."""
        nonlocal index, base, cursor, limit, timestamp_q, offset_w, buffer_cpu, buffer_flags, pending_flags
        states[new_index] = FILLING
        index = new_index
        base = pool.buffer_offset(new_index)
        cursor, limit = base + _BH_SIZE, base + buffer_size
        timestamp_q, offset_w = (base + _TIMESTAMP_AT) // 8, (base + _OFFSET_AT) // 4
        buffer_cpu = cpu & 0xFFFF
        buffer_flags, pending_flags = L.BUFFER_FLAG_PROCESSOR_INDEX | pending_flags, 0
        qwords[timestamp_q] = 0
        words[offset_w] = _BH_SIZE
        _u16_into(mapping, base + _PROCESSOR_AT, buffer_cpu)
        _u16_into(mapping, base + _FLAGS_AT, buffer_flags)

    def complete() -> int:
        """FILLING → FULL, the WMI_BUFFER_HEADER filled in first. Returns the buffer's index."""
        nonlocal index, cursor, limit
        used = cursor - base
        sequence = qwords[_COMPLETED_Q] + 1
        qwords[_COMPLETED_Q] = sequence
        _BH.pack_into(
            mapping, base, buffer_size, used, used, 0, qwords[timestamp_q], sequence, 0, buffer_cpu, logger_id,
            _BUFFER_STATE_WRITTEN, used, buffer_flags, L.BUFFER_TYPE_GENERIC, _NO_KERNEL_POINTERS,
        )
        states[index] = FULL
        full, index = index, -1
        cursor, limit = 0, -1
        writer.became_full += 1
        return full

    def orphan() -> None:
        """In a forked child: never touch the parent's pool again. The token is new, as another
        thread of the parent may have held the old one at the fork."""
        nonlocal orphaned, index, limit, take, give
        orphaned, index, limit = True, -1, -1
        take, give = _new_turn()

    return (write if buffer_size - _BH_SIZE <= MAX_RECORD_SIZE else write_big), flush, orphan


def _new_turn() -> tuple[Callable[[], bool], Callable[[bool], None]]:
    """The write path's mutual exclusion: a list holding one token. ``pop`` takes it (or raises
    ``IndexError`` when another thread has it), ``append`` gives it back. Each is one call into C
    that the interpreter never interrupts, and the pair costs a third of ``threading.Lock``'s
    ``acquire`` and ``release``; a thread that finds the token gone yields until it is back."""
    token = [True]
    return token.pop, token.append
