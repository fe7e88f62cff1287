"""The shared-memory buffer pool: layout, every state transition, real producer processes."""

from __future__ import annotations

import fcntl
import io
import multiprocessing
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.errors import InvalidArgument, ServiceError
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.relog import is_logfile_header_record
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.ipc.pool import (
    FILLING,
    FREE,
    FULL,
    POOL_HEADER,
    POOL_HEADER_SIZE,
    STATE_OFFSET,
    TAKEN,
    BufferPool,
)

PROVIDER = uuid.UUID("5eadbeef-0000-4000-8000-00000000c0de")
BH = L.WMI_BUFFER_HEADER
BH_SIZE = L.BUFFER_HEADER_SIZE
SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT = 60.0  # only a hung child ever gets near this


def record(k: int) -> bytes:
    """Record number ``k``: its number in the payload, sizes varying so padding varies too."""
    return build_event_record(
        provider_id=PROVIDER, id=k & 0xFFFF, timestamp=1_000 + k, pid=4242, tid=7,
        user_data=struct.pack("<Q", k) + bytes(k % 13),
    ).raw


def record_number(raw: bytes) -> int:
    return struct.unpack_from("<Q", raw, L.EVENT_HEADER.size)[0]


def header_buffer(buffer_size: int) -> bytes:
    out = io.BytesIO()
    EtlWriter(out, header=new_logfile_header(clock=linux_trace_clock(), buffer_size=buffer_size)).close()
    return out.getvalue()[:buffer_size]


def read_pool_buffers(buffers: list[bytes], buffer_size: int) -> list[bytes]:
    """The records of pool buffers placed after a header buffer, read by EtlReader (strict)."""
    with EtlReader(header_buffer(buffer_size) + b"".join(buffers)) as reader:
        raws = [r.raw for r in reader if not is_logfile_header_record(r)]
        assert reader.stats.errors == []
        assert reader.stats.unknown_records == 0
    return raws


def new_pool(buffer_size: int = 4096, buffer_count: int = 4, logger_id: int = 1) -> BufferPool:
    return BufferPool.create(buffer_size, buffer_count, logger_id=logger_id, producer_pid=os.getpid(), flush_interval_ms=250)


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    with new_pool() as p:
        yield p


def drain(pool: BufferPool) -> list[bytes]:
    taken = []
    for index in pool.full_buffers():
        taken.append(pool.take(index))
        pool.release(index)
    return taken


def buffer_header(pool: BufferPool, index: int) -> dict[str, object]:
    return BH.as_dict(BH.unpack_from(pool.view, pool.buffer_offset(index)))


# -- layout -----------------------------------------------------------------------------------


def test_create_lays_out_the_header_and_blank_buffers(pool: BufferPool) -> None:
    size = os.fstat(pool.fileno()).st_size
    assert size == POOL_HEADER_SIZE + 4 * 4096
    header = POOL_HEADER.as_dict(POOL_HEADER.unpack_from(pool.view, 0))
    assert header == {
        "Magic": b"OETWPOOL", "Version": 1, "HeaderSize": 4096, "BufferSize": 4096, "BufferCount": 4, "LoggerId": 1,
        "ProducerPid": os.getpid(), "FlushIntervalMs": 250, "StateOffset": 0x100, "EventsLost": 0, "EventsRefused": 0,
        "BuffersCompleted": 0, "LossesCounted": 0, "Identity": header["Identity"],
    }
    assert pool.identity == f"{os.getpid()}-{header['Identity']:016x}"
    assert POOL_HEADER.offset("EventsLost") == 40 and STATE_OFFSET == 0x100
    assert struct.unpack_from("<4I", pool.view, STATE_OFFSET) == (FREE,) * 4
    for index in range(4):
        start = POOL_HEADER_SIZE + index * 4096
        assert pool.buffer_offset(index) == start
        data = bytes(pool.view[start : start + 4096])
        assert BH.unpack_from(data, 0) == (0,) * 10 + (BH_SIZE, 0, 0, bytes(16))
        assert data[BH_SIZE:] == bytes(4096 - BH_SIZE)  # zero: a record's padding is there already


def test_memfd_is_sealed_so_a_producer_cannot_resize_it(pool: BufferPool) -> None:
    seals = fcntl.fcntl(pool.fileno(), fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    with pytest.raises(PermissionError):
        os.ftruncate(pool.fileno(), 4096)


@pytest.mark.parametrize(
    ("buffer_size", "buffer_count"), [(1000, 4), (1020, 4), (4096, 0), (4096, 961), (32 << 20, 1)],
)
def test_create_refuses_impossible_sizes(buffer_size: int, buffer_count: int) -> None:
    with pytest.raises(InvalidArgument):
        BufferPool.create(buffer_size, buffer_count, logger_id=1, producer_pid=1, flush_interval_ms=0)


def test_attach_maps_the_same_memory(pool: BufferPool) -> None:
    with BufferPool.attach(os.dup(pool.fileno())) as attached:
        assert (attached.buffer_size, attached.buffer_count, attached.logger_id) == (4096, 4, 1)
        assert (attached.producer_pid, attached.flush_interval_ms) == (os.getpid(), 250)
        assert attached.writer().write(record(0), 1000)
        assert pool.states[0] == FILLING


# -- producer transitions ---------------------------------------------------------------------


def test_first_write_opens_a_buffer_and_stores_offset_after_the_record(pool: BufferPool) -> None:
    raw = record(5)  # 0x50 + 8 + 5 bytes: 3 bytes of padding
    assert len(raw) % 8 == 5
    assert pool.writer().write(raw, 1005, cpu=3)
    assert pool.stats().filling == 1 and pool.states[0] == FILLING
    base = pool.buffer_offset(0)
    header = buffer_header(pool, 0)
    aligned = (len(raw) + 7) & ~7
    assert header["Offset"] == BH_SIZE + aligned
    assert header["TimeStamp"] == 1005
    assert header["ProcessorIndex"] == 3 and header["BufferFlag"] == L.BUFFER_FLAG_PROCESSOR_INDEX
    assert bytes(pool.view[base + BH_SIZE : base + BH_SIZE + len(raw)]) == raw
    assert bytes(pool.view[base + BH_SIZE + len(raw) : base + BH_SIZE + aligned]) == bytes(3)
    assert pool.view[base + BH_SIZE + aligned] == 0


def test_a_record_that_does_not_fit_completes_the_buffer_and_opens_the_next(pool: BufferPool) -> None:
    full: list[int] = []
    writer = pool.writer(on_full=full.append)
    k = 0
    while pool.states[0] == FILLING or k == 0:
        assert writer.write(record(k), 1000 + k, cpu=1)
        k += 1
    assert pool.states[0] == FULL and pool.states[1] == FILLING
    assert full == [0] and writer.became_full == 1
    header = buffer_header(pool, 0)
    used = header["Offset"]
    assert isinstance(used, int) and used + ((len(record(k - 1)) + 7) & ~7) > 4096
    assert header == {
        "BufferSize": 4096, "SavedOffset": used, "CurrentOffset": used, "ReferenceCount": 0,
        "TimeStamp": 1000 + k - 2, "SequenceNumber": 1, "ClockTypeFrequency": 0, "ProcessorIndex": 1,
        "LoggerId": 1, "State": 3, "Offset": used, "BufferFlag": 0x20, "BufferType": 0, "KernelPointers": bytes(16),
    }
    assert pool.buffers_completed == 1


def test_flush_marks_only_a_non_empty_filling_buffer_full(pool: BufferPool) -> None:
    full: list[int] = []
    writer = pool.writer(on_full=full.append)
    assert writer.flush() is False
    writer.write(record(0), 1000)
    assert writer.flush() is True
    assert full == [0] and pool.stats().full == 1 and pool.stats().filling == 0
    assert writer.flush() is False
    writer.write(record(1), 1001)
    assert pool.states[1] == FILLING  # the lowest FREE buffer (0 is FULL)


def test_take_and_release(pool: BufferPool) -> None:
    writer = pool.writer()
    writer.write(record(0), 1000)
    with pytest.raises(ServiceError, match="FILLING, not FULL"):
        pool.take(0)
    writer.flush()
    with pytest.raises(ServiceError, match="FULL, not TAKEN"):
        pool.release(0)
    data = pool.take(0)
    assert pool.states[0] == TAKEN and len(data) == 4096
    base = pool.buffer_offset(0)
    used = struct.unpack_from("<I", data, BH.offset("Offset"))[0]
    assert used == struct.unpack_from("<I", pool.view, base + BH.offset("Offset"))[0] > BH_SIZE
    # a well-behaved producer's header and records are kept as they are; the tail becomes 0xFF
    assert data[:used] == bytes(pool.view[base : base + used])
    assert data[used:] == b"\xff" * (4096 - used) and bytes(pool.view[base + used : base + 4096]) == bytes(4096 - used)
    with pytest.raises(ServiceError, match="TAKEN, not FULL"):
        pool.take(0)
    pool.release(0)
    assert pool.states[0] == FREE
    assert bytes(pool.view[base : base + 4096]) == bytes(0x30) + struct.pack("<I", BH_SIZE) + bytes(0x14) + bytes(4096 - BH_SIZE)
    with pytest.raises(InvalidArgument):
        pool.take(4)
    assert read_pool_buffers([data], 4096) == [record(0)]


def test_full_buffers_come_in_sequence_order() -> None:
    with new_pool(buffer_size=1024, buffer_count=4) as pool:
        writer = pool.writer()
        k = 0
        while pool.stats().full < 2:
            writer.write(record(k), k)
            k += 1
        assert pool.full_buffers() == [0, 1]
        pool.take(0)
        pool.release(0)
        while pool.states[0] != FILLING:  # the lowest FREE buffer comes next: index 0 again, after 2
            writer.write(record(k), k)
            k += 1
        writer.flush()
        order = pool.full_buffers()
        assert order == [1, 2, 0]
        assert [buffer_header(pool, index)["SequenceNumber"] for index in order] == [2, 3, 4]


def test_pool_buffers_are_byte_for_byte_what_the_etl_writer_writes() -> None:
    raws = [record(k) for k in range(120)]
    out = io.BytesIO()
    with EtlWriter(out, header=new_logfile_header(clock=linux_trace_clock(), buffer_size=4096), logger_id=9) as etl:
        for k, raw in enumerate(raws):
            etl.write_raw(raw, 2, 1000 + k)
    written = out.getvalue()
    from_writer = [written[i : i + 4096] for i in range(4096, len(written), 4096)]

    with new_pool(buffer_size=4096, buffer_count=8, logger_id=9) as pool:
        writer = pool.writer()
        assert all(writer.write(raw, 1000 + k, cpu=2) for k, raw in enumerate(raws))
        writer.flush()
        from_pool = drain(pool)
    assert len(from_pool) == len(from_writer) > 2
    assert from_pool == from_writer
    with EtlReader(written[:4096] + b"".join(from_pool)) as reader:
        records = [r for r in reader if not is_logfile_header_record(r)]
    assert [r.raw for r in records] == raws
    assert {r.cpu for r in records} == {2}


def test_no_free_buffer_drops_and_counts_and_flags_the_next_buffer() -> None:
    with new_pool(buffer_size=1024, buffer_count=2) as pool:
        writer = pool.writer()
        results = [writer.write(record(k), k) for k in range(40)]
        kept = results.count(True)
        assert results == [True] * kept + [False] * (40 - kept)
        assert pool.events_lost == 40 - kept and pool.events_refused == 0
        assert pool.stats().full == 2 and pool.stats().filling == 0
        taken = drain(pool)
        assert read_pool_buffers(taken, 1024) == [record(k) for k in range(kept)]
        assert writer.write(record(100), 100)
        writer.flush()
        later = drain(pool)
        with EtlReader(header_buffer(1024) + b"".join(taken + later)) as reader:
            list(reader)
            assert reader.stats.buffers_with_events_lost_flag == 1
        assert BH.unpack_from(later[0], 0)[BH.index("BufferFlag")] == 0x20 | L.BUFFER_FLAG_EVENTS_LOST


@pytest.mark.parametrize("size", [0, 7, 1024 - BH_SIZE + 1, 5000])
def test_records_no_buffer_can_hold_are_refused_and_counted_apart(size: int) -> None:
    with new_pool(buffer_size=1024, buffer_count=2) as pool:
        writer = pool.writer()
        assert writer.write(record(0), 0)
        assert writer.write(b"\x01" * size, 1) is False
        assert pool.events_refused == 1 and pool.events_lost == 0
        assert writer.write(b"\x01" * (1024 - BH_SIZE), 2)  # the largest record that fits is taken
        assert pool.stats().full == 1
        assert buffer_header(pool, 0)["BufferFlag"] == 0x20 | L.BUFFER_FLAG_EVENTS_LOST


def test_records_bigger_than_etw_allows_are_refused_even_in_big_buffers() -> None:
    with new_pool(buffer_size=128 * 1024, buffer_count=1) as pool:
        writer = pool.writer()
        assert writer.write(b"\x02" * 0x10000, 0) is False
        assert writer.write(b"\x02" * 0xFFF8, 0) is True
        assert pool.events_refused == 1


def test_writer_is_one_per_mapping(pool: BufferPool) -> None:
    calls: list[int] = []
    first = pool.writer()
    assert pool.writer(on_full=calls.append) is first
    first.write(record(0), 0)
    first.flush()
    assert calls == [0]


def test_close_is_idempotent_and_closes_the_fd() -> None:
    pool = new_pool()
    fd = pool.fileno()
    pool.writer().write(record(0), 0)
    pool.close()
    pool.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_forked_child_never_writes_into_its_parents_pool(pool: BufferPool) -> None:
    writer = pool.writer()
    assert writer.write(record(0), 1000)
    before = bytes(pool.view)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only when every write was refused and nothing changed
        try:
            results = [writer.write(record(k), k) for k in range(300)] + [writer.flush()]
            os._exit(0 if not any(results) and bytes(pool.view) == before else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert bytes(pool.view) == before
    assert writer.write(record(1), 1001)  # the parent goes on
    writer.flush()
    assert read_pool_buffers(drain(pool), 4096) == [record(0), record(1)]


# -- a dead producer --------------------------------------------------------------------------


def test_take_all_after_service_death_gives_back_taken_full_and_filling_in_order(pool: BufferPool) -> None:
    writer = pool.writer()
    raws = [record(k) for k in range(100)]
    assert all(writer.write(raw, 1000 + k, cpu=1) for k, raw in enumerate(raws))
    full = pool.full_buffers()
    assert len(full) >= 2 and pool.stats().filling == 1
    pool.take(full[0])  # a dead service took it and never released it: never stored
    pool.losses_counted = 5  # what it had counted of the producer's losses stays in the pool
    every = pool.take_all_after_service_death()
    assert read_pool_buffers(every, 4096) == raws
    stats = pool.stats()
    assert stats.free == 4 and pool.losses_counted == 5
    assert POOL_HEADER.as_dict(POOL_HEADER.unpack_from(pool.view, 0))["LossesCounted"] == 5


def test_buffers_held_after_a_service_death_stay_taken_and_a_later_taker_finds_them_the_same(pool: BufferPool) -> None:
    from openetw.eventlog.records import buffer_sequence

    writer = pool.writer()
    raws = [record(k) for k in range(100)]
    assert all(writer.write(raw, 1000 + k, cpu=1) for k, raw in enumerate(raws))
    pool.take(pool.full_buffers()[0])  # a dead service took it and never released it
    completed = pool.buffers_completed
    held = pool.hold_all_after_service_death()
    assert read_pool_buffers([data for _, data in held], 4096) == raws
    sequences = [buffer_sequence(data) for _, data in held]
    assert sequences == sorted(sequences) and sequences[-1] == completed + 1 == pool.buffers_completed
    assert pool.stats().taken == len(held) and pool.stats().filling == 0
    # this taker died too, before storing them: the next one finds the same buffers, numbered the same
    again = pool.take_all_after_service_death()
    assert again == [data for _, data in held]
    assert pool.stats().free == 4 and pool.buffers_completed == completed + 1


def test_take_filling_after_death_keeps_every_returned_write(pool: BufferPool) -> None:
    writer = pool.writer()
    raws = [record(k) for k in range(60)]
    assert all(writer.write(raw, 1000 + k, cpu=1) for k, raw in enumerate(raws))
    completed = pool.buffers_completed
    full = [pool.take(index) for index in pool.full_buffers()]
    rescued = pool.take_filling_after_death()
    assert len(rescued) == 1 and pool.stats().filling == 0 and pool.stats().taken == completed + 1
    header = BH.as_dict(BH.unpack_from(rescued[0], 0))
    assert header["SequenceNumber"] == completed + 1 and header["TimeStamp"] == 1059
    assert header["BufferSize"] == 4096 and header["State"] == 3 and header["ProcessorIndex"] == 1
    assert header["SavedOffset"] == header["Offset"] == header["CurrentOffset"]
    assert read_pool_buffers(full + rescued, 4096) == raws


def test_an_empty_filling_buffer_after_death_is_freed(pool: BufferPool) -> None:
    pool.states[2] = FILLING  # opened, then the producer died before its first record was in
    assert pool.take_filling_after_death() == []
    assert pool.states[2] == FREE


# -- a hostile peer ---------------------------------------------------------------------------


def _memfd_with(header: bytes, size: int) -> int:
    fd = os.memfd_create("bad-pool")
    os.ftruncate(fd, size)
    os.pwrite(fd, header, 0)
    return fd


def _pool_header(**changes: object) -> bytes:
    values: dict[str, object] = {
        "Magic": b"OETWPOOL", "Version": 1, "HeaderSize": 4096, "BufferSize": 1024, "BufferCount": 2, "LoggerId": 1,
        "ProducerPid": 1, "FlushIntervalMs": 0, "StateOffset": 0x100, "EventsLost": 0, "EventsRefused": 0,
        "BuffersCompleted": 0, "LossesCounted": 0, "Identity": 1,
    }
    values.update(changes)
    return POOL_HEADER.pack_dict(values)


@pytest.mark.parametrize(
    ("header", "size", "message"),
    [
        (_pool_header(), 4096 + 2048, None),
        (_pool_header(Magic=b"OETWPOOX"), 4096 + 2048, "magic"),
        (_pool_header(Version=2), 4096 + 2048, "version"),
        (_pool_header(HeaderSize=8192), 4096 + 2048, "header size"),
        (_pool_header(StateOffset=0x40), 4096 + 2048, "state offset"),
        (_pool_header(BufferSize=1020), 4096 + 2040, "buffer size"),
        (_pool_header(BufferSize=0), 4096, "buffer size"),
        (_pool_header(BufferCount=0), 4096, "buffer count"),
        (_pool_header(BufferCount=961), 4096 + 1024 * 961, "buffer count"),
        (_pool_header(LoggerId=0x10000), 4096 + 2048, "logger id"),
        (_pool_header(), 4096 + 4096, "holds 8192 bytes"),
        (_pool_header(), 4096 + 1024, "holds 5120 bytes"),
        (b"", 100, "shorter than"),
        (b"", 0, "shorter than"),
    ],
)
def test_attach_refuses_a_bad_header_and_closes_the_fd(header: bytes, size: int, message: str | None) -> None:
    fd = _memfd_with(header, size)
    if message is None:
        BufferPool.attach(fd).close()
    else:
        with pytest.raises(ServiceError, match=message):
            BufferPool.attach(fd)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_attach_refuses_what_is_not_a_memfd() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    with pytest.raises(ServiceError):
        BufferPool.attach(read_end)


def test_take_reframes_a_buffer_a_producer_scribbled_on(pool: BufferPool) -> None:
    writer = pool.writer()
    writer.write(record(0), 1000)
    writer.flush()
    base = pool.buffer_offset(0)
    BH.pack_into(pool.view, base, 0x7FFFFFF, 5, 5, 9, 77, 1, 3, 2, 0x55, 0, 0x9999, 0x40 | 0x10 | 0x02, 4, b"x" * 16)
    data = pool.take(0)
    header = BH.as_dict(BH.unpack_from(data, 0))
    assert header["BufferSize"] == 4096 and header["Offset"] == BH_SIZE and header["LoggerId"] == 1
    assert header["BufferFlag"] == 0x20 | 0x02 and header["BufferType"] == 0 and header["KernelPointers"] == bytes(16)
    assert pool.stats().buffers_repaired == 1
    assert read_pool_buffers([data], 4096) == []
    pool.states[1] = 77
    assert pool.stats().invalid == 1
    with pytest.raises(ServiceError, match="unknown state 77"):
        pool.take(1)


def test_bytes_a_producer_left_after_its_records_never_leave_the_pool(pool: BufferPool) -> None:
    writer = pool.writer()
    raw = record(3)  # 3 bytes of padding
    writer.write(raw, 1000)
    base = pool.buffer_offset(0)
    used = BH_SIZE + ((len(raw) + 7) & ~7)
    pool.view[base + BH_SIZE + len(raw) : base + 4096] = b"\x5a" * (4096 - BH_SIZE - len(raw))  # padding and tail
    writer.flush()
    data = pool.take(0)
    assert data[BH_SIZE : BH_SIZE + len(raw)] == raw
    assert data[used:] == b"\xff" * (4096 - used)
    assert data[BH_SIZE + len(raw) : used] == b"\x5a" * (used - BH_SIZE - len(raw))  # inside Offset: the producer's
    pool.release(0)
    assert bytes(pool.view[base + BH_SIZE : base + 4096]) == bytes(4096 - BH_SIZE)


# -- properties -------------------------------------------------------------------------------

_operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 80)),
        st.tuples(st.just("write_sized"), st.sampled_from([0, 4, 7, 952, 953, 2000])),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("drain"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(_operations)
def test_every_write_is_in_a_buffer_exactly_once_or_counted(operations: list[tuple[str, int]]) -> None:
    with new_pool(buffer_size=1024, buffer_count=3) as pool:
        writer = pool.writer()
        taken: list[bytes] = []
        accepted: list[bytes] = []
        refused = dropped = 0
        for k, (operation, argument) in enumerate(operations):
            if operation in ("write", "write_sized"):
                raw = record(k + 1000 * argument) if operation == "write" else _opaque_record(k, argument)
                if writer.write(raw, k):
                    accepted.append(raw)
                elif 8 <= len(raw) <= 1024 - BH_SIZE:
                    assert pool.stats().free == 0  # dropped only when no buffer was FREE
                    dropped += 1
                else:
                    refused += 1
            elif operation == "flush":
                writer.flush()
            else:
                taken += drain(pool)
        writer.flush()
        taken += drain(pool)
        assert pool.events_lost == dropped and pool.events_refused == refused
        assert read_pool_buffers(taken, 1024) == accepted
        assert pool.stats().free == 3


def _opaque_record(k: int, size: int) -> bytes:
    """A record of exactly ``size`` bytes (a classic header with its own size), or junk when too short."""
    if size < L.EVENT_HEADER.size:
        return b"\x07" * size
    raw = bytearray(record(k))
    raw[:2] = struct.pack("<H", size)
    return bytes(raw[:size].ljust(size, b"\x05"))


# -- threads ----------------------------------------------------------------------------------


def test_two_threads_and_a_draining_service_lose_nothing_unaccounted() -> None:
    per_thread = 5000
    with new_pool(buffer_size=2048, buffer_count=4) as pool:
        writer = pool.writer()
        drops = [0, 0]
        done = threading.Event()
        start = threading.Barrier(2)

        def produce(thread: int) -> None:
            start.wait()
            for k in range(per_thread):
                if not writer.write(record(thread * 1_000_000 + k), k, cpu=thread):
                    drops[thread] += 1

        taken: list[bytes] = []

        def service() -> None:
            while not done.is_set():
                taken.extend(drain(pool))
                time.sleep(0.0005)

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(2)]
        drainer = threading.Thread(target=service)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # threads switch often, also inside a write
        try:
            drainer.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            done.set()
            drainer.join()
        finally:
            sys.setswitchinterval(interval)
        writer.flush()
        taken += drain(pool)
        numbers = [record_number(raw) for raw in read_pool_buffers(taken, 2048)]
        assert pool.events_lost == sum(drops)
        assert len(numbers) + pool.events_lost == 2 * per_thread
        for thread in range(2):
            mine = [n for n in numbers if n // 1_000_000 == thread]
            assert mine == sorted(set(mine)) and len(mine) == per_thread - drops[thread]


# -- real producer processes ------------------------------------------------------------------


def _produce(sock: socket.socket, count: int, then: str) -> None:
    """A producer process: attach the pool received on ``sock``, write records 0..count-1, report.

    One b"F" per buffer that became FULL, then b"D" + (drops, refused). ``then``: "flush" flushes
    before reporting; "hang" reports without flushing and waits to be killed.
    """
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    pool = BufferPool.attach(fds[0])
    writer = pool.writer(on_full=lambda index: sock.send(b"F"))
    raws = [record(k) for k in range(count)]
    drops = sum(not writer.write(raw, 1000 + k) for k, raw in enumerate(raws))
    if then == "flush":
        writer.flush()
    sock.sendall(b"D" + struct.pack("<QQ", drops, pool.events_refused))
    if then == "hang":
        time.sleep(CHILD_TIMEOUT)
    pool.close()


class Producer:
    """A producer process and the service's end of its control connection."""

    def __init__(self, pool: BufferPool, count: int, then: str) -> None:
        self.sock, child_sock = socket.socketpair()
        self.process = SPAWN.Process(target=_produce, args=(child_sock, count, then), daemon=True)
        self.process.start()
        child_sock.close()
        socket.send_fds(self.sock, [b"P"], [pool.fileno()])
        self.notifications = 0
        self.report: tuple[int, int] | None = None
        self._received = b""

    def poll(self, timeout: float) -> None:
        """Read what the producer sent within ``timeout``: notifications, then its report."""
        if self.report is not None or not select.select([self.sock], [], [], timeout)[0]:
            return
        data = self.sock.recv(65536)
        assert data, "the producer closed its connection before reporting"
        self._received += data
        notifications, marker, report = self._received.partition(b"D")
        assert notifications == b"F" * len(notifications)
        self.notifications = len(notifications)
        if marker and len(report) >= 16:
            self.report = struct.unpack_from("<QQ", report)

    def wait_for_report(self) -> tuple[int, int]:
        deadline = time.monotonic() + CHILD_TIMEOUT
        while self.report is None:
            assert time.monotonic() < deadline, "the producer did not report"
            self.poll(0.5)
        return self.report

    def close(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(CHILD_TIMEOUT)
        self.sock.close()


def test_a_producer_process_and_a_concurrent_service_account_for_every_record() -> None:
    count = 6000
    with new_pool(buffer_size=2048, buffer_count=3) as pool:
        producer = Producer(pool, count, "flush")
        taken: list[bytes] = []
        try:
            while producer.report is None:
                producer.poll(0.05)
                taken += drain(pool)
            drops, refused = producer.report
            producer.process.join(CHILD_TIMEOUT)
            assert producer.process.exitcode == 0
        finally:
            producer.close()
        taken += drain(pool)
        raws = read_pool_buffers(taken, 2048)
        assert refused == 0 and pool.events_lost == drops
        assert len(raws) + pool.events_lost == count
        numbers = [record_number(raw) for raw in raws]
        assert numbers == sorted(set(numbers))
        assert raws == [record(n) for n in numbers]
        assert producer.notifications == pool.buffers_completed == len(taken)
        assert pool.stats().free == 3


def test_a_killed_producer_loses_nothing_it_wrote() -> None:
    count = 150
    with new_pool(buffer_size=4096, buffer_count=8) as pool:
        producer = Producer(pool, count, "hang")
        try:
            assert producer.wait_for_report() == (0, 0)
            os.kill(producer.process.pid, signal.SIGKILL)
            producer.process.join(CHILD_TIMEOUT)
            assert producer.process.exitcode == -signal.SIGKILL
        finally:
            producer.close()
        full = [pool.take(index) for index in pool.full_buffers()]
        rescued = pool.take_filling_after_death()
        assert len(full) >= 2 and len(rescued) == 1
        assert read_pool_buffers(full + rescued, 4096) == [record(k) for k in range(count)]
        assert pool.events_lost == 0


def records_that_fit(raws: list[bytes], buffer_size: int, buffer_count: int) -> int:
    """How many of ``raws``, written in order to a pool nobody drains, find room."""
    opened, used = 0, buffer_size
    for n, raw in enumerate(raws):
        aligned = (len(raw) + 7) & ~7
        if used + aligned > buffer_size:
            if opened == buffer_count:
                return n
            opened, used = opened + 1, BH_SIZE
        used += aligned
    return len(raws)


def test_a_tiny_pool_without_a_service_counts_exactly_the_drops() -> None:
    count = 100
    kept = records_that_fit([record(k) for k in range(count)], 1024, 2)
    assert 10 < kept < 30
    with new_pool(buffer_size=1024, buffer_count=2) as pool:
        producer = Producer(pool, count, "exit")
        try:
            drops, refused = producer.wait_for_report()
            producer.process.join(CHILD_TIMEOUT)
            assert producer.process.exitcode == 0
        finally:
            producer.close()
        assert drops == pool.events_lost == count - kept and refused == 0
        stats = pool.stats()
        assert (stats.full, stats.filling, stats.free) == (2, 0, 0)
        assert producer.notifications == 2
        assert read_pool_buffers(drain(pool), 1024) == [record(k) for k in range(kept)]


def test_take_into_writes_what_take_returns(pool: BufferPool) -> None:
    import mmap

    from openetw.service.logfile import count_records

    writer = pool.writer()
    for number in range(3):
        writer.write(record(number), 1000 + number)
    writer.flush()
    writer.write(record(9), 2000)
    writer.flush()
    out = mmap.mmap(-1, 4096)
    out[:] = b"\x55" * 4096  # whatever was there before goes
    with pytest.raises(InvalidArgument, match="4096 bytes, not 8"):
        pool.take_into(0, bytearray(8))
    pool.take_into(0, out)
    assert pool.states[0] == TAKEN
    with pytest.raises(ServiceError, match="TAKEN, not FULL"):
        pool.take_into(0, out)
    reference = pool._copy_out(0, sequence=None)
    assert bytes(out) == reference and count_records(out) == 3  # type: ignore[arg-type]
    assert read_pool_buffers([bytes(out)], 4096) == [record(0), record(1), record(2)]
