"""Exports of the corpus, made once per test session and shared by the table and SQL tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.events.registry import build_registry
from openetw.export import export_files
from tests.conftest import CORPUS, corpus_path

ETL_FILES = sorted(str(path.relative_to(CORPUS / "etl")) for path in (CORPUS / "etl").rglob("*.etl")) if (CORPUS / "etl").exists() else []


def manifests() -> list[str]:
    """The manifests the corpus traces need beside what they carry themselves."""
    return [str(corpus_path("etl", "manifests", "tx", "HTTP_Server.man")), str(corpus_path("manifests", "dotnet-runtime", "ClrEtwAll.man"))]


def registry():  # type: ignore[no-untyped-def]
    return build_registry(manifests(), installed=False)


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``exported(name)``: the Parquet layout of corpus file ``etl/<name>`` (exported once)."""
    made: dict[str, tuple[Path, object]] = {}
    root = tmp_path_factory.mktemp("layouts")

    def get(name: str) -> tuple[Path, object]:
        if name not in made:
            source = corpus_path("etl", name)
            target = root / name.replace("/", "_")
            summary = export_files([str(source)], str(target), "parquet", registry=registry())
            made[name] = (target, summary)
        return made[name]

    return get
