"""The work of a compressed file is bounded before it is done: what its buffers inflate to.

A 77 KB file of 64 compressed buffers declaring 13.4 million records kept ``openetw info`` busy for
a minute of CPU. Compressed buffers may inflate to ``MAX_INFLATION`` times the bytes read (real
traces: 3-10), at least ``INFLATION_FLOOR`` in all; past it the reader refuses the next buffer
before inflating it, reports why and how to raise the bound, and keeps every record before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.consumer import EtlIndex
from openetw.errors import EtlFormatError, InvalidArgument
from openetw.etl import EtlReader
from openetw.etl.reader import INFLATION_FLOOR
from openetw.testing.hostile import BOMB_RECORD_SIZE, record_bomb

PER_BUFFER = (INFLATION_FLOOR - 0x48) // BOMB_RECORD_SIZE


def test_a_record_bomb_is_refused_after_the_floor_in_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "bomb.etl"
    declared = record_bomb(path)
    assert declared > 13_000_000 and path.stat().st_size < 80_000
    with EtlReader(path) as strict, pytest.raises(EtlFormatError) as caught:
        for _ in strict:
            pass
    assert strict.stats.records == 1 + PER_BUFFER  # the header record and the first buffer: under the floor
    assert caught.value.structure == "compressed buffer" and caught.value.buffer_index == 2
    assert "max_inflation" in caught.value.message
    with EtlReader(path, strict=False) as lenient:
        assert sum(1 for _ in lenient.records(time_order=True)) == 1 + PER_BUFFER
    assert [error.structure for error in lenient.stats.errors] == ["compressed buffer"]
    assert lenient.stats.skipped_bytes == path.stat().st_size - caught.value.offset  # the rest: counted
    index = EtlIndex.build(path)
    assert len(index) == 1 + PER_BUFFER
    assert [error.structure for error in index.format_errors()] == ["compressed buffer"]


def test_max_inflation_raises_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "bomb.etl"
    record_bomb(path, buffers=4, inflated=8 << 20)  # 32 MiB from a few hundred bytes
    with EtlReader(path, strict=False) as bounded:
        list(bounded.buffers())
    assert bounded.stats.compressed_buffers == 2 and len(bounded.stats.errors) == 1
    with EtlReader(path, strict=False, max_inflation=1 << 20) as raised:
        list(raised.buffers())
    assert raised.stats.compressed_buffers == 4 and not raised.stats.errors
    with pytest.raises(InvalidArgument):
        EtlReader(path, max_inflation=0)
