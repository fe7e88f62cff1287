"""The CLI's conventions: --start/--end, one line per record, trace's messages as dump's,
providers named from manifests in info, listings as one JSON document, progress on a terminal."""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from pathlib import Path

import pytest

from openetw.cli import progress
from openetw.cli.main import main
from openetw.cli.time_options import TimeBound, parse_time_bound
from openetw.controller.live import LiveFormatter
from openetw.errors import InvalidArgument
from openetw.etl import EtlReader
from openetw.etl.build import build_event_record
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.events.registry import build_registry
from tests.conftest import corpus_path

PRIMITIVE = str(corpus_path("etl", "perfview", "primitive-types.etl"))  # starts 14:59:32.857851; events at +2.94 .. +4.63 s
DRIVER = Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml"
DRIVER_GUID = uuid.UUID("b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("text", "bound"), [
    ("2.5", TimeBound(seconds=2.5)),
    ("0", TimeBound(seconds=0.0)),
    ("2021-09-09T14:59:36Z", TimeBound(filetime=132756731760000000)),
    ("2021-09-09T14:59:36", TimeBound(filetime=132756731760000000)),
    ("2021-09-09T16:59:36+02:00", TimeBound(filetime=132756731760000000)),
])  # fmt: skip
def test_time_bounds(text: str, bound: TimeBound) -> None:
    assert parse_time_bound(text) == bound


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "yesterday", "", "2021-13-01"])
def test_bad_time_bounds(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_time_bound(text)


@pytest.mark.parametrize("window", [["--start", "3", "--end", "4.2"], ["--start", "2021-09-09T14:59:36Z", "--end", "2021-09-09T14:59:37.2Z"]])
def test_dump_and_report_keep_the_window(window: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", "--json", *window, PRIMITIVE)
    times = [json.loads(line)["time"] for line in out.splitlines()]
    assert code == 0 and times == ["2021-09-09T14:59:36.2391104Z", "2021-09-09T14:59:36.6718531Z", "2021-09-09T14:59:37.0482590Z"]
    code, out, _ = run(capsys, "report", "--json", *window, PRIMITIVE)
    summary = json.loads(out)
    assert (code, summary["records"], summary["first_time"], summary["last_time"]) == (0, 3, times[0], times[-1])
    code, out, _ = run(capsys, "report", "--format", "csv", *window, PRIMITIVE)
    assert code == 0 and len(out.splitlines()) == 1 + 3  # the header row and three events


def _driver_trace(path: Path, name: str) -> None:
    """One StartEvent of the Sample Driver whose device name is ``name``."""
    clock = linux_trace_clock()
    payload = struct.pack("<H", len(name) * 2) + name.encode("utf-16-le") + b"\0\0" + struct.pack("<I", 0)
    record = build_event_record(provider_id=DRIVER_GUID, id=1, channel=8, level=4, opcode=1, keyword=1 << 63,
                                timestamp=time.monotonic_ns(), pid=7, tid=7, user_data=payload)  # fmt: skip
    with EtlWriter(str(path), header=new_logfile_header(clock=clock)) as writer:
        writer.write(record)


def test_one_line_per_record_and_trace_shows_the_message_as_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "drv.etl"
    _driver_trace(path, "\\Device\\Two\nLines\x1b")
    code, out, _ = run(capsys, "dump", "--manifest", str(DRIVER), "--no-installed", str(path))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2  # the logfile header record and the event
    assert "name=\\Device\\Two\\nLines\\x1b" in lines[1] and lines[1].endswith(' "Driver Loaded"')
    with EtlReader(str(path)) as reader:
        (event,) = [r for r in reader if r.kind == "event"]
        shown = LiveFormatter(build_registry([str(DRIVER)], installed=False)).format(event)
    assert "\n" not in shown and "\\Device\\Two\\nLines\\x1b" in shown and shown.endswith(' "Driver Loaded"')


def test_info_names_providers_from_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(corpus_path("etl", "tx", "HTTP_Server.etl"))
    manifest = str(corpus_path("etl", "manifests", "tx", "HTTP_Server.man"))
    code, out, _ = run(capsys, "info", "--json", "--no-installed", "--manifest", manifest, path)
    providers = {p["provider"]: p.get("name") for p in json.loads(out)["providers"]}
    assert code == 0 and providers["dd5ef90a-6398-47a4-ad34-4dcecdef795f"] == "Microsoft-Windows-HttpService"


def test_listings_are_one_json_document_and_streams_are_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    # The driver's manifest has a System channel: installing it would start the machine's service.
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    for argv in (["manifest", "list"], ["manifest", "install", str(DRIVER)], ["info", PRIMITIVE, PRIMITIVE],
                 ["relog", "-o", str(tmp_path / "r.etl"), PRIMITIVE], ["report", PRIMITIVE]):  # fmt: skip
        code, out, err = run(capsys, *argv, "--json")
        assert code == 0, err
        json.loads(out)  # one document, whatever its size
    code, out, _ = run(capsys, "manifest", "validate", "--json", str(DRIVER), str(DRIVER))
    assert code == 0 and [json.loads(line)["ok"] for line in out.splitlines()] == [True, True]


def test_progress_only_on_a_terminal_and_never_with_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert progress.show_progress(False) and not progress.show_progress(True)
    monkeypatch.setattr("sys.stdout", Terminal())
    assert not progress.show_progress(False) and progress.show_progress(False, output_is_stdout=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not progress.show_progress(False, output_is_stdout=False)
    with EtlReader(PRIMITIVE) as reader:
        records = list(progress.with_progress(reader, [reader], True))
    assert len(records) == 7

