"""``report --format perfview --first-per-type`` against TraceEvent's EventPipe parsing baselines.

Each baseline (``corpus/nettrace/*.baseline.txt``) is one line per event name: the name, its
count, and the first event of that name as ``TraceEvent.ToXml`` writes it. Every count must be
equal; every line must be equal, except the lines listed below with the reason they differ.
A listed line must really differ (the list cannot go stale), and every name openetw shows must
be in the baseline or stand for a listed renamed one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.consumer.nettrace_source import NettraceFileSource
from openetw.report.perfview.first_events import first_event_lines
from openetw.report.sources import build_registry
from tests.conftest import corpus_path

HAND_WRITTEN = (
    "TraceEvent writes this .NET runtime event's XML with its hand-written ClrTraceEventParser class; openetw follows "
    "that class's fields (report/perfview views) but not every choice its ToXml makes: hex or decimal per field, "
    "fields of older event versions left out, enums of its own"
)
BULK_VALUES = "TraceEvent writes the struct array of this bulk event as child elements; openetw shows the manifest's fields"
CHAR_ARRAY = "a char[] field: TraceEvent shows the characters as a string, openetw the UTF-16 code units as numbers"
TPL_NAMES = (
    "TraceEvent's TplEtwProviderTraceEventParser names TPL events by task and opcode (TaskExecute/Start); the trace's "
    "metadata names them by the EventSource method (TaskStarted), as openetw shows them"
)
SAMPLE_PROFILER = (
    "TraceEvent's SampleProfilerTraceEventParser names this event Thread/Sample and its Type values; the trace's "
    "metadata gives it neither a name nor fields, openetw names it ThreadSample with an integer Type"
)
GC_PRESSURE = (
    "GC/IncreaseMemoryPressure and GC/DecreaseMemoryPressure were newer than TraceEvent's CLR parser: it parsed "
    "them from the trace's metadata, both under the task name GC; openetw names them from the shipped manifest"
)
R2R = "the shipped manifest gives event 159 the opcode MethodLoad (Method/Load); TraceEvent's parser names it R2RGetEntryPoint"
TPL_FIELDS = "TraceEvent's TPL parser does not show every field of this event; openetw shows the metadata's fields"

RUNTIME = "Microsoft-Windows-DotNETRuntime"
RUNDOWN = "Microsoft-Windows-DotNETRuntimeRundown"
TPL = "System.Threading.Tasks.TplEventSource"
SAMPLE = "Microsoft-DotNETCore-SampleProfiler"


def _hand_written(provider: str, *events: str) -> dict[str, str]:
    return {f"{provider}/{event}": HAND_WRITTEN for event in events}


# baseline name -> (openetw's names whose counts add up to it, reason)
RENAMED: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "eventpipe-dotnetcore2.0-linux-objver2.netperf": {
        f"{SAMPLE}/Thread/Sample": ((f"{SAMPLE}/ThreadSample",), SAMPLE_PROFILER),
        f"{RUNTIME}/GC": ((f"{RUNTIME}/GarbageCollection/IncreaseMemoryPressure",), GC_PRESSURE),
        f"{TPL}/AwaitTaskContinuationScheduled/Send": ((f"{TPL}/AwaitTaskContinuationScheduled",), TPL_NAMES),
        f"{TPL}/TaskExecute/Start": ((f"{TPL}/TaskStarted",), TPL_NAMES),
        f"{TPL}/TaskExecute/Stop": ((f"{TPL}/TaskCompleted",), TPL_NAMES),
        f"{TPL}/TaskScheduled/Send": ((f"{TPL}/TaskScheduled",), TPL_NAMES),
        f"{TPL}/TaskWait/Send": ((f"{TPL}/TaskWaitBegin",), TPL_NAMES),
        f"{TPL}/TaskWait/Stop": ((f"{TPL}/TaskWaitEnd",), TPL_NAMES),
    },
    "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace": {
        f"{SAMPLE}/Thread/Sample": ((f"{SAMPLE}/ThreadSample",), SAMPLE_PROFILER),
        f"{RUNTIME}/GC": ((f"{RUNTIME}/GarbageCollection/IncreaseMemoryPressure", f"{RUNTIME}/GC/DecreaseMemoryPressure"), GC_PRESSURE),
        f"{RUNTIME}/Method/R2RGetEntryPoint": ((f"{RUNTIME}/Method/Load",), R2R),
    },
}

DIFFERING: dict[str, dict[str, str]] = {
    "eventpipe-dotnetcore2.0-linux-objver2.netperf": {
        **_hand_written(RUNTIME, "AppDomainResourceManagement/ThreadCreated", "GC/AllocationTick", "Method/LoadVerbose"),
        **_hand_written(RUNDOWN, "Loader/ModuleDCStop"),
        f"{TPL}/TaskWaitContinuationComplete": TPL_FIELDS,
    },
    "eventpipe-dotnetcore2.1-linux-x64-objver3.netperf": _hand_written(RUNDOWN, "Loader/ModuleDCStop"),
    "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf": {},
    "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace": {
        **_hand_written(
            RUNTIME, "AppDomainResourceManagement/ThreadCreated", "Contention/Start", "GC/AllocationTick", "GC/GlobalHeapHistory",
            "GC/HeapStats", "GC/PerHeapHistory", "GC/Start", "Method/LoadVerbose",
        ),
        f"{RUNTIME}/GC/BulkMovedObjectRanges": BULK_VALUES,
    },
    "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace": {
        **_hand_written(RUNDOWN, "Runtime/Start"),
        "TestEventSource0/TestEvent3/24": CHAR_ARRAY,
    },
}


def _split(lines: list[str]) -> dict[str, tuple[int, str]]:
    parsed = {}
    for line in lines:
        name, count, _ = line.split(", ", 2)
        parsed[name] = (int(count), line)
    return parsed


@pytest.fixture(scope="module")
def registry():  # type: ignore[no-untyped-def]
    return build_registry([], installed=False)  # no manifest given or installed: the shipped .NET layouts


@pytest.mark.parametrize("name", sorted(DIFFERING))
def test_first_event_per_type_matches_the_baseline(trace_file, registry, name: str) -> None:  # type: ignore[no-untyped-def]
    path: Path = trace_file(name)
    baseline = corpus_path("nettrace", f"{name}.baseline.txt").read_text(encoding="utf-8-sig").splitlines()
    source = NettraceFileSource(path)
    source.open()
    try:
        ours = list(first_event_lines(source.records(), registry))
        assert source.losses() == []
    finally:
        source.close()
    theirs, mine = _split(baseline), _split(ours)
    renamed, differing = RENAMED.get(name, {}), DIFFERING[name]
    standing_in = {ours_name for names, _ in renamed.values() for ours_name in names}
    assert set(mine) - set(theirs) <= standing_in, "names that are neither in the baseline nor listed as renamed"
    equal = 0
    for event, (count, line) in theirs.items():
        if event in renamed:
            assert sum(mine[ours_name][0] for ours_name in renamed[event][0]) == count, event
            continue
        assert event in mine, f"missing {event}"
        assert mine[event][0] == count, event
        if event in differing:
            assert mine[event][1] != line, f"{event} is listed as differing but is equal: take it off the list"
        else:
            assert mine[event][1] == line, f"\nbaseline: {line}\nopenetw:  {mine[event][1]}"
            equal += 1
    print(f"\n{name}: {equal} of {len(theirs)} lines equal; {len(differing)} differ, {len(renamed)} renamed (listed with reasons)")


def test_the_command_writes_the_baseline_text(trace_file, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    name = "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf"
    out = tmp_path / "first.txt"
    assert main(["report", "--format", "perfview", "--first-per-type", "--no-installed", "-o", str(out), str(trace_file(name))]) == 0
    baseline = corpus_path("nettrace", f"{name}.baseline.txt").read_text(encoding="utf-8-sig").splitlines()
    assert out.read_text(encoding="utf-8").splitlines() == baseline
    assert main(["report", "--format", "csv", "--first-per-type", str(trace_file(name))]) == 2
