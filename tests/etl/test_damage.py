"""Damaged input: the reader yields every good record before the damage, then reports it precisely.

Strict reading raises ``EtlFormatError`` (offset, buffer index, structure); lenient reading records
the error, skips the damaged bytes and goes on with the next buffer. Nothing else ever escapes,
nothing hangs, and memory stays bounded by a few buffers whatever the sizes in the file say.
"""

from __future__ import annotations

import functools
import io
import itertools
import signal
import struct
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import EtlFormatError
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record, build_message_record, build_system_record
from openetw.etl.clock import TraceClock
from openetw.etl.extended import ExtendedItem
from openetw.etl.record import EventRecord
from openetw.etl.writer import EtlWriter, new_logfile_header
from tests.conftest import corpus_path

BH = L.BUFFER_HEADER_SIZE
PRIMITIVE = "perfview/primitive-types.etl"  # 2 buffers of 8 KiB, TraceLogging events
LXCORE = "etl-parser/lxcore_kernel.etl"  # 3 buffers of 8 KiB
HTTP = "tx/HTTP_Server.etl"  # 36 buffers of 8 KiB, Windows 7, extended items
SHUTDOWN = "etl-parser/ShutdownPerfDiagLogger.etl"  # 3 MiB, 49 buffers of 64 KiB
COMPRESSED = "perfview/SelfDescribingSingleEvent.etl"  # 3 packed LZXPRESS buffers
MUTATED_FILES = [PRIMITIVE, LXCORE, HTTP, COMPRESSED]

# Fields whose offset from the record start holds the u16 record size.
_SIZE_FIELD_OFFSET = {"system": 4, "compact": 4, "perfinfo": 4, "classic": 0, "instance": 0, "event": 0, "wpp": 0}


# -- the unmutated files --------------------------------------------------------------------------
@dataclass(frozen=True)
class Site:
    """A record of the unmutated file: where it sits and what it is."""

    offset: int | None  # None inside a compressed buffer
    buffer_index: int
    record: EventRecord


@dataclass(frozen=True)
class Original:
    data: bytes
    buffers: tuple[tuple[int, int], ...]  # (file offset, BufferSize)
    sites: tuple[Site, ...]  # file order
    time_ordered: tuple[EventRecord, ...]

    def buffer_at(self, position: int) -> int:
        """Index of the buffer holding ``position`` (one past the last buffer at the end of the file)."""
        for index, (start, size) in enumerate(self.buffers):
            if start <= position < start + size:
                return index
        return len(self.buffers)

    def records_before(self, buffer_index: int) -> list[EventRecord]:
        return [site.record for site in self.sites if site.buffer_index < buffer_index]


@functools.cache
def original(name: str) -> Original:
    data = corpus_path("etl", *name.split("/")).read_bytes()
    return _original_of(data)


def _original_of(data: bytes) -> Original:
    with EtlReader(data) as reader:
        infos = [info for info, _ in reader.buffers()]
    buffers = tuple((info.file_offset, info.buffer_size) for info in infos)
    with EtlReader(data) as reader:
        records = list(reader)
    with EtlReader(data) as reader:
        time_ordered = tuple(reader.records(time_order=True))
    sites = []
    for index, group in itertools.groupby(records, key=lambda r: r.buffer_index):
        position = buffers[index][0] + BH
        for record in group:
            if infos[index].compressed:
                sites.append(Site(None, index, record))
                continue
            assert data[position : position + record.size] == record.raw
            sites.append(Site(position, index, record))
            position += (record.size + 7) & ~7
    return Original(data, buffers, tuple(sites), time_ordered)


# -- reading damaged bytes ------------------------------------------------------------------------
@dataclass
class Outcome:
    records: list[EventRecord]
    error: EtlFormatError | None
    reader: EtlReader | None


def read(data: bytes, *, strict: bool = True, time_order: bool = False, touch: bool = True) -> Outcome:
    """Every record a read gives before it ends or raises; only EtlFormatError may escape.

    ``touch`` reads every field of every record too.
    """
    limit = len(data) // 8 + 1
    records: list[EventRecord] = []
    try:
        reader = EtlReader(data, strict=strict)
    except EtlFormatError as err:
        return Outcome(records, err, None)
    try:
        for record in itertools.islice(reader.records(time_order=time_order), limit + 1):
            if touch:
                _touch(record)
            records.append(record)
    except EtlFormatError as err:
        assert strict, "lenient reading must not raise once the header is read"
        return Outcome(records, err, reader)
    assert len(records) <= limit, "more records than the bytes can hold: the reader revisits bytes"
    return Outcome(records, None, reader)


def _touch(record: EventRecord) -> None:
    """Every field a consumer reads must be readable on damaged bytes."""
    _ = (record.kind, record.raw, record.size, record.timestamp, record.filetime, record.pid, record.tid)
    _ = (record.provider_id, record.activity_id, record.id, record.version, record.level, record.opcode)
    _ = (record.keyword, record.hook_id, record.cpu, record.pointer_size, record.user_data, record.time_iso)
    _ = (record.extended, record.related_activity_id, record.stack, record.tracelogging_schema)
    try:
        _ = record.time
    except EtlFormatError as err:  # a timestamp no calendar date fits
        assert "outside the years" in err.message


def assert_well_formed(err: EtlFormatError, data_length: int) -> None:
    assert isinstance(err.offset, int) and 0 <= err.offset <= max(data_length, 0) + (1 << 32)
    assert isinstance(err.buffer_index, int) and err.buffer_index >= 0
    assert isinstance(err.structure, str) and err.structure
    assert err.message


def raws(records: list[EventRecord] | tuple[EventRecord, ...]) -> list[bytes]:
    return [record.raw for record in records]


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@contextmanager
def watchdog(seconds: int = 60) -> Iterator[None]:
    """Turns a hang into a failure (a generous bound, not a timing assertion)."""

    def expire(signum: int, frame: object) -> None:
        raise AssertionError(f"the reader did not finish within {seconds} s: it loops")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- not an ETL file at all -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff" * 65536,
        b"\0" * 65536,
        b"root:x:0:0:root:/root:/bin/bash\n" * 100,
        b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40,
        b"\x01\x02\x03",
        struct.pack("<I", 0x2000) + b"\0" * 0x44,  # a buffer header and nothing after it
    ],
    ids=["empty", "all-ff", "all-zero", "text", "png", "three-bytes", "header-only"],
)
def test_non_etl_input_is_refused_with_a_located_error(data: bytes) -> None:
    with pytest.raises(EtlFormatError) as caught:
        EtlReader(data)
    assert caught.value.offset == 0
    assert caught.value.buffer_index == 0
    assert caught.value.structure
    with pytest.raises(EtlFormatError):
        EtlReader(data, strict=False)


def test_missing_file_is_an_etl_format_error(tmp_path: Path) -> None:
    with pytest.raises(EtlFormatError, match="cannot open"):
        EtlReader(tmp_path / "absent.etl")


def test_buffer_without_a_logfile_header_record_is_refused() -> None:
    data = bytearray(original(PRIMITIVE).data)
    struct.pack_into("<I", data, BH, 0xC0130000 | 0x50)  # an EVENT_HEADER where the logfile header belongs
    with pytest.raises(EtlFormatError) as caught:
        EtlReader(bytes(data))
    assert caught.value.offset == BH
    assert caught.value.structure == "SYSTEM_TRACE_HEADER"


# -- truncation -----------------------------------------------------------------------------------
def _cut_points(o: Original) -> list[int]:
    points = {0, 1, 4, BH - 1, BH, BH + 4, BH + 0x20, BH + 0x100, len(o.data) - 1}
    for start, size in o.buffers:
        points |= {start, start + 1, start + BH - 1, start + BH, start + BH + 2, start + size - 1}
    for site in o.sites:
        points |= {site.offset + 2, site.offset + site.record.size // 2, site.offset + site.record.size}
    return sorted(p for p in points if 0 <= p < len(o.data))


@pytest.mark.parametrize("name", [PRIMITIVE, LXCORE])
def test_truncated_file_yields_the_whole_records_before_the_cut(name: str) -> None:
    o = original(name)
    for cut in _cut_points(o):
        data = o.data[:cut]
        buffer_index = o.buffer_at(cut)
        expected = [s.record for s in o.sites if s.offset + s.record.size <= cut]
        strict = read(data)
        lenient = read(data, strict=False)
        if buffer_index == 0 and strict.reader is None:
            # The header buffer is cut before its logfile header record ends: nothing to read.
            assert strict.error is not None and lenient.reader is None
            assert strict.error.buffer_index == 0
            continue
        assert raws(strict.records) == raws(expected), cut
        assert raws(lenient.records) == raws(expected), cut
        buffer_start = o.buffers[buffer_index][0] if buffer_index < len(o.buffers) else len(o.data)
        if cut == buffer_start:
            # Cut on a buffer boundary: a shorter file, but a well-formed one.
            assert strict.error is None and lenient.reader.stats.errors == [], cut
            continue
        assert strict.error is not None, cut
        assert_well_formed(strict.error, len(data))
        assert strict.error.buffer_index == buffer_index
        assert buffer_start <= strict.error.offset <= cut
        assert lenient.reader.stats.errors[0].offset == strict.error.offset
        assert "ends inside" in strict.error.message


def test_truncated_record_names_the_record_and_counts_skipped_bytes() -> None:
    o = original(HTTP)
    site = next(s for s in o.sites if s.buffer_index == 1 and s.record.size > 0x60)
    cut = site.offset + 0x58
    strict = read(o.data[:cut])
    assert strict.error is not None
    assert strict.error.offset == site.offset
    assert strict.error.structure.endswith(".Size") or strict.error.structure.endswith("HEADER")
    assert "file ends inside a record" in strict.error.message
    lenient = read(o.data[:cut], strict=False)
    assert lenient.reader.stats.skipped_bytes == 0x58
    assert lenient.reader.stats.records == len(lenient.records)


# -- buffer header fields -------------------------------------------------------------------------
@pytest.mark.parametrize("buffer_size", [0, 1, BH - 1, 2**31, 0xFFFFFFFF, (64 << 20) + 8])
def test_absurd_buffer_size_ends_strict_reading_and_is_skipped_leniently(buffer_size: int) -> None:
    o = original(LXCORE)
    start = o.buffers[1][0]
    data = patched(o.data, start, "<I", buffer_size)
    with watchdog():
        strict = read(data)
        lenient = read(data, strict=False)
    assert raws(strict.records) == raws(o.records_before(1))
    assert strict.error is not None
    assert (strict.error.offset, strict.error.buffer_index, strict.error.structure) == (start, 1, "WMI_BUFFER_HEADER.BufferSize")
    # Lenient: the damaged buffer is skipped, the next one (same size, next slot) reads again.
    assert raws(lenient.records) == raws([s.record for s in o.sites if s.buffer_index != 1])
    assert len(lenient.reader.stats.errors) == 1
    assert lenient.reader.stats.skipped_bytes == o.buffers[1][1]


@pytest.mark.parametrize("buffer_size", [0, BH - 1, 2**31])
def test_absurd_buffer_size_in_the_header_buffer_is_fatal(buffer_size: int) -> None:
    data = patched(original(LXCORE).data, 0, "<I", buffer_size)
    for strict in (True, False):
        with pytest.raises(EtlFormatError) as caught:
            EtlReader(data, strict=strict)
        assert (caught.value.offset, caught.value.buffer_index) == (0, 0)
        assert caught.value.structure == "WMI_BUFFER_HEADER.BufferSize"


def test_a_header_only_buffer_size_is_damage_and_lenient_reading_keeps_the_file_stride() -> None:
    o = original(LXCORE)
    start = o.buffers[1][0]
    data = patched(o.data, start, "<I", BH)  # a buffer of nothing but its header
    with watchdog():
        strict = read(data)
        lenient = read(data, strict=False)
    assert raws(strict.records) == raws(o.records_before(1))
    assert strict.error is not None and strict.error.buffer_index == 1
    assert strict.error.structure == "WMI_BUFFER_HEADER.BufferSize"
    # Every buffer of an uncompressed file has the logfile's BufferSize: lenient reading frames
    # the damaged buffer at that stride and loses nothing, the damage counted.
    assert raws(lenient.records) == raws([s.record for s in o.sites])
    assert [e.structure for e in lenient.reader.stats.errors] == ["WMI_BUFFER_HEADER.BufferSize"]


def test_empty_buffer_reads_as_no_records() -> None:
    o = original(LXCORE)
    data = patched(o.data, o.buffers[1][0] + 0x30, "<I", BH)  # Offset: no data after the header
    strict = read(data)
    assert strict.error is None
    assert raws(strict.records) == raws([s.record for s in o.sites if s.buffer_index != 1])


@pytest.mark.parametrize("offset_field", [0, BH - 8])
def test_offset_inside_the_buffer_header_is_reported(offset_field: int) -> None:
    o = original(LXCORE)
    start = o.buffers[1][0]
    data = patched(o.data, start + 0x30, "<I", offset_field)
    strict = read(data)
    assert raws(strict.records) == raws(o.records_before(1))
    assert strict.error is not None
    assert (strict.error.offset, strict.error.buffer_index, strict.error.structure) == (start + 0x30, 1, "WMI_BUFFER_HEADER.Offset")
    lenient = read(data, strict=False)
    assert raws(lenient.records) == raws([s.record for s in o.sites if s.buffer_index != 1])


def test_offset_past_the_buffer_end_still_yields_the_buffers_records_then_raises() -> None:
    o = original(LXCORE)
    start, size = o.buffers[1]
    data = patched(o.data, start + 0x30, "<I", size + 0x100)
    strict = read(data)
    assert raws(strict.records) == raws(o.records_before(2))
    assert strict.error is not None
    assert (strict.error.offset, strict.error.buffer_index, strict.error.structure) == (start + 0x30, 1, "WMI_BUFFER_HEADER.Offset")
    lenient = read(data, strict=False)
    assert raws(lenient.records) == raws(o.records_before(99))
    assert len(lenient.reader.stats.errors) == 1


# -- record sizes ---------------------------------------------------------------------------------
def _second_record_of_buffer(o: Original, buffer_index: int) -> Site:
    return [s for s in o.sites if s.buffer_index == buffer_index][1]


@pytest.mark.parametrize("size", ["zero", "below-header", "huge", "past-data", "one-past-data"])
def test_bad_record_size_stops_at_that_record(size: str) -> None:
    o = original(HTTP)
    site = _second_record_of_buffer(o, 1)
    start, _buffer_size = o.buffers[1]
    data_end = struct.unpack_from("<I", o.data, start + 0x30)[0]
    value = {
        "zero": 0,
        "below-header": 8,
        "huge": 0xFFFF,
        "past-data": data_end - (site.offset - start) + 0x40,
        "one-past-data": data_end - (site.offset - start) + 1,
    }[size]
    data = patched(o.data, site.offset + _SIZE_FIELD_OFFSET[site.record.kind], "<H", value)
    strict = read(data)
    expected = [s.record for s in o.sites if s.offset < site.offset]
    assert raws(strict.records) == raws(expected)
    assert strict.error is not None
    assert (strict.error.offset, strict.error.buffer_index) == (site.offset, 1)
    assert strict.error.structure.endswith(".Size")
    lenient = read(data, strict=False)
    assert raws(lenient.records) == raws([s.record for s in o.sites if s.offset < site.offset or s.buffer_index > 1])
    assert lenient.reader.stats.skipped_bytes == data_end - (site.offset - start)


def test_unknown_header_type_becomes_an_unknown_record_never_a_skip() -> None:
    o = original(HTTP)
    site = _second_record_of_buffer(o, 1)
    data = bytearray(o.data)
    data[site.offset + 2] = 0x3F  # a header type no Windows writes
    strict = read(bytes(data))
    assert strict.error is None
    unknown = [r for r in strict.records if r.kind == "unknown"]
    assert len(unknown) == 1
    assert unknown[0].raw.startswith(bytes(data[site.offset : site.offset + 4]))
    assert "unknown header type 0x3f" in unknown[0].reason  # type: ignore[attr-defined]
    assert strict.reader.stats.unknown_records == 1 and strict.reader.stats.skipped_bytes > 0
    before = [s.record for s in o.sites if s.offset < site.offset]
    assert raws(strict.records[: len(before)]) == raws(before)


def test_marker_without_header_flags_becomes_an_unknown_record() -> None:
    o = original(PRIMITIVE)
    site = _second_record_of_buffer(o, 1)
    data = patched(o.data, site.offset, "<I", 0x12345678)
    strict = read(data)
    assert strict.error is None
    assert [r.kind for r in strict.records].count("unknown") == 1


def test_timestamp_no_calendar_date_fits_reads_as_raw_filetime() -> None:
    record = build_system_record(hook_id=0x0A10, timestamp=2**62)
    assert record.time_iso == f"FILETIME({record.filetime})"
    with pytest.raises(EtlFormatError, match="outside the years"):
        _ = record.time


# -- loops: sizes that would make a reader revisit bytes ------------------------------------------
def _synthetic(records: list[EventRecord]) -> bytes:
    out = io.BytesIO()
    clock = TraceClock(L.CLOCK_SYSTEM_TIME, 132_000_000_000_000_000, 1000, 10_000_000)
    with EtlWriter(out, header=new_logfile_header(clock=clock, buffer_size=4096, number_of_processors=2, cpu_speed_mhz=3000)) as writer:
        writer.write_all(records)
    return out.getvalue()


def test_zero_sized_message_record_does_not_loop() -> None:
    records = [build_message_record(message_number=n, sequence=n, timestamp=2000 + n, user_data=b"x" * n) for n in range(5)]
    data = _synthetic(records)
    second = data.index(records[1].raw)
    damaged = patched(data, second, "<H", 0)
    with watchdog():
        strict = read(damaged)
        lenient = read(damaged, strict=False)
    assert raws(strict.records[1:]) == raws(records[:1])
    assert strict.error is not None and strict.error.structure == "MESSAGE_TRACE_HEADER.Size"
    assert strict.error.offset == second
    assert len(lenient.records) == 2


def test_zero_sized_extended_item_does_not_loop() -> None:
    items = [ExtendedItem(1, uuid.uuid4().bytes_le), ExtendedItem(11, b"\x10\x00\x00schema\0")]
    records = [build_event_record(provider_id=uuid.uuid4(), id=1, timestamp=3000, extended=items, user_data=b"payload")]
    data = _synthetic(records)
    first = data.index(records[0].raw)
    damaged = bytearray(data)
    struct.pack_into("<H", damaged, first + L.EVENT_HEADER.size, 0)  # ItemSize 0
    with watchdog():
        outcome = read(bytes(damaged))
    assert outcome.error is None
    event = outcome.records[-1]
    assert event.extended == ()
    assert event.user_data_offset == L.EVENT_HEADER.size


def test_last_item_claiming_another_follows_does_not_loop() -> None:
    items = [ExtendedItem(1, bytes(16)), ExtendedItem(1, bytes(16))]
    records = [build_event_record(provider_id=uuid.uuid4(), timestamp=3000, extended=items)]
    data = _synthetic(records)
    first = data.index(records[0].raw)
    damaged = bytearray(data)
    for item in range(2):  # every item says another follows, the last one past the record
        struct.pack_into("<H", damaged, first + L.EVENT_HEADER.size + item * 0x18 + 4, 1)
    with watchdog():
        outcome = read(bytes(damaged))
    assert outcome.error is None
    assert len(outcome.records[-1].extended) == 2


# -- memory ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("time_order", [False, True], ids=["file-order", "time-order"])
@pytest.mark.parametrize("damage", ["huge-buffer-size", "max-buffer-size", "clean"])
def test_memory_stays_bounded_whatever_the_sizes_say(damage: str, time_order: bool, tmp_path: Path) -> None:
    o = original(SHUTDOWN)
    start = o.buffers[1][0]
    data = {
        "huge-buffer-size": patched(o.data, start, "<I", 60 << 20),
        "max-buffer-size": patched(o.data, start, "<I", 64 << 20),
        "clean": o.data,
    }[damage]
    path = tmp_path / "damaged.etl"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        count = 0
        with EtlReader(path, strict=False) as reader:
            for _ in reader.records(time_order=time_order):
                count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count > 0
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


# -- random mutations -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Mutation:
    data: bytes = field(repr=False)
    damaged_buffer: int
    description: str


def _size_sites(o: Original) -> list[tuple[int, str]]:
    """Offsets of every u16 record size and u32 buffer framing field, with their struct format."""
    sites = [(s.offset + _SIZE_FIELD_OFFSET.get(s.record.kind, 0), "<H") for s in o.sites if s.offset is not None]
    for start, _ in o.buffers:
        sites += [(start, "<I"), (start + 0x30, "<I"), (start + 4, "<I")]
    return sites


_INTERESTING_SIZES = [0, 1, 7, 8, 0x10, 0x47, 0x48, 0x49, 0x50, 0xFF, 0x1000, 0x1FF8, 0x2000, 0x2008, 0xFFFF, 0x10000, 2**31, 0xFFFFFFFF]


@st.composite
def mutations(draw: st.DrawFn, name: str) -> Mutation:
    o = original(name)
    data, n = o.data, len(o.data)
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "size"]))
    if kind == "flip":
        position = draw(st.integers(0, n - 1))
        mask = draw(st.integers(1, 255))
        out = bytearray(data)
        out[position] ^= mask
        return Mutation(bytes(out), o.buffer_at(position), f"flip {mask:#x} at {position:#x}")
    if kind == "truncate":
        cut = draw(st.integers(0, n - 1))
        return Mutation(data[:cut], o.buffer_at(cut), f"cut at {cut:#x}")
    if kind == "insert":
        position = draw(st.integers(0, n))
        inserted = draw(st.binary(min_size=1, max_size=64))
        return Mutation(data[:position] + inserted + data[position:], o.buffer_at(position), f"insert {len(inserted)} at {position:#x}")
    if kind == "delete":
        position = draw(st.integers(0, n - 1))
        length = draw(st.integers(1, 4096))
        return Mutation(data[:position] + data[position + length :], o.buffer_at(position), f"delete {length} at {position:#x}")
    offset, fmt = draw(st.sampled_from(_size_sites(o)))
    limit = 0xFFFF if fmt == "<H" else 0xFFFFFFFF
    value = draw(st.sampled_from([v for v in _INTERESTING_SIZES if v <= limit]) | st.integers(0, limit))
    return Mutation(patched(data, offset, fmt, value), o.buffer_at(offset), f"size {value:#x} at {offset:#x}")


def _check_mutation(name: str, mutation: Mutation) -> None:
    o = original(name)
    data = mutation.data
    expected = raws(o.records_before(mutation.damaged_buffer))
    with watchdog():
        strict = read(data, touch=False)
        lenient = read(data, strict=False)  # reads the most records: every field is read here
        strict_in_time = read(data, time_order=True, touch=False)
        lenient_in_time = read(data, strict=False, time_order=True, touch=False)

    for outcome in (strict, lenient, strict_in_time, lenient_in_time):
        if outcome.error is not None:
            assert_well_formed(outcome.error, len(data))
        if outcome.reader is not None:
            for err in outcome.reader.stats.errors:
                assert_well_formed(err, len(data))

    # File order: the records before the damaged buffer come first, unchanged.
    assert raws(strict.records[: len(expected)]) == expected
    assert raws(lenient.records[: len(expected)]) == expected
    # Strict reading is lenient reading stopped at its first error.
    assert raws(strict.records) == raws(lenient.records[: len(strict.records)])
    if strict.error is not None and strict.reader is not None:
        first = lenient.reader.stats.errors[0]
        assert (first.offset, first.buffer_index, first.structure) == (strict.error.offset, strict.error.buffer_index, strict.error.structure)

    # Time order: every record of the buffers before the damaged one, in the original's order.
    expected_in_time = raws([r for r in o.time_ordered if r.buffer_index < mutation.damaged_buffer])
    for outcome in (strict_in_time, lenient_in_time):
        assert raws([r for r in outcome.records if r.buffer_index < mutation.damaged_buffer]) == expected_in_time


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_framing_byte_flipped(mask: int) -> None:
    """Each byte of a buffer header, of the logfile header record and of a record header, flipped."""
    o = original(LXCORE)
    second = o.buffers[1][0]
    positions = list(range(BH + 0x30)) + list(range(second, second + BH + L.EVENT_HEADER.size))
    for position in positions:
        out = bytearray(o.data)
        out[position] ^= mask
        _check_mutation(LXCORE, Mutation(bytes(out), o.buffer_at(position), f"flip {mask:#x} at {position:#x}"))


@pytest.mark.parametrize("name", MUTATED_FILES, ids=lambda n: n.rsplit("/", 1)[-1])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_mutations_only_ever_raise_located_format_errors(name: str, data: st.DataObject) -> None:
    original(name)  # skips when the corpus is missing, before drawing
    mutation = data.draw(mutations(name), label="mutation")
    _check_mutation(name, mutation)
