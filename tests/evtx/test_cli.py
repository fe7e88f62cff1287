"""``openetw info``, ``dump``, ``report`` and ``relog`` on ``.evtx`` files, run in-process."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.evtx import EvtxReader
from tests.conftest import corpus_path
from tests.evtx.readers import crate_records
from tests.evtx.xmlnorm import canonical, first_difference


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_info_shows_header_facts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", "--json", corpus_path("evtx", "system.evtx"))
    assert code == 0
    facts = json.loads(out)
    assert facts["format"] == "evtx" and facts["header_chunks"] == 3 and facts["chunks"] == 15
    assert facts["dirty"] is True and facts["full"] is False and facts["records"] == 1881
    assert facts["first_record_id"] <= facts["last_record_id"] and facts["first_time"] < facts["last_time"]
    assert facts["damaged_chunks"] == []
    code, out, _ = run(capsys, "info", corpus_path("evtx", "system.evtx"))
    assert "chunks         15 (header says 3)" in out and "flags 0x1 (dirty)" in out


def test_info_on_damage_reports_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "info", "--json", corpus_path("evtx", "sample_with_a_bad_chunk_magic.evtx"))
    facts = json.loads(out)
    assert facts["damaged_chunks"] == [6, 10] and facts["records"] >= 270 and facts["crc_mismatches"] == 3
    assert code == 2 and "chunk 6, chunk header: signature" in err


def test_dump_and_report(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("evtx", "security.evtx")
    code, out, _ = run(capsys, "dump", "--json", "--limit", "2", path)
    assert code == 0
    second = json.loads(out.splitlines()[1])
    assert second["kind"] == "evtx" and second["record_id"] == 2 and second["id"] == 4624
    assert second["provider_name"] == "Microsoft-Windows-Security-Auditing" and second["user_data_length"] == 0
    assert second["properties"]["TargetUserName"] == "SYSTEM" and second["channel_name"] == "Security"
    code, out, _ = run(capsys, "dump", "--limit", "2", path)
    assert "Microsoft-Windows-Security-Auditing id=4624" in out and "TargetUserName=SYSTEM" in out
    code, out, _ = run(capsys, "report", "--json", path)
    summary = json.loads(out)
    assert code == 0 and summary["records"] == 2261
    code, out, _ = run(capsys, "report", "--format", "xml", corpus_path("evtx", "new-user-security.evtx"))
    events = ET.fromstring(out)
    expected = [r.xml() for r in EvtxReader(corpus_path("evtx", "new-user-security.evtx").read_bytes()).records()]
    assert code == 0 and len(events) == len(expected) == 4
    assert [canonical(ET.tostring(e, encoding="unicode")) for e in events] == [canonical(x) for x in expected]


def test_relog_to_evtx_from_etl_and_evtx(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    output = tmp_path / "out.evtx"
    inputs = [corpus_path("evtx", "pyevtx_issue_39.evtx"), corpus_path("etl", "tx", "HTTP_Server.etl")]
    code, out, _ = run(capsys, "relog", *inputs, "-o", output)
    assert code == 0 and out.startswith(f"wrote {output}: ")
    reader = EvtxReader(output.read_bytes())
    records = list(reader.records())
    assert not reader.errors and not reader.header.dirty
    assert len(records) == 394 + 2042  # every .evtx record, every record of the .etl (its logfile header too)
    times = [r.header.time_created for r in records]
    assert times == sorted(times)
    crate = dict(crate_records(output))
    assert len(crate) == len(records)
    for record in records[::50]:
        assert first_difference(canonical(record.xml()), canonical(crate[record.record_id])) is None
    code, out, _ = run(capsys, "info", "--json", output)
    assert json.loads(out)["records"] == len(records)


def test_dump_prints_values_as_windows_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", corpus_path("evtx", "security.evtx"))
    line = next(line for line in out.splitlines() if " id=4624 " in line)
    assert code == 0 and "SubjectLogonId=0x0;" in line and "TargetLogonId=0x3e7;" in line and "TargetUserSid=S-1-5-18;" in line
