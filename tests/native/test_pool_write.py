"""The compiled pool writer against the pure one: the same operations leave the same bytes.

Two pools of the same shape, one written by ``ipc/pool.py``'s closures and one by
``openetw._native._write``, go through one random sequence of writes (every size from nothing
to past what a buffer holds), flushes, and the service's takes and releases; after every step
the two mappings are byte for byte the same, and so are the writes' results, the buffers
reported FULL and the loss counters.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.ipc.pool import POOL_HEADER, BufferPool, PoolWriter

_write = native.module("_write")
needs_native = pytest.mark.skipif(
    _write is None and os.environ.get("CI") != "true", reason=f"compiled write side not active here: {native.reason()}"
)

Op = tuple[str, int, int, int]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 1200), st.integers(-(2**63), 2**63 - 1), st.integers(0, 70000)),
        st.tuples(st.just("write"), st.integers(8, 120), st.integers(0, 2**40), st.integers(0, 3)),
        st.tuples(st.just("flush"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("take"), st.integers(0, 7), st.just(0), st.just(0)),
    ),
    max_size=120,
)


def pool_bytes(pool: BufferPool) -> bytes:
    """The pool's bytes, its random Identity (a name, no state) zeroed: two pools compare by state."""
    data = bytearray(pool.view)
    at = POOL_HEADER.offset("Identity")
    data[at : at + 8] = bytes(8)
    return bytes(data)


def run(pool: BufferPool, engine: str, ops: list[Op]) -> list[object]:
    fulls: list[int] = []
    writer = PoolWriter(pool, on_full=fulls.append, engine=engine)
    seen: list[object] = []
    for number, (kind, a, b, c) in enumerate(ops):
        if kind == "write":
            record = bytes((number + i) & 0xFF for i in range(a))
            seen.append(writer.write(record if number % 2 else memoryview(record), b, c))
        elif kind == "flush":
            seen.append(writer.flush())
        else:
            full = pool.full_buffers()
            if full:
                index = full[a % len(full)]
                seen.append(pool.take(index))
                pool.release(index)
        seen.append(pool_bytes(pool))
    seen += [fulls, writer.became_full, pool.events_lost, pool.events_refused, pool.take_filling_after_death()]
    return seen


@needs_native
@settings(max_examples=60, deadline=None)
@given(ops=operations, buffer_size=st.sampled_from([1024, 2048, 0x10000 + 1024]), count=st.integers(1, 4))
def test_the_compiled_writer_leaves_the_pool_as_the_pure_one_does(ops: list[Op], buffer_size: int, count: int) -> None:
    results = []
    for engine in ("python", "native"):
        with BufferPool.create(buffer_size, count, logger_id=7, producer_pid=1234, flush_interval_ms=1000) as pool:
            results.append(run(pool, engine, ops))
    assert results[0] == results[1]


@needs_native
def test_a_closed_pool_refuses_the_compiled_writer_and_a_forked_child_writes_nothing() -> None:
    with BufferPool.create(1024, 2, logger_id=1, producer_pid=1, flush_interval_ms=0) as pool:
        writer = PoolWriter(pool, engine="native")
        assert writer.write(bytes(16), 1)
        writer._orphan()
        assert not writer.write(bytes(16), 2) and not writer.flush()
        assert pool.events_lost == pool.events_refused == 0
    with pytest.raises(ValueError, match="closed"):
        writer.write(bytes(16), 3)


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(8, 300), max_size=30),
    offset=st.one_of(st.none(), st.integers(0, 3000)),
    flags=st.integers(0, 0xFFFF),
    use_bytearray=st.booleans(),
)
def test_the_compiled_take_and_release_match_the_pure_ones(sizes: list[int], offset: int | None, flags: int, use_bytearray: bool) -> None:
    import mmap
    import struct

    from openetw.ipc import pool as P

    results = []
    for compiled in (P._native, None):
        saved = P._native
        P._native = compiled
        try:
            with BufferPool.create(2048, 2, logger_id=9, producer_pid=5, flush_interval_ms=0) as pool:
                writer = PoolWriter(pool, engine="python")
                for number, size in enumerate(sizes):
                    writer.write(bytes((number + i) & 0xFF for i in range(size)), number * 3, number % 4)
                writer.flush()
                full = pool.full_buffers()
                if not full:
                    return
                index = full[0]
                base = pool.buffer_offset(index)
                if offset is not None:  # a producer that scribbled on its buffer's header
                    struct.pack_into("<I", pool.view, base + 0x30, offset)
                struct.pack_into("<H", pool.view, base + 0x34, flags)
                out: mmap.mmap | bytearray = bytearray(2048) if use_bytearray else mmap.mmap(-1, 2048)
                pool.take_release_into(index, out)
                results.append((bytes(out), pool_bytes(pool), pool.buffers_repaired))
                with pytest.raises(P.ServiceError, match="not FULL"):
                    pool.take_release_into(index, out)
        finally:
            P._native = saved
    assert results[0] == results[1]


@needs_native
def test_the_compiled_write_side_was_built_from_the_current_constants() -> None:
    from openetw.etl import layouts as L
    from openetw.ipc import pool as P

    assert _write is not None
    built = _write.constants()
    assert built["buffer_header_size"] == L.BUFFER_HEADER_SIZE
    assert (built["timestamp_at"], built["offset_at"], built["flags_at"]) == (P._TIMESTAMP_AT, P._OFFSET_AT, P._FLAGS_AT)
    assert (built["pool_header_size"], built["state_offset"]) == (P.POOL_HEADER_SIZE, P.STATE_OFFSET)
    assert (built["events_lost_at"], built["buffers_completed_at"]) == (P._LOST_Q * 8, P._COMPLETED_Q * 8)
    assert built["states"] == (P.FREE, P.FILLING, P.FULL, P.TAKEN)
