"""EventPipe traces of the shared corpus, read out of their zips into a temporary folder."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.conftest import corpus_path

SMALL = (
    "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf",
    "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
)


@pytest.fixture(scope="session")
def nettrace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nettrace")


def extract(folder: Path, name: str) -> Path:
    """``name`` (a trace of ``corpus/nettrace``) out of its zip, once per test session."""
    target = folder / name
    if not target.exists():
        with zipfile.ZipFile(corpus_path("nettrace", f"{name}.zip")) as archive:
            archive.extract(name, folder)
    return target


@pytest.fixture(scope="session")
def trace_file(nettrace_dir: Path):  # type: ignore[no-untyped-def]
    return lambda name: extract(nettrace_dir, name)
