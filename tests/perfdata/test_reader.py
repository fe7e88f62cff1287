"""The perf.data reader: header, attributes, features and records of the corpus file."""

from __future__ import annotations

import struct

import pytest

from openetw.errors import PerfDataFormatError
from openetw.perfdata import layout as P
from openetw.perfdata.reader import PerfData, is_perf_data
from openetw.perfdata.tracing_data import parse_tracing_data
from tests.conftest import corpus_path


@pytest.fixture(scope="module")
def perf() -> PerfData:
    return PerfData(corpus_path("perfdata", "perf.data").read_bytes())


def test_header_attributes_and_features(perf: PerfData) -> None:
    assert not perf.pipe and perf.endian == "<"
    assert len(perf.attrs) == 11
    tracepoints = [attr for attr in perf.attrs if attr.is_tracepoint]
    assert len(tracepoints) == 10 and all(len(attr.ids) == 24 for attr in tracepoints)
    sample_type = (
        P.SAMPLE_IDENTIFIER | P.SAMPLE_IP | P.SAMPLE_TID | P.SAMPLE_TIME | P.SAMPLE_CPU | P.SAMPLE_PERIOD | P.SAMPLE_RAW
    )
    assert all(attr.sample_type == sample_type and attr.sample_id_all and attr.clockid == 1 for attr in tracepoints)
    assert {
        P.FEATURE_TRACING_DATA,
        P.FEATURE_BUILD_ID,
        P.FEATURE_EVENT_DESC,
        P.FEATURE_CLOCKID,
        P.FEATURE_CLOCK_DATA,
    } <= set(perf.features)
    assert (
        perf.strings["hostname"] == "dcook2"
        and perf.strings["arch"] == "x86_64"
        and perf.strings["cmdline"].startswith("/usr/bin/perf record -k monotonic")
    )
    assert perf.nr_cpus == (24, 24) and perf.clock_resolution_ns == 1
    assert (
        perf.clock_data is not None
        and perf.clock_data.clockid == 1
        and perf.clock_data.wall_clock_ns == 1711586712588060000
    )
    assert [(pid, name) for pid, _, name in perf.build_ids] == [(-1, "[kernel.kallsyms]"), (-1, "[vdso]")]
    assert perf.build_ids[0][1].hex().startswith("14b4bcb975")
    assert perf.sample_time == (12782555136396, 12786184517299)
    assert set(perf.event_names.values()) >= {"sched:sched_switch", "dummy:HG", "user_events:TestProviderC_L5K0Gmsft"}


def test_tracing_data_carries_every_format(perf: PerfData) -> None:
    tracing = perf.tracing
    assert tracing is not None and tracing.version == "0.6" and tracing.long_size == 8 and tracing.page_size == 4096
    assert len(tracing.formats) == 10 and tracing.problems == []
    names = {f"{fmt.system}:{fmt.name}" for fmt in tracing.formats.values()}
    assert "sched:sched_switch" in names and "user_events:TestProviderCpp_L4K85" in names
    with pytest.raises(PerfDataFormatError):
        parse_tracing_data(b"not tracing data")


def test_records_are_walked_and_counted(perf: PerfData) -> None:
    reader = PerfData(perf.data)
    samples = [sample for sample in reader.records() if sample is not None]
    assert len(samples) == reader.stats.samples == 539 and reader.errors == []
    assert reader.stats.records == {
        "SAMPLE": 539, "MMAP2": 371, "FORK": 37, "COMM": 36, "KSYMBOL": 6, "BPF_EVENT": 6, "FINISHED_ROUND": 2,
        "ID_INDEX": 1, "MMAP": 1, "THREAD_MAP": 1, "CPU_MAP": 1, "FINISHED_INIT": 1, "EXIT": 1,
    }  # fmt: skip
    first = samples[0]
    assert (first.pid, first.tid, first.cpu, first.time, first.period) == (2002, 2002, 0, 12782555136396, 1)
    assert reader.event_name(first.attr) == "sched:sched_switch"
    assert first.raw is not None and first.raw[:2] == struct.pack(
        "<H", first.attr.config
    )  # common_type: the tracepoint id
    rounds = list(PerfData(perf.data).records(rounds=True))
    assert rounds.count(None) == 2


def test_the_magic_in_either_byte_order() -> None:
    assert is_perf_data(b"PERFILE2") and is_perf_data(b"2ELIFREP") and not is_perf_data(b"PERFILE1")
