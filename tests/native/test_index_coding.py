"""The index blocks' column coding, compiled (``openetw._native._index``) against numpy.

Every corpus .etl's index rows are encoded and decoded by both, in blocks of several sizes: the
bytes written are the same, the rows read back are the rows written, and a block whose size does
not match its row count is refused by both alike.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import openetw._native as native
from openetw.consumer._engine import blocks
from openetw.consumer._engine.index_build import build_index_data
from tests.native import cases

_index = native.module("_index")
if _index is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled index coding must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_index is None, reason=f"compiled index coding not active: {native.reason()}")


@pytest.mark.parametrize("path", cases.corpus_files(), ids=lambda path: path.name)
def test_blocks_of_every_corpus_file_code_the_same_on_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = build_index_data(path).records.copy()
    rows["filetime"] = 0  # not stored: the reader fills it
    for start, stop in ((0, len(rows)), (0, min(len(rows), 1)), (len(rows) // 3, len(rows) // 3 + 777), (0, 0)):
        part = rows[start:stop]
        monkeypatch.setattr(blocks, "_NATIVE", _index)
        compiled = blocks.encode_block(part)
        compiled_rows = blocks.decode_block(compiled, len(part))
        monkeypatch.setattr(blocks, "_NATIVE", None)
        assert blocks.encode_block(part) == compiled
        assert blocks.decode_block(compiled, len(part)).tobytes() == compiled_rows.tobytes() == part.tobytes()
        for wrong in (len(part) + 1, len(part) - 1):
            if wrong < 0:
                continue
            for engine in (_index, None):
                monkeypatch.setattr(blocks, "_NATIVE", engine)
                with pytest.raises(ValueError):
                    blocks.decode_block(compiled, wrong)


def test_the_compiled_coding_checks_its_arguments() -> None:
    assert _index is not None
    rows = bytes(3)
    with pytest.raises(ValueError):
        _index.encode_column(rows, 2, 0, 1)  # 3 bytes: not rows of 2
    with pytest.raises(ValueError):
        _index.encode_column(rows, 3, 2, 2)  # a field past the row
    with pytest.raises(ValueError):
        _index.encode_column(rows, 3, 0, 3)  # not a width of a column
    with pytest.raises(ValueError):
        _index.encode_columns(rows, 3, np.asarray([(0, 1), (2, 2)], dtype=np.int64))
    with pytest.raises(ValueError):
        _index.decode_column(b"\0" * 4, bytearray(3), 3, 0, 1)  # raw, one byte too many
    with pytest.raises(ValueError):
        _index.offset_residuals(rows, 3, 0, 0, 0)  # u32 fields past the row
    one_value = _index.encode_column(bytes([7] * 8), 2, 0, 2)
    assert one_value == bytes([1, 0, 7, 7, 7, 7])  # FOR: 0 bits, first 0x0707, least 0x0707
    out = bytearray(8)
    _index.decode_column(one_value, out, 2, 0, 2)
    assert bytes(out) == bytes([7] * 8)
    assert _index.encode_column(bytes([7] * 4), 2, 0, 2) == bytes([0, 7, 7, 7, 7])  # two rows: raw is smaller


@pytest.mark.parametrize("distinct", [1, 3, 300, 5000, 20000])
def test_group_numbers_are_the_same_on_both(distinct: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(distinct)
    rows = np.zeros(20000, dtype=blocks.RECORD_DTYPE)
    kinds = rng.integers(0, distinct, len(rows))
    rows["id"] = kinds % 7
    rows["keyword"] = (kinds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1 << 63)  # differs in the high bytes too
    rows["opcode"] = kinds // 7 % 256
    rows["provider"] = kinds % 11 - 1
    rows["pid"] = rng.integers(0, 1 << 32, len(rows), dtype=np.uint64)  # another group's column: no bearing on the descriptor numbers
    rows["tid"] = kinds % 13
    for group, names in blocks._GROUPS.items():
        monkeypatch.setattr(blocks, "_NATIVE", _index)
        compiled = blocks._group_codes(rows, group)
        monkeypatch.setattr(blocks, "_NATIVE", None)
        reference = blocks._group_codes(rows, group)
        assert np.array_equal(compiled[0], reference[0]) and np.array_equal(compiled[1], reference[1]), group
        codes, firsts = reference
        if group == "descriptor":
            assert len(firsts) == len(np.unique(kinds)) and int(codes.max()) == len(firsts) - 1
        assert np.array_equal(codes[firsts], np.arange(len(firsts))) and np.all(np.diff(firsts) > 0)  # numbered as first seen
        table = rows[firsts]
        for name in names:
            assert np.array_equal(table[name][codes], rows[name])


def test_descriptor_numbers_check_their_arguments() -> None:
    assert _index is not None
    with pytest.raises(ValueError):
        _index.descriptor_codes(bytes(3), 2, np.asarray([(0, 1)], dtype=np.int64))  # not rows of 2
    with pytest.raises(ValueError):
        _index.descriptor_codes(bytes(4), 4, np.asarray([(2, 4)], dtype=np.int64))  # a span past the row
    with pytest.raises(ValueError):
        _index.descriptor_codes(bytes(80), 80, np.asarray([(0, 40), (40, 40)], dtype=np.int64))  # more than a descriptor holds
    assert _index.descriptor_codes(b"", 4, np.asarray([(0, 4)], dtype=np.int64)) == (b"", b"")


def _grouped_rows(distinct: int) -> np.ndarray:
    rng = np.random.default_rng(distinct + 1)
    rows = np.zeros(5000, dtype=blocks.RECORD_DTYPE)
    kinds = rng.integers(0, distinct, len(rows))
    for place, name in enumerate(blocks._GROUP_OF):
        values = kinds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(place)  # every byte of the wide ones differs
        rows[name] = values.astype(rows.dtype[name])  # (cut to the field's width)
    rows["tid"] = rng.integers(0, 3, len(rows))  # the thread group: few tuples, apart from the descriptor's
    return rows


@pytest.mark.parametrize("distinct", [1, 2, 300, 5000])
def test_groups_expand_the_same_on_both(distinct: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _grouped_rows(distinct)
    payload = blocks.encode_block(rows)

    def read(at: int, length: int) -> bytes:
        return payload[at : at + length]

    names = [*blocks._GROUP_OF, "timestamp"]
    for engine in (_index, None):
        monkeypatch.setattr(blocks, "_NATIVE", engine)
        assert blocks.decode_block(payload, len(rows)).tobytes() == rows.tobytes()
        columns = blocks.decode_columns(read, payload[: blocks.HEAD_BYTES], len(rows), names)
        for name in names:
            assert columns[name].dtype == rows.dtype[name] and np.array_equal(columns[name], rows[name]), name
        one = blocks.decode_columns(read, payload[: blocks.HEAD_BYTES], len(rows), ["pid"])
        assert list(one) == ["pid"] and np.array_equal(one["pid"], rows["pid"])


@pytest.mark.parametrize("group", list(blocks._GROUPS))
def test_a_group_number_past_its_list_is_refused_by_both(group: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _grouped_rows(40)
    numbered = blocks._group_codes

    def past(rows: np.ndarray, which: str = "descriptor") -> tuple[np.ndarray, np.ndarray]:
        codes, firsts = numbered(rows, which)
        if which == group:
            codes = codes.copy()
            codes[len(codes) // 2] = len(firsts)  # one past the list: a damaged block with good digests
        return codes, firsts

    monkeypatch.setattr(blocks, "_group_codes", past)
    payload = blocks.encode_block(rows)
    head = payload[: blocks.HEAD_BYTES]
    for engine in (_index, None):
        monkeypatch.setattr(blocks, "_NATIVE", engine)
        with pytest.raises(ValueError, match=f"a {group} number past its table"):
            blocks.decode_block(payload, len(rows))
        with pytest.raises(ValueError, match=f"a {group} number past its table"):
            blocks.decode_columns(lambda at, length: payload[at : at + length], head, len(rows), [blocks._GROUPS[group][-1]])


def test_the_group_gather_checks_its_arguments() -> None:
    assert _index is not None
    table = np.arange(6, dtype=np.uint16)
    moves = np.asarray([[0, 0, 2]], dtype=np.int64)
    out = np.zeros(3, dtype=np.uint16)
    _index.gather_group(np.asarray([5, 0, 2], dtype=np.uint32), table, 2, out, 2, moves)
    assert out.tolist() == [5, 0, 2]
    with pytest.raises(ValueError, match="past its table"):
        _index.gather_group(np.asarray([0, 6, 1], dtype=np.uint32), table, 2, out, 2, moves)
    with pytest.raises(ValueError):
        _index.gather_group(bytes(5), table, 2, out, 2, moves)  # numbers not of 4 bytes
    with pytest.raises(ValueError):
        _index.gather_group(bytes(8), table, 2, out, 2, moves)  # two numbers, three rows out
    with pytest.raises(ValueError):
        _index.gather_group(bytes(12), table, 2, out, 2, np.asarray([[1, 0, 2]], dtype=np.int64))  # a move past a table row
    with pytest.raises(ValueError):
        _index.gather_group(bytes(12), table, 2, out, 2, np.zeros((0, 3), dtype=np.int64))  # no move
    wide = np.zeros(2, dtype=[("a", "<u4"), ("b", "u1"), ("c", "<u2")])
    source = np.asarray([(7, 1, 300), (9, 2, 400)], dtype=wide.dtype)
    _index.gather_group(np.asarray([1, 0], dtype=np.uint32), source, 7, wide, 7, np.asarray([[0, 0, 4], [5, 5, 2]], dtype=np.int64))
    assert wide.tolist() == [(9, 0, 400), (7, 0, 300)]  # the moved fields only
