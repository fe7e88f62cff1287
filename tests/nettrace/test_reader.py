"""The EventPipe container read from bytes: versions, events, metadata, stacks, sequence points, damage."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from openetw.consumer.formats import NETTRACE, trace_format
from openetw.errors import NettraceFormatError
from openetw.nettrace import NettraceReader
from openetw.nettrace.metadata import TypeCode

# name: (Trace object version, pointer size, process id, events, metadata records)
FACTS = {
    "eventpipe-dotnetcore2.1-linux-x64-objver3.netperf": (3, 8, 80749, 26146, 9),
    "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf": (3, 8, 12365, 12, 8),
    "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace": (4, 8, 26240, 1970, 13),
    "only_managed_samples.nettrace": (4, 8, 60178, 37603, 18),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_each_corpus_trace_reads_whole_in_time_order(trace_file, name: str) -> None:  # type: ignore[no-untyped-def]
    path: Path = trace_file(name)
    assert trace_format(path) is NETTRACE
    reader = NettraceReader(path.read_bytes(), path=str(path))
    version, pointer_size, pid, events, metadata = FACTS[name]
    assert (reader.info.version, reader.info.pointer_size, reader.info.process_id) == (version, pointer_size, pid)
    assert reader.info.nettrace == (version >= 4)
    times = [event.timestamp for event in reader.events()]
    assert len(times) == events and reader.stats.metadata == metadata
    assert times == sorted(times)
    assert reader.losses == [] and reader.notices == []


def test_an_empty_file_is_told_by_its_name(tmp_path: Path) -> None:
    for name in ("empty.nettrace", "empty.netperf"):
        (tmp_path / name).write_bytes(b"")
        assert trace_format(tmp_path / name) is NETTRACE
    disguised = tmp_path / "trace.etl"
    disguised.write_bytes(b"\x14\x00\x00\x00!FastSerialization.1" + bytes(40))
    assert trace_format(disguised) is NETTRACE


def test_version_2_events_end_at_the_forward_reference(trace_file) -> None:  # type: ignore[no-untyped-def]
    data = trace_file("eventpipe-dotnetcore2.0-linux-objver2.netperf").read_bytes()[: 4 << 20]
    reader = NettraceReader(data)
    assert reader.info.version == 2 and reader.info.pointer_size == 8
    events = list(reader.events())
    assert len(events) > 1000 and all(event.metadata.provider_name for event in events)
    # cut at 4 MiB: every whole event kept, the cut reported where it is
    assert [loss.structure for loss in reader.losses] == ["event header", "Trace"]
    assert reader.losses[0].offset is not None and reader.losses[0].offset < len(data)


def test_metadata_v2_params_describe_arrays(trace_file) -> None:  # type: ignore[no-untyped-def]
    reader = NettraceReader(trace_file("eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace").read_bytes())
    list(reader.events())
    arrays = [meta for meta in reader.metadata.values() if meta.fields and any(f.type_code == TypeCode.ARRAY for f in meta.fields)]
    assert arrays, "the V2 parameter tag gives array fields"
    field = next(f for f in arrays[0].fields or () if f.type_code == TypeCode.ARRAY)
    assert field.element is not None and field.element.type_code != TypeCode.ARRAY
    assert any(meta.opcode is not None for meta in reader.metadata.values())  # the opcode tag (version 5)


def test_stacks_are_joined_to_events_by_id(trace_file) -> None:  # type: ignore[no-untyped-def]
    reader = NettraceReader(trace_file("only_managed_samples.nettrace").read_bytes())
    with_stacks = [event for event in reader.events() if event.stack]
    assert len(with_stacks) == 7423 and reader.stats.sequence_points == 6
    assert all(len(event.stack) >= 1 and all(address > 0 for address in event.stack) for event in with_stacks[:100])


def test_a_truncated_trace_keeps_every_event_before_the_cut(trace_file) -> None:  # type: ignore[no-untyped-def]
    data = trace_file("only_managed_samples.nettrace").read_bytes()
    whole = {event.header.offset: event.header.payload_start + event.header.payload_size for event in NettraceReader(data).events()}
    cut = len(data) // 2 + 1001
    reader = NettraceReader(data[:cut])
    kept = {event.header.offset for event in reader.events()}
    before_the_cut = {offset for offset, end in whole.items() if end <= cut}
    assert kept == before_the_cut and 0 < len(kept) < len(whole)
    assert reader.losses, "the cut is reported"
    for loss in reader.losses:
        assert loss.offset is not None and loss.offset <= cut and loss.block is not None and loss.structure


def test_a_damaged_block_costs_that_block_only(trace_file) -> None:  # type: ignore[no-untyped-def]
    data = bytearray(trace_file("only_managed_samples.nettrace").read_bytes())
    whole = sum(1 for _ in NettraceReader(bytes(data)).events())
    at = data.index(b"EventBlock", len(data) // 2) + len("EventBlock") + 1 + 4  # the content of a block mid-file
    at += -at % 4
    data[at : at + 2] = struct.pack("<h", 3)  # its header size: less than the header
    reader = NettraceReader(bytes(data))
    kept = sum(1 for _ in reader.events())
    assert whole - 5000 < kept < whole
    assert len(reader.losses) == 1 and reader.losses[0].structure == "block header" and reader.losses[0].block is not None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "FastSerialization header"),
        (b"Nettrace" + bytes(4) + struct.pack("<II", 7, 0), "version 7"),
        (b"Nettrace" + bytes(4) + struct.pack("<II", 6, 0), "block header"),
        (b"Nettrace\x14\x00\x00\x00!FastSerialization.2" + bytes(40), "not an EventPipe trace"),
        (b"\x14\x00\x00\x00!FastSerialization.1\x05\x05\x01" + struct.pack("<ii", 9, 9) + b"\x05\x00\x00\x00Trace\x06", "version 9"),
    ],
)
def test_unreadable_headers_are_format_errors_with_an_offset(data: bytes, expected: str) -> None:
    with pytest.raises(NettraceFormatError, match=expected) as caught:
        NettraceReader(data)
    assert caught.value.offset is not None


def test_counts_from_the_file_are_bounded_before_allocating() -> None:
    from openetw.nettrace.cursor import Cursor
    from openetw.nettrace.events import read_stacks

    block = struct.pack("<ii", 1, 0x7FFFFFFF) + bytes(8)
    with pytest.raises(NettraceFormatError, match="stack count"):
        read_stacks(Cursor(block, structure="StackBlock"), {})
