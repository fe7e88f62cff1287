"""JSON lines written from columns against the record-by-record writer: every corpus trace byte for
byte (the lines are the contract: ``dump --json``'s keys and values, in its order and spelling, so
the whole text is compared, not parsed values), with a selection, and the summaries alike."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer.index import build_index_data
from openetw.export.jsonl import export_jsonl
from openetw.export.jsonl_columns import export_jsonl_from_columns
from openetw.export.pipeline import ExportSummary
from openetw.export.source import Selection, merged_records, open_inputs
from tests.conftest import corpus_path
from tests.export.conftest import ETL_FILES, registry
from tests.native import cases


def _lines(source: Path, way: str, selection: Selection) -> tuple[str, dict[str, Any], bool]:
    readers = open_inputs([str(source)])
    summary = ExportSummary(inputs=[str(source)], output="-", format="jsonl")
    out = io.StringIO()
    try:
        if way == "records":
            export_jsonl(readers, merged_records(readers), registry(), out, summary, selection=selection)
            used = True
        else:
            used = export_jsonl_from_columns(readers[0], registry(), out, summary, selection=selection)
    finally:
        for reader in readers:
            reader.close()
    facts = summary.as_json()
    del facts["seconds"]
    return out.getvalue(), facts, used


# net.4.5.2's CLR events carry messages and go record by record both ways (a minute of the record
# writer); the longer traces are compared over their first LIMIT records (a time window)
COMPARED = [name for name in ETL_FILES if name != "perfview/net.4.5.2.x64.etl"]
LIMIT = 6000


def _selection(source: Path) -> Selection:
    times = np.sort(build_index_data(str(source)).records["filetime"])
    return Selection() if len(times) <= LIMIT else Selection(end=int(times[LIMIT]))


@pytest.mark.parametrize("name", COMPARED)
def test_each_corpus_trace_gives_the_record_writers_lines(name: str) -> None:
    source = corpus_path("etl", name)
    selection = _selection(source)
    got, got_facts, used = _lines(source, "columns", selection)
    assert used  # every corpus trace compared here is one the columns write
    expected, expected_facts, _ = _lines(source, "records", selection)
    assert got.count("\n") == expected.count("\n") > 0
    assert got == expected
    assert got_facts == expected_facts


@pytest.mark.parametrize(
    "selection",
    [Selection(providers=("Windows Kernel",)), Selection(start=129_328_528_800_000_000, end=129_328_528_900_000_000)],
    ids=["provider name", "time window"],
)
def test_a_selection_keeps_the_same_lines(selection: Selection) -> None:
    source = corpus_path("etl", "tx", "Process.etl")
    got, got_facts, used = _lines(source, "columns", selection)
    expected, expected_facts, _ = _lines(source, "records", selection)
    assert used and 0 < expected_facts["rows"] < expected_facts["records_read"]
    assert got == expected
    assert got_facts == expected_facts


@pytest.mark.parametrize("seed", range(2))
def test_damaged_traces_give_the_same_lines_or_are_left_to_the_record_writer(seed: int, tmp_path: Path) -> None:
    name = ("tx/HTTP_Server.etl", "tx/Process.etl")[seed % 2]
    source = tmp_path / "damaged.etl"
    source.write_bytes(cases.mutated(corpus_path("etl", name).read_bytes(), seed, flips=24, keep=0x2000))
    got, got_facts, used = _lines(source, "columns", _selection(source))
    if not used:
        assert got == "" and got_facts["rows"] == 0
        return
    expected, expected_facts, _ = _lines(source, "records", _selection(source))
    assert got == expected
    assert got_facts == expected_facts


def test_text_columns_are_escaped_as_json_dumps_escapes_them() -> None:
    import json

    import pyarrow as pa

    from openetw.export import row_text as T
    from openetw.export.jsonl_columns import _LinesWriter

    texts = ["plain", "C:\\Windows\\System32\\ntdll.dll", 'say "hi"', "caf\u00e9 \\ x", "tab\there", None, "", "\\\\server\\share", "\x7f"]
    array = pa.array(texts, type=pa.string())
    for column in (array, array.slice(1, 5)):
        writer = _LinesWriter(pa, io.StringIO())
        valid = np.asarray([value is not None for value in column.to_pylist()])
        piece = writer._strings(column, b"", valid, b"null")
        expected = b"".join(b"null" if value is None else json.dumps(value).encode("ascii") for value in column.to_pylist())
        assert T.rows(len(column), [piece], b"") == expected
