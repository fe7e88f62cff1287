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
