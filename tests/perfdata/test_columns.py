"""Samples as columns: the same values as the samples read one by one."""

from __future__ import annotations

import numpy as np

from openetw.kernel.event_decoder import EventDecoder
from openetw.perfdata.columns import sample_columns
from openetw.perfdata.reader import PerfData
from tests.conftest import corpus_path


def test_columns_hold_what_the_samples_hold() -> None:
    data = corpus_path("perfdata", "perf.data").read_bytes()
    tables = sample_columns(PerfData(data))
    assert sum(table.rows for table in tables.values()) == 539
    reader = PerfData(data)
    switches = [s for s in reader.records() if s is not None and reader.event_name(s.attr) == "sched:sched_switch"]
    table = tables["sched:sched_switch"]
    assert table.rows == len(switches) == 285
    assert np.array_equal(table.columns["time"], [s.time for s in switches])
    assert np.array_equal(table.columns["cpu"], [s.cpu for s in switches])
    assert reader.tracing is not None
    decoder = EventDecoder(reader.tracing.formats.values())
    decoded = [decoder.decode(s.raw or b"") for s in switches]
    assert [value.decode() for value in table.columns["prev_comm"]] == [
        d[1]["prev_comm"] for d in decoded if d is not None
    ]
    assert table.columns["next_pid"].tolist() == [d[1]["next_pid"] for d in decoded if d is not None]


def test_columns_of_a_cut_file_keep_the_samples_before_the_cut() -> None:
    data = corpus_path("perfdata", "perf.data").read_bytes()
    perf = PerfData(data[:100_000])
    tables = sample_columns(perf)
    whole = PerfData(data[:100_000])
    expected = sum(1 for s in whole.records() if s is not None)
    assert sum(table.rows for table in tables.values()) == expected
    assert perf.errors and perf.errors[-1].structure == "perf_event_header"
