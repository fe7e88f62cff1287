"""The index in blocks: the codec, block summaries that skip, the format version, where an index
lives and whether it is trusted, the cache's cap, and consumption a block at a time agreeing
with the streaming reader (random windows and provider filters, several files merged)."""

from __future__ import annotations

import heapq
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.consumer import EtlIndex, Provider, UserTrace
from openetw.consumer._engine import blocks
from openetw.consumer._engine.blocks import (
    FORMAT,
    decode_block,
    decode_column,
    encode_block,
    encode_column,
    read_stored,
)
from openetw.consumer._engine.index_build import RECORD_DTYPE
from openetw.consumer._engine.location import evict, index_locations, may_trust
from openetw.etl import EtlReader
from openetw.etl import framing as F
from tests.consumer.helpers import PROCESS_ETL, corpus_etl, diaghub_files, every_kind, write_etl
from tests.native.cases import CORPUS

SMALL_BLOCKS = "OPENETW_INDEX_BLOCK_ROWS"


def _rows(draw: Any, n: int) -> np.ndarray:
    rows = np.zeros(n, dtype=RECORD_DTYPE)
    for name in RECORD_DTYPE.names:  # type: ignore[union-attr]
        if name == "filetime":
            continue
        dtype = RECORD_DTYPE.fields[name][0]  # type: ignore[index]
        info = np.iinfo(dtype)
        values = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n))
        rows[name] = np.asarray(values, dtype=object).astype(dtype)
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_block_decodes_to_the_rows_it_was_made_of(data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    n = data.draw(st.integers(0, 40))
    rows = _rows(data.draw, n)
    payload = encode_block(rows)
    assert np.array_equal(decode_block(payload, n), rows)
    with monkeypatch.context() as m:  # the numpy twin: the same bytes, the same rows
        m.setattr(blocks, "_NATIVE", None)
        assert encode_block(rows) == payload
        assert np.array_equal(decode_block(payload, n), rows)


_COLUMN_TYPES = ("<i8", "<u8", "<i4", "<u4", "<u2", "u1")


def _column(draw: Any) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(_COLUMN_TYPES)))
    info = np.iinfo(dtype)
    n = draw(st.integers(0, 300))
    shape = draw(st.sampled_from(["any", "few", "narrow"]))
    if shape == "any":
        values = st.integers(int(info.min), int(info.max))
    elif shape == "few":  # few distinct values anywhere in the range: a dictionary
        values = st.sampled_from(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=20)))
    else:  # a narrow range: frame of reference
        low = draw(st.integers(0, min(int(info.max), 1 << 40)))
        values = st.integers(low, min(int(info.max), low + 300))
    return np.asarray(draw(st.lists(values, min_size=n, max_size=n)), dtype=object).astype(dtype)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_column_packs_to_the_same_bytes_compiled_or_not_and_back(data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if blocks._NATIVE is None:
        pytest.skip("the compiled core is not built")
    values = _column(data.draw)
    width = values.dtype.itemsize
    compiled = bytes(blocks._NATIVE.encode_column(np.ascontiguousarray(values), width, 0, width))
    with monkeypatch.context() as m:
        m.setattr(blocks, "_NATIVE", None)
        assert encode_column(values) == compiled
        assert np.array_equal(decode_column(compiled, len(values), values.dtype), values)
    assert np.array_equal(decode_column(compiled, len(values), values.dtype), values)
    assert len(compiled) <= 1 + len(values) * width


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_column_is_refused_alike_compiled_or_not(data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes that are not a packed column (a packed one with bytes changed, cut or added, or
    noise) give ``ValueError`` or the same values both ways, never a crash or a read past them."""
    if blocks._NATIVE is None:
        pytest.skip("the compiled core is not built")
    dtype = np.dtype(data.draw(st.sampled_from(_COLUMN_TYPES)))
    n = data.draw(st.integers(0, 200))
    packed = bytearray(encode_column(np.arange(n, dtype=np.int64).astype(dtype) * data.draw(st.integers(0, 3))))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, max(0, len(packed) - 1)))
        change = data.draw(st.sampled_from(["flip", "cut", "add"]))
        if change == "flip" and packed:
            packed[where] ^= data.draw(st.integers(1, 255))
        elif change == "cut":
            del packed[where:]
        else:
            packed[where:where] = data.draw(st.binary(min_size=1, max_size=8))
    part = bytes(packed) if data.draw(st.booleans()) else data.draw(st.binary(max_size=64))

    def outcome() -> Any:
        try:
            return decode_column(part, n, dtype).tobytes()
        except ValueError:
            return ValueError

    compiled = outcome()
    with monkeypatch.context() as m:
        m.setattr(blocks, "_NATIVE", None)
        assert outcome() == compiled


@pytest.mark.parametrize("name", ["diaghub.etl", "Process.etl"])
def test_corpus_indexes_are_small_and_equal_to_the_whole_file_build(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = next(p for p in [*diaghub_files(), corpus_etl(*PROCESS_ETL)] if p.name == name)
    whole = EtlIndex.build(path)
    monkeypatch.setenv(SMALL_BLOCKS, "777")
    small = EtlIndex.build(path, chunk_bytes=70_000)
    assert len(small.blocks) > 1 and all(block["rows"] == 777 for block in small.blocks[:-1])
    assert np.array_equal(whole.records, small.records) and whole.providers == small.providers
    assert os.fstat(whole._stored.fd).st_size / len(whole) < 12  # type: ignore[union-attr]


def test_every_corpus_index_of_a_thousand_records_or_more_takes_under_12_bytes_a_record() -> None:
    # Files under 1,000 records are left out: their footer weighs more than their rows.
    sizes = {}
    for path in sorted(CORPUS.rglob("*.etl")):
        index = EtlIndex.build(path)
        if len(index) >= 1000:
            sizes[path.name] = os.fstat(index._stored.fd).st_size / len(index)  # type: ignore[union-attr]
    assert len(sizes) >= 5
    assert {name: size for name, size in sizes.items() if size >= 12} == {}


def test_blocks_ruled_out_by_their_summaries_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SMALL_BLOCKS, "500")
    index = EtlIndex.build(corpus_etl(*PROCESS_ETL))
    times = index.records["filetime"]
    start, end = int(times[3000]), int(times[3400])
    read: list[int] = []
    decode = index._stored.block  # type: ignore[union-attr]
    monkeypatch.setattr(index._stored, "block", lambda number: read.append(number) or decode(number))
    index._decoded = None
    rows = index.select(start=start, end=end)
    assert np.array_equal(rows, np.flatnonzero((times >= start) & (times <= end)))
    assert 1 <= len(read) <= 2


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_select_and_count_by_over_blocks_equal_the_columns(data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SMALL_BLOCKS, str(data.draw(st.integers(50, 3000))))
    index = EtlIndex.build(corpus_etl(*PROCESS_ETL))
    rows = index.records
    times = rows["filetime"]
    a, b = sorted(data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=2, max_size=2)))
    providers = data.draw(st.lists(st.sampled_from(index.providers), max_size=2, unique=True))
    codes = [index.providers.index(p) for p in providers]
    expected = (times >= times[a]) & (times <= times[b])
    if providers:
        expected &= np.isin(rows["provider"], codes)
    got = index.select(start=int(times[a]), end=int(times[b]), provider=providers or None)
    assert np.array_equal(got, np.flatnonzero(expected))
    counts = index.count_by("provider", "id")
    assert sum(counts.values()) == len(rows)


def _delivered(files: list[Path], index: bool, window: tuple[int, int] | None, provider: Any) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    start, end = window if window is not None else (None, None)
    trace = UserTrace(files=files, manifests=[], index=index, start_time=start, end_time=end)
    got: list[tuple[Any, ...]] = []
    if provider is None:
        trace.set_default_event_callback(lambda r, c: got.append((r.raw, r.filetime)))
    else:
        chosen = Provider(provider)
        chosen.add_on_event_callback(lambda r, c: got.append((r.raw, r.filetime)))
        trace.enable(chosen)
    trace.start()
    stats = trace.query_stats()
    return got, {key: stats[key] for key in ("events_read", "events_handled", "events_filtered", "events_unmatched", "events_outside_window")}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_consumption_block_by_block_equals_the_streaming_reader(data: Any, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv(SMALL_BLOCKS, str(data.draw(st.integers(100, 5000))))
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path_factory.mktemp("idx")))
    several = data.draw(st.booleans())
    files = diaghub_files() if several else [corpus_etl(*PROCESS_ETL)]
    times = sorted(r.filetime for path in files for r in EtlReader(path, strict=False).records())
    window = None
    if data.draw(st.booleans()):
        a, b = sorted(data.draw(st.lists(st.integers(0, len(times) - 1), min_size=2, max_size=2)))
        window = (times[a], times[b])
    guids = sorted({str(r.provider_id) for path in files for r in EtlReader(path, strict=False).records() if r.provider_id is not None})
    provider = data.draw(st.one_of(st.none(), st.sampled_from(guids)))
    streamed = _delivered(files, False, window, provider)
    first = _delivered(files, True, window, provider)  # the first pass, delivering as it indexes
    warm = _delivered(files, True, window, provider)  # from the stored index
    assert first == streamed == warm
    if several:
        merged = heapq.merge(*[EtlReader(p, strict=False).records(time_order=True) for p in files], key=lambda r: r.filetime)
        if provider is None and window is None:
            assert [raw for raw, _ in first[0]] == [r.raw for r in merged]


def test_the_first_pass_delivers_events_before_the_index_is_done(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(300))
    trace = UserTrace(files=[path], manifests=[])
    states: list[bool] = []
    trace.set_default_event_callback(lambda r, c: states.append(trace.sources[0].index.complete))  # type: ignore[union-attr]
    trace.start()
    assert states and not states[0]
    assert not Path(str(path) + ".idx").exists() and index_locations(path)[1].exists() and not EtlIndex.open(path).built


def test_a_first_pass_stopped_early_still_counts_each_record_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SMALL_BLOCKS, "50")
    path = write_etl(tmp_path / "a.etl", every_kind(300))
    with EtlReader(path) as reader:
        expected = sum(1 for _ in reader)
    index = EtlIndex.open(path)
    segments = index.segments()
    first = next(segments)
    segments.close()  # the reader stops after one block: the pass is finished, not left half done
    assert 0 < len(first) < expected
    assert len(index) == index.read_stats["records"] == expected
    assert sum(len(segment) for segment in index.segments()) == expected
    assert index.errors == []


def test_an_index_of_the_previous_format_is_rebuilt(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(40))
    beside = Path(str(path) + ".idx")
    stat = os.stat(path)
    head = json.dumps({"format": FORMAT - 1, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "arrays": {}}).encode()
    beside.write_bytes(b"OPENETW-INDEX\0\0" + bytes([FORMAT - 1]) + struct.pack("<Q", len(head)) + head)
    assert read_stored(beside) is None
    index = EtlIndex.open(path)
    assert index.built and len(index) == 41
    assert index.index_path is not None
    stored = read_stored(index.index_path)
    assert stored is not None and stored.footer["format"] == FORMAT
    assert not EtlIndex.open(path).built


def test_an_index_others_may_write_is_not_trusted(tmp_path: Path, private_stores: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(40))
    EtlIndex.open(path, beside=True).ensure_built()
    beside = Path(str(path) + ".idx")
    assert may_trust(beside)
    beside.chmod(0o666)
    assert not may_trust(beside)
    index = EtlIndex.open(path)
    assert index.built and index.index_path == index_locations(path)[1]  # rebuilt in the user's cache
    assert index_locations(path)[1].parent == private_stores


def test_the_cache_keeps_under_its_cap_dropping_the_least_recently_used(tmp_path: Path) -> None:
    made = []
    for n in range(4):
        entry = tmp_path / f"{n}.idx"
        entry.write_bytes(bytes(1000))
        os.utime(entry, ns=(n * 10**9, n * 10**9))
        made.append(entry)
    gone = evict(tmp_path, keep=made[0], cap=2500)
    assert gone == [made[1], made[2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.idx", "3.idx"]


def test_index_false_writes_nothing(tmp_path: Path, private_stores: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(40))
    trace = UserTrace(files=[path], manifests=[], index=False)
    trace.start()
    assert trace.query_stats()["events_read"] == 41
    assert not Path(str(path) + ".idx").exists() and not list(private_stores.iterdir())


@pytest.mark.parametrize("cut", [None, 4096 * 3 + 1000])
def test_damage_is_reported_with_the_readers_fields(cut: int | None, tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(300))
    data = bytearray(path.read_bytes())
    first = 4096 * 2 + 72
    size_at = 4 if data[first + 2] in (1, 2, 3, 4, 0x10, 0x11) else 0
    data[first + size_at : first + size_at + 2] = b"\xff\xff"  # buffer 2: a record larger than its buffer
    struct.pack_into("<I", data, 4096 * 4 + F.BUFFER_OFFSET_AT, 9000)  # buffer 4: its Offset past its end
    path.write_bytes(bytes(data[:cut]))
    with EtlReader(path, strict=False) as reader:
        list(reader.records(time_order=True))
        expected = [(e.message, e.offset, e.buffer_index, e.structure, e.path) for e in reader.stats.errors]
    for index in (True, False):
        errors: list[Any] = []
        trace = UserTrace(files=[path], manifests=[], index=index)
        trace.on_error(lambda error, record, errors=errors: errors.append(error))
        trace.start()
        assert sorted((e.message, e.offset, e.buffer_index, e.structure, e.path) for e in errors) == sorted(expected)
    assert len(expected) >= 2 and all(offset is not None for _, offset, *_ in expected)
