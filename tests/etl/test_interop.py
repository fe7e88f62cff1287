"""Files openetw writes are read by an independent parser (dissect.etl) with the same records."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from openetw.etl import EtlReader
from openetw.etl.relog import is_logfile_header_record, relog
from tests.conftest import corpus_path
from tests.etl.corpus_facts import CORPUS_ETL, EtlFacts

dissect_etl = pytest.importorskip("dissect.etl")


def _relogged(path: str) -> bytes:
    out = io.BytesIO()
    with EtlReader(path) as reader:
        relog([reader], out)
    return out.getvalue()


def _compare_headers(ours, theirs) -> None:  # type: ignore[no-untyped-def]
    raw = theirs.header.header
    if ours.kind in ("system", "compact"):
        assert raw.ThreadId == ours.tid and raw.ProcessId == ours.pid
    if ours.kind in ("classic", "instance", "event"):
        assert raw.ThreadId == ours.tid and raw.ProcessId == ours.pid
        assert bytes(raw.ProviderId) == ours.provider_guid_bytes
    if ours.kind in ("classic", "instance"):
        assert theirs.header.provider_id == ours.provider_id
    if ours.kind == "event":
        # dissect.etl reads EVENT_HEADER GUIDs big-endian: the same 16 bytes, another UUID.
        assert theirs.header.provider_id.bytes == ours.provider_id.bytes_le
        assert (raw.Id, raw.Version, raw.Level, raw.OpCode, raw.Task, raw.Keywords) == (
            ours.id, ours.version, ours.level, ours.opcode, ours.task, ours.keyword,
        )
    assert raw.TimeDelta == ours.timestamp
    delta = abs(theirs.header.timestamp - ours.time)
    assert delta <= timedelta(microseconds=2), (theirs.header.timestamp, ours.time)


@pytest.mark.parametrize("facts", CORPUS_ETL, ids=lambda f: f.path.rsplit("/", 1)[-1])
def test_relog_is_read_by_dissect_and_by_openetw_with_the_same_records(facts: EtlFacts) -> None:
    path = str(corpus_path("etl", *facts.path.split("/")))
    data = _relogged(path)

    with EtlReader(path) as original_reader:
        original = [r for r in original_reader.records(time_order=True) if not is_logfile_header_record(r)]
    with EtlReader(data) as back_reader:
        back = list(back_reader.records(time_order=True))
    assert back_reader.stats.errors == []
    assert len(back) == facts.records  # the new logfile header replaces the old one
    relogged = [r for r in back if not is_logfile_header_record(r)]
    assert len(relogged) == len(original)
    assert all(a.same_as(b) for a, b in zip(original, relogged, strict=True))
    assert back_reader.header.events_lost == facts.events_lost

    theirs = list(dissect_etl.ETL(io.BytesIO(data)))
    assert len(theirs) == facts.records
    ours_in_file_order = list(EtlReader(data))
    step = max(1, len(theirs) // 2000)  # every record on small files, a spread sample on big ones
    for ours, their in list(zip(ours_in_file_order, theirs, strict=True))[1::step]:
        _compare_headers(ours, their)
