"""An index someone else planted, or a damaged one, is never believed and never a crash: the
reader builds the index again (in its own cache when the file's folder is not its own)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer import EtlIndex, UserTrace
from openetw.consumer._engine.blocks import BlockWriter, read_stored
from openetw.consumer.index import index_locations
from openetw.consumer.index_trust import untrusted_reason
from tests.consumer.helpers import every_kind, write_etl

NOBODY = 65534
COUNT = 300


def _events(path: Path) -> int:
    return sum(len(batch) for batch in UserTrace(files=[path], manifests=[]).batches(columns=["id"]))


def _plant(location: Path, change: Any, *, owner: int | None = None) -> None:
    """Rewrite the index at ``location`` with ``change(meta, arrays)`` applied."""
    stored = read_stored(location)
    assert stored is not None
    providers = b"".join(bytes.fromhex(text) for text in stored.footer["providers"])
    arrays = {
        "records": np.concatenate([stored.block(n) for n in range(len(stored.blocks))]), "buffers": stored.buffers(),
        "providers": np.frombuffer(providers, dtype=np.uint8).reshape(-1, 16).copy(),
    }  # fmt: skip
    meta = {key: value for key, value in stored.footer.items() if key not in ("blocks", "providers", "buffer_table")}
    stored.close()
    change(meta, arrays)
    with open(location, "wb") as out:
        writer = BlockWriter(out)
        if len(arrays["records"]):
            writer.add(arrays["records"], 0)
        writer.finish(meta, arrays["buffers"], [bytes(row) for row in arrays["providers"]])
    if owner is not None:
        os.chown(location, owner, owner)


def _one_row(meta: dict, arrays: dict) -> None:
    arrays["records"] = arrays["records"][:1]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a file as another user")
def test_an_index_another_user_planted_is_ignored_and_rebuilt_in_the_readers_cache(tmp_path: Path, private_stores: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    path = write_etl(theirs / "a.etl", every_kind(COUNT))
    shutil.chown(theirs, NOBODY, NOBODY)
    honest = EtlIndex.open(path, save=False)
    expected = len(honest)
    beside = index_locations(path)[0]
    honest.save(beside)
    _plant(beside, _one_row, owner=NOBODY)
    planted = beside.read_bytes()
    assert "uid 65534" in (untrusted_reason(beside) or "")
    index = EtlIndex.open(path)
    assert index.built and len(index) == expected
    assert index.index_path is not None and index.index_path.parent == private_stores  # not in their folder
    assert beside.read_bytes() == planted
    assert not EtlIndex.open(path).built  # the cached one is believed next time
    assert _events(path) == expected


def test_an_index_others_may_write_is_not_believed(tmp_path: Path, private_stores: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(COUNT))
    first = EtlIndex.open(path)
    assert first.index_path is not None
    _plant(first.index_path, _one_row)
    first.index_path.chmod(0o666)
    again = EtlIndex.open(path)
    assert again.built and len(again) == len(first)


def _provider_out_of_range(meta: dict, arrays: dict) -> None:
    arrays["records"]["provider"][5] = 10_000


def _buffer_unknown(meta: dict, arrays: dict) -> None:
    arrays["records"]["buffer"][7] = 999_999


def _offset_past_buffer(meta: dict, arrays: dict) -> None:
    arrays["records"]["offset"][3] = 0xFFFFFF00


def _wrong_header_type(meta: dict, arrays: dict) -> None:
    rows = arrays["records"]
    rows["header_type"][rows["kind"] < 6] = 0xEE


def _buffer_outside(meta: dict, arrays: dict) -> None:
    arrays["buffers"]["file_offset"][0] = 1 << 40


def _bomb_buffer(meta: dict, arrays: dict) -> None:
    arrays["buffers"]["data_end"][0] = 0xFFFFFFF0


def _meta_types(meta: dict, arrays: dict) -> None:
    meta["unknown_reasons"] = ["not", "a", "dict"]


def _provider_table(meta: dict, arrays: dict) -> None:
    arrays["providers"] = np.zeros((2, 3), dtype=np.uint8)


@pytest.mark.parametrize("damage", [_buffer_outside, _bomb_buffer, _meta_types, _provider_table])
def test_a_damaged_index_of_the_readers_own_is_rebuilt_never_a_crash(tmp_path: Path, private_stores: Path, damage: Any) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(COUNT))
    first = EtlIndex.open(path)
    assert first.index_path is not None
    _plant(first.index_path, damage)
    again = EtlIndex.open(path)
    assert again.built and len(again) == len(first)
    assert _events(path) == len(first)


@pytest.mark.parametrize("damage", [_provider_out_of_range, _buffer_unknown, _offset_past_buffer, _wrong_header_type])
def test_a_damaged_block_is_noticed_when_read_and_the_file_indexed_again(tmp_path: Path, private_stores: Path, damage: Any) -> None:
    # Blocks are read as they are used: a damaged one is found then, and the rows from it on
    # come from indexing the file again (which replaces the damaged index).
    path = write_etl(tmp_path / "a.etl", every_kind(COUNT))
    first = EtlIndex.open(path)
    expected = first.records
    assert first.index_path is not None
    _plant(first.index_path, damage)
    again = EtlIndex.open(path)
    assert not again.built
    assert np.array_equal(again.records, expected)
    assert again.built and not EtlIndex.open(path).built
    _plant(first.index_path, damage)
    assert _events(path) == len(expected)


def test_garbage_where_the_index_should_be_is_rebuilt(tmp_path: Path, private_stores: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(COUNT))
    first = EtlIndex.open(path)
    location = first.index_path  # the first pass writes the index
    assert location is not None
    for garbage in (b"", b"OETWIDX\x00" + b"\xff" * 64, location.read_bytes()[:200], os.urandom(4096)):
        location.write_bytes(garbage)
        assert EtlIndex.open(path).built
    assert len(EtlIndex.open(path)) == len(first)
