"""Mutated .evtx files: only the project's errors, with a location; bounded work and memory;
every good record before and after the damage kept."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from openetw.errors import EvtxFormatError, OpenEtwError
from openetw.evtx import EvtxReader
from openetw.evtx import layout as L
from openetw.evtx import values as V
from openetw.evtx.binxml import TemplateInstance
from tests.conftest import corpus_path
from tests.evtx import fuzzing

SMALL = ["Security_short_selected.evtx", "new-user-security.evtx", "Application_no_crc32.evtx", "pyevtx_issue_38.evtx"]


def _consume(data: bytes) -> tuple[dict[int, str], list[EvtxFormatError]]:
    """Read every record and render it; returns rendered XML by id and every error met."""
    reader = EvtxReader(data, path="fuzzed.evtx")
    rendered: dict[int, str] = {}
    errors: list[EvtxFormatError] = []
    for record in reader.records(damaged=True):
        try:
            rendered[record.record_id] = record.xml()
            record.properties()
            _ = record.header.event_id, record.time_iso, record.provider_id
        except EvtxFormatError as error:
            errors.append(error)
    return rendered, errors + reader.errors


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    choice = rng.randrange(5)
    if choice == 0:  # flip bytes anywhere after the file header
        for _ in range(rng.randint(1, 16)):
            out[rng.randrange(L.FILE_HEADER_SIZE, len(out))] ^= 1 << rng.randrange(8)
    elif choice == 1:  # random run of bytes inside the records of the first chunk
        start = rng.randrange(L.FILE_HEADER_SIZE + 0x200, L.FILE_HEADER_SIZE + 0x3000)
        out[start : start + rng.randint(1, 64)] = rng.randbytes(rng.randint(1, 64))
        out = out[: len(data)] if len(out) >= len(data) else out + bytes(len(data) - len(out))
    elif choice == 2:  # truncate
        out = out[: rng.randrange(L.FILE_HEADER_SIZE, len(out))]
    elif choice == 3:  # large numbers where sizes and offsets live
        pos = rng.randrange(L.FILE_HEADER_SIZE + 0x200, L.FILE_HEADER_SIZE + 0x4000)
        out[pos : pos + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\x00\x02\x00\x00", b"\x00\x00\x00\x00"])
    else:  # damage the chunk header's fields
        pos = L.FILE_HEADER_SIZE + rng.randrange(0, 0x200)
        out[pos] = rng.randrange(256)
    return bytes(out)


@pytest.mark.parametrize("name", SMALL)
def test_mutations_raise_only_located_project_errors(name: str) -> None:
    data = corpus_path("evtx", name).read_bytes()
    rng = random.Random(name)
    tracemalloc.start()
    try:
        for _ in range(60):
            mutated = _mutate(data, rng)
            tracemalloc.reset_peak()
            try:
                _, errors = _consume(mutated)
            except OpenEtwError as error:  # the file header itself is unusable
                assert isinstance(error, EvtxFormatError) and error.offset == 0
                continue
            for error in errors:
                assert error.offset is not None and error.structure, error
            # Work is bounded by the file: a few MiB for a 68 KiB file, whatever its content.
            assert tracemalloc.get_traced_memory()[1] < 32 * 1024 * 1024
    finally:
        tracemalloc.stop()


def _records(data: bytes) -> list:  # type: ignore[type-arg]
    return list(EvtxReader(data).records())


def test_a_damaged_record_costs_that_record_only() -> None:
    data = corpus_path("evtx", "security.evtx").read_bytes()
    records = _records(data)
    expected = {r.record_id: r.xml() for r in records}
    for victim in records[5:2261:150]:
        mutated = bytearray(data)
        mutated[victim.file_offset : victim.file_offset + 4] = b"XX\x00\x00"
        reader = EvtxReader(bytes(mutated), path="s.evtx")
        kept = {r.record_id: r.xml() for r in reader.records()}
        assert set(expected) - set(kept) == {victim.record_id}
        assert all(kept[i] == expected[i] for i in kept)
        located = [e for e in reader.errors if e.offset == victim.file_offset]
        assert located and located[0].chunk_index == victim.chunk_index and located[0].structure == "event record"


def _plain_value_ranges(record) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Chunk offsets of a record's own substitution values (BinXml ones aside: they may hold
    template definitions later records use)."""
    instance = record._nodes[0] if record._nodes and isinstance(record._nodes[0], TemplateInstance) else None
    if instance is None:
        return []
    return [(start, start + size) for value_type, start, size in instance.values if size and value_type != V.BINXML]


def test_damaged_values_leave_every_other_record_intact() -> None:
    data = corpus_path("evtx", "system.evtx").read_bytes()
    records = _records(data)
    expected = {r.record_id: r.xml() for r in records}
    rng = random.Random(7)
    victims = [r for r in records if _plain_value_ranges(r)][::150]
    assert len(victims) >= 5
    for victim in victims:
        ranges = _plain_value_ranges(victim)
        mutated = bytearray(data)
        base = victim.file_offset - victim._pos
        for _ in range(8):
            start, end = rng.choice(ranges)
            mutated[base + rng.randrange(start, end)] = rng.randrange(256)
        rendered, errors = _consume(bytes(mutated))
        for record_id, xml in expected.items():
            if record_id != victim.record_id:
                assert rendered.get(record_id) == xml, record_id
        assert victim.record_id in rendered  # damaged values still render (as their bytes when they must)
        assert all(e.offset is not None for e in errors)


def test_a_damaged_chunk_costs_that_chunk_only() -> None:
    data = corpus_path("evtx", "security.evtx").read_bytes()
    records = _records(data)
    mutated = bytearray(data)
    offset = L.FILE_HEADER_SIZE + 3 * L.CHUNK_SIZE
    mutated[offset : offset + 8] = b"garbage!"
    reader = EvtxReader(bytes(mutated), path="s.evtx")
    kept = [r.record_id for r in reader.records()]
    assert kept == [r.record_id for r in records if r.chunk_index != 3]
    assert str(reader.errors[0]).startswith(f"s.evtx, offset 0x{offset:x}, chunk 3, chunk header: signature")


def test_not_an_evtx_file() -> None:
    with pytest.raises(EvtxFormatError) as failure:
        EvtxReader(b"ElfChnk\x00" + bytes(200), path="x.evtx")
    assert str(failure.value).startswith("x.evtx, offset 0x0, file header: signature")
    with pytest.raises(EvtxFormatError):
        EvtxReader(b"Elf", path="x.evtx")


@pytest.mark.parametrize("mutation", [m.__name__ for m in fuzzing.MUTATIONS])
def test_each_kind_of_mutation_meets_only_project_errors(mutation: str) -> None:
    """The CI-sized run of ``benchmarks/fuzz_evtx.py``: each mutation on each small corpus file,
    only located project errors, a few MiB at most whatever the bytes say."""
    mutate = next(m for m in fuzzing.MUTATIONS if m.__name__ == mutation)
    rng = random.Random(mutation)
    tracemalloc.start()
    try:
        for name in SMALL:
            data = corpus_path("evtx", name).read_bytes()
            for _ in range(6):
                mutated = bytearray(data)
                mutate(mutated, rng)
                tracemalloc.reset_peak()
                fuzzing.consume(bytes(mutated))
                assert tracemalloc.get_traced_memory()[1] < 32 * 1024 * 1024
    finally:
        tracemalloc.stop()


def test_a_systemtime_of_the_wrong_size_is_its_bytes() -> None:
    """Found by benchmarks/fuzz_evtx.py (seed 2879, a bit flip in a substitution descriptor):
    a SYSTEMTIME of 12 bytes raised struct.error out of the record's header."""
    from openetw.evtx.render import Value

    assert Value(V.SYSTEMTIME, bytes(12)).value == bytes(12)
    assert Value(V.SYSTEMTIME, bytes(12)).text == "00" * 12


def test_a_time_attribute_that_is_not_a_time_is_no_time() -> None:
    """Found by benchmarks/fuzz_evtx.py (seed 17442, a bit flip in a TimeCreated given as text):
    a fraction that is not digits raised ValueError out of the record's header."""
    from openetw.evtx.record import _iso_filetime

    assert _iso_filetime("2019-01-01T00:00:00.83373\u10335Z") == 0
    assert _iso_filetime("2019-01-01T00:00:00.1234567Z") > 0
