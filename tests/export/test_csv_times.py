"""CSV times: the text Arrow's CSV writer gives a UTC time column (``...22:49:57.211809100Z``),
made by a cast; read back as the same times."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from openetw.export.csv_format import CsvWriter


def test_utc_times_are_written_as_arrows_writer_writes_them(tmp_path: Path) -> None:
    nanos = [1_600_123_797_211_809_100, 0, None, -5, 253_402_300_799_999_999_999 // 1000]
    table = pa.table({
        "time": pa.array(nanos, type=pa.timestamp("ns", tz="UTC")),
        "micros": pa.array([None if n is None else n // 1000 for n in nanos], type=pa.timestamp("us", tz="UTC")),
    })  # fmt: skip
    writer = CsvWriter(str(tmp_path))
    writer.write_events(table)
    writer.finish({})
    got = list(csv.reader(io.StringIO((tmp_path / "events.csv").read_text())))
    theirs = io.BytesIO()
    pacsv.write_csv(table, theirs)
    expected = list(csv.reader(io.StringIO(theirs.getvalue().decode())))
    assert got == expected
    assert got[1][0] == "2020-09-14 22:49:57.211809100Z" and got[3] == ["", ""]
    back = pacsv.read_csv(tmp_path / "events.csv")
    assert back.column("time").cast(pa.timestamp("ns", tz="UTC")).equals(table.column("time"))
