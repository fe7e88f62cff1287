"""``openetw stacks`` and ``export --to speedscope|pprof|folded`` on PerfView's net.4.5.2 trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from openetw.cli.main import cli
from tests.conftest import corpus_path


@pytest.fixture(scope="module")
def net() -> str:
    return str(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_by_name_text_and_the_named_share(net: str) -> None:
    out = run("stacks", net, "--limit", "3")
    lines = out.splitlines()
    assert lines[0] == "By Name: 6318 samples"
    assert lines[2].endswith("mscorlib!System.DateTime.GetDatePart") and len(lines) == 6
    assert "6318 samples with stacks" in lines[-1] and "in an image" in lines[-1] and "managed" in lines[-1]


def test_views_as_json(net: str) -> None:
    view = json.loads(run("stacks", net, "--json", "--caller-callee", "System.DateTime.get_Now"))
    assert view["caller_callee"]["focus"]["name"] == "mscorlib!System.DateTime.get_Now"
    assert view["caller_callee"]["callers"][0]["name"] == "Test.x64!Test.Program.Main"
    tree = json.loads(run("stacks", net, "--json", "--tree", "--fold", "20", "--process", "Test.x64"))["tree"]
    assert tree["children"][0]["name"] == "Test.x64 (3676)"
    grouped = json.loads(run("stacks", net, "--json", "--group-modules", "--event", "DiskIO/ReadInit"))
    assert grouped["samples"] == 1208 and grouped["by_name"][0]["name"] == "partmgr"  # the partition manager issues the reads


def test_flame_exports(net: str, tmp_path: Path) -> None:
    folded = tmp_path / "net.folded"
    summary = json.loads(run("export", net, "--to", "folded", "-o", str(folded), "--json"))
    assert summary["written"] == summary["samples"] == 6318
    assert sum(int(line.rsplit(" ", 1)[1]) for line in folded.read_text().splitlines()) == 6318
    speedscope = tmp_path / "net.speedscope.json"
    run("export", net, "--to", "speedscope", "-o", str(speedscope), "--start", "0", "--end", "1000")
    assert json.loads(speedscope.read_text())["profiles"][0]["name"].startswith("Test.x64 (3676) thread ")


def test_a_symbols_path_that_is_no_directory_is_refused(net: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["stacks", net, "--symbols", str(tmp_path / "none")])
    assert result.exit_code == 2 and "is not a directory" in result.output
