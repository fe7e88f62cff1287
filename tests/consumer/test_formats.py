"""The table of trace formats: a file is told by its first bytes, its name only when they say nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.consumer import formats
from openetw.consumer.formats import ETL, EVTX, SourceReader, TraceFormat, open_reader, open_source, trace_format
from openetw.consumer.sources import FileSource, RecordSource
from openetw.etl.reader import EtlReader
from tests.conftest import corpus_path


def test_the_first_bytes_decide_over_the_name(tmp_path: Path) -> None:
    disguised = tmp_path / "log.etl"
    disguised.write_bytes(b"ElfFile\x00" + bytes(56))
    assert trace_format(disguised) is EVTX
    named = tmp_path / "x.evtx"
    named.write_bytes(b"\x00" * 64)  # bytes that are no .evtx: read as .etl, whose reader says what it is not
    assert trace_format(named) is ETL
    assert trace_format(corpus_path("evtx", "Security_short_selected.evtx")) is EVTX


def test_the_name_decides_for_an_empty_or_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.evtx"
    empty.write_bytes(b"")
    assert trace_format(empty) is EVTX
    assert trace_format(tmp_path / "missing.evtx") is EVTX
    assert trace_format(tmp_path / "missing.etl") is ETL


class _Listed(RecordSource):
    def __init__(self, path: str) -> None:
        super().__init__([], name=str(path))


def test_a_registered_format_reaches_every_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "_FORMATS", list(formats._FORMATS))
    listed = TraceFormat(name="listed", description="test", source=f"{__name__}:_Listed", magics=((4, b"LIST"),))
    formats.register_format(listed)
    path = tmp_path / "trace.bin"
    path.write_bytes(b"\x00\x00\x00\x00LIST")
    assert trace_format(path) is listed
    assert isinstance(open_source(path), _Listed)
    reader = open_reader(str(path))
    assert isinstance(reader, SourceReader) and reader.format is listed
    assert list(reader.records()) == [] and reader.stats.errors == []
    assert formats.formats()[-1] is ETL


def test_etl_files_keep_the_etl_reader_and_index_options(tmp_path: Path) -> None:
    path = corpus_path("etl", "perfview", "primitive-types.etl")
    reader = open_reader(str(path))
    try:
        assert isinstance(reader, EtlReader)
    finally:
        reader.close()
    source = open_source(path, index=False)
    assert isinstance(source, FileSource)
