"""Corpus ``.evtx`` files queried in place, with results equal to a plain Python filter over the same records."""

from __future__ import annotations

from openetw.consumer.evtx_source import map_file
from openetw.eventlog.files import EvtxQuery
from openetw.evtx import EvtxReader
from tests.conftest import corpus_path


def headers(name: str) -> list[tuple[int, int, int, str]]:
    path = corpus_path("evtx", name)
    return [(r.record_id, r.header.level, r.header.event_id, r.header.provider_name) for r in EvtxReader(map_file(str(path))).records()]


def test_system_evtx_by_level_and_provider() -> None:
    rows = headers("system.evtx")
    path = corpus_path("evtx", "system.evtx")
    for level in (2, 4):
        expected = sorted(rid for rid, lvl, _, _ in rows if lvl == level)
        got = [e.record_id for e in EvtxQuery(path).events(xpath=f"*[System[Level={level}]]")]
        assert got == expected
    provider = max({p for _, lvl, _, p in rows if lvl <= 3}, key=lambda p: sum(1 for _, lvl, _, q in rows if q == p and lvl <= 3))
    expected = sorted(rid for rid, lvl, _, p in rows if p == provider and lvl <= 3)
    got = [e.record_id for e in EvtxQuery(path).events(xpath=f"*[System[Provider[@Name='{provider}'] and Level<=3]]")]
    assert got == expected and got


def test_security_evtx_by_event_data_newest_first() -> None:
    path = corpus_path("evtx", "security.evtx")
    records = list(EvtxReader(map_file(str(path))).records())
    logons = sorted((r.record_id for r in records if r.header.event_id == 4624 and r.properties().get("LogonType") == 5), reverse=True)
    got = [e.record_id for e in EvtxQuery(path).events(xpath="*[System[EventID=4624] and EventData[Data[@Name='LogonType']=5]]", reverse=True)]
    assert got == logons and logons
    first = next(EvtxQuery(path).events(count=1))
    assert first.format == "evtx" and first.xml is not None and "<EventRecordID>" in first.xml
