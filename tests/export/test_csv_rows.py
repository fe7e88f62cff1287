"""CSV rows written by the compiled core's row writer: the bytes Arrow's CSV writer gives, for the
types it takes (integers, booleans, text plain or dictionary, nulls, quotes, line breaks), and for
every table of corpus layouts; other types are left to Arrow's writer."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from openetw.export.csv_format import CsvWriter, csv_rows
from tests.export.conftest import ETL_FILES


def _arrow(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pacsv.write_csv(table, out, write_options=pacsv.WriteOptions(include_header=False))
    return out.getvalue()


def _tricky() -> pa.Table:
    codes = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 2, 0], type=pa.int32()), pa.array(["a", 'b"q', ""]))
    return pa.table({
        "i": pa.array([1, -2, None, 2**62, -(2**63)], pa.int64()), "u": pa.array([2**64 - 1, 0, 5, None, 7], pa.uint64()),
        "u8": pa.array([1, 2, 3, 255, None], pa.uint8()), "i16": pa.array([-1, None, -32768, 7, 0], pa.int16()),
        "b": pa.array([True, False, None, True, False]),
        "s": pa.array(["x", 'he said "hi"', None, "", "line\nbreak,comma"]), "d": codes,
        "e": pa.array(["\u00e9", "\u4e2d\U0001f600", None, "a\rb", "\t"]),
    })  # fmt: skip


def test_rows_are_arrows_bytes_for_the_types_it_takes() -> None:
    table = _tricky()
    assert csv_rows(pa, table) == _arrow(table)
    for start, length in ((1, 3), (4, 1), (0, 0)):
        piece = table.slice(start, length)
        assert csv_rows(pa, piece) == _arrow(piece)
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    assert csv_rows(pa, chunked) == _arrow(table)


def test_other_types_are_left_to_arrow(tmp_path: Path) -> None:
    table = pa.table({"n": pa.array([1, 2], pa.int32()), "x": pa.array([0.1, 1e300])})
    assert csv_rows(pa, table) is None
    writer = CsvWriter(str(tmp_path))
    writer.write_events(_tricky())
    nulls = pa.table({name: pa.nulls(1, column.type) for name, column in zip(_tricky().column_names, _tricky().columns, strict=True)})
    writer.write_events(nulls)
    writer.write_table(type("Info", (), {"path": "T/x.csv"})(), table)
    writer.finish({})
    expected = io.BytesIO()
    pacsv.write_csv(pa.concat_tables([_tricky(), nulls]), expected)
    assert (tmp_path / "events.csv").read_bytes() == expected.getvalue()
    theirs = io.BytesIO()
    pacsv.write_csv(table, theirs)
    assert (tmp_path / "T" / "x.csv").read_bytes() == theirs.getvalue()


CORPUS_LAYOUTS = [
    "perfview/diaghub-dotnetcore3.1-win-x64-diagsession/diaghub.etl", "perfview/primitive-types.etl", "tx/HTTP_Server.etl",
    "krabsetw/powershell.etl",
]  # fmt: skip


@pytest.mark.parametrize("name", [name for name in CORPUS_LAYOUTS if name in ETL_FILES])
def test_every_table_of_corpus_layouts_gives_arrows_bytes(name: str, exported, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layout, _ = exported(name)
    flatten = CsvWriter(str(tmp_path))._flat
    checked = 0
    for path in sorted(layout.rglob("*.parquet")):
        table = flatten(pq.read_table(path))
        mine = csv_rows(pa, table)
        if mine is not None:
            assert mine == _arrow(table), path
            checked += 1
    assert checked
