"""The file index: same records as the reader, kept beside the file or in the cache, rebuilt when
the file changes; selections, counts and batches on its columns."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.consumer import EtlIndex, Provider, UserTrace, records_from_buffer
from openetw.consumer._engine.index_build import KIND_NAMES, build_index_data
from openetw.consumer._engine.index_walk import _reachable
from openetw.consumer.index import INDEX_SUFFIX, index_locations
from openetw.consumer.state import is_state_record, state_mask
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.guids import provider_guid_from_name
from tests.consumer.helpers import (
    PROCESS_ETL,
    PROVIDER_A,
    PROVIDER_B,
    REFERENCE,
    corpus_etl,
    describe,
    diaghub_files,
    every_kind,
    reader_raws,
    write_etl,
)

CORPUS_FILES = [
    ("tx", "Process.etl"), ("tx", "HTTP_Server.etl"), ("krabsetw", "powershell.etl"), ("etl-parser", "AMSITrace.etl"),
    ("etl-parser", "ShutdownPerfDiagLogger.etl"), ("perfview", "SelfDescribingSingleEvent.etl"), ("perfview", "primitive-types.etl"),
    ("perfview", "gcevents.etl"), ("tx", "BondEtwSample.etl"),
]  # fmt: skip


def index_records(index: EtlIndex) -> list[tuple[str, int, int, bytes]]:
    with index.loader() as loader:
        return describe(loader.records(np.arange(len(index))))


@pytest.mark.parametrize("parts", CORPUS_FILES, ids=lambda parts: parts[-1])
def test_index_rows_are_the_readers_records(parts: tuple[str, ...]) -> None:
    assert_rows_are_the_readers(corpus_etl(*parts))


@pytest.mark.parametrize("major", range(8), ids=lambda major: f"mostly-kind-{major}")
def test_rows_of_a_file_mostly_of_one_header_kind(major: int, tmp_path: Path) -> None:
    # The header family with most rows is read over every row; the others' rows are then redone.
    records = every_kind(800)
    mostly = [record for n, record in enumerate(records) if n % 8 == major or n % 61 == 0]
    assert_rows_are_the_readers(write_etl(tmp_path / "mostly.etl", mostly))


def assert_rows_are_the_readers(path: Path) -> None:
    index = EtlIndex.build(path)
    assert index_records(index) == reader_raws(path)
    with EtlReader(path) as reader:
        for row, record in zip(index.records, reader.records(time_order=True), strict=True):
            assert KIND_NAMES[row["kind"]] == record.kind
            assert (row["timestamp"], row["filetime"], row["pid"], row["tid"], row["id"], row["version"]) == (
                record.timestamp, record.filetime, record.pid, record.tid, record.id, record.version)
            assert (row["opcode"], row["level"], row["task"], row["keyword"], row["channel"]) == (
                record.opcode, record.level, record.task, record.keyword, record.channel)
            assert (row["user_data_offset"], row["user_data_length"], row["size"]) == (
                record.user_data_offset, record.user_data_length, record.size)
            provider = index.providers[row["provider"]] if row["provider"] >= 0 else None
            assert provider == record.provider_id or record.provider_id is None


@pytest.mark.parametrize("parts", [("tx", "Process.etl"), ("perfview", "SelfDescribingSingleEvent.etl")], ids=lambda parts: parts[-1])
def test_indexing_a_few_buffers_at_a_time_changes_nothing(parts: tuple[str, ...]) -> None:
    path = corpus_etl(*parts)
    whole = build_index_data(path)
    pieces = build_index_data(path, chunk_bytes=20_000)  # a few buffers per piece
    assert np.array_equal(whole.records, pieces.records) and whole.providers == pieces.providers
    assert np.array_equal(whole.buffers, pieces.buffers) and whole.read_stats == pieces.read_stats


def test_every_record_kind_and_both_pointer_sizes(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(600))
    index = EtlIndex.build(path)
    assert index_records(index) == reader_raws(path)
    assert set(index.count_by("kind")) == {"system", "compact", "perfinfo", "classic", "instance", "event", "wpp"}
    assert index.meta["exact_time_order"]


def test_buffers_out_of_time_order_are_merged_as_the_reader_merges_them(tmp_path: Path) -> None:
    records = every_kind(300)
    # Late records on one processor: its buffers are no longer in time order.
    shuffled = records[:100] + [r.with_timestamp(REFERENCE + 50) for r in records[100:120]] + records[120:]
    path = write_etl(tmp_path / "late.etl", shuffled, buffer_size=1024)
    index = EtlIndex.build(path)
    assert not index.meta["exact_time_order"]  # the reader's merge was replayed, not a sort
    assert index_records(index) == reader_raws(path)


_MUTATIONS = st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 255)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=_MUTATIONS, cut=st.one_of(st.none(), st.integers(4096, 40_000)))
def test_damaged_files_index_to_the_readers_records(mutations: list[tuple[int, int]], cut: int | None, tmp_path: Path) -> None:
    path = tmp_path / "damaged.etl"
    if not path.exists():
        write_etl(tmp_path / "clean.etl", every_kind(500), buffer_size=2048)
    data = bytearray((tmp_path / "clean.etl").read_bytes())
    for offset, value in mutations:
        if 4096 <= offset < len(data):  # the header buffer is left whole: without it nothing reads
            data[offset] = value
    if cut is not None:
        data = data[:cut]
    path.write_bytes(bytes(data))
    try:
        expected = reader_raws(path)
    except Exception as error:  # noqa: BLE001 - what the reader refuses, the index refuses too
        with pytest.raises(type(error)):
            EtlIndex.build(path)
        return
    index = EtlIndex.build(path)
    assert index_records(index) == expected
    assert np.array_equal(build_index_data(path, chunk_bytes=5000).records, index.records)
    with EtlReader(path, strict=False) as reader:
        list(reader)
        assert index.read_stats["unknown_records"] == reader.stats.unknown_records
        assert len(index.errors) == len(reader.stats.errors)


def test_the_index_is_written_to_the_cache_and_loaded_next_time(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(50))
    first = EtlIndex.open(path)
    assert first.built and first.index_path == index_locations(path)[1] and first.index_path.exists()
    assert os.listdir(tmp_path) == ["a.etl"]
    second = EtlIndex.open(path)
    assert not second.built and second.index_path == first.index_path
    assert np.array_equal(first.records, second.records) and first.providers == second.providers
    assert index_records(second) == reader_raws(path)


def test_a_read_only_directory_sends_the_index_to_the_cache(tmp_path: Path, private_stores: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = write_etl(folder / "a.etl", every_kind(50))
    folder.chmod(0o555)
    try:
        index = EtlIndex.open(path)
        assert index.index_path == index_locations(path)[1]
        assert index.index_path is not None and index.index_path.parent == private_stores
        assert os.listdir(folder) == ["a.etl"]
        assert not EtlIndex.open(path).built
    finally:
        folder.chmod(0o755)


def test_a_changed_file_is_indexed_again(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(50))
    first = EtlIndex.open(path)
    first.ensure_built()  # the first pass reads the file as it is now, and writes the index
    write_etl(path, every_kind(80))  # other content, other size
    again = EtlIndex.open(path)
    assert again.built and len(again) == 81
    # Same size and modification time, other header buffer: the digest tells.
    stat = os.stat(path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 72 + 32 + 12, 1234)  # TRACE_LOGFILE_HEADER.NumberOfProcessors
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    rebuilt = EtlIndex.open(path)
    assert rebuilt.built
    rebuilt.ensure_built()
    assert not EtlIndex.open(path).built
    assert len(first) == 51


def test_an_unreadable_or_foreign_index_is_rebuilt(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(30))
    beside = Path(str(path) + INDEX_SUFFIX)
    beside.write_bytes(b"not an index")
    assert EtlIndex.open(path).built
    other = write_etl(tmp_path / "b.etl", every_kind(31))
    shutil.copy(Path(str(other) + INDEX_SUFFIX) if Path(str(other) + INDEX_SUFFIX).exists() else EtlIndex.open(other).index_path, beside)  # type: ignore[arg-type]
    assert EtlIndex.open(path).built


def test_select_and_count_by() -> None:
    path = corpus_etl(*PROCESS_ETL)
    index = EtlIndex.open(path)
    with EtlReader(path) as reader:
        records = list(reader.records(time_order=True))
    process = "22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716"
    chosen = index.select(provider=process, id=[1, 2])
    assert [records[row].raw for row in chosen] == [r.raw for r in records if r.kind == "event" and r.id in (1, 2)]
    start, end = records[100].filetime, records[200].filetime
    window = index.select(start=start, end=end, id=5)
    assert [records[row].raw for row in window] == [r.raw for r in records if start <= r.filetime <= end and r.id == 5]
    counts = index.count_by("id")
    assert sum(counts.values()) == len(records) and counts[8] == sum(r.id == 8 for r in records if r.kind == "event")
    by_provider = index.count_by("provider", "kind")
    assert by_provider[(index.providers[index.provider_row(process)], "event")] == 10343  # type: ignore[index]
    assert index.count_by("pid", rows=chosen) == {pid: sum(1 for r in chosen if records[r].pid == pid) for pid in {records[r].pid for r in chosen}}
    assert index.select(kind="system").tolist() == [0]


def test_batches_equal_plain_iteration() -> None:
    files = diaghub_files()
    kernel = Provider("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c")  # the kernel's Process class
    image_id = Provider("b3e675d7-2554-4f18-830b-2762732560de")
    for providers in ([], [kernel, image_id]):
        plain = UserTrace(files=files, manifests=[])
        for provider in providers:
            plain.enable(provider)
        expected = [(r.raw, r.filetime) for r in (event.record for event in plain.events())]
        batched = UserTrace(files=files, manifests=[])
        for provider in providers:
            batched.enable(provider)
        batches = list(batched.batches(batch_size=5000))
        rows = np.concatenate([batch.rows for batch in batches])
        assert rows["filetime"].tolist() == [filetime for _, filetime in expected]
        assert [r.raw for batch in batches for r in batch.records()] == [raw for raw, _ in expected]
        some = batches[len(batches) // 2]
        assert some.user_data(3) == next(r for n, r in enumerate(some.records()) if n == 3).user_data


def test_batch_columns_and_user_data_offsets() -> None:
    path = corpus_etl(*PROCESS_ETL)
    trace = UserTrace(files=[path], manifests=[])
    batches = list(trace.batches(columns=["timestamp", "id", "pid"], batch_size=4096))
    assert [len(b) for b in batches] == [4096, 4096, 2152]
    assert batches[0].rows.dtype.names == ("timestamp", "id", "pid")
    data = path.read_bytes()
    batch = batches[1]
    for i in (0, 17, 4095):
        start, length = int(batch.data_offset[i]), int(batch.data_length[i])
        assert data[start : start + length] == batch.user_data(i)
    with pytest.raises(Exception, match="no column"):
        list(trace.batches(columns=["nope"]))


def test_a_time_window_and_providers_select_batches() -> None:
    path = corpus_etl(*PROCESS_ETL)
    index = EtlIndex.open(path)
    start, end = int(index.records["filetime"][1000]), int(index.records["filetime"][3000])
    trace = UserTrace(files=[path], manifests=[], start_time=start, end_time=end)
    trace.enable(Provider("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716").event_ids([5, 6]))
    rows = np.concatenate([b.rows for b in trace.batches()])
    assert rows.tolist() == index.records[index.select(start=start, end=end, id=[5, 6])].tolist()


def test_compressed_files_have_no_file_offsets_for_user_data() -> None:
    path = corpus_etl("perfview", "SelfDescribingSingleEvent.etl")
    batch = next(UserTrace(files=[path], manifests=[]).batches())
    index = EtlIndex.open(path)
    compressed = index.buffers["index"][(index.buffers["flags"] & L.BUFFER_FLAG_COMPRESSED) != 0]
    in_compressed = np.isin(batch.rows["buffer"], compressed)
    assert in_compressed.sum() == len(batch) - 2  # the header buffer is never compressed
    assert (batch.data_offset[in_compressed] == -1).all() and (batch.data_offset[~in_compressed] > 0).all()
    records = list(batch.records())
    assert [batch.user_data(i) for i in range(len(batch))] == [r.user_data for r in records]


def test_provider_names_resolve_to_their_guid_in_the_index(tmp_path: Path) -> None:
    guid = provider_guid_from_name("Contoso.Indexed")
    records = [build_event_record(provider_id=guid, id=n, timestamp=REFERENCE + n) for n in range(5)]
    records += [build_event_record(provider_id=PROVIDER_A, id=n, timestamp=REFERENCE + 10 + n) for n in range(3)]
    index = EtlIndex.open(write_etl(tmp_path / "named.etl", records))
    assert len(index.select(provider=Provider("Contoso.Indexed"))) == 5
    assert len(index.select(provider="Contoso.Indexed")) == 5
    assert len(index.select(provider=[guid, PROVIDER_A])) == 8
    assert len(index.select(provider=PROVIDER_B)) == 0
    assert index.select(header_type=L.HEADER_TYPE_EVENT_HEADER64).size == 8


def test_records_from_one_buffer_are_the_readers(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(200), buffer_size=4096)
    with EtlReader(path) as reader:
        context = reader.context
        by_buffer: dict[int, list[bytes]] = {}
        for record in reader:
            by_buffer.setdefault(record.buffer_index, []).append(record.raw)
        buffers = {info.index: data for info, data in EtlReader(path).buffers()}
    for index, data in buffers.items():
        got = list(records_from_buffer(data, context, index))
        assert [r.raw for r in got] == by_buffer.get(index, [])
        assert all(r.buffer_index == index for r in got)
    damaged = bytearray(buffers[2])
    damaged[72 + 3] = 0x12  # no record marker at the first record
    got = list(records_from_buffer(bytes(damaged), context, 2))
    assert [r.kind for r in got] == ["unknown"]


def _walked_from_roots(follow: list[int], roots: list[int]) -> set[int]:
    """What following each root's links one at a time meets."""
    met: set[int] = set()
    for root in roots:
        node = root
        while node >= 0:
            met.add(node)
            node = follow[node]
    return met


@st.composite
def _candidate_links(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    count = draw(st.integers(1, 40))
    follow = [draw(st.sampled_from([-2, -1]) | st.integers(i + 1, count - 1)) if i + 1 < count else draw(st.sampled_from([-2, -1])) for i in range(count)]
    roots = draw(st.lists(st.integers(-1, count - 1), max_size=5))
    return follow, roots


@settings(max_examples=300, deadline=None)
@given(_candidate_links())
def test_reachable_candidates_are_what_walking_the_links_meets(links: tuple[list[int], list[int]]) -> None:
    follow, roots = links
    alive = _reachable(np.asarray(follow, dtype=np.int64), np.asarray(roots, dtype=np.int64))
    assert alive is not None  # chains of at most 40 give up after no more rounds than that
    assert set(np.flatnonzero(alive).tolist()) == _walked_from_roots(follow, [root for root in roots if root >= 0])


def test_reachable_gives_up_on_a_chain_longer_than_its_rounds() -> None:
    count = 200  # one long chain of look-alikes not reached from any root
    follow = np.append(np.arange(1, count), -1)
    assert _reachable(follow, np.asarray([-1])) is None


@pytest.mark.parametrize(
    "parts", [("tx", "Process.etl"), ("perfview", "gcevents.etl"), ("etl-parser", "ShutdownPerfDiagLogger.etl")], ids=lambda parts: parts[-1]
)
def test_state_rows_are_the_state_records(parts: tuple[str, ...]) -> None:
    index = EtlIndex.build(corpus_etl(*parts))
    with index.loader() as loader:
        expected = [is_state_record(record) for record in loader.records(np.arange(len(index)))]
    assert state_mask(index.records, index.providers).tolist() == expected


def test_state_rows_of_kernel_records() -> None:
    index = EtlIndex.build(diaghub_files()[1])
    rows = np.flatnonzero(np.isin(index.records["kind"], (0, 1, 2)))[:20_000]
    with index.loader() as loader:
        expected = [is_state_record(record) for record in loader.records(rows)]
    assert any(expected)
    assert state_mask(index.records, index.providers)[rows].tolist() == expected
