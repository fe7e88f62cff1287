"""Kernel scheduling records cut short (a CSwitch, ReadyThread or SampledProfile whose payload
decodes to fewer fields than the class has) stay ordinary instant events of the timeline: the
export finishes and every record is kept, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.etl.build import build_perfinfo_record, build_system_record
from openetw.export.trace_check import check_file
from tests.consumer.helpers import REFERENCE, write_etl

SHORT = bytes(12)  # far shorter than any of these classes' fields


@pytest.mark.parametrize("fmt", ["chrome", "perfetto"])
def test_short_scheduling_records_are_exported_as_plain_events(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    records = [
        build_system_record(hook_id=0x0524, version=2, timestamp=REFERENCE + 1000, cpu=0, user_data=SHORT),  # CSwitch
        build_system_record(hook_id=0x0532, version=2, timestamp=REFERENCE + 2000, cpu=1, user_data=SHORT),  # ReadyThread
        build_perfinfo_record(hook_id=0x0F2E, timestamp=REFERENCE + 3000, cpu=0, user_data=SHORT),  # SampledProfile
    ]
    trace = write_etl(tmp_path / "short.etl", records)
    out = tmp_path / f"short.{fmt}"
    assert main(["export", str(trace), "--to", fmt, "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert check_file(str(out)).ok
