"""Every command that reads a trace leaves the trace's folder as it was, writable or not (an
index goes into the user's cache, or nowhere with --no-index); --index-beside opts in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openetw.cli.main import main
from tests.consumer.helpers import every_kind, write_etl

READERS = ("dump", "report", "info", "export", "sql", "trace", "viewer", "probe", "relog")
NEEDS = {"sql": ("duckdb", "pyarrow"), "viewer": ("starlette", "uvicorn")}  # their extras
COUNT_PROBE = "etw::: { @n = count(); }"


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture(params=["writable", "read-only"])
def evidence(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "evidence"
    folder.mkdir()
    path = write_etl(folder / "case.etl", every_kind(80))
    if request.param == "read-only":
        folder.chmod(0o555)
    try:
        yield path
    finally:
        folder.chmod(0o755)


def _need_extras(name: str) -> None:
    """Skip (never under CI) when the command's extra is not installed."""
    for module in NEEDS.get(name, ()):
        try:
            __import__(module)
        except ImportError:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"openetw {name} needs {module}, which is not installed")


def _in_process(*args: object) -> int:
    return main([str(a) for a in args])


def _viewer(*args: object) -> None:
    """Run ``openetw viewer`` until every file it was given is shown, then stop it."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    child = subprocess.Popen([sys.executable, "-m", "openetw", "viewer", "--no-browser", "--json", *map(str, args)],
                             stdout=subprocess.PIPE, env=env, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the viewer printed no URL"
        started = json.loads(line)
        with urllib.request.urlopen(started["url"], timeout=30) as exchanged:  # the one-time token, for a session
            cookie = exchanged.headers["Set-Cookie"].split(";")[0]
            csrf = exchanged.headers["Refresh"].partition("#csrf=")[2]
        request = urllib.request.Request(f"http://127.0.0.1:{started['port']}/api/sources", headers={"Cookie": cookie, "X-OpenETW-CSRF": csrf})
        for _ in range(600):
            with urllib.request.urlopen(request, timeout=10) as reply:
                sources = json.load(reply)
            listed = sources.get("sources", sources) if isinstance(sources, dict) else sources
            if listed and all(source["ready"] or source["error"] for source in listed):
                assert not any(source["error"] for source in listed), listed
                return
            time.sleep(0.05)
        raise AssertionError("the viewer did not finish opening its files")
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _command(name: str, trace: Path, out: Path) -> Callable[..., None]:
    """A function running command ``name`` over ``trace`` with extra flags, writing under ``out``."""
    _need_extras(name)

    def run(*flags: str) -> None:
        out.mkdir(exist_ok=True)
        runs: dict[str, Callable[[], object]] = {
            "dump": lambda: _in_process("dump", *flags, trace),
            "report": lambda: _in_process("report", *flags, trace),
            "info": lambda: _in_process("info", *flags, trace),
            "export": lambda: _in_process("export", *flags, "--to", "jsonl", "-o", out / "events.jsonl", trace),
            "sql": lambda: _in_process("sql", *flags, "SELECT count(*) FROM events", trace),
            "probe": lambda: _in_process("probe", *flags, "--file", trace, "-q", "-n", COUNT_PROBE),
            "relog": lambda: _in_process("relog", *flags, "-o", out / f"relogged{len(list(out.iterdir()))}.etl", trace),
            "viewer": lambda: _viewer(*flags, trace),
        }
        if name == "trace":
            assert _in_process("trace", *flags, "--help") == 0  # it reads live sessions only: the flag is accepted
            return
        status = runs[name]()
        assert status in (None, 0), (name, flags, status)

    return run


@pytest.mark.parametrize("name", READERS)
def test_no_command_writes_beside_the_trace(name: str, evidence: Path, tmp_path: Path, private_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = evidence.parent
    before = _snapshot(folder)
    run = _command(name, evidence, tmp_path / "out")
    run("--no-index")
    assert _snapshot(folder) == before
    assert _files_under(private_cache / "openetw" / "index") == []  # --no-index: no index anywhere
    run()
    assert _snapshot(folder) == before
    capsys.readouterr()


@pytest.mark.parametrize("name", ["probe", "viewer"])
def test_index_beside_is_an_opt_in(name: str, tmp_path: Path, private_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = write_etl(folder / "mine.etl", every_kind(80))
    trace.chmod(0o640)
    _command(name, trace, tmp_path / "out")("--index-beside")
    beside = Path(str(trace) + ".idx")
    assert sorted(p.name for p in folder.iterdir()) == ["mine.etl", "mine.etl.idx"]
    assert beside.stat().st_mode & 0o777 == 0o640
    assert _files_under(private_cache / "openetw" / "index") == []
    capsys.readouterr()


def test_every_reading_command_takes_no_index(capsys: pytest.CaptureFixture[str]) -> None:
    for name in READERS:
        assert _in_process(name, "--help") == 0
        assert "--no-index" in capsys.readouterr().out, name


@pytest.mark.parametrize("name", ["probe", "viewer"])
def test_no_index_and_index_beside_exclude_each_other(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_etl(tmp_path / "a.etl", every_kind(10))
    argv = ["probe", "--file", str(trace), "-n", COUNT_PROBE] if name == "probe" else ["viewer", "--no-browser", str(trace)]
    assert main([*argv, "--no-index", "--index-beside"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.etl"]
