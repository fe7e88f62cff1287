"""Where a reader keeps an index: in the user's private, capped cache, never beside the trace
unless asked (a flag or a setting), and then with the trace's privacy."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from openetw.consumer import EtlIndex, UserTrace
from openetw.consumer.index import index_locations
from tests.consumer.helpers import every_kind, write_etl


@pytest.fixture
def xdg_cache(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("OPENETW_INDEX_DIR", raising=False)
    return private_cache / "openetw" / "index"


def _read(path: Path, **options: object) -> int:
    trace = UserTrace(files=[path], manifests=[], **options)  # type: ignore[arg-type]
    trace.start()
    return int(trace.query_stats()["events_read"])


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("writable", [True, False])
def test_a_read_writes_nothing_beside_the_trace_and_keeps_its_index_private(tmp_path: Path, xdg_cache: Path, writable: bool) -> None:
    folder = tmp_path / "evidence"
    folder.mkdir()
    path = write_etl(folder / "a.etl", every_kind(60))
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    folder.chmod(0o755 if writable else 0o555)
    try:
        assert _read(path) == 61
        assert _read(path) == 61  # the cached index is used
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    finally:
        folder.chmod(0o755)
    cached = index_locations(path)[1]
    assert cached.parent == xdg_cache and [p.name for p in xdg_cache.iterdir()] == [cached.name]
    assert _mode(xdg_cache) == 0o700 and _mode(xdg_cache.parent) == 0o700
    assert _mode(cached) == 0o600
    assert not EtlIndex.open(path).built


def test_the_cache_is_capped_and_drops_the_least_recently_used(tmp_path: Path, xdg_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = [write_etl(tmp_path / f"{name}.etl", every_kind(400)) for name in "abc"]
    a, b, c = traces
    for number, path in enumerate((a, b)):
        location = EtlIndex.open(path).index_path
        assert location is not None
        os.utime(location, ns=((number + 1) * 10**15,) * 2)  # a used before b, long ago
    assert not EtlIndex.open(a).built  # a is used again: b is now the least recently used
    sizes = sorted(p.stat().st_size for p in xdg_cache.iterdir())
    assert len(sizes) == 2 and sizes[-1] - sizes[0] < 100
    monkeypatch.setenv("OPENETW_INDEX_CACHE_MB", str((2 * sizes[-1] + 200) / (1 << 20)))  # room for two, not three
    assert EtlIndex.open(c).index_path is not None
    assert sorted(p.name for p in xdg_cache.iterdir()) == sorted(index_locations(p)[1].name for p in (a, c))
    assert EtlIndex.open(b).built


@pytest.mark.parametrize("how", ["setting", "argument"])
@pytest.mark.parametrize("trace_mode", [0o600, 0o640, 0o644, 0o666])
def test_the_index_goes_beside_the_trace_when_asked_with_the_traces_privacy(
    tmp_path: Path, xdg_cache: Path, monkeypatch: pytest.MonkeyPatch, how: str, trace_mode: int,
) -> None:  # fmt: skip
    path = write_etl(tmp_path / "a.etl", every_kind(60))
    path.chmod(trace_mode)
    options = {}
    if how == "setting":
        monkeypatch.setenv("OPENETW_INDEX_BESIDE", "1")
    else:
        options["index_beside"] = True
    assert _read(path, **options) == 61
    beside = Path(str(path) + ".idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.etl", "a.etl.idx"]
    assert _mode(beside) == trace_mode & 0o644
    assert not xdg_cache.exists() or not list(xdg_cache.iterdir())
    assert not EtlIndex.open(path).built  # believed next time (nobody else may write it)


def test_an_index_already_beside_the_trace_is_read_and_checked_never_rewritten(tmp_path: Path, xdg_cache: Path) -> None:
    path = write_etl(tmp_path / "a.etl", every_kind(60))
    beside = EtlIndex.open(path, beside=True).index_path
    assert beside == Path(str(path) + ".idx")
    index = EtlIndex.open(path)
    assert not index.built and index.index_path == beside  # reading it is a read
    damaged = bytearray(beside.read_bytes())
    damaged[len(damaged) // 2] ^= 0x10
    beside.write_bytes(bytes(damaged))
    assert _read(path) == 61
    assert beside.read_bytes() == bytes(damaged)  # not repaired in place: the index is rebuilt in the cache
    assert index_locations(path)[1].exists()
