"""Dirty ``.evtx`` files: a stale chunk header (its record-id range, its CRC32s) never costs a
record whose own framing holds; the disagreement is counted and reported. Every path that opens
an ``.evtx`` as records follows that one policy."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.consumer import UserTrace
from openetw.consumer.evtx_source import EvtxFileSource
from openetw.eventlog.files import EvtxQuery
from openetw.evtx import EvtxReader, EvtxWriter
from openetw.evtx import layout as L
from openetw.evtx import values as V
from openetw.evtx.render import Value, XmlNode
from tests.conftest import corpus_path
from tests.evtx.readers import crate_records, python_evtx_records

KEPT_IN_HEADER = 40  # records of chunk 0 the stale header still covers


def _dirty_copy(tmp_path: Path) -> tuple[Path, int]:
    """security.evtx left as a dirty write leaves it: the file header flagged dirty, chunk 0's
    header stale (its last record number and id say 40 records, its CRC32s were not updated)."""
    data = bytearray(corpus_path("evtx", "security.evtx").read_bytes())
    data[L.FILE_FLAGS_OFFSET : L.FILE_FLAGS_OFFSET + 4] = struct.pack("<I", L.FILE_FLAG_DIRTY)
    data[L.FILE_CHECKSUM_OFFSET : L.FILE_CHECKSUM_OFFSET + 4] = struct.pack("<I", L.file_header_checksum(data[: L.FILE_HEADER_FIELDS_SIZE]))
    chunk = L.FILE_HEADER_SIZE
    fields = L.CHUNK_HEADER.unpack_from(data, chunk)
    assert fields["LastEventRecordIdentifier"] - fields["FirstEventRecordIdentifier"] > KEPT_IN_HEADER
    struct.pack_into("<Q", data, chunk + 32, fields["FirstEventRecordIdentifier"] + KEPT_IN_HEADER - 1)
    struct.pack_into("<Q", data, chunk + 16, fields["FirstEventRecordNumber"] + KEPT_IN_HEADER - 1)
    data[chunk + L.CHUNK_RECORDS_CHECKSUM_OFFSET] ^= 0xFF  # the records' CRC32 of an earlier state
    path = tmp_path / "dirty.evtx"
    path.write_bytes(bytes(data))
    outside = fields["LastEventRecordIdentifier"] - fields["FirstEventRecordIdentifier"] + 1 - KEPT_IN_HEADER
    return path, outside


def test_a_stale_chunk_header_costs_no_record(tmp_path: Path) -> None:
    clean = [r.record_id for r in EvtxReader(corpus_path("evtx", "security.evtx").read_bytes()).records()]
    path, outside = _dirty_copy(tmp_path)
    reader = EvtxReader(path.read_bytes(), path=str(path))
    ids = [r.record_id for r in reader.records()]
    assert ids == clean and len(ids) == 2261  # the old reader dropped the records past the stale range
    assert reader.stats.records_outside_header == outside and reader.stats.crc_mismatches == 2
    assert reader.losses == [] and len(reader.notices) == 3
    assert any(f"{outside} records" in n.message and n.structure == "chunk header" and n.chunk_index == 0 for n in reader.notices)
    # python-evtx does not trust the chunk header either; the Rust reader stops a chunk at its
    # header's last record id (the records past it are the ones the old reader dropped too).
    assert len(list(python_evtx_records(path, xml=False))) == len(ids)
    assert len(list(crate_records(path))) == len(ids) - outside


def test_every_path_follows_the_one_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, outside = _dirty_copy(tmp_path)
    source = EvtxFileSource(path)
    source.open()
    assert sum(1 for _ in source.records()) == 2261 and source.losses() == [] and len(source.notices()) == 3
    source.close()
    query = EvtxQuery(path)
    assert sum(1 for _ in query.events()) == 2261 and query.errors == [] and len(query.notices) == 3

    assert main(["info", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    facts = json.loads(out)
    assert facts["records"] == 2261 and facts["records_outside_header"] == outside and facts["crc_mismatches"] == 2
    assert facts["errors"] == [] and len(facts["notices"]) == 3 and err.count("openetw: warning:") == 3
    assert main(["dump", str(path)]) == 0  # counted and reported, not a failure
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2261 and "CRC32 mismatch" in err and "outside the chunk header" in err

    seen: list[int] = []
    trace = UserTrace(files=[str(path)], manifests=[])
    trace.set_default_event_callback(lambda record, context: seen.append(record.record_id))
    trace.start()
    assert len(seen) == 2261


def test_rdpcorets_each_record_decided_by_its_framing() -> None:
    """A VSS copy whose pages come from two uses of two chunks: chunk 0 and chunk 13 hold records
    of a later use (ids past the header's range) after one record torn across the page seam."""
    path = corpus_path("evtx", "2-vss_0-Microsoft-Windows-RemoteDesktopServices-RdpCoreTS%4Operational.evtx")
    reader = EvtxReader(path.read_bytes(), path=str(path))
    ours = {r.record_id: r for r in reader.records()}
    theirs = dict(python_evtx_records(path, xml=False))
    # python-evtx yields two records openetw does not: each starts in the old page and ends in the
    # new one, so the copy of its size at its end is not its size and its BinXml does not parse.
    extra = set(theirs) - set(ours)
    assert extra == {6335011, 6914519}
    data = path.read_bytes()
    for record_id in extra:
        loss = next(e for e in reader.losses if e.record_id == record_id)
        assert loss.structure == "BinXml"
        start = loss.offset - (loss.offset - L.FILE_HEADER_SIZE) % L.CHUNK_SIZE
        at = data.find(struct.pack("<Q", record_id), start, start + L.CHUNK_SIZE) - 8
        size = struct.unpack_from("<I", data, at + 4)[0]
        assert struct.unpack_from("<I", data, at + size - 4)[0] != size
    # openetw keeps the later use's records whose framing holds (their template ids name the
    # definitions they point at) and counts them; the others fail their framing and are counted.
    kept_outside = set(ours) - set(theirs)
    assert len(kept_outside) == reader.stats.records_outside_header == 41
    for record_id in kept_outside:
        record = ours[record_id]
        assert not record.torn and record.header.record_id == record_id and record.xml().startswith("<Event")
    assert len(ours) == 1910 + 41


def test_sizet_prints_as_windows_prints_it() -> None:
    writer = EvtxWriter()
    data = XmlNode("Data", {"Name": ["Pointer"]}, [Value(V.SIZE_T, (4).to_bytes(8, "little"))])
    tree = [XmlNode("Event", {}, [XmlNode("System", {}, [XmlNode("Provider", {"Name": ["P"]})]), XmlNode("EventData", {}, [data])])]
    writer.add_tree(tree, written_time=1)
    image = writer.file_header() + b"".join(writer.finish())
    (record,) = EvtxReader(image).records()
    assert "<Data Name='Pointer'>0x4</Data>" in record.xml()
