"""``openetw report`` and the decoding ``dump``, run in-process: formats, manifests, exit codes."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.report import EVENT_NAMESPACE
from tests.conftest import corpus_path

PRIMITIVE = ("perfview", "primitive-types.etl")
HTTP = ("tx", "HTTP_Server.etl")
GCEVENTS = ("perfview", "gcevents.etl")
SUMMARY_KEYS = {"records", "decoded", "undecoded_providers", "events_lost", "providers"}


@pytest.fixture(autouse=True)
def no_installed_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "store"))


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def http_manifest() -> Path:
    return corpus_path("etl", "manifests", "tx", "HTTP_Server.man")


def test_report_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "report", "--help")
    assert code == 0 and "--format" in out and "perfview" in out


def test_summary_json_counts_every_record(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *HTTP)
    code, out, err = run(capsys, "report", "--json", path)
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert SUMMARY_KEYS <= set(summary)
    code, info, _ = run(capsys, "info", "--json", path)
    assert summary["records"] == json.loads(info)["records"] == 2042
    assert summary["decoded"] == 1  # the logfile header; nothing knows HttpService without its manifest
    assert summary["undecoded_providers"] == {"dd5ef90a-6398-47a4-ad34-4dcecdef795f": 2041}
    code, out, _ = run(capsys, "report", "--json", "--manifest", http_manifest(), path)
    with_manifest = json.loads(out)
    assert with_manifest["decoded"] == 2042 and with_manifest["undecoded_providers"] == {}


def test_summary_reports_events_lost(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "report", "--json", corpus_path("etl", "etl-parser", "AMSITrace.etl"))
    assert code == 0
    assert json.loads(out)["events_lost"] == 3


def test_summary_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "report", corpus_path("etl", *PRIMITIVE))
    assert code == 0
    assert "records        7   decoded 7 (100.0%)" in out
    assert "PrimitiveTypesTest" in out


def test_csv_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "events.csv"
    code, out, err = run(capsys, "report", "--format", "csv", "-o", output, corpus_path("etl", *PRIMITIVE))
    assert (code, out, err) == (0, "", "")
    rows = list(csv.reader(io.StringIO(output.read_text(encoding="utf-8"))))
    assert rows[0][:3] == ["Time", "Provider", "Event"]
    assert len(rows) == 8
    assert rows[-1][2] == "PrimitiveTypesTest" and "string_type=Jupiter" in rows[-1][-1]


def test_xml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "report", "--format", "xml", "--manifest", http_manifest(), corpus_path("etl", *HTTP))
    assert code == 0
    root = ET.fromstring(out)
    events = root.findall(f"{{{EVENT_NAMESPACE}}}Event")
    assert len(events) == 2042
    assert events[5].find(f"{{{EVENT_NAMESPACE}}}EventData") is not None


def test_json_lines_carry_process_names(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = corpus_path("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml")
    code, out, _ = run(capsys, "report", "--format", "json", "--manifest", manifest, corpus_path("etl", "tx", "Process.etl"))
    assert code == 0
    objects = [json.loads(line) for line in out.splitlines()]
    assert len(objects) == 10344
    assert all("properties" in item for item in objects)
    assert sum(1 for item in objects if "process_name" in item) > 1000


def test_perfview_matches_the_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    manifests = corpus_path("manifests")
    code, out, err = run(
        capsys, "report", "--format", "perfview", corpus_path("etl", *GCEVENTS),
        "--manifest", manifests / "perfview" / "ClrEtwAll.man", "--manifest", manifests / "dotnet-runtime",
    )
    assert (code, err) == (0, "")
    baseline = corpus_path("etl", "baselines", "perfview", "gcevents.baseline.txt").read_text(encoding="utf-8-sig")
    assert out.splitlines() == baseline.splitlines()


def test_a_manifest_that_is_not_there_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "report", "--json", "--manifest", tmp_path / "absent.man", corpus_path("etl", *PRIMITIVE))
    assert (code, out) == (2, "")
    assert err.startswith("openetw: error:") and "absent.man" in err and "does not exist" in err and err.count("\n") == 1


def test_missing_file_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "report", tmp_path / "absent.etl")
    assert code == 2 and out == ""
    assert err.strip().startswith("openetw: error:") and len(err.strip().splitlines()) == 1


def test_damaged_file_reports_what_it_read_then_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = corpus_path("etl", *HTTP).read_bytes()
    path = tmp_path / "cut.etl"
    path.write_bytes(data[: len(data) // 2 + 100])
    code, out, err = run(capsys, "report", "--json", path)
    assert code == 2
    assert 0 < json.loads(out)["records"] < 2042
    assert len(err.strip().splitlines()) == 1 and "ends inside" in err


# -- dump decodes -------------------------------------------------------------------------------------
def test_dump_lines_show_decoded_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", corpus_path("etl", *PRIMITIVE))
    assert code == 0
    last = out.splitlines()[-1]
    assert " pid=33984 tid=21768 cpu=2 size=374 " in last
    assert "{string_type=Jupiter; boolean_type=true;" in last


def test_dump_json_has_properties_and_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = corpus_path("etl", *HTTP)
    code, out, _ = run(capsys, "dump", "--json", path)
    objects = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(objects) == 2042
    assert sum(1 for item in objects if "properties" in item) == 1  # the logfile header only
    code, out, _ = run(capsys, "dump", "--json", "--manifest", http_manifest(), path)
    objects = [json.loads(line) for line in out.splitlines()]
    decoded = [item for item in objects if "properties" in item]
    assert len(decoded) == 2042 and not any("errors" in item for item in decoded)
    assert all(item["provider_name"] == "Microsoft-Windows-HttpService" for item in decoded[1:])
    values = [value for item in decoded for value in item["properties"].values()]
    assert all(isinstance(value, (int, str, bool, list, dict, float)) or value is None for value in values)
    # A property after Parse's URL: the URL (logged without its NUL) takes every byte left.
    code, out, _ = run(capsys, "dump", "--json", "--manifest", http_manifest_with_a_field_after_the_url(tmp_path), path)
    failed = [item for item in map(json.loads, out.splitlines()) if "errors" in item]
    assert code == 0 and len(failed) == 291
    assert all(item["errors"] == {"Status": "UINT32 needs 4 bytes, 0 left in the payload"} for item in failed)
    assert all(item["properties"]["Url"].startswith("http://") for item in failed)


def http_manifest_with_a_field_after_the_url(tmp_path: Path) -> Path:
    text = http_manifest().read_text(encoding="utf-8")
    parse = (
        '<data name="HttpVerb" inType="win:UInt32" outType="xs:unsignedInt"></data>\n\t\t\t\t'
        '<data name="Url" inType="win:UnicodeString" outType="xs:string"></data>'
    )
    assert text.count(parse) == 1
    changed = tmp_path / "HTTP_Server.man"
    changed.write_text(text.replace(parse, parse + '\n\t\t\t\t<data name="Status" inType="win:UInt32"></data>'), encoding="utf-8")
    return changed


def test_dump_shows_the_message_with_its_inserts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", "--json", "--limit", 40, "--manifest", http_manifest(), corpus_path("etl", *HTTP))
    assert code == 0
    messages = [item["message"] for item in map(json.loads, out.splitlines()) if item.get("message")]
    assert messages and not any("%1" in message for message in messages)
    code, out, _ = run(capsys, "dump", "--limit", 40, "--manifest", http_manifest(), corpus_path("etl", *HTTP))
    assert sum(1 for line in out.splitlines() if line.endswith('"')) == len(messages)
