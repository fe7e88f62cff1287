"""Record framing in one place: every fast walker agrees with ``framing.walk``, the plain reference.

Buffers are generated from the framing table itself (every header type, WPP messages, odd marker
flags), then damaged at random (a byte overwritten, ``Offset`` moved, the file cut short,
the buffer inflated as a compressed one would be); the streaming reader's walk must give the same
records, unknown records and errors (message, file offset, buffer, structure, skipped bytes).
The service's record counts are compared on the buffers they are given: producer records for
the pools, typed records for the kernel sources.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.reader import BufferInfo, EtlReader
from openetw.etl.record import RECORD_CLASSES, MessageRecord, UnknownRecord
from openetw.etl.writer import header_buffer, linux_trace_clock, new_logfile_header
from openetw.service.logfile import count_records
from openetw.service.sessions import count_typed_records
from tests.conftest import corpus_path

BUFFER_SIZE = 2048
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPES = sorted(F.HEADER_KINDS)
PRODUCER_TYPES = [t for t, row in F.HEADER_KINDS.items() if row.kind in ("event", "classic", "instance")]


def _zeros(layout: L.Layout) -> list[Any]:
    return [bytes(int(code[:-1])) if code.endswith("s") else 0 for _, code in layout.fields]


def record_bytes(row: F.HeaderKind, payload: int, flags: int, version: int = 0, header_type: int | None = None) -> bytes:
    """A record of ``row`` with ``payload`` bytes after its header, framed as the table says."""
    values = _zeros(row.layout)
    values[row.layout.index("HeaderType")] = row.header_type if header_type is None else header_type
    values[row.layout.index("MarkerFlags")] = flags
    values[row.size_index] = row.header_size + payload
    if row.system_extension:
        values[row.layout.index("Version")] = version
    return row.layout.pack(*values) + bytes(range(payload % 251)) + bytes(max(0, payload - 251))


def buffer_bytes(records: list[bytes], *, fill: int = 0xFF, size: int = BUFFER_SIZE) -> bytes:
    body = b"".join(r + bytes(F.aligned(len(r)) - len(r)) for r in records)
    used = F.RECORDS_START + len(body)
    data = bytearray([fill]) * size
    data[F.RECORDS_START : used] = body
    data[: F.RECORDS_START] = L.WMI_BUFFER_HEADER.pack(size, used, used, 0, 1, 0, 0, 0, 1, 3, used, L.BUFFER_FLAG_PROCESSOR_INDEX, 0, bytes(16))
    return bytes(data)


typed_record = st.builds(
    lambda t, payload, flags, version: record_bytes(F.HEADER_KINDS[t], payload, flags, version),
    st.sampled_from(TYPES),
    st.integers(0, 120),
    st.sampled_from([F.TYPED_FLAGS, F.TYPED_FLAGS, F.TYPED_FLAGS | 0x10, 0xFF]),
    st.sampled_from([0, 2, 0x8102]),
)
message_record = st.builds(
    lambda payload, t: record_bytes(F.MESSAGE_KIND, payload, F.MESSAGE_FLAGS, header_type=t),
    st.integers(0, 60),
    st.sampled_from([L.HEADER_TYPE_MESSAGE, 0]),
)
any_record = st.one_of(typed_record, typed_record, message_record)


@st.composite
def damaged_buffers(draw: st.DrawFn) -> tuple[bytes, int, bool]:
    """(buffer data, its Offset field, compressed?) with damage drawn at random."""
    records = draw(st.lists(any_record, max_size=12))
    total = F.RECORDS_START + sum(F.aligned(len(r)) for r in records)
    if total > BUFFER_SIZE:
        records, total = [], F.RECORDS_START
    data = bytearray(buffer_bytes(records))
    data_end = total
    damage = draw(st.sampled_from(["none", "byte", "word", "offset", "cut", "inflated"]))
    if damage in ("byte", "word") and total > F.RECORDS_START:
        at = draw(st.integers(F.RECORDS_START, total - 1))
        if damage == "byte":
            data[at] = draw(st.integers(0, 255))
        else:
            at &= ~7
            data[at : at + 4] = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\0\0\0\0", b"\x10\0\x7f\xc0", b"\x02\0\x01\xc0"]))
    elif damage == "offset":
        data_end = draw(st.sampled_from([0, F.RECORDS_START - 8, total - 3, total + 5, BUFFER_SIZE + 8, draw(st.integers(0, BUFFER_SIZE))]))
    elif damage == "cut":
        data = data[: draw(st.integers(F.RECORDS_START, BUFFER_SIZE - 1))]
    compressed = damage == "inflated"
    if compressed:
        data = data[:total]
    return bytes(data), data_end, compressed


def _reader() -> EtlReader:
    header = new_logfile_header(clock=linux_trace_clock(), buffer_size=BUFFER_SIZE)
    return EtlReader(header_buffer(header, 1), strict=False)


def reference(data: bytes, data_end: int, compressed: bool, file_offset: int, index: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    items, problems, skipped = [], [], 0
    for item in F.walk(data, data_end=data_end, buffer_size=BUFFER_SIZE, compressed=compressed, file_offset=file_offset, buffer_index=index):
        if isinstance(item, F.Framed):
            items.append(("record", item.pos, item.size, item.kind.kind))
        elif isinstance(item, F.Unframed):
            items.append(("unknown", item.pos, item.size, item.reason))
            skipped += item.size
        else:
            problems.append((item.message, item.offset, item.buffer_index, item.structure))
            skipped += item.skipped
    return items, problems, skipped


@SETTINGS
@given(damaged_buffers(), st.integers(0, 40).map(lambda n: n * BUFFER_SIZE), st.integers(1, 9))
def test_the_reader_walks_a_buffer_as_the_reference_does(buffer: tuple[bytes, int, bool], file_offset: int, index: int) -> None:
    data, data_end, compressed = buffer
    reader = _reader()
    stats = reader.stats
    before_errors, before_skipped = len(stats.errors), stats.skipped_bytes
    flags = L.BUFFER_FLAG_COMPRESSED if compressed else 0
    info = BufferInfo(index, file_offset, BUFFER_SIZE, data_end, flags, 0, 0, 0, 0, 1, data_end)
    got = []
    for record in reader._walk(info, data):
        if isinstance(record, UnknownRecord):
            got.append(("unknown", record._pos, record.size, record.reason))
        else:
            assert record.buffer_index == index
            got.append(("record", record._pos, record.size, record.kind))
    errors = [(e.message, e.offset, e.buffer_index, e.structure) for e in stats.errors[before_errors:]]
    items, problems, skipped = reference(data, data_end, compressed, file_offset, index)
    assert got == items
    assert errors == problems
    assert stats.skipped_bytes - before_skipped == skipped


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(PRODUCER_TYPES), st.integers(0, 200)), max_size=40), st.integers(0, 12), st.sampled_from([0, 0xFF]))
def test_the_pool_count_counts_what_the_reference_frames(shapes: list[tuple[int, int]], repeat: int, fill: int) -> None:
    # Runs of one size (a producer writing one event again and again) take the count's fast path.
    shapes = shapes + shapes[-1:] * repeat
    records = [record_bytes(F.HEADER_KINDS[t], payload, F.TYPED_FLAGS) for t, payload in shapes]
    while records and F.RECORDS_START + sum(F.aligned(len(r)) for r in records) > 8192:
        records.pop()
    data = buffer_bytes(records, fill=fill, size=8192)
    items, problems, _ = reference_sized(data, 8192)
    assert not problems
    assert count_records(data) == len(items) == len(records)


@SETTINGS
@given(st.lists(typed_record, max_size=30), st.sampled_from([0, 0xFF]))
def test_the_kernel_count_counts_what_the_reference_frames(records: list[bytes], fill: int) -> None:
    while records and F.RECORDS_START + sum(F.aligned(len(r)) for r in records) > 4096:
        records.pop()
    data = buffer_bytes(records, fill=fill, size=4096)
    items, problems, _ = reference_sized(data, 4096)
    assert not problems
    assert count_typed_records(data) == len(items) == len(records)


def reference_sized(data: bytes, size: int) -> tuple[list[F.Framed | F.Unframed], list[F.Problem], int]:
    data_end = L.WMI_BUFFER_HEADER.unpack_from(data, 0)[L.WMI_BUFFER_HEADER.index("Offset")]
    items: list[F.Framed | F.Unframed] = []
    problems: list[F.Problem] = []
    for item in F.walk(data, data_end=data_end, buffer_size=size):
        (problems if isinstance(item, F.Problem) else items).append(item)
    return items, problems, data_end


def test_the_table_agrees_with_the_record_classes_and_the_layouts() -> None:
    assert F.HEADER_KINDS.keys() == RECORD_CLASSES.keys()
    for header_type, row in F.HEADER_KINDS.items():
        cls = RECORD_CLASSES[header_type]
        assert (cls.layout, cls.header_size, cls.size_index, cls.kind) == (row.layout, row.header_size, row.size_index, row.kind)
        assert row.layout.fields[row.size_index][0] == "Size"
        assert F.field_offsets(row.layout)["Size"] == (row.size_at, "H")
    assert MessageRecord.layout is F.MESSAGE_KIND.layout
    assert F.BUFFER_OFFSET_AT == 0x30 and F.RECORDS_START == 0x48  # the Windows values, stated once here


def test_the_marker_split() -> None:
    marker = F.marker_bits(L.HEADER_TYPE_EVENT_HEADER64) | 0x50
    assert F.header_type_of(marker) == L.HEADER_TYPE_EVENT_HEADER64
    assert F.kind_of_marker(marker) is F.HEADER_KINDS[L.HEADER_TYPE_EVENT_HEADER64]
    assert marker >> F.MARKER_KEY_SHIFT == F.typed_key(L.HEADER_TYPE_EVENT_HEADER64)
    assert F.kind_of_marker(F.marker_bits(L.HEADER_TYPE_MESSAGE, F.MESSAGE_FLAGS)) is F.MESSAGE_KIND
    assert F.kind_of_marker(F.marker_bits(0x7F)) is None
    assert F.kind_of_marker(F.END_OF_DATA) is None
    assert F.kind_of_marker(0) is None
    assert [F.aligned(n) for n in (0, 1, 8, 9, 0x50)] == [0, 8, 8, 16, 0x50]
    assert F.system_header_extension(2) == 0 and F.system_header_extension(0x8102) == 16


def test_a_corpus_file_reads_the_same_through_the_reference() -> None:
    path = corpus_path("etl", "etl-parser", "lxcore_kernel.etl")
    with EtlReader(path) as reader:
        for info, data in reader.buffers():
            walked = list(F.walk(data, data_end=info.data_end, buffer_size=info.buffer_size, compressed=info.compressed,
                                 file_offset=info.file_offset, buffer_index=info.index))
            records = list(reader._walk(info, data))
            assert [(r._pos, r.size) for r in records] == [(w.pos, w.size) for w in walked if isinstance(w, F.Framed)]
