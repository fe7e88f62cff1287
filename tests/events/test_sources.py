"""One way to open any source, one damage policy: every good record kept, what cost records in
``losses`` (a command fails after its output), what was only counted in ``notices`` (a warning)."""

from __future__ import annotations

from pathlib import Path

from openetw.consumer.live import LiveSessionSource
from openetw.eventlog.files import EvtxQuery
from openetw.events.sources import EVTX, Damage, damage_of, open_session, open_source, trace_format
from openetw.evtx.reader import EvtxReader
from tests.conftest import corpus_path


def _read(path: Path) -> tuple[int, Damage]:
    source = open_source(path)
    source.open()
    try:
        return sum(1 for _ in source.records()), damage_of(source)
    finally:
        source.close()


def test_a_damaged_evtx_keeps_its_good_records_and_names_its_losses() -> None:
    path = corpus_path("evtx", "sysmon.evtx")
    assert trace_format(path) is EVTX
    records, damage = _read(path)
    reader = EvtxReader(path.read_bytes(), path=str(path))
    assert records == sum(1 for _ in reader.records()) > 0  # the format's own policy decides what is kept
    assert damage.failed and [str(e) for e in damage.losses] == [str(e) for e in reader.losses]
    assert damage.summary() == f"{reader.losses[0]} (and {len(reader.losses) - 1} more)"


def test_a_crc_mismatch_is_a_notice_not_a_loss() -> None:
    records, damage = _read(corpus_path("evtx", "security_bad_string_cache.evtx"))
    assert records > 0 and not damage.failed and damage.summary() is None
    assert any("CRC32 mismatch" in str(notice) for notice in damage.notices)


def test_the_event_logs_file_query_reads_through_the_same_policy() -> None:
    path = corpus_path("evtx", "sysmon.evtx")
    query = EvtxQuery(path)
    events = list(query.events())
    records, damage = _read(path)
    assert len(events) == records
    assert [str(e) for e in query.errors] == [str(e) for e in damage.losses]
    assert [str(e) for e in query.notices] == [str(e) for e in damage.notices]
    again = list(query.events())  # a second reading counts its own damage again, as before
    assert len(again) == records and len(query.errors) == 2 * len(damage.losses)


def test_a_file_named_evtx_is_read_as_one_whatever_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    assert type(open_source(path, as_format=EVTX)).__name__ == "EvtxFileSource"


def test_a_session_is_opened_as_a_source_by_name() -> None:
    source = open_session("Viewer-Demo", socket="/nonexistent/openetw.sock")
    assert isinstance(source, LiveSessionSource) and source.name == "Viewer-Demo" and source.socket == "/nonexistent/openetw.sock"
    assert damage_of(source) == Damage((), ())
