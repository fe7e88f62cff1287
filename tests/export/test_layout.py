"""The Parquet layout of every corpus trace: row counts as ``dump`` counts, typed columns as decoded."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from openetw.cli.naming import RecordNamer
from openetw.etl.reader import EtlReader
from openetw.events.as_json import event_to_json
from openetw.events.decoded import decode_record
from openetw.tdh.context import DecodeContext
from tests.conftest import corpus_path
from tests.export.compare import expected, same
from tests.export.conftest import ETL_FILES, registry

SAMPLE = 1000
_FILETIME_UNIX_TICKS = 116_444_736_000_000_000
# dump --json keys that are columns of the events table as they are (time is compared in ticks)
_SAME_KEYS = ("kind", "provider_id", "provider_name", "event_name", "id", "version", "channel", "level", "opcode",
              "task", "keyword", "hook_id", "pid", "tid", "cpu", "timestamp", "size", "activity_id",
              "related_activity_id", "extended", "pointer_size", "user_data_length", "process_name", "reason")  # fmt: skip


def _dump_pass(name: str, sample: set[int]) -> tuple[int, int, dict[int, tuple[object, dict]]]:
    """What ``dump`` sees: the record count, how many have a schema, and the sampled records
    decoded as ``dump --json`` decodes them (the same registry, in time order)."""
    path = str(corpus_path("etl", name))
    reg = registry()
    context = DecodeContext(reg)
    namer = RecordNamer(reg)
    with_schema = records = 0
    decoded: dict[int, tuple[object, dict]] = {}
    with EtlReader(path, strict=False) as reader:
        for position, record in enumerate(reader.records(time_order=True)):  # dump --time-order's records
            records += 1
            if record.kind != "unknown":
                context.observe(record)
                if context.schema_for(record) is not None:
                    with_schema += 1
            if position in sample:
                event = decode_record(record, reg, context)
                data = event_to_json(event, event.provider_name or namer.provider_name(record), event.event_name or namer.event_name(record))
                data["_filetime"] = record.filetime if record.kind != "unknown" else None
                decoded[position] = (event, data)
    return records, with_schema, decoded


@pytest.mark.parametrize("name", ETL_FILES)
def test_layout_matches_dump_and_decoding(name: str, exported) -> None:  # type: ignore[no-untyped-def]
    directory, summary = exported(name)
    events = pq.read_table(directory / "events.parquet")
    total = events.num_rows
    sample = set(random.Random(name).sample(range(total), min(SAMPLE, total)))
    dumped, with_schema, decoded = _dump_pass(name, sample)

    # row counts: the events table holds every record dump shows; the event tables the decodable ones
    assert total == dumped == summary.records == summary.rows
    layout = json.loads((directory / "_schemas.json").read_text())
    table_rows = {entry["file"]: pq.ParquetFile(directory / entry["file"]).metadata.num_rows for entry in layout["tables"]}
    assert all(table_rows[entry["file"]] == entry["rows"] for entry in layout["tables"])
    assert sum(table_rows.values()) == with_schema == summary.decoded
    assert summary.undecodable == total - with_schema
    assert summary.untyped_values == 0 and summary.errors == []
    assert events.column("record").to_pylist() == list(range(total))

    # the events table: dump --json's keys, record by record
    rows = events.drop_columns(["time"]).filter(pc.is_in(events.column("record"), pa.array(sorted(sample)))).to_pylist()
    ticks = pc.cast(events.column("time"), pa.int64()).to_pylist()
    for row in rows:
        _event, data = decoded[row["record"]]
        for key in _SAME_KEYS:
            assert row[key] == data.get(key), (name, row["record"], key)
        filetime = data["_filetime"]
        assert ticks[row["record"]] == (None if filetime is None else (filetime - _FILETIME_UNIX_TICKS) * 100)

    # the event tables: every sampled decodable record once, in its table, with its decoded values
    found: dict[int, tuple[dict, pa.Schema, str]] = {}
    for entry in layout["tables"]:
        table = pq.read_table(directory / entry["file"])
        picked = table.filter(pc.is_in(table.column("record"), pa.array(sorted(sample))))
        columns = {column["name"]: column["property"] for column in entry["columns"]}
        for row in picked.to_pylist():
            assert row["record"] not in found, "a record in two tables"
            found[row["record"]] = (row, table.schema, entry["table"])
            assert set(columns) == set(row) - {"record"}
    properties = {(entry["table"], column["name"]): column["property"] for entry in layout["tables"] for column in entry["columns"]}
    for position, (event, data) in decoded.items():
        if event.schema is None:
            assert position not in found
            continue
        row, schema, table_name = found[position]
        assert table_name.split("/", 1)[0] in (data.get("provider_name"), event.schema.provider_name, str(event.schema.provider_id))
        values = dict(event.decoded.items()) if event.decoded is not None else {}
        for field in schema:
            if field.name == "record":
                continue
            prop = properties[(table_name, field.name)]
            want = expected(values.get(prop), field.type)
            assert same(row[field.name], want), (name, position, field.name, row[field.name], want)
