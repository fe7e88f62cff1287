"""PerfView's stack views over named samples: By Name, Caller-Callee and the call tree.

* **By Name**: per function, *exclusive* samples (the function is the innermost frame) and
  *inclusive* samples (the function is anywhere on the stack, counted once per sample), with
  their percent of all samples; sorted by exclusive, then inclusive, then name.
* **Caller-Callee** of a function: the samples through it (inclusive, exclusive), the frames
  that called it and the frames it called, each with the samples that went through that edge.
* **Call tree**: from the process (the root of each stack, as PerfView's ``Process (pid)``) down
  to the innermost frame, each node with its inclusive and exclusive samples.

``group_modules`` names each frame by its module alone (PerfView's module grouping), merging
consecutive frames of one module; ``fold`` (percent) folds every function whose inclusive share
is below it into its caller (PerfView's Fold%).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from openetw.events.profile import StackSample
from openetw.events.profile_columns import SampleTable

__all__ = [
    "CallerCallee", "NameRow", "TreeNode", "by_name", "call_tree", "caller_callee", "render_by_name",
    "render_caller_callee", "render_tree", "stack_names",
]  # fmt: skip


@dataclass(slots=True)
class NameRow:
    name: str
    exclusive: int = 0
    inclusive: int = 0

    def as_json(self, total: int) -> dict[str, Any]:
        return {
            "name": self.name, "exclusive": self.exclusive, "inclusive": self.inclusive,
            "exclusive_percent": _percent(self.exclusive, total), "inclusive_percent": _percent(self.inclusive, total),
        }  # fmt: skip


@dataclass(slots=True)
class CallerCallee:
    focus: NameRow
    callers: list[NameRow]
    callees: list[NameRow]


@dataclass(slots=True)
class TreeNode:
    name: str
    inclusive: int = 0
    exclusive: int = 0
    children: dict[str, TreeNode] = field(default_factory=dict)

    def as_json(self, total: int, fold: float = 0.0) -> dict[str, Any]:
        return {
            "name": self.name, "inclusive": self.inclusive, "exclusive": self.exclusive,
            "inclusive_percent": _percent(self.inclusive, total),
            "children": [child.as_json(total, fold) for child in _ordered(self.children.values()) if _percent(child.inclusive, total) >= fold],
        }  # fmt: skip


def _percent(part: int, total: int) -> float:
    return round(100.0 * part / total, 2) if total else 0.0


def _ordered(nodes: Any) -> list[Any]:
    return sorted(nodes, key=lambda node: (-node.inclusive, node.name))


def stack_names(sample: StackSample, group_modules: bool = False) -> list[str]:
    """The frames' names innermost first (modules alone, consecutive ones merged, when grouping)."""
    if not group_modules:
        return [frame.label for frame in sample.frames]
    names: list[str] = []
    for frame in sample.frames:
        if not names or names[-1] != frame.module:
            names.append(frame.module)
    return names


def _stacks(samples: Sequence[StackSample], group_modules: bool, fold: float) -> list[tuple[int, list[str]]]:
    stacks = [(sample.weight, stack_names(sample, group_modules)) for sample in samples]
    if fold <= 0:
        return stacks
    total = sum(weight for weight, _ in stacks)
    inclusive: dict[str, int] = {}
    for weight, names in stacks:
        for name in set(names):
            inclusive[name] = inclusive.get(name, 0) + weight
    kept = {name for name, count in inclusive.items() if total and 100.0 * count / total >= fold}
    folded = []
    for weight, names in stacks:
        remaining = [name for name in names if name in kept]
        folded.append((weight, remaining or names[-1:]))
    return folded


def by_name(samples: Sequence[StackSample], *, group_modules: bool = False, fold: float = 0.0) -> list[NameRow]:
    """PerfView's By Name view (module doc)."""
    if isinstance(samples, SampleTable) and not group_modules and fold <= 0:
        names, exclusive, inclusive = samples.name_counts()
        counted = [NameRow(name, int(exc), int(inc)) for name, exc, inc in zip(names, exclusive.tolist(), inclusive.tolist(), strict=True) if inc]
        return sorted(counted, key=lambda row: (-row.exclusive, -row.inclusive, row.name))
    rows: dict[str, NameRow] = {}
    for weight, names in _stacks(samples, group_modules, fold):
        if not names:
            continue
        innermost = names[0]
        for name in set(names):
            row = rows.get(name)
            if row is None:
                row = rows[name] = NameRow(name)
            row.inclusive += weight
        rows[innermost].exclusive += weight
    return sorted(rows.values(), key=lambda row: (-row.exclusive, -row.inclusive, row.name))


def _matches(name: str, wanted: str) -> bool:
    return name == wanted or name.endswith("!" + wanted)


def caller_callee(samples: Sequence[StackSample], function: str, *, group_modules: bool = False, fold: float = 0.0) -> CallerCallee:
    """Who called ``function`` (``module!name`` or just ``name``) and whom it called."""
    focus = NameRow(function)
    callers: dict[str, NameRow] = {}
    callees: dict[str, NameRow] = {}
    for weight, names in _stacks(samples, group_modules, fold):
        places = [index for index, name in enumerate(names) if _matches(name, function)]
        if not places:
            continue
        focus.name = names[places[0]]
        focus.inclusive += weight
        if places[0] == 0:
            focus.exclusive += weight
        seen_callers: set[str] = set()
        seen_callees: set[str] = set()
        for index in places:
            caller = names[index + 1] if index + 1 < len(names) else "(root)"
            if caller not in seen_callers:
                seen_callers.add(caller)
                callers.setdefault(caller, NameRow(caller)).inclusive += weight
            if index > 0 and names[index - 1] not in seen_callees:
                callee = names[index - 1]
                seen_callees.add(callee)
                row = callees.setdefault(callee, NameRow(callee))
                row.inclusive += weight
                if index - 1 == 0:
                    row.exclusive += weight
    return CallerCallee(focus, _ordered(callers.values()), _ordered(callees.values()))


def call_tree(samples: Sequence[StackSample], *, group_modules: bool = False, fold: float = 0.0) -> TreeNode:
    """The call tree from ``ROOT`` through each process to the innermost frames."""
    root = TreeNode("ROOT")
    processes = [sample.process for sample in samples]
    for (weight, names), process in zip(_stacks(samples, group_modules, fold), processes, strict=True):
        node = root
        node.inclusive += weight
        for name in [process, *reversed(names)]:
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = TreeNode(name)
            child.inclusive += weight
            node = child
        node.exclusive += weight
    return root


# -- text --------------------------------------------------------------------------------------
def render_by_name(rows: Sequence[NameRow], total: int, out: TextIO, *, limit: int | None = None) -> None:
    out.write(f"By Name: {total} samples\n")
    out.write(f"{'Exc':>8} {'Exc %':>7} {'Inc':>8} {'Inc %':>7}  Name\n")
    for row in rows[:limit] if limit else rows:
        out.write(
            f"{row.exclusive:>8} {_percent(row.exclusive, total):>7.2f} {row.inclusive:>8} {_percent(row.inclusive, total):>7.2f}  {row.name}\n"
        )


def render_caller_callee(view: CallerCallee, total: int, out: TextIO) -> None:
    focus = view.focus
    out.write(f"Caller-Callee of {focus.name}: inclusive {focus.inclusive} ({_percent(focus.inclusive, total):.2f}%), ")
    out.write(f"exclusive {focus.exclusive} ({_percent(focus.exclusive, total):.2f}%) of {total} samples\n")
    out.write("Callers:\n")
    for row in view.callers:
        out.write(f"{row.inclusive:>8} {_percent(row.inclusive, total):>7.2f}  {row.name}\n")
    out.write("Callees:\n")
    for row in view.callees:
        out.write(f"{row.inclusive:>8} {_percent(row.inclusive, total):>7.2f}  {row.name}\n")


def render_tree(root: TreeNode, total: int, out: TextIO, *, fold: float = 0.0) -> None:
    out.write(f"{'Inc':>8} {'Inc %':>7} {'Exc':>8}  Call tree ({total} samples)\n")

    def walk(node: TreeNode, depth: int) -> None:
        out.write(f"{node.inclusive:>8} {_percent(node.inclusive, total):>7.2f} {node.exclusive:>8}  {'  ' * depth}{node.name}\n")
        for child in _ordered(node.children.values()):
            if _percent(child.inclusive, total) >= fold:
                walk(child, depth + 1)

    walk(root, 0)
