"""Chrome JSON from columns (``chrome_columns``): the same bytes as the record-by-record export,
on every corpus trace and on traces made here with the shapes that cut a run of plain events
(Start/Stop slices open over them, counters, processes and threads named mid-run, records
without a thread in their header, text to escape, integers beyond a double's, floats, GUIDs,
FILETIMEs, events of no schema)."""

from __future__ import annotations

import math
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from openetw.etl.intypes import InType
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.export import timeline as timeline_export
from openetw.export.timeline import chrome_columns, export_timeline
from openetw.export.timeline.builder import Naming, TimelineStats
from openetw.export.timeline.chrome_columns import write_chrome_from_columns
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import PropertyInfo, Schema
from openetw.testing import EventRecordBuilder
from tests.conftest import corpus_path
from tests.export.conftest import ETL_FILES, registry
from tests.native import cases

PROVIDER = uuid.UUID("6f0a3c7e-2b1d-4e55-9a10-3c1f2d4e5a6b")
ORPHAN = 0xFFFFFFFF


def _columns(source: Path, target: Path, made: SchemaRegistry, stats: TimelineStats) -> bytes | None:
    """The column export's bytes, or None when the file was left to the records."""

    def output():  # type: ignore[no-untyped-def]
        return open(target, "w", encoding="utf-8")

    written = write_chrome_from_columns(str(source), made, output, stats, Naming())
    return target.read_bytes() if written is not None else None


def _both(source: Path, target: Path, made: SchemaRegistry, monkeypatch: pytest.MonkeyPatch) -> tuple[
    bytes, bytes | None, TimelineStats, TimelineStats, int
]:  # fmt: skip
    """(record-by-record bytes, column bytes or None, both stats, rows written from columns)."""
    by_records = export_timeline([str(source)], str(target), "chrome", registry=made, columns=False)
    written = [0]
    write = chrome_columns._Pass._write

    def counted(self, a, b, *rest):  # type: ignore[no-untyped-def]
        written[0] += max(0, b - a)
        write(self, a, b, *rest)

    monkeypatch.setattr(chrome_columns._Pass, "_write", counted)
    stats = TimelineStats()
    columns = _columns(source, target.with_suffix(".columns.json"), made, stats)
    return target.read_bytes(), columns, by_records.stats, stats, written[0]


@pytest.mark.parametrize("name", ETL_FILES)
def test_each_corpus_trace_gives_the_record_writers_bytes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = corpus_path("etl", *name.split("/"))
    if name.endswith("net.4.5.2.x64.etl"):  # CPU samples: their frames are named by a first pass, record by record
        assert _columns(source, tmp_path / "out.json", registry(), TimelineStats()) is None
        return
    monkeypatch.setattr(
        chrome_columns, "_mostly_kernel", lambda rows: False
    )  # the kernel traces too: the pass's records
    expected, columns, by_records, by_columns, _ = _both(source, tmp_path / "out.json", registry(), monkeypatch)
    assert columns is not None
    assert columns == expected
    by_records.errors, by_columns.errors = [], []
    assert by_columns == by_records


def _schemas() -> dict[str, Schema]:
    def schema(event_id: int, name: str, *properties: PropertyInfo, opcode: int = 0, task: int = 0) -> Schema:
        return Schema(PROVIDER, event_id=event_id, opcode=opcode, task=task, provider_name="Contoso-Shapes", event_name=name,
                      properties=properties)  # fmt: skip

    return {
        "plain": schema(
            1,
            "Work/Step",
            PropertyInfo("Count", InType.UINT32),
            PropertyInfo("Big", InType.UINT64),
            PropertyInfo("Signed", InType.INT64),
            PropertyInfo("Ratio", InType.DOUBLE),
            PropertyInfo("Small", InType.FLOAT),
            PropertyInfo("Flag", InType.BOOLEAN),
            PropertyInfo("Text", InType.UNICODESTRING),
            PropertyInfo("Id", InType.GUID),
        ),
        "thread": schema(
            2, "Work/Handoff", PropertyInfo("ThreadId", InType.UINT32), PropertyInfo("Note", InType.UNICODESTRING)
        ),
        "timed": schema(3, "Work/Timed", PropertyInfo("When", InType.FILETIME), PropertyInfo("Count", InType.UINT16)),
        "start": schema(4, "Request/Start", PropertyInfo("Url", InType.UNICODESTRING), opcode=1, task=7),
        "stop": schema(5, "Request/Stop", PropertyInfo("Status", InType.UINT32), opcode=2, task=7),
        "counter": schema(
            6,
            "GarbageCollection/GCHeapStats",
            PropertyInfo("GenerationSize0", InType.UINT64),
            PropertyInfo("GenerationSize1", InType.UINT64),
        ),
    }


def _shapes_trace(path: Path, schemas: dict[str, Schema], seed: int) -> None:
    rng = random.Random(seed)
    texts = ["plain", 'quote " and \\ back', "line\nbreak\ttab\x01", "ünïcödé ✓", "x" * 5000, ""]
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="Shapes")
    base = time.monotonic_ns()
    open_requests: dict[int, int] = {}
    with EtlWriter(path, header=header) as writer:
        for step in range(3000):
            pid = rng.choice([40, 41, 42]) if step > 200 else 40
            tid = pid * 10 + rng.randrange(3 if step < 1500 else 6)
            at = base + step * 1000

            def event(kind: str, values: dict[str, object], *, owner: tuple[int, int] = (pid, tid)) -> None:
                builder = EventRecordBuilder(PROVIDER, pid=owner[0], tid=owner[1], timestamp=at)  # noqa: B023
                writer.write(builder.add_properties(values).pack_manifest(schemas[kind]))

            roll = rng.random()
            if 800 < step < 2200 and roll < 0.02:
                if tid in open_requests:
                    event("stop", {"Status": 200})
                    del open_requests[tid]
                else:
                    event("start", {"Url": f"/item/{step}"})
                    open_requests[tid] = step
            elif roll < 0.03:
                event("counter", {"GenerationSize0": rng.randrange(1 << 20), "GenerationSize1": rng.randrange(1 << 20)})
            elif roll < 0.06:
                event(
                    "thread",
                    {"ThreadId": rng.choice([400, 401, 410, 0]), "Note": rng.choice(texts)},
                    owner=(ORPHAN, ORPHAN),
                )
            elif roll < 0.08:
                when = datetime(2024, 5, 6, 7, 8, 9, rng.randrange(1_000_000), tzinfo=UTC)
                event("timed", {"When": when, "Count": rng.randrange(1 << 16)})
            elif roll < 0.09:  # a provider without a schema: no arguments
                writer.write(
                    EventRecordBuilder(uuid.UUID(int=12345), 9, pid=pid, tid=tid, timestamp=at).pack(b"\x01\x02")
                )
            else:
                event("plain", {
                    "Count": rng.randrange(1 << 32), "Big": rng.choice([5, (1 << 53) + rng.randrange(1 << 10), (1 << 64) - 1]),
                    "Signed": rng.choice([-7, -(1 << 60), 1 << 53, -(1 << 53)]),
                    "Ratio": rng.choice([0.1, -2.5, 1e300, math.inf, math.nan, 3.0]), "Small": rng.choice([0.5, 1.25, -3.0]),
                    "Flag": rng.random() < 0.5, "Text": rng.choice(texts), "Id": uuid.UUID(int=rng.getrandbits(128)),
                })  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2])
def test_made_traces_give_the_record_writers_bytes(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = _schemas()
    made = SchemaRegistry()
    for schema in schemas.values():
        made.add_schema(schema)
    source = tmp_path / "shapes.etl"
    _shapes_trace(source, schemas, seed)
    expected, columns, by_records, by_columns, from_columns = _both(source, tmp_path / "out.json", made, monkeypatch)
    assert columns is not None and columns == expected
    assert by_columns == by_records
    assert by_records.slices and by_records.counters and by_records.undecodable  # the shapes are there
    assert 0 < from_columns < by_records.records  # runs written from columns, other records stepped


@pytest.mark.parametrize("seed", range(2))
def test_damaged_traces_give_the_same_bytes_or_are_left_to_the_records(seed: int, tmp_path: Path) -> None:
    name = ("tx/HTTP_Server.etl", "perfview/gcevents.etl")[seed % 2]
    source = tmp_path / "damaged.etl"
    source.write_bytes(cases.mutated(corpus_path("etl", *name.split("/")).read_bytes(), seed, flips=24, keep=0x2000))
    target = tmp_path / "columns.json"
    columns = _columns(source, target, registry(), TimelineStats())
    if columns is None:
        assert not target.exists()  # nothing opened: the record-by-record export writes it
        return
    export_timeline([str(source)], str(tmp_path / "records.json"), "chrome", registry=registry(), columns=False)
    assert columns == (tmp_path / "records.json").read_bytes()


def test_kernel_traces_are_left_to_the_records(tmp_path: Path) -> None:
    source = corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.kernel.1.etl")
    assert _columns(source, tmp_path / "out.json", registry(), TimelineStats()) is None
    assert not (tmp_path / "out.json").exists()


def test_a_look_at_the_first_records_leaves_sampled_and_kernel_traces_to_the_records() -> None:
    perfview = ("perfview",)
    assert timeline_export._mostly_plain(
        str(corpus_path("etl", *perfview, "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl"))
    )
    assert not timeline_export._mostly_plain(str(corpus_path("etl", *perfview, "net.4.5.2.x64.etl")))  # CPU samples
    assert not timeline_export._mostly_plain(
        str(corpus_path("etl", "etl-parser", "ShutdownPerfDiagLogger.etl"))
    )  # kernel records
