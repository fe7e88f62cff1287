"""The index's fast walker (``_engine.index_walk``) against ``etl.framing``'s plain reference
walk: the same records, the same unknown records, as many problems, on clean and damaged buffers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.consumer._engine.index_walk import single_buffer, walk_chains
from openetw.etl import framing as F
from tests.consumer.helpers import every_kind, write_etl

_MUTATIONS = st.lists(st.tuples(st.integers(F.RECORDS_START, 4095), st.integers(0, 255)), max_size=8)


def _buffers(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, at = [], 0
    while at + F.RECORDS_START <= len(data):
        size = int.from_bytes(data[at + F.BUFFER_SIZE_AT : at + F.BUFFER_SIZE_AT + 4], "little")
        out.append(data[at : at + size])
        at += size
    return out


def _reference(data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int, str]], int]:
    data_end = int.from_bytes(data[F.BUFFER_OFFSET_AT : F.BUFFER_OFFSET_AT + 4], "little")
    framed, unframed, problems = [], [], 0
    for item in F.walk(data, data_end=data_end, buffer_size=len(data)):
        if isinstance(item, F.Framed):
            framed.append((item.pos, item.size))
        elif isinstance(item, F.Unframed):
            unframed.append((item.pos, item.size, item.reason))
        else:
            problems += 1
    return framed, unframed, problems


def _fast(data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int, str]], int]:
    bufs = single_buffer(data)
    chains = walk_chains(bufs)
    framed = list(zip(chains.offsets.tolist(), chains.sizes.tolist(), strict=True))
    unframed = [(pos, size, reason) for pos, size, _, reason in chains.unknown]
    return framed, unframed, len(bufs.errors)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=_MUTATIONS, which=st.integers(0, 50))
def test_the_fast_walk_is_the_reference_walk(mutations: list[tuple[int, int]], which: int, tmp_path: Path) -> None:
    path = tmp_path / "kinds.etl"
    if not path.exists():
        write_etl(path, every_kind(400), buffer_size=4096)
    buffers = _buffers(path)[1:]
    data = bytearray(buffers[which % len(buffers)])
    for offset, value in mutations:
        data[offset] = value
    assert _fast(bytes(data)) == _reference(bytes(data))


def test_every_buffer_of_a_clean_file_walks_alike(tmp_path: Path) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(600), buffer_size=2048)
    seen: list[Any] = []
    for data in _buffers(path)[1:]:
        fast = _fast(data)
        assert fast == _reference(data)
        seen.extend(fast[0])
    assert len(seen) == 600
