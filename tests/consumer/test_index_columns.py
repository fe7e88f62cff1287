"""Header columns read alone from the index (``EtlIndex.column_blocks``): the same values as the
whole rows, on the first pass and from a stored index, only the asked columns inflated, a
column every row of a block shares kept as one value, and a damaged column rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer import EtlIndex
from openetw.consumer._engine import blocks
from openetw.consumer._engine.index_build import RECORD_DTYPE
from openetw.consumer.index_trust import PLACE_CHECKED
from tests.consumer.helpers import every_kind, write_etl

SMALL_BLOCKS = "OPENETW_INDEX_BLOCK_ROWS"
PLACES = ["buffer", "offset", "size", "user_data_offset", "user_data_length", "header_type"]
HEADER = ["provider", "id", "opcode", "level", "keyword", "kind", "pid", "tid", "cpu", "version", "timestamp", "filetime"]


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SMALL_BLOCKS, "37")  # several blocks, the last one short
    return write_etl(tmp_path / "a.etl", every_kind(300))


def _joined(pieces: list[tuple[int, Any]], names: list[str]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([columns[name] for _, columns in pieces]) for name in names}


def test_columns_alone_equal_the_rows_on_the_first_pass_and_from_the_stored_index(trace: Path) -> None:
    whole = EtlIndex.build(trace).records
    first = EtlIndex.open(trace)
    assert first.built  # no index yet: this pass makes it
    built = list(first.column_blocks(["provider", "kind"]))
    stored = EtlIndex.open(trace)
    assert not stored.built
    read = list(stored.column_blocks(["provider", "kind"]))
    for pieces in (built, read):
        assert [row for row, _ in pieces] == list(range(0, len(whole), 37))
        lazy = {name: np.concatenate([columns[name] for _, columns in pieces]) for name in HEADER}  # the rest read when asked
        for name in HEADER:
            assert np.array_equal(lazy[name], whole[name]), name
        places = {name: np.concatenate([columns[name] for _, columns in pieces]) for name in PLACES}  # read with their check
        for name in PLACES:
            assert np.array_equal(places[name], whole[name]), name
    with pytest.raises(KeyError):
        read[0][1]["no such column"]


def test_place_columns_are_read_with_what_they_are_checked_against(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.consumer._engine.blocks import StoredIndex

    EtlIndex.open(trace).ensure_built()
    asked: list[list[str]] = []
    columns = StoredIndex.columns

    def spy(self: Any, number: int, names: Any) -> Any:
        asked.append(list(names))
        return columns(self, number, names)

    monkeypatch.setattr(StoredIndex, "columns", spy)
    monkeypatch.setattr(StoredIndex, "block", lambda self, number: pytest.fail("a whole block read"))
    index = EtlIndex.open(trace)
    pieces = list(index.column_blocks(["provider", "id"]))
    assert all(set(names) <= {"provider", "id"} for names in asked)
    asked.clear()
    pieces[0][1]["offset"]
    assert len(asked) == 1 and set(asked[0]) == set(PLACE_CHECKED) - {"provider"}  # provider held already, not read again
    assert set(pieces[0][1]) >= set(PLACE_CHECKED)


def test_rows_problem_finds_damaged_places_in_columns(trace: Path) -> None:
    from openetw.consumer.index_trust import buffer_positions, rows_problem

    index = EtlIndex.build(trace)
    rows, buffers = index.records, index.buffers
    columns = {name: rows[name] for name in PLACE_CHECKED}
    assert rows_problem(columns, buffers, len(index.providers)) is None
    assert rows_problem(columns, buffers, len(index.providers), buffer_positions(buffers)) is None
    for name, value, problem in (("offset", 1 << 30, "a row's record ends past its buffer"),
                                 ("buffer", 1 << 20, "a row names a buffer the table does not have"),
                                 ("user_data_length", 1 << 20, "a row's user data ends past its record"),
                                 ("provider", 1000, "a row names a provider the table does not have")):  # fmt: skip
        damaged = dict(columns, **{name: columns[name].copy()})
        damaged[name][len(rows) // 2] = value
        assert rows_problem(damaged, buffers, len(index.providers)) == problem, name


def test_only_the_asked_columns_are_inflated() -> None:
    rows = np.zeros(50, dtype=RECORD_DTYPE)
    rows["pid"] = np.arange(50)
    rows["size"] = 64 + np.arange(50)
    rows["offset"] = np.arange(50) * 128
    rows["buffer"] = np.arange(50) // 10
    rows["timestamp"] = np.arange(50) * 7
    payload = blocks.encode_block(rows)
    head = payload[: blocks.HEAD_BYTES]
    spans = dict(zip(blocks._STORED, blocks.column_spans(head, 50), strict=True))
    places: list[int] = []

    def read(at: int, length: int) -> bytes:
        places.append(at)
        return payload[at : at + length]

    got = blocks.decode_columns(read, head, 50, ["pid", "offset"])
    assert sorted(places) == sorted(spans[name][0] for name in ("pid", "offset", "buffer", "size"))  # offset is coded by buffer and size
    assert set(got) >= {"pid", "offset"} and np.array_equal(got["pid"], rows["pid"]) and np.array_equal(got["offset"], rows["offset"])


def test_a_column_every_row_shares_is_one_value_and_checked_like_the_others() -> None:
    rows = np.zeros(1000, dtype=RECORD_DTYPE)
    rows["keyword"] = 0x8000_0000_0000_0010
    rows["pid"] = np.arange(1000) % 7
    payload = blocks.encode_block(rows)
    spans = dict(zip(blocks._STORED, blocks.column_spans(payload[: blocks.HEAD_BYTES], 1000), strict=True))
    at, length, coding, _ = spans["keyword"]
    assert (length, coding) == (8, blocks._ONE_VALUE)
    assert spans["pid"][2] == blocks._PACKED
    assert np.array_equal(blocks.decode_block(payload, 1000), rows)
    damaged = bytearray(payload)
    damaged[at] ^= 0x10
    with pytest.raises(ValueError):
        blocks.decode_block(bytes(damaged), 1000)
    with pytest.raises(ValueError):
        blocks.decode_columns(lambda a, n: bytes(damaged[a : a + n]), bytes(damaged[: blocks.HEAD_BYTES]), 1000, ["keyword"])


def test_a_damaged_column_is_found_when_read_and_the_file_indexed_again(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = EtlIndex.build(trace).records
    location = EtlIndex.open(trace).index_path
    assert location is not None
    EtlIndex.open(trace).ensure_built()
    stored = blocks.read_stored(location)
    assert stored is not None
    entry = stored.blocks[2]
    head = location.read_bytes()[entry["at"] : entry["at"] + blocks.HEAD_BYTES]
    pid_at = blocks.column_spans(head, entry["rows"])[blocks._STORED.index("pid")][0]
    stored.close()
    data = bytearray(location.read_bytes())
    data[entry["at"] + pid_at] ^= 0x01
    location.write_bytes(bytes(data))
    for asked, rows in ((["provider", "pid"], "37"), (["provider"], "37"), (["provider"], "50")):
        # pid read with the block, or later when first used; the index built again in blocks cut elsewhere
        monkeypatch.setenv(SMALL_BLOCKS, rows)
        location.write_bytes(bytes(data))
        index = EtlIndex.open(trace)
        assert not index.built  # the footer is sound: the damage shows when the column is read
        got = _joined(list(index.column_blocks(asked)), ["provider", "pid"])
        assert np.array_equal(got["pid"], whole["pid"]) and np.array_equal(got["provider"], whole["provider"])
        assert location.read_bytes() != bytes(data)  # built again


WHOLE_FILE = ["timestamp", "filetime", "provider", "pid", "tid", "buffer", "offset", "user_data_offset", "user_data_length", "hook_id", "kind"]


def test_whole_file_columns_equal_the_records_fields(trace: Path) -> None:
    whole = EtlIndex.build(trace).records
    for index in (EtlIndex.open(trace), EtlIndex.open(trace)):  # the first pass, then the stored index
        got = index.columns(WHOLE_FILE)
        assert list(got) == WHOLE_FILE
        for name in WHOLE_FILE:
            assert got[name].dtype == whole[name].dtype and np.array_equal(got[name], whole[name]), name


def test_whole_file_columns_of_a_damaged_index_are_read_again(trace: Path) -> None:
    whole = EtlIndex.build(trace).records
    location = EtlIndex.open(trace).index_path
    assert location is not None
    stored = blocks.read_stored(location)
    assert stored is not None
    entry = stored.blocks[1]
    head = location.read_bytes()[entry["at"] : entry["at"] + blocks.HEAD_BYTES]
    offset_at = blocks.column_spans(head, entry["rows"])[blocks._STORED.index("offset")][0]
    stored.close()
    data = bytearray(location.read_bytes())
    data[entry["at"] + offset_at] ^= 0x01
    location.write_bytes(bytes(data))
    got = EtlIndex.open(trace).columns(["offset", "buffer"])
    assert np.array_equal(got["offset"], whole["offset"]) and np.array_equal(got["buffer"], whole["buffer"])
    assert location.read_bytes() != bytes(data)  # built again


def test_place_columns_pointing_past_their_buffer_are_not_believed(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.consumer._engine.blocks import StoredIndex

    whole = EtlIndex.build(trace).records
    EtlIndex.open(trace).ensure_built()
    columns = StoredIndex.columns
    lied: list[int] = []

    def lying(self: Any, number: int, names: Any) -> Any:
        got = columns(self, number, names)
        if "offset" in got and number == 1 and not lied:
            lied.append(number)
            got["offset"] = got["offset"] + np.uint32(1 << 20)  # digests sound, places outside every buffer
        return got

    monkeypatch.setattr(StoredIndex, "columns", lying)
    for asked in (["provider", "offset"], ["provider"]):  # read with the block, or when first used
        lied.clear()
        index = EtlIndex.open(trace)
        assert not index.built
        got = _joined(list(index.column_blocks(asked)), ["offset", "buffer"])
        assert lied and np.array_equal(got["offset"], whole["offset"]) and np.array_equal(got["buffer"], whole["buffer"])
