"""A damaged index is never trusted: whatever happened to the bytes of a genuine index, a trace
gives the same events as with no index (the index is built again), or a project error."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from openetw.consumer import EtlIndex
from openetw.testing.index_damage import bit_flips, events_with_index, mutations, plain_events
from tests.consumer.helpers import every_kind, write_etl

SMALL_BLOCKS = "OPENETW_INDEX_BLOCK_ROWS"


@pytest.fixture
def genuine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, bytes]:
    monkeypatch.setenv(SMALL_BLOCKS, "40")  # several blocks, so damage lands in blocks, table, footer and trailer
    path = write_etl(tmp_path / "a.etl", every_kind(200))
    location = EtlIndex.open(path).index_path
    assert location is not None
    return path, location, location.read_bytes()


def test_a_flipped_bit_anywhere_in_a_genuine_index_gives_the_same_events(genuine: tuple[Path, Path, bytes]) -> None:
    path, location, data = genuine
    expected = plain_events(path)
    assert len(expected) == 201
    for where, damaged in bit_flips(data, 120):
        got = events_with_index(path, location, damaged)
        assert got == expected, where
        assert not EtlIndex.open(path).built, where  # the damaged index was replaced by a sound one


def test_random_damage_of_an_index_is_rebuilt_or_a_project_error(genuine: tuple[Path, Path, bytes]) -> None:
    path, location, data = genuine
    expected = plain_events(path)
    rng = random.Random(20260529)
    for _ in range(80):
        what, damaged = mutations(data, rng)
        got = events_with_index(path, location, damaged)
        assert got == expected or not isinstance(got, list), what


def test_a_damaged_block_read_by_row_number_is_rebuilt_too(genuine: tuple[Path, Path, bytes]) -> None:
    import numpy as np

    from openetw.consumer._engine.blocks import MAGIC

    path, location, data = genuine
    expected = [bytes(record.raw) for record in EtlIndex.open(path).loader().records(np.arange(201))]
    damaged = bytearray(data)
    damaged[len(MAGIC) + 3] ^= 0x01  # inside the first block
    location.write_bytes(bytes(damaged))
    index = EtlIndex.open(path)
    assert not index.built  # the footer is sound: the damage shows when the block is read
    assert [bytes(record.raw) for record in index.loader().records(np.arange(201))] == expected
    assert index.built and location.read_bytes() != bytes(damaged)
