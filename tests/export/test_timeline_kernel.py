"""Perfetto exports of openetw's own kernel traces pass ``export --check``: every sequence in time
order, also where the trace hands a CPU sample over after newer records."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openetw.export.timeline import export_timeline, perfetto
from openetw.export.timeline.model import Frame, Sample, Switch
from openetw.export.timeline.perfetto import REORDER_WINDOW_NS, PerfettoWriter
from openetw.export.trace_check import check_file
from tests.conftest import corpus_path
from tests.export.conftest import registry
from tests.export.perfetto_values import perfetto_values
from tests.export.timeline_traces import kernel_sched_trace
from tests.service.harness import need_tracefs

BUSY = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"


def test_a_live_kernel_trace_with_samples_exports_to_a_perfetto_file_that_checks(tmp_path: Path) -> None:
    need_tracefs()
    from openetw.kernel import KernelSession

    trace = tmp_path / "kernel.etl"
    with KernelSession(flags={"process", "thread", "cswitch", "profile"}, output=trace, profile_rate_hz=997):
        subprocess.run([sys.executable, "-c", BUSY], check=True)
    target = tmp_path / "kernel.perfetto-trace"
    summary = export_timeline([str(trace)], str(target), "perfetto")
    assert summary.stats.samples > 100 and summary.stats.switches > 0
    result = check_file(str(target))
    assert result.ok, result.errors
    assert summary.errors == []  # nothing came too late to be written


def _sample(ts: int, cpu: int = 0) -> Sample:
    address = 0x1000 + ts % 97
    return Sample(ts, cpu, 7, 8, (Frame(f"?!{address:#x}", "?", "", 0, address),))


def test_samples_and_switches_handed_over_late_are_written_in_time_order(tmp_path: Path) -> None:
    target = tmp_path / "late.perfetto-trace"
    with open(target, "wb") as out:
        writer = PerfettoWriter(out)
        for ts in (5_000, 9_000, 3_000, 12_000, 11_000):  # two come after newer ones, within the window
            writer.write(_sample(ts))
            writer.write(Switch(ts, 1, 8, 9, 7, 7, 8, 8, 0, 0, 0, 0))
        writer.write(_sample(20_000 + REORDER_WINDOW_NS))
        writer.write(_sample(4_000))  # far later than the window allows: not written, counted
        writer.close()
    assert writer.late == 1
    result = check_file(str(target))
    assert result.ok, result.errors
    assert result.counts["perf_samples"] == 6 and result.counts["etw_events"] == 5


def test_the_window_costs_nothing_when_items_come_in_order() -> None:
    writer = PerfettoWriter(io.BytesIO())
    for ts in range(0, 10 * REORDER_WINDOW_NS, REORDER_WINDOW_NS // 4):
        writer.write(_sample(ts))
    assert writer.held <= 5  # about one window's worth waits
    writer.close()
    assert writer.late == 0 and writer.held == 0


def test_a_dense_trace_holds_at_most_the_limit_and_keeps_each_sequence_in_order(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(perfetto, "HELD_LIMIT", 8)
    target = tmp_path / "dense.perfetto-trace"
    with open(target, "wb") as out:
        writer = PerfettoWriter(out)
        most = 0
        for ts in range(1_000, 41_000, 1_000):  # 40 items within one window
            writer.write(_sample(ts))
            writer.write(Switch(ts, 1, 8, 9, 7, 7, 8, 8, 0, 0, 0, 0))
            most = max(most, writer.held)
        assert most == 8
        writer.write(_sample(35_500))  # older than samples written already: late
        writer.write(_sample(40_500))  # newer than every sample written: in its place
        writer.close()
    assert writer.late == 1 and writer.held == 0
    result = check_file(str(target))
    assert result.ok, result.errors
    assert result.counts["perf_samples"] == 41 and result.counts["etw_events"] == 40


def test_the_naming_pass_runs_only_over_inputs_with_samples(tmp_path: Path, monkeypatch: Any) -> None:
    import openetw.export.timeline as timeline_package

    passes: list[int] = []
    learn = timeline_package.learn_naming

    def counted(*args: Any, **kwargs: Any) -> None:
        passes.append(1)
        learn(*args, **kwargs)

    monkeypatch.setattr(timeline_package, "learn_naming", counted)
    plain = export_timeline([str(corpus_path("etl", "tx", "Process.etl"))], str(tmp_path / "plain.json"), "chrome")
    assert passes == [] and plain.stats.records == 10_344  # no sample: nothing to name, no first pass
    sampled = export_timeline([str(kernel_sched_trace(tmp_path / "sched.etl", steps=200))], str(tmp_path / "s.json"), "chrome")
    assert passes == [1] and sampled.stats.samples > 0


def test_a_trace_denser_than_the_limit_is_written_with_the_same_values(tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    source = str(corpus_path("etl", "etl-parser", "ShutdownPerfDiagLogger.etl"))  # up to 11,068 items wait for the window
    whole, limited = tmp_path / "whole.perfetto-trace", tmp_path / "limited.perfetto-trace"
    export_timeline([source], str(whole), "perfetto", registry=registry())
    monkeypatch.setattr(perfetto, "HELD_LIMIT", 64)
    summary = export_timeline([source], str(limited), "perfetto", registry=registry())
    assert summary.errors == []
    assert whole.read_bytes() != limited.read_bytes()  # the descriptors interleave otherwise...
    values = perfetto_values(whole)
    assert sum(1 for value in values[0][1] if isinstance(value, tuple) and value[5]) > 10_000  # decoded arguments
    assert values == perfetto_values(limited)  # ...every sequence in the same order, the same values
    assert check_file(str(limited)).ok
