"""PerfView's stack views over hand-made samples: By Name, Caller-Callee, the call tree, folding."""

from __future__ import annotations

import io

from openetw.events.frames import Frame
from openetw.events.profile import StackSample
from openetw.report.stacks import by_name, call_tree, caller_callee, render_by_name, render_tree


def sample(*labels: str, pid: int = 10, tid: int = 11) -> StackSample:
    """A sample whose frames are given outermost first (as one reads a call chain)."""
    frames = tuple(Frame(label.split("!")[0], label.split("!")[1], 0, index, "test") for index, label in enumerate(reversed(labels)))
    return StackSample(pid, tid, f"app ({pid})", 0, "SampledProfile", frames)


SAMPLES = [
    sample("app!main", "app!work", "lib!hot"),
    sample("app!main", "app!work", "lib!hot"),
    sample("app!main", "app!work", "lib!cold"),
    sample("app!main", "app!idle"),
    sample("app!main", "app!work", "app!work", "lib!hot"),  # recursion counts once inclusive
]


def test_by_name_counts_exclusive_innermost_and_inclusive_once_per_sample() -> None:
    rows = {row.name: row for row in by_name(SAMPLES)}
    assert (rows["lib!hot"].exclusive, rows["lib!hot"].inclusive) == (3, 3)
    assert (rows["app!work"].exclusive, rows["app!work"].inclusive) == (0, 4)
    assert (rows["app!main"].exclusive, rows["app!main"].inclusive) == (0, 5)
    assert [row.name for row in by_name(SAMPLES)][:3] == ["lib!hot", "app!idle", "lib!cold"]
    assert rows["lib!hot"].as_json(5)["inclusive_percent"] == 60.0
    text = io.StringIO()
    render_by_name(by_name(SAMPLES), 5, text)
    assert "By Name: 5 samples" in text.getvalue() and "   60.00  lib!hot" in text.getvalue()


def test_caller_callee_of_a_function() -> None:
    view = caller_callee(SAMPLES, "work")
    assert view.focus.name == "app!work" and (view.focus.inclusive, view.focus.exclusive) == (4, 0)
    assert [(row.name, row.inclusive) for row in view.callers] == [("app!main", 4), ("app!work", 1)]
    assert [(row.name, row.inclusive, row.exclusive) for row in view.callees] == [("lib!hot", 3, 3), ("app!work", 1, 0), ("lib!cold", 1, 1)]


def test_the_call_tree_goes_from_the_process_down() -> None:
    root = call_tree(SAMPLES)
    process = root.children["app (10)"]
    work = process.children["app!main"].children["app!work"]
    assert root.inclusive == 5 and process.inclusive == 5 and work.inclusive == 4
    assert work.children["lib!hot"].exclusive == 2 and work.children["app!work"].inclusive == 1
    text = io.StringIO()
    render_tree(root, 5, text)
    assert "      app!work" in text.getvalue()


def test_fold_gives_small_functions_time_to_their_callers() -> None:
    rows = {row.name: row for row in by_name(SAMPLES, fold=30)}
    assert "lib!cold" not in rows and "app!idle" not in rows
    assert rows["app!work"].exclusive == 1 and rows["app!main"].exclusive == 1


def test_group_modules_names_frames_by_module_and_merges_neighbours() -> None:
    rows = {row.name: row for row in by_name(SAMPLES, group_modules=True)}
    assert (rows["lib"].exclusive, rows["lib"].inclusive) == (4, 4)
    assert (rows["app"].exclusive, rows["app"].inclusive) == (1, 5)
