"""The Sample Driver example: its checked-in module is what ``openetw mc`` makes of its manifest,
and the program's events reach real sessions, each session getting what its rule admits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.controller import Session
from openetw.mc import load_module
from openetw.session import EventFilters
from openetw.tdh import decode_all, format_event_message
from tests.service.harness import ServiceProcess, read_events

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_driver"
GUID = "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6"


def test_the_checked_in_module_is_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["mc", str(EXAMPLE / "evntdrv.xml"), "-o", str(EXAMPLE / "generated"), "--check"])
    out, err = capsys.readouterr()
    assert code == 0, f"run `openetw mc examples/sample_driver/evntdrv.xml -o examples/sample_driver/generated`\n{out}{err}"


def test_the_program_writes_its_events_into_each_session_as_its_rule_admits(service: ServiceProcess, tmp_path: Path) -> None:
    events = load_module((EXAMPLE / "generated" / "sample_driver.py").read_text(), "sample_driver")
    schemas = {s.event_id: s for s in events.schemas()}
    everything, only_a, other_keyword = tmp_path / "all.etl", tmp_path / "a.etl", tmp_path / "kw.etl"
    with (
        Session.start("Everything", output=everything, providers=[GUID]),
        Session.start("OnlyA", output=only_a, providers=[(GUID, {"filters": EventFilters(frozenset({2}))})]),
        Session.start("OtherKeyword", output=other_keyword, providers=[(GUID, {"any": 0x1})]),
    ):
        run = subprocess.run(
            [sys.executable, str(EXAMPLE / "sample_driver.py"), "--requests", "4", "--interval", "0"],
            capture_output=True, text=True, timeout=60, env=dict(os.environ),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    assert run.stdout.count("written") - run.stdout.count("not written") == 6
    records = read_events(everything)
    assert [r.id for r in records] == [1, 2, 2, 2, 2, 3]
    assert {(r.channel, r.level, r.keyword) for r in records} == {(8, 4, 1 << 63)}
    assert [r.opcode for r in records] == [1, 0, 0, 0, 0, 2]
    decoded = [decode_all(schemas[r.id], r.user_data) for r in records]
    assert dict(decoded[0].items()) == {"DeviceNameLength": 32, "name": "\\Device\\EventDrv", "Status": 0}
    assert isinstance(decoded[-1]["DeviceObjPtr"], int)
    assert [format_event_message(d) for d in decoded] == ["Driver Loaded"] + ["IRP A Occurred"] * 4 + ["Driver Unloaded"]
    assert [r.id for r in read_events(only_a)] == [2, 2, 2, 2]
    assert read_events(other_keyword) == []  # keyword 0x1 is not the System channel's bit
