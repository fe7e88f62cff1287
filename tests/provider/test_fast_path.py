"""The write path's generated fast writes against the general path: the same record bytes for
every shape of write, whichever path a write takes, into a real buffer pool (no service)."""

from __future__ import annotations

import os
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.guids import NULL_GUID
from openetw.ipc.pool import BufferPool
from openetw.manifest.winmeta import InType
from openetw.provider import Provider, TraceLoggingProvider, activity
from openetw.provider.encode import ManifestEventEncoder, TraceLoggingEncoderCache, TraceLoggingEventEncoder
from openetw.session import EnableRule, EnableState, SessionEnable

BH_SIZE = L.BUFFER_HEADER_SIZE
NAME = "twenty characters..!"
FIELDS = [("count", InType.UINT32), ("total", InType.UINT64), ("name", InType.UNICODESTRING)]


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    with BufferPool.create(64 * 1024, 16, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=1000) as p:
        yield p


def enable(provider: Any, pool: BufferPool, sessions: int = 1) -> None:
    """Route the provider's writes into ``pool`` as a service enabling it would (``sessions``
    sessions sharing the one pool writer, so each event lands once per session)."""
    entries = [SessionEnable(session_id, session_id, EnableRule(level=5)) for session_id in range(1, sessions + 1)]
    writer = pool.writer()
    provider._apply_state(EnableState.from_sessions(entries), dict.fromkeys(range(1, sessions + 1), writer), notify=False)


def records(pool: BufferPool) -> list[bytes]:
    pool.writer().flush()
    found = []
    for index in pool.full_buffers():
        data = pool.take(index)
        pool.release(index)
        used = struct.unpack_from("<I", data, L.WMI_BUFFER_HEADER.offset("Offset"))[0]
        position = BH_SIZE
        while position < used:
            size = struct.unpack_from("<H", data, position)[0]
            found.append(data[position : position + size])
            position += (size + 7) & ~7
    return found


def ids(record: bytes) -> dict[str, int]:
    """The per-write header fields (thread, process, timestamp) of an EVENT_HEADER record."""
    tid, pid, timestamp = struct.unpack_from("<IIq", record, 8)
    return {"tid": tid, "pid": pid, "timestamp": timestamp}


TL_WRITES: list[tuple[str, dict[str, Any]]] = [
    ("Counted", {"count": 1, "total": 2, "name": NAME}),
    ("Counted", {"count": 3, "total": 4, "name": NAME}),  # the fast write from here on
    ("Counted", {"count": True, "total": 4, "name": NAME}),  # bool: another field type
    ("Counted", {"count": 5, "total": 1 << 63, "name": NAME}),  # past INT64: the general path re-infers
    ("Counted", {"count": 5, "total": 6, "name": NAME}),
    ("Counted", {"total": 6, "count": 5, "name": NAME}),  # another order: other metadata
    ("Counted", {"count": 5, "total": 6, "name": NAME}),
    ("Counted", {"count": 5, "total": 6, "name": "ünï\U0001f600"}),
    ("Counted", {"count": 5, "total": 6}),  # a field fewer
    ("Counted", {"count": 5.5, "total": 6, "name": NAME}),
    ("Counted", {"count": 5, "total": 6, "name": b"bytes"}),
    ("Counted", {"count": 5, "total": 6, "name": [1, 2]}),
    ("Counted", {"count": 5, "total": 6, "name": uuid.UUID(int=7)}),
    ("Other", {}),
    ("Other", {}),
    ("Counted", {"count": 7, "total": 8, "name": NAME}),
]


def test_tracelogging_fast_writes_are_the_general_paths_bytes(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    for event_name, fields in TL_WRITES * 2:
        assert provider.write(event_name, level=4, keyword=0x10, **fields) is True
    assert ("Counted", 4, 0x10, 0) in provider._routing[2] and "Counted" in provider._routing[2]  # the fast write exists
    written = records(pool)
    assert len(written) == 2 * len(TL_WRITES)
    reference = TraceLoggingEncoderCache("Test.FastPath", provider_id=provider.guid)
    for (event_name, fields), record in zip(TL_WRITES * 2, written, strict=True):
        expected = reference.encode(event_name, fields, level=4, keyword=0x10, **ids(record))
        assert record == expected, (event_name, fields)
    assert ids(written[-1])["tid"] == threading.get_native_id() and ids(written[-1])["pid"] == os.getpid()


def test_tracelogging_variants_of_one_name_each_get_a_fast_write(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    variants = [(4, 0x10, 0), (5, 0x10, 0), (4, 0x20, 1), (4, 0x10, 0)]
    writes = [(variant, {"count": n, "total": 2 * n, "name": NAME}) for n, variant in enumerate(variants * 3)]
    for (level, keyword, opcode), fields in writes:
        assert provider.write("Counted", level=level, keyword=keyword, opcode=opcode, **fields) is True
    fast_writes = provider._routing[2]
    assert {("Counted", *variant) for variant in variants} <= set(fast_writes)
    assert fast_writes["Counted"] is fast_writes[("Counted", 4, 0x10, 0)]  # the name finds its first variant
    reference = TraceLoggingEncoderCache("Test.FastPath", provider_id=provider.guid)
    written = records(pool)
    for ((level, keyword, opcode), fields), record in zip(writes, written, strict=True):
        assert record == reference.encode("Counted", fields, level=level, keyword=keyword, opcode=opcode, **ids(record))


def test_manifest_fast_writes_are_the_general_paths_bytes(pool: BufferPool) -> None:
    provider = Provider(uuid.UUID("3f0e1c2a-9a1b-4c55-8d36-6c1d2e3f4a5b"))
    event = provider.event((7, 1, 16, 4, 2, 3, 0x10), FIELDS)
    single = provider.event((8, 0, 16, 4, 0, 0, 0x10), [("name", InType.UNICODESTRING)])
    enable(provider, pool)
    writes: list[tuple[ManifestEventEncoder, tuple[Any, ...]]] = [
        (event, (1, 2, NAME)),
        (event, (3, 4, NAME)),
        (event, ({"count": 5, "total": 6, "name": NAME},)),  # one mapping by field name
        (single, ("alone",)),
        (single, ({"name": "by name"},)),
        (event, (9, 10, NAME)),
    ]
    for encoder, values in writes * 2:
        assert provider.write(encoder, *values) is True
    assert event in provider._routing[2] and single in provider._routing[2]
    written = records(pool)
    assert len(written) == 2 * len(writes)
    for (encoder, values), record in zip(writes * 2, written, strict=True):
        payload = values[0] if isinstance(values[0], dict) else values
        assert record == encoder.encode_general(payload, **ids(record)), values


def test_bad_values_still_raise_through_the_fast_write(pool: BufferPool) -> None:
    provider = Provider(uuid.UUID("3f0e1c2a-9a1b-4c55-8d36-6c1d2e3f4a5b"))
    event = provider.event((7, 1, 16, 4, 2, 3, 0x10), FIELDS)
    enable(provider, pool)
    assert provider.write(event, 1, 2, NAME)
    with pytest.raises(InvalidArgument, match="count"):
        provider.write(event, -1, 2, NAME)
    with pytest.raises(InvalidArgument):
        provider.write(event, 1, 2)
    with pytest.raises(InvalidArgument, match="name"):
        provider.write(event, 1, 2, "with\0nul")
    assert len(records(pool)) == 1


def test_an_activity_takes_the_general_path_and_carries_its_ids(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    provider.write("Counted", count=1, total=2, name=NAME)
    provider.write("Counted", count=1, total=2, name=NAME)
    with activity() as outer:
        provider.write("Counted", count=3, total=4, name=NAME)
        provider.write("Counted", count=3, total=4, name=NAME)
    provider.write("Counted", count=5, total=6, name=NAME)
    activities = [uuid.UUID(bytes_le=record[0x40:0x50]) for record in records(pool)]
    assert activities == [NULL_GUID, NULL_GUID, outer, outer, NULL_GUID]


def test_every_session_gets_the_fast_write(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool, sessions=2)
    for index in range(3):
        assert provider.write("Counted", count=index, total=index, name=NAME) is True
    payload_size = 8 + 8 + 2 * (len(NAME) + 1)
    counts = [struct.unpack_from("<q", record, len(record) - payload_size)[0] for record in records(pool)]
    assert counts == [0, 0, 1, 1, 2, 2]


def test_a_thread_writes_its_own_id(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    thread_ids: list[int] = []

    def write() -> None:
        thread_ids.append(threading.get_native_id())
        for _ in range(2):
            provider.write("Counted", count=1, total=2, name=NAME)

    for _ in range(2):
        thread = threading.Thread(target=write)
        thread.start()
        thread.join()
    write()
    assert [ids(record)["tid"] for record in records(pool)] == [tid for tid in thread_ids for _ in range(2)]


def test_a_record_over_the_limit_is_refused_not_written(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    assert provider.write("Counted", count=1, total=2, name=NAME)
    assert provider.write("Counted", count=1, total=2, name="x" * 40_000) is False
    assert provider.events_refused == 1 and pool.events_refused == 1
    encoder = TraceLoggingEventEncoder("Test.FastPath", "Counted", [("count", InType.INT64)])
    assert encoder.fast_encoder()((1,), 5, 6, 7, bytes(16)) == encoder.encode((1,), timestamp=5, pid=6, tid=7)


def test_a_forked_child_writes_its_own_thread_id() -> None:
    from openetw.provider import runtime

    assert runtime._current_thread_id() == threading.get_native_id()  # cached from here on
    pid = os.fork()
    if pid == 0:  # the child: its one thread's id is its pid
        os._exit(0 if runtime._current_thread_id() == os.getpid() == runtime._PID[0] == runtime._pid else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_write_fields_takes_the_same_fast_write(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    enable(provider, pool)
    fields = {"count": 1, "total": 2, "name": NAME}
    provider.write_fields("Counted", fields, level=4)
    provider.write_fields("Counted", fields, level=4)
    provider.write("Counted", level=4, **fields)
    provider.write_fields("Counted", fields, level=4, tags=0x5)  # tags: other metadata
    written = records(pool)
    reference = TraceLoggingEncoderCache("Test.FastPath", provider_id=provider.guid)
    expected = [reference.encode("Counted", fields, level=4, tags=tags, **ids(record)) for tags, record in zip((0, 0, 0, 5), written, strict=True)]
    assert written == expected
    assert written[3] != reference.encode("Counted", fields, level=4, **ids(written[3]))


# -- declared TraceLogging events: event.write(v0, v1, ...) ----------------------------------------

DECLARED = (("count", "uint32"), ("total", InType.UINT64), ("name", "string"))


def test_a_declared_event_writes_the_encoders_bytes(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    event = provider.event("Counted", level=4, keyword=0x10, opcode=2, fields=DECLARED)
    assert event.write(1, 2, NAME) is False  # no session yet
    enable(provider, pool)
    write = event.write  # kept in a local: still right after sessions change
    values = [(1, 2, NAME), (0xFFFFFFFF, (1 << 64) - 1, ""), (3, 4, "ünï\U0001f600"), (5, 6, NAME)]
    for row in values:
        assert write(*row) is True
    written = records(pool)
    reference = TraceLoggingEventEncoder("Test.FastPath", "Counted", FIELDS, level=4, keyword=0x10, opcode=2, provider_id=provider.guid)
    assert event.fields == reference.fields
    assert written == [reference.encode(row, **ids(record)) for row, record in zip(values, written, strict=True)]
    assert ids(written[0])["tid"] == threading.get_native_id() and ids(written[0])["pid"] == os.getpid()
    provider._apply_state(EnableState.from_sessions([]), {}, notify=False)
    assert write(1, 2, NAME) is False and records(pool) == []
    enable(provider, pool, sessions=2)
    assert write(7, 8, NAME) is True
    assert len(records(pool)) == 2  # once per session


def test_a_declared_event_takes_its_level_and_keyword_to_the_sessions_rules(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    verbose = provider.event("Verbose", level=5, fields=(("count", "uint32"),))
    keyed = provider.event("Keyed", level=4, keyword=0x4, fields=(("count", "uint32"),))
    entries = [SessionEnable(1, 1, EnableRule(level=4, match_any=0x4))]
    provider._apply_state(EnableState.from_sessions(entries), {1: pool.writer()}, notify=False)
    assert verbose.write(1) is False
    assert keyed.write(2) is True
    assert len(records(pool)) == 1


def test_a_declared_events_bad_values_raise_and_activities_carry_their_ids(pool: BufferPool) -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    event = provider.event("Counted", fields=DECLARED)
    enable(provider, pool)
    with pytest.raises(InvalidArgument, match="count"):
        event.write(-1, 2, NAME)
    with pytest.raises(InvalidArgument, match="name"):
        event.write(1, 2, "with\0nul")
    with pytest.raises(InvalidArgument, match="total"):
        event.write(1, 2.5, NAME)
    with pytest.raises(TypeError):
        event.write(1, 2)
    assert event.write(1, 2, "x" * 40_000) is False and pool.events_refused == 1
    with activity() as outer:
        assert event.write(3, 4, NAME)
    assert event.write(5, 6, NAME)
    activities = [uuid.UUID(bytes_le=record[0x40:0x50]) for record in records(pool)]
    assert activities == [outer, NULL_GUID]


def test_declared_fields_name_their_types() -> None:
    provider = TraceLoggingProvider("Test.FastPath")
    with pytest.raises(InvalidArgument, match="'bogus'"):
        provider.event("Bad", fields=(("a", "bogus"),))
    event = provider.event("Empty")
    assert event.fields == () and event.write() is False
