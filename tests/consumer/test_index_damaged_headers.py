"""A damaged record header whose user data would start past the record's end: the index keeps the
record (no user data, as the reader gives it) and stays an index that can be believed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from openetw.consumer import EtlIndex
from openetw.consumer._engine.index_build import KIND_CODES, build_index_data
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.testing.fuzz import pure_engine
from tests.consumer.helpers import describe, every_kind, write_etl


@pytest.mark.parametrize("engine", ["native", "pure"])
def test_a_kernel_header_extension_longer_than_its_record_leaves_no_user_data(tmp_path: Path, engine: str) -> None:
    clean = write_etl(tmp_path / "clean.etl", every_kind(200), buffer_size=2048)
    built = build_index_data(str(clean))
    compact = built.records[built.records["kind"] == KIND_CODES["compact"]]
    row = compact[np.argmin(compact["size"])]
    buffers = built.buffers
    start = int(buffers["file_offset"][buffers["index"] == row["buffer"]][0]) + int(row["offset"])
    data = bytearray(clean.read_bytes())
    data[start + L.SYSTEM_TRACE_HEADER.offset("Version") + 1] = 2  # an extension of 16 bytes
    path = tmp_path / "damaged.etl"
    path.write_bytes(bytes(data))
    with pure_engine() if engine == "pure" else contextlib.nullcontext():
        with EtlReader(path, strict=False) as reader:
            expected = describe(list(reader.records(time_order=True)))
        index = EtlIndex.build(path)
        rows = index.records
        assert np.all(rows["user_data_offset"] <= rows["size"])
        with index.loader() as loader:
            assert describe(loader.records(np.arange(len(index)))) == expected
