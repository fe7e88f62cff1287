"""``EtlIndex.records_at``: the records of chosen rows through their blocks' place columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer import EtlIndex
from tests.conftest import corpus_path
from tests.consumer.helpers import every_kind, write_etl


def _seen(record: Any) -> tuple[Any, ...]:
    return (record.kind, record.filetime, record.provider_guid_bytes, record.pid, record.tid, bytes(record.user_data))


def test_records_at_are_the_loaders_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "40")  # rows from several blocks, every header kind
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "index"))
    index = EtlIndex.open(write_etl(tmp_path / "a.etl", every_kind(300)))
    index.ensure_built()
    assert len(index.blocks) > 5
    rows = np.asarray(sorted({0, 1, 39, 40, 41, 119, 200, len(index) - 1, *range(60, 300, 7)}), dtype=np.int64)
    expected = [_seen(record) for record in index.loader().records(rows)]
    assert [_seen(record) for record in index.records_at(rows)] == expected
    assert list(index.records_at(np.zeros(0, dtype=np.int64))) == []


def test_records_at_read_only_the_place_columns_of_their_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "200")
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "index"))
    index = EtlIndex.open(str(corpus_path("etl", "tx", "Process.etl")))
    index.ensure_built()
    asked: list[tuple[int, tuple[str, ...]]] = []
    real = index._block_columns

    def block_columns(number: int, names: list[str], held: Any = None) -> Any:
        asked.append((number, tuple(names)))
        return real(number, names, held)

    monkeypatch.setattr(index, "_block_columns", block_columns)
    monkeypatch.setattr(index, "_block_rows", lambda number: pytest.fail("a whole block decoded"))
    rows = np.asarray([3, 250, 251, len(index) - 2], dtype=np.int64)
    got = [_seen(record) for record in index.records_at(rows)]
    monkeypatch.undo()
    assert got == [_seen(record) for record in index.loader().records(rows)]
    assert sorted({number for number, _ in asked}) == sorted({0, 1, len(index.blocks) - 1})


def test_the_catalog_over_a_damaged_index_is_the_catalog_of_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records read through place columns of a block that turns out damaged: the file is indexed
    again (the same rows), and the catalog is still the one a pass over every record gives."""
    import os

    from openetw.errors import OpenEtwError
    from openetw.probe.run.adapter import Catalog, TraceFiles
    from openetw.testing.index_damage import bit_flips

    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "500")
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "index"))
    path = str(corpus_path("etl", "tx", "Process.etl"))
    location = EtlIndex.open(path).index_path
    assert location is not None
    genuine = location.read_bytes()
    mode = location.stat().st_mode & 0o777
    expected = Catalog.scan_records(TraceFiles([path], manifests=[])).items()
    for where, damaged in bit_flips(genuine, 12):
        location.unlink(missing_ok=True)
        with os.fdopen(os.open(location, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            out.write(damaged)
        try:
            found = Catalog.from_index(TraceFiles([path], manifests=[]))
        except OpenEtwError:
            continue
        assert found is not None and found.items() == expected, where
