"""Every corpus .etl file reads completely and matches the independently measured facts."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest

from openetw.cli.main import main
from openetw.etl import EtlReader
from tests.conftest import corpus_path
from tests.etl.corpus_facts import CORPUS_ETL, EtlFacts


@pytest.mark.parametrize("facts", CORPUS_ETL, ids=lambda f: f.path.rsplit("/", 1)[-1])
def test_reads_completely_with_documented_facts(facts: EtlFacts) -> None:
    path = corpus_path("etl", *facts.path.split("/"))
    with EtlReader(path) as reader:
        kinds = Counter(record.kind for record in reader)
        assert reader.stats.errors == []
        assert reader.stats.unknown_records == 0
        assert sum(kinds.values()) == facts.records
        for kind, count in facts.kinds.items():
            assert kinds[kind] == count, kind
        header = reader.header
        assert header.provider_version == facts.os_build
        assert header.pointer_size == facts.pointer_size
        assert header.events_lost == facts.events_lost
        assert header.compressed == facts.compressed
        assert reader.stats.buffers == facts.buffers
        assert header.buffers_written == facts.buffers


@pytest.mark.parametrize("facts", CORPUS_ETL, ids=lambda f: f.path.rsplit("/", 1)[-1])
def test_info_json_counts_records_including_the_logfile_header(facts: EtlFacts, capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_path("etl", *facts.path.split("/"))
    assert main(["info", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == facts.records
    assert summary["os_build"] == facts.os_build
    assert summary["pointer_size"] == facts.pointer_size
    assert summary["buffers"] == facts.buffers
    assert summary["events_lost"] == facts.events_lost


def test_win7_header_buffer_has_no_saved_offset_and_still_reads() -> None:
    path = corpus_path("etl", "tx", "HTTP_Server.etl")
    with EtlReader(path) as reader:
        buffers = list(reader.buffers())
    assert buffers[0][0].saved_offset == 0
    assert reader.header.perf_freq == 1_818_300
    assert reader.header.os_version_text == "6.1"


def test_time_matches_perfview_baseline_start() -> None:
    # PerfView's baseline puts the first GC event of gcevents.etl 8.199 ms after the session start.
    path = corpus_path("etl", "perfview", "gcevents.etl")
    with EtlReader(path) as reader:
        records = list(reader.records(time_order=True))
    start = reader.header.start_time
    first_event = next(r for r in records if r.kind == "event")
    assert first_event.filetime >= start
    assert first_event.time.year == 2023


def test_extended_items_decode_into_typed_objects() -> None:
    path = corpus_path("etl", "tx", "HTTP_Server.etl")
    with EtlReader(path) as reader:
        related = [r.related_activity_id for r in reader if r.kind == "event" and r.related_activity_id is not None]
    assert len(related) == 291


def test_stack_traces_in_compressed_relogged_file() -> None:
    path = corpus_path("etl", "perfview", "net.4.5.2.x64.etl")
    with EtlReader(path) as reader:
        stacks = [r.stack for r in reader if r.kind == "event" and r.flags & 1 and r.stack is not None]
    assert len(stacks) == 655
    assert all(s.pointer_size == 8 and s.addresses for s in stacks)


def test_tracelogging_items_are_exposed_as_bytes() -> None:
    path = corpus_path("etl", "perfview", "primitive-types.etl")
    with EtlReader(path) as reader:
        events = [r for r in reader if r.kind == "event"]
    assert all(r.tracelogging_schema and r.provider_traits for r in events)
    assert events[0].provider_traits[2:].startswith(b"solar_system\0")


@pytest.mark.parametrize("facts", CORPUS_ETL, ids=lambda f: f.path.rsplit("/", 1)[-1])
def test_time_order_is_non_decreasing_and_keeps_every_record(facts: EtlFacts) -> None:
    path = corpus_path("etl", *facts.path.split("/"))
    with EtlReader(path) as reader:
        in_file_order = Counter(record.raw for record in reader)
    with EtlReader(path) as reader:
        ordered = list(reader.records(time_order=True))
        assert reader.stats.time_order_violations == 0
    stamps = [record.timestamp for record in ordered]
    assert all(a <= b for a, b in itertools.pairwise(stamps))
    assert Counter(record.raw for record in ordered) == in_file_order
