"""The index blocks' byte planes, compiled (``openetw._native._index``) against numpy.

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
    raise AssertionError(f"the compiled index planes must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_index is None, reason=f"compiled index planes not active: {native.reason()}")


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


def test_the_compiled_planes_check_their_arguments() -> None:
    assert _index is not None
    rows = np.zeros(3, dtype=np.uint8).reshape(3)
    with pytest.raises(ValueError):
        _index.rows_to_planes(rows.tobytes(), 2, np.asarray([(0, 1)], dtype=np.int64))  # 3 bytes: not rows of 2
    with pytest.raises(ValueError):
        _index.rows_to_planes(rows.tobytes(), 3, np.asarray([(2, 2)], dtype=np.int64))  # a field past the row
    with pytest.raises(ValueError):
        _index.planes_to_rows(b"\0" * 4, bytearray(3), 3, np.asarray([(0, 1)], dtype=np.int64))
    assert _index.rows_to_planes(bytes([1, 2, 3, 4]), 2, np.asarray([(0, 2)], dtype=np.int64)) == bytes([1, 3, 2, 4])
