"""One behaviour, two implementations: the compiled core against the pure-Python reference.

Both engines read the same inputs in one process (every corpus .etl, mutated copies, generated
traces, LZXPRESS streams) and must give identical records, bytes, errors (messages, offsets,
buffers, structures) and counts. The pure path is the reference: ``pure()`` switches the
process to it for the length of a block.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.consumer._engine import index_build, index_walk
from openetw.etl import lzxpress, reader
from openetw.etl.lzxpress import compress, decompress_python
from tests.consumer.helpers import every_kind, write_etl
from tests.native import cases

_read = native.module("_read")
if _read is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled core must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_read is None, reason=f"compiled core not active: {native.reason()}")


@contextlib.contextmanager
def pure() -> Iterator[None]:
    """The pure-Python reference for the length of the block."""
    saved = reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress
    reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress = None, None, None, decompress_python
    try:
        yield
    finally:
        reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress = saved


def both(call):  # type: ignore[no-untyped-def]
    fast = cases.outcome(call)
    with pure():
        reference = cases.outcome(call)
    return fast, reference


# -- LZXPRESS ------------------------------------------------------------------------------------
def test_inflation_of_every_compressed_corpus_buffer_and_its_damaged_copies() -> None:
    assert _read is not None
    seen = 0
    for path in cases.corpus_files():
        for i, (stream, size) in enumerate(cases.compressed_streams(path.read_bytes(), limit=24)):
            seen += 1
            assert _read.inflate(stream, size) == decompress_python(stream, size)
            for variant in (cases.mutated(stream, i, flips=3, keep=0), stream[: len(stream) // 2], stream + b"\0" * 9):
                for want in (size, size - 1, size + 7):
                    fast = cases.outcome(lambda v=variant, w=want: _read.inflate(v, w))
                    assert fast == cases.outcome(lambda v=variant, w=want: decompress_python(v, w)), (path.name, i, want)
    assert seen, "no compressed buffer in the corpus"


def test_inflation_of_generated_and_random_streams() -> None:
    assert _read is not None
    for stream, size in cases.generated_streams(seed=7, count=60):
        assert cases.outcome(lambda s=stream, n=size: _read.inflate(s, n)) == cases.outcome(lambda s=stream, n=size: decompress_python(s, n))


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200), size=st.integers(-2, 600))
def test_inflation_of_arbitrary_bytes(data: bytes, size: int) -> None:
    assert _read is not None
    assert cases.outcome(lambda: _read.inflate(data, size)) == cases.outcome(lambda: decompress_python(data, size))


@settings(max_examples=60, deadline=None)
@given(plain=st.binary(max_size=3000), flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4))
def test_inflation_of_compressed_then_damaged_data(plain: bytes, flips: list[tuple[int, int]]) -> None:
    assert _read is not None
    stream = bytearray(compress(plain * 3))
    for at, value in flips:
        if stream:
            stream[at % len(stream)] = value
    data = bytes(stream)
    assert cases.outcome(lambda: _read.inflate(data, 3 * len(plain))) == cases.outcome(lambda: decompress_python(data, 3 * len(plain)))


# -- reading records ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", cases.corpus_files(), ids=lambda p: p.name)
def test_every_corpus_file_reads_alike(path: Path) -> None:
    data = path.read_bytes()
    for strict in (True, False):
        fast, reference = both(lambda s=strict: cases.read_all(data, strict=s))  # type: ignore[misc]
        assert fast == reference
    fast, reference = both(lambda: cases.index_of(data))
    assert fast == reference


@pytest.mark.parametrize("path", cases.corpus_files(), ids=lambda p: p.name)
def test_mutated_corpus_files_read_alike(path: Path) -> None:
    data = path.read_bytes()
    for seed in range(4 if len(data) < 4 << 20 else 1):
        damaged = cases.mutated(data, seed, flips=12)
        for strict in (True, False):
            fast, reference = both(lambda d=damaged, s=strict: cases.read_all(d, strict=s))  # type: ignore[misc]
            assert fast == reference, (path.name, seed, strict)
        fast, reference = both(lambda d=damaged: cases.index_of(d))  # type: ignore[misc]
        assert fast == reference, (path.name, seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.sampled_from([0, 0xFF, 0xC0, 0x90, 0x13, 0x15, 7])), min_size=1, max_size=10))
def test_generated_traces_of_every_header_kind_read_alike(flips: list[tuple[int, int]], tmp_path: Path) -> None:
    path = tmp_path / "kinds.etl"
    if not path.exists():
        write_etl(path, every_kind(300), buffer_size=2048)
    data = bytearray(path.read_bytes())
    for at, value in flips:
        data[0x400 + at % (len(data) - 0x400)] = value
    damaged = bytes(data)
    for strict in (True, False):
        fast, reference = both(lambda s=strict: cases.read_all(damaged, strict=s))  # type: ignore[misc]
        assert fast == reference
    fast, reference = both(lambda: cases.read_all(damaged, strict=False, time_order=True))
    assert fast == reference
    fast, reference = both(lambda: cases.index_of(damaged))
    assert fast == reference


def test_records_built_in_c_are_whole_records() -> None:
    # Slots set by the C are the ones the Python __init__ sets: every field reads, pickles, compares.
    path = cases.corpus_files()[0]
    with reader.EtlReader(path) as r:
        records = list(r)
    with pure(), reader.EtlReader(path) as r:
        reference = list(r)
    assert [(x.kind, x.timestamp, x.raw, x.user_data, x.cpu, x.buffer_index) for x in records] == [
        (x.kind, x.timestamp, x.raw, x.user_data, x.cpu, x.buffer_index) for x in reference
    ]


def test_header_fields_read_in_c_are_the_header_tuple_and_read_only() -> None:
    from openetw.etl.record import RECORD_CLASSES, tuple_field_index

    checked = 0
    for path in cases.corpus_files()[:6]:
        with reader.EtlReader(path, strict=False) as r:
            for record in r:
                for klass in type(record).__mro__:
                    for name, attr in vars(klass).items():
                        index = tuple_field_index(attr)
                        if index is not None and getattr(type(record), name) is attr:
                            assert getattr(record, name) == record._h[index], (type(record).__name__, name)
                            checked += 1
    assert checked > 1000
    record_class = RECORD_CLASSES[0x13]
    with pytest.raises(AttributeError):
        record_class.timestamp.__set__(object.__new__(record_class), 1)  # type: ignore[attr-defined]
