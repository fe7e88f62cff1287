"""The XPath's record back end: a query evaluated over one event's ``Event`` element tree, as XPath
1.0 evaluates it (node sets compared item by item, strings exactly, two times as times).

Pure. This is the reference the other back ends are held to: ``.evtx`` files, ``.etl`` files and
live events are tested here, and what the columns cannot answer exactly is tested here row by row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from openetw.events.xpath.tree import (
    Call,
    Compare,
    Literal,
    Logical,
    Path,
    Step,
    XmlElement,
    filetime_from_text,
    number_value,
)

__all__ = ["matches"]


def matches(path: Path, event: XmlElement, now: int) -> bool:
    """Whether the selector ``path`` selects ``event`` (an ``Event`` element) at ``now`` (FILETIME)."""
    document = XmlElement("#document", children=[event])
    return bool(_select(path.steps[:1] if len(path.steps) == 1 else path.steps, [document], now))


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list):
        return [v if isinstance(v, str) else v.string_value() for v in value]
    return None


def _truth(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value)
    if isinstance(value, str):
        return value != ""
    if isinstance(value, float) and math.isnan(value):
        return False
    return bool(value)


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _compare(op: str, left: Any, right: Any) -> bool:
    test = _OPS[op]
    left_set, right_set = _strings(left), _strings(right)
    if left_set is not None and right_set is not None:
        return any(_compare(op, a, b) for a in left_set for b in right_set)
    if left_set is not None:
        return any(_compare(op, item, right) for item in left_set)
    if right_set is not None:
        return any(_compare(op, left, item) for item in right_set)
    if isinstance(left, bool) or isinstance(right, bool):
        return test(_truth(left), _truth(right)) if op in ("=", "!=") else test(int(_truth(left)), int(_truth(right)))
    if isinstance(left, str) and isinstance(right, str):
        if op in ("=", "!="):
            return test(left, right)
        left_time, right_time = filetime_from_text(left), filetime_from_text(right)
        if left_time is not None and right_time is not None:  # TimeCreated[@SystemTime>='2024-…Z']
            return test(left_time, right_time)
    a = number_value(left) if isinstance(left, str) else left
    b = number_value(right) if isinstance(right, str) else right
    if (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return op == "!="
    return test(a, b)


class _Context:
    __slots__ = ("node", "position", "now")

    def __init__(self, node: XmlElement, position: int, now: int) -> None:
        self.node = node
        self.position = position
        self.now = now


def _evaluate(expr: Any, ctx: _Context) -> Any:
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Path):
        return _select(expr.steps, [ctx.node], ctx.now)
    if isinstance(expr, Compare):
        return _compare(expr.op, _evaluate(expr.left, ctx), _evaluate(expr.right, ctx))
    if isinstance(expr, Logical):
        if expr.op == "and":
            return all(_truth(_evaluate(item, ctx)) for item in expr.items)
        return any(_truth(_evaluate(item, ctx)) for item in expr.items)
    if isinstance(expr, Call):
        return _call(expr, ctx)
    raise AssertionError(expr)


def _asnumber_value(value: Any) -> int | float:
    if isinstance(value, list):
        strings = _strings(value) or []
        return number_value(strings[0]) if strings else math.nan
    if isinstance(value, str):
        return number_value(value)
    if isinstance(value, bool):
        return int(value)
    return value  # type: ignore[no-any-return]


def _as_time(value: Any) -> int | None:
    if isinstance(value, list):
        strings = _strings(value) or []
        return filetime_from_text(strings[0]) if strings else None
    if isinstance(value, str):
        return filetime_from_text(value)
    return None


def _call(call: Call, ctx: _Context) -> Any:
    if call.name == "position":
        return ctx.position
    if call.name == "Band":
        a, b = (_asnumber_value(_evaluate(arg, ctx)) for arg in call.args)
        if not isinstance(a, int) or not isinstance(b, int):
            return math.nan
        return (a & b) & 0xFFFFFFFFFFFFFFFF
    times = [_as_time(_evaluate(arg, ctx)) for arg in call.args]
    if any(t is None for t in times):
        return math.nan
    start = times[0]
    end = times[1] if len(times) == 2 else ctx.now
    assert start is not None and end is not None
    return abs(end - start) // 10_000


def _select(steps: tuple[Step, ...], nodes: list[Any], now: int) -> list[Any]:
    for step in steps:
        found: list[Any] = []
        for node in nodes:
            if not isinstance(node, XmlElement):
                continue
            if step.attribute:
                if step.name in node.attributes:
                    found.append(node.attributes[step.name])
                continue
            matching = [c for c in node.children if c.name == step.name]
            for predicate in step.predicates:
                kept = []
                for position, child in enumerate(matching, 1):
                    value = _evaluate(predicate, _Context(child, position, now))
                    # a number alone is a position; Band() and the rest are tested for truth
                    is_position = isinstance(predicate, Literal) and isinstance(value, (int, float))
                    if (value == position) if is_position else _truth(value):
                        kept.append(child)
                matching = kept
            found.extend(matching)
        nodes = found
    return nodes
