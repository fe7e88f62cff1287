"""Files the CLI writes from a trace or a log take their source's privacy: created with the
source's permission bits at most, from the moment they exist (no chmod of a new file), and an
existing output is narrowed before anything is written to it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogStore
from tests.consumer.helpers import every_kind, write_etl
from tests.eventlog.events import private_logs


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, int]]:
    """Records every chmod: a new output must need none."""
    calls: list[tuple[object, int]] = []
    real_fchmod, real_chmod = os.fchmod, os.chmod

    def fchmod(fd: int, mode: int) -> None:
        calls.append((fd, mode))
        real_fchmod(fd, mode)

    def chmod(path: object, mode: int, **options: object) -> None:
        calls.append((path, mode))
        real_chmod(path, mode, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fchmod", fchmod)
    monkeypatch.setattr(os, "chmod", chmod)
    return calls


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _trace(folder: Path, name: str, mode: int) -> Path:
    path = write_etl(folder / name, every_kind(40))
    path.chmod(mode)
    return path


@pytest.mark.parametrize("suffix", [".etl", ".evtx"])
@pytest.mark.parametrize("modes", [(0o600,), (0o640,), (0o644,), (0o644, 0o600), (0o664, 0o644)])
def test_relog_output_takes_the_inputs_privacy(tmp_path: Path, suffix: str, modes: tuple[int, ...], no_chmod: list, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = [_trace(tmp_path, f"in{n}.etl", mode) for n, mode in enumerate(modes)]
    expected = 0o666 & ~0o022
    for mode in modes:
        expected &= mode
    out = tmp_path / f"out{suffix}"
    no_chmod.clear()
    assert main(["relog", *map(str, inputs), "-o", str(out)]) == 0, capsys.readouterr().err
    assert _mode(out) == expected
    assert no_chmod == []  # created with its mode, never changed after


def test_relog_over_an_existing_open_file_narrows_it_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _trace(tmp_path, "secret.etl", 0o600)
    out = tmp_path / "out.etl"
    out.write_bytes(b"old")
    out.chmod(0o644)
    assert main(["relog", str(source), "-o", str(out)]) == 0, capsys.readouterr().err
    assert _mode(out) == 0o600


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LogStore:
    return private_logs(tmp_path, monkeypatch, 10)


@pytest.mark.parametrize("log_mode", [0o600, 0o640, 0o644])
@pytest.mark.parametrize("verb", ["export", "clear"])
def test_log_export_and_backup_take_the_logs_privacy(
    logs: LogStore, tmp_path: Path, log_mode: int, verb: str, no_chmod: list, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    logs.path("Application").chmod(log_mode)
    out = tmp_path / "out.evtx"
    no_chmod.clear()
    argv = ["log", "export", "Application", str(out)] if verb == "export" else ["log", "clear", "Application", "--backup", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    assert out.stat().st_size > 0
    assert _mode(out) == log_mode & ~0o022
    assert no_chmod == []


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{module} is not installed")


@pytest.mark.parametrize("trace_mode", [0o600, 0o640, 0o644])
@pytest.mark.parametrize("fmt", ["jsonl", "chrome", "parquet", "csv"])
def test_export_output_takes_the_traces_privacy(tmp_path: Path, trace_mode: int, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    if fmt in ("parquet", "csv"):
        _need("pyarrow")
    trace = _trace(tmp_path, "in.etl", trace_mode)
    out = tmp_path / ("out" if fmt in ("parquet", "csv") else f"out.{fmt}")
    assert main(["export", str(trace), "--to", fmt, "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    made = [out, *out.rglob("*")] if out.is_dir() else [out]
    assert len(made) > 1 or out.is_file()
    for path in made:
        expected = trace_mode & ~0o022
        if path.is_dir():
            expected |= 0o700 | (0o050 if trace_mode & 0o040 else 0) | (0o005 if trace_mode & 0o004 else 0)
            expected &= ~0o022
        assert _mode(path) == expected, path
