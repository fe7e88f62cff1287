"""NetTrace version 6 (.NET 9+): the block format, read from a stream written per its description."""

from __future__ import annotations

import random

from openetw.consumer.formats import NETTRACE, trace_format
from openetw.etl.extended import EXT_STACK_TRACE64
from openetw.nettrace import NettraceReader
from openetw.nettrace.records import RecordBuilder
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from openetw.testing.fuzz_nettrace import check, mutate
from tests.nettrace.v6_file import ACTIVITY, PROVIDER_GUID, SYNC_QPC, stream


def test_version_6_events_with_threads_labels_stacks_and_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = stream()
    path = tmp_path / "v6.nettrace"
    path.write_bytes(data)
    assert trace_format(path) is NETTRACE
    reader = NettraceReader(data)
    assert (reader.info.version, reader.info.process_id, reader.info.processors) == (6, 4321, 16)
    events = list(reader.events())
    assert reader.losses == [] and reader.notices == []
    assert [event.header.timestamp for event in events] == [SYNC_QPC + 100, SYNC_QPC + 150, SYNC_QPC + 175, SYNC_QPC + 300]
    first = events[0]
    assert (first.header.thread_id, first.header.process_id, first.header.capture_thread_id) == (1001, 777, 1001)
    assert first.header.activity_id == ACTIVITY.bytes_le and first.stack == (0x7FF000001000, 0x7FF000002000)
    meta = first.metadata
    assert (meta.provider_name, meta.event_id, meta.event_name, meta.opcode, meta.level, meta.version) == ("My.V6Source", 7, "HelloStart", 1, 4, 2)
    assert meta.keywords == 0xF0 and meta.provider_guid == PROVIDER_GUID
    assert events[1].header.thread_id == 1002 and events[3].header.thread_id == 1001  # uncompressed row: index 1

    builder = RecordBuilder(reader.info)
    registry = SchemaRegistry()
    context = DecodeContext(registry)
    record = builder.record(first)
    assert record.provider_id == PROVIDER_GUID and (record.pid, record.tid, record.opcode, record.level) == (777, 1001, 1, 4)
    assert record.extended_item(EXT_STACK_TRACE64) is not None and record.activity_id.bytes_le == ACTIVITY.bytes_le
    assert record.filetime == reader.info.sync_time_filetime + 100  # 100 ticks at 10 MHz: 100 FILETIME units
    schema = context.schema_for(record)
    values = dict(registry.decode(schema, record.user_data, 8).items())
    assert values["count"] == 1 and values["message"] == "one" and values["values"] == [1, 2, 3]
    assert values["when"].year == 2025 and values["when"].second == 7
    odd = builder.record(events[2])
    assert odd.user_data == b"\xac\x02"  # a varuint field: kept undecoded
    assert dict(registry.decode(context.schema_for(odd), odd.user_data, 8).items()) != {"big": 300}


def test_a_cut_version_6_stream_keeps_its_whole_events() -> None:
    data = stream()
    cut = data[: data.rindex("three".encode("utf-16-le")) + 4]  # inside the last event's payload
    reader = NettraceReader(cut)
    assert len(list(reader.events())) == 3
    assert reader.losses and all(loss.offset is not None and loss.block is not None for loss in reader.losses)


def test_mutated_version_6_streams_give_only_format_errors() -> None:
    data = stream()
    rng = random.Random(6)
    for _ in range(300):
        seed = rng.getrandbits(32)
        assert check(mutate(data, random.Random(seed))) == [], seed
