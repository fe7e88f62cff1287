"""Every corpus .evtx: every record the independent readers yield, with the same XML."""

from __future__ import annotations

import pytest

from openetw.errors import EvtxFormatError
from openetw.evtx import EvtxReader
from tests.conftest import corpus_path
from tests.evtx.readers import crate_records, python_evtx_records, python_evtx_xml
from tests.evtx.sources_facts import read_facts
from tests.evtx.xmlnorm import canonical, first_difference, same_binary

FACTS = read_facts(corpus_path("evtx", "SOURCES.md")) if corpus_path("evtx", "SOURCES.md").exists() else []


def test_sources_table_lists_the_corpus() -> None:
    names = {f.name for f in FACTS}
    on_disk = {p.name for p in corpus_path("evtx").glob("*.evtx")}
    assert len(FACTS) == 18
    assert names == on_disk


@pytest.mark.parametrize("facts", FACTS, ids=[f.name[:40] for f in FACTS])
def test_counts_and_xml_match_the_readers(facts, capsys) -> None:
    path = corpus_path("evtx", facts.name)
    reader = EvtxReader(path.read_bytes(), path=facts.name)
    framed = list(reader.records(damaged=True))
    ours = [r for r in framed if r.damage is None]
    # Printed beside SOURCES.md's counts (run with -s to see them).
    with capsys.disabled():
        print(
            f"\n{facts.name}: openetw {len(ours)} rendered / {len(framed)} framed; "
            f"evtx {facts.crate_ok} ok / {facts.crate_errors} errors; python-evtx {facts.python_evtx}; "
            f"damage reported {len(reader.errors) - reader.stats.crc_mismatches}, CRC mismatches {reader.stats.crc_mismatches}"
        )
    assert len(framed) >= facts.best_reader
    assert len(ours) >= facts.crate_ok

    # Record-id order inside each chunk.
    by_chunk: dict[int, list[int]] = {}
    for record in framed:
        by_chunk.setdefault(record.chunk_index, []).append(record.record_id)
    for ids in by_chunk.values():
        assert ids == sorted(ids)

    # Every record either reader yields is one of ours.
    mine = {r.record_id: r for r in ours}
    framed_ids = {r.record_id for r in framed}
    crate = dict(crate_records(path))
    pyevtx_ids = {record_id for record_id, _ in python_evtx_records(path, xml=False)}
    assert set(crate) <= set(mine)
    assert pyevtx_ids <= framed_ids

    # XML: equal to the Rust reader's wherever it renders the record. A torn record (its size
    # not repeated, written while the file was dirty) holds zeros where a value should be,
    # which that reader renders as an empty element; python-evtx cannot render those at all.
    for record_id, xml in crate.items():
        record = mine[record_id]
        difference = first_difference(canonical(record.xml()), canonical(xml))
        assert difference is None or record.torn, f"record {record_id}: {difference}"

    # Records only python-evtx renders are compared with its rendering.
    only_pyevtx = pyevtx_ids - set(crate)
    for record_id, xml in python_evtx_xml(path, only_pyevtx & set(mine)).items():
        difference = first_difference(canonical(mine[record_id].xml(), rounding="python-evtx"), canonical(xml), same=same_binary)
        assert difference is None, f"record {record_id}: {difference}"

    # What was skipped is reported with its place.
    for error in reader.errors:
        assert isinstance(error, EvtxFormatError)
        assert error.offset is not None and error.structure
    for record in framed:
        if record.damage is not None:
            with pytest.raises(EvtxFormatError):
                record.xml()


def test_dirty_files_keep_chunks_past_the_header_count() -> None:
    # system.evtx: the header says 3 chunks; 15 hold records (python-evtx stops at 3).
    data = corpus_path("evtx", "system.evtx").read_bytes()
    reader = EvtxReader(data)
    records = list(reader.records())
    assert reader.header.number_of_chunks == 3 and reader.header.dirty
    assert len({r.chunk_index for r in records}) == 15
    assert len(records) == 1881


def test_bad_chunk_magic_is_reported_and_the_rest_kept() -> None:
    data = corpus_path("evtx", "sample_with_a_bad_chunk_magic.evtx").read_bytes()
    reader = EvtxReader(data, path="bad.evtx")
    records = list(reader.records())
    assert len(records) >= 270
    damaged = [c for c in reader.chunk_infos if c.state == "damaged"]
    assert [c.index for c in damaged] == [6, 10]
    messages = [str(e) for e in reader.errors if e.structure == "chunk header" and "CRC" not in e.message]
    assert messages[0].startswith("bad.evtx, offset 0x61000, chunk 6, chunk header: signature")


def test_crc_mismatches_are_counted_not_fatal() -> None:
    data = bytearray(corpus_path("evtx", "security.evtx").read_bytes())
    reader = EvtxReader(bytes(data))
    assert reader.stats.crc_mismatches == 0 and len(list(reader.records())) == 2261
    # A flipped byte in a record's padding changes the records' CRC32, not their content.
    record = next(iter(EvtxReader(bytes(data)).records()))
    data[record.file_offset + 8 + 8] ^= 0x01  # the written time: no part of the XML
    reader = EvtxReader(bytes(data))
    assert len(list(reader.records())) == 2261
    assert reader.stats.crc_mismatches == 1
    assert "CRC32 mismatch" in str(reader.errors[0]) and reader.errors[0].chunk_index == 0
