"""``openetw info``, ``dump`` and ``relog``, run in-process: output, JSON contracts, exit codes."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import build_system_record
from openetw.etl.clock import TraceClock
from openetw.etl.writer import EtlWriter, new_logfile_header
from openetw.guids import format_guid
from tests.conftest import corpus_path

PRIMITIVE = ("perfview", "primitive-types.etl")  # 7 records: 2 system, 5 TraceLogging "solar_system"
LXCORE = ("etl-parser", "lxcore_kernel.etl")
HTTP = ("tx", "HTTP_Server.etl")
GCRUNDOWN = ("perfview", "gcrundownevents.etl")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$")
INFO_KEYS = {
    "records", "os_build", "pointer_size", "clock", "buffers", "buffer_size", "events_lost", "buffers_lost", "compressed", "kinds", "providers",
}
DUMP_KEYS = {"kind", "id", "version", "channel", "level", "opcode", "task", "keyword", "pid", "tid", "cpu", "timestamp", "time", "size"}


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def records_of(path: Path, **options: bool) -> list:  # type: ignore[type-arg]
    with EtlReader(path, strict=False) as reader:
        return list(reader.records(**options))


def assert_one_error_line(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("openetw: error:"), err


# -- help -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["info"], ["dump"], ["relog"]], ids=["openetw", "info", "dump", "relog"])
def test_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith("Usage: openetw")
    if command:
        assert "FILES..." in out


# -- info -----------------------------------------------------------------------------------------
def test_info_json_has_the_contract_keys_and_the_file_facts(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *PRIMITIVE)
    code, out, err = run(capsys, "info", "--json", path)
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert INFO_KEYS <= set(summary)
    assert summary["records"] == 7
    assert summary["os_build"] == 19043
    assert summary["pointer_size"] == 8
    assert summary["clock"] == "QPC"
    assert (summary["buffers"], summary["buffer_size"]) == (2, 8192)
    assert (summary["events_lost"], summary["buffers_lost"], summary["compressed"]) == (0, 0, False)
    assert summary["kinds"] == {"event": 5, "system": 2}
    solar = next(p for p in summary["providers"] if p.get("name") == "solar_system")
    assert solar["records"] == 5
    assert solar["provider"] == "d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615"
    assert sum(p["records"] for p in summary["providers"]) == 7


def test_info_json_is_one_document_listing_every_file(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [corpus_path("etl", *PRIMITIVE), corpus_path("etl", *LXCORE)]
    code, out, _ = run(capsys, "info", "--json", *paths)
    assert code == 0
    summaries = json.loads(out)
    assert [s["path"] for s in summaries] == [str(p) for p in paths]
    assert [s["records"] for s in summaries] == [7, 4]


def test_info_text(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *PRIMITIVE)
    code, out, _ = run(capsys, "info", path)
    assert code == 0
    assert out.splitlines()[0] == str(path)
    assert "build 19043" in out
    assert "records        7" in out
    assert "solar_system (d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615)" in out


# -- dump -----------------------------------------------------------------------------------------
def test_dump_prints_one_line_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *HTTP)
    code, out, err = run(capsys, "dump", path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    records = records_of(path)
    assert len(lines) == len(records) == 2042
    for line, record in zip(lines[:50], records[:50], strict=True):
        assert line.startswith(record.time_iso + " ")
        assert f" pid={record.pid} tid={record.tid} cpu={record.cpu} size={record.size} " in line


@pytest.mark.parametrize("limit", [0, 1, 3, 7, 100])
def test_dump_limit(limit: int, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", "--limit", limit, corpus_path("etl", *PRIMITIVE))
    assert code == 0
    assert len(out.splitlines()) == min(limit, 7)


@pytest.mark.parametrize(
    "provider",
    ["solar_system", "SOLAR_SYSTEM", "d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615", "{D3DD3DD4-AAC2-4E2A-8DD4-A8FB61B77615}"],
)
def test_dump_provider_by_name_or_guid(provider: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", "--json", "--provider", provider, corpus_path("etl", *PRIMITIVE))
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 5
    assert {r["provider_id"] for r in records} == {"d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615"}


def test_dump_provider_that_is_not_there_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "dump", "--provider", "00000000-0000-0000-0000-000000000001", "--provider", "nobody", corpus_path("etl", *PRIMITIVE))
    assert (code, out) == (2, "")
    assert err.startswith("openetw: error: no provider '00000000-0000-0000-0000-000000000001', 'nobody' in ") and err.count("\n") == 1


def test_dump_json_follows_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *HTTP)
    code, out, _ = run(capsys, "dump", "--json", path)
    assert code == 0
    dumped = [json.loads(line) for line in out.splitlines()]
    records = records_of(path)
    assert len(dumped) == len(records)
    for item, record in zip(dumped, records, strict=True):
        assert DUMP_KEYS <= set(item)
        assert item["kind"] == record.kind
        if record.provider_guid_bytes is None:
            assert "provider_id" not in item
        else:
            assert item["provider_id"] == format_guid(record.provider_id) == str(record.provider_id)
            assert item["provider_id"] == item["provider_id"].lower() and "{" not in item["provider_id"]
        if record.kind in ("system", "compact", "perfinfo"):
            assert item["hook_id"] == record.hook_id
        assert (item["id"], item["version"], item["channel"], item["level"]) == (record.id, record.version, record.channel, record.level)
        assert (item["opcode"], item["task"]) == (record.opcode, record.task)
        assert isinstance(item["keyword"], int) and item["keyword"] == record.keyword
        assert (item["pid"], item["tid"], item["cpu"], item["timestamp"], item["size"]) == (
            record.pid, record.tid, record.cpu, record.timestamp, record.size,
        )
        assert ISO_UTC.match(item["time"]) and item["time"] == record.time_iso


def test_dump_time_order(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *HTTP)
    code, out, _ = run(capsys, "dump", "--json", "--time-order", path)
    assert code == 0
    stamps = [json.loads(line)["timestamp"] for line in out.splitlines()]
    assert len(stamps) == 2042
    assert stamps == sorted(stamps)
    code, out, _ = run(capsys, "dump", "--json", path)
    assert [json.loads(line)["timestamp"] for line in out.splitlines()] != stamps  # file order differs


def test_dump_time_order_of_several_files_merges_them_by_wall_clock(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [corpus_path("etl", *PRIMITIVE), corpus_path("etl", *LXCORE)]
    code, out, _ = run(capsys, "dump", "--json", "--time-order", *paths)
    assert code == 0
    times = [json.loads(line)["time"] for line in out.splitlines()]
    assert len(times) == 11
    assert times == sorted(times)


# -- relog ----------------------------------------------------------------------------------------
def test_relog_one_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = corpus_path("etl", *HTTP)
    output = tmp_path / "out.etl"
    code, out, err = run(capsys, "relog", source, "-o", output)
    assert (code, err) == (0, "")
    assert out.startswith(f"wrote {output}: 2042 records")
    back = records_of(output)
    assert len(back) == 2042  # the new logfile header replaces the old one
    original = records_of(source, time_order=True)
    assert sorted(r.raw for r in back[1:]) == sorted(r.raw for r in original[1:])


def test_relog_several_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = [corpus_path("etl", *name) for name in (PRIMITIVE, LXCORE, GCRUNDOWN)]
    output = tmp_path / "merged.etl"
    code, _, err = run(capsys, "relog", *sources, "--output", output, "--buffer-size", 64)
    assert (code, err) == (0, "")
    counts = [len(records_of(path)) for path in sources]
    with EtlReader(output) as reader:
        back = list(reader)
        assert reader.stats.errors == []
        assert reader.header.buffer_size == 64 * 1024
    assert len(back) == sum(counts) - len(sources) + 1
    code, out, _ = run(capsys, "info", "--json", output)
    assert json.loads(out)["records"] == len(back)


def test_relog_refuses_to_overwrite_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "in.etl"
    copy.write_bytes(corpus_path("etl", *LXCORE).read_bytes())
    code, _, _ = run(capsys, "relog", copy, "-o", copy)
    assert code == 2
    assert copy.read_bytes() == corpus_path("etl", *LXCORE).read_bytes()


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["info", "dump", "relog"])
def test_missing_file_is_one_error_line(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["-o", tmp_path / "out.etl"] if command == "relog" else []
    code, out, err = run(capsys, command, tmp_path / "absent.etl", *extra)
    assert code == 2
    assert out == ""
    assert_one_error_line(err)
    assert "absent.etl" in err


@pytest.mark.parametrize("content", [b"", b"not an etl file\n" * 100, b"\xff" * 8192], ids=["empty", "text", "all-ff"])
@pytest.mark.parametrize("command", ["info", "dump", "relog"])
def test_not_an_etl_file_is_one_error_line(command: str, content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.etl"
    path.write_bytes(content)
    extra = ["-o", tmp_path / "out.etl"] if command == "relog" else []
    code, out, err = run(capsys, command, path, *extra)
    assert code == 2
    assert out == ""
    assert_one_error_line(err)
    assert str(path) in err


def _truncated_copy(tmp_path: Path) -> tuple[Path, int]:
    data = corpus_path("etl", *HTTP).read_bytes()
    path = tmp_path / "cut.etl"
    path.write_bytes(data[: len(data) // 2 + 100])
    return path, len(records_of(path))


def test_dump_of_a_damaged_file_prints_the_good_records_then_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, good = _truncated_copy(tmp_path)
    assert 0 < good < 2042
    code, out, err = run(capsys, "dump", path)
    assert code == 2
    assert len(out.splitlines()) == good
    assert_one_error_line(err)
    assert "ends inside" in err


def test_dump_json_of_a_damaged_file_keeps_going_past_a_damaged_buffer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(corpus_path("etl", *HTTP).read_bytes())
    struct.pack_into("<I", data, 5 * 8192, 0)  # buffer 5 says its size is 0
    path = tmp_path / "damaged.etl"
    path.write_bytes(bytes(data))
    code, out, err = run(capsys, "dump", "--json", path)
    assert code == 2
    assert_one_error_line(err)
    assert "buffer 5" in err and "BufferSize" in err
    dumped = [json.loads(line) for line in out.splitlines()]
    assert len(dumped) == len(records_of(path))
    skipped = sum(1 for r in records_of(corpus_path("etl", *HTTP)) if r.buffer_index == 5)
    assert len(dumped) == 2042 - skipped


def test_info_of_a_damaged_file_still_summarizes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, good = _truncated_copy(tmp_path)
    code, out, err = run(capsys, "info", "--json", path)
    assert code == 2
    assert_one_error_line(err)
    summary = json.loads(out)
    assert summary["records"] == good
    assert summary["errors"]


def test_relog_of_a_damaged_file_writes_the_good_records_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, good = _truncated_copy(tmp_path)
    output = tmp_path / "out.etl"
    code, _, err = run(capsys, "relog", path, "-o", output)
    assert code == 2
    assert_one_error_line(err)
    assert len(records_of(output)) == good


def test_dump_of_a_record_whose_time_no_calendar_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "far.etl"
    clock = TraceClock(L.CLOCK_SYSTEM_TIME, 132_000_000_000_000_000, 0, 10_000_000)
    with EtlWriter(path, header=new_logfile_header(clock=clock, buffer_size=4096, cpu_speed_mhz=1000)) as writer:
        writer.write(build_system_record(hook_id=0x0A10, timestamp=2**62))
    code, out, err = run(capsys, "dump", "--json", path)
    assert (code, err) == (0, "")
    far = json.loads(out.splitlines()[-1])
    assert far["time"] == f"FILETIME({132_000_000_000_000_000 + 2**62})"
