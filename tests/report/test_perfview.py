"""``report --format perfview`` against the baselines of PerfView's TraceEvent GeneralParsing test.

For each baseline: every ``COUNT`` line must be equal, and at least 95% of the ``EVENT`` lines
(compared line by line); the lines that differ must be known differences, listed below with the
reason. The test prints the match ratio and the first differences.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openetw.etl import EtlReader
from openetw.etl.record import EventRecord
from openetw.events.registry import build_registry
from openetw.report.perfview import PerfViewReport, perfview_lines
from openetw.tdh.context import DecodeContext
from tests.conftest import corpus_path

MINIMUM_MATCH = 0.95
BASELINES = ["primitive-types", "gcevents", "gcrundownevents", "net.4.5.2.x64"]

# Event names whose lines are known to differ, and why.
KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "net.4.5.2.x64": {
        "Microsoft-Windows-DotNETRuntimePrivate/GC/PerHeapHistory": (
            "version 2 of this .NET 4.5 private event has an empty template in every manifest; PerfView "
            "decodes its 433 bytes with a hand-written layout that no manifest or trace metadata describes"
        ),
    },
}


def _records(name: str) -> Iterator[EventRecord]:
    with EtlReader(corpus_path("etl", "perfview", f"{name}.etl")) as reader:
        yield from reader.records(time_order=True)


@pytest.fixture(scope="module")
def registry():  # type: ignore[no-untyped-def]
    manifests = corpus_path("manifests")
    found = build_registry([manifests / "perfview" / "ClrEtwAll.man", manifests / "dotnet-runtime" / "ClrEtwAll.man"], installed=False)
    assert found.errors == []
    return found


def _event_name(line: str) -> str:
    return line.split(": ", 1)[1].split(" PID=", 1)[0]


@pytest.fixture(scope="module")
def shipped_registry():  # type: ignore[no-untyped-def]
    """No manifest named and none installed: the .NET layouts openetw ships decode the traces."""
    found = build_registry([], installed=False)
    assert found.errors == []
    return found


@pytest.mark.parametrize("name", BASELINES)
def test_perfview_text_matches_the_baseline_with_no_manifest_given(name: str, shipped_registry) -> None:  # type: ignore[no-untyped-def]
    test_perfview_text_matches_the_baseline(name, shipped_registry)


@pytest.mark.parametrize("name", BASELINES)
def test_perfview_text_matches_the_baseline(name: str, registry) -> None:  # type: ignore[no-untyped-def]
    baseline = corpus_path("etl", "baselines", "perfview", f"{name}.baseline.txt").read_text(encoding="utf-8-sig").splitlines()
    ours = list(perfview_lines(lambda: _records(name), registry))
    expected_events = [line for line in baseline if line.startswith("EVENT ")]
    our_events = [line for line in ours if line.startswith("EVENT ")]
    expected_counts = [line for line in baseline if line.startswith("COUNT ")]
    our_counts = [line for line in ours if line.startswith("COUNT ")]
    assert len(expected_events) + len(expected_counts) == len(baseline)

    # The counts may differ: shown first, asserted below.
    differing = [(index, want, got) for index, (want, got) in enumerate(zip(expected_events, our_events, strict=False)) if want != got]
    matched = len(expected_events) - len(differing) if len(our_events) == len(expected_events) else 0
    ratio = matched / len(expected_events)
    print(f"\n{name}: {matched}/{len(expected_events)} EVENT lines equal ({ratio:.1%}); COUNT lines equal: {our_counts == expected_counts}")
    for index, want, got in differing[:3]:
        print(f"  line {index + 1}\n    baseline: {want[:300]}\n    ours:     {got[:300]}")

    assert our_counts == expected_counts
    assert len(our_events) == len(expected_events)
    assert ratio >= MINIMUM_MATCH
    known = KNOWN_DIFFERENCES.get(name, {})
    assert {_event_name(want) for _, want, _ in differing} <= set(known), "lines differ that are not known differences"


def test_only_five_events_of_a_name_are_shown_but_all_are_counted(registry) -> None:  # type: ignore[no-untyped-def]
    report = PerfViewReport(registry, DecodeContext(registry), max_per_name=2)
    report.learn(_records("gcevents"))
    lines = list(report.event_lines(_records("gcevents")))
    allocation_ticks = [line for line in lines if "/GC/AllocationTick " in line]
    assert len(allocation_ticks) == 2
    assert report.counts["Microsoft-Windows-DotNETRuntime/GC/AllocationTick"] == 12
    assert report.count_lines()[0] < report.count_lines()[-1]
