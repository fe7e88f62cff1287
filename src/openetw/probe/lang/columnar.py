"""Which programs may run column-wise: header-only aggregations over a file's index.

A program qualifies when every event clause has no predicate and only aggregates ``count()``,
``sum``/``min``/``max`` of a header column or of an integer event field (``args->Field``; the
runner also needs the field at a fixed offset in every event it reads), keyed by header columns
and probe names, and the
program has no timer or ERROR clause (their order relative to events would matter). Such a
program gives the same aggregations whether its clauses run record by record or over columns;
the runner picks the column-wise path then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openetw.probe.lang import ast as A
from openetw.probe.lang.types import IntType

__all__ = ["COLUMN_KEYS", "ColumnAgg", "ColumnClause", "columnar_plan"]

COLUMN_KEYS = frozenset({"probeprov", "probemod", "probefunc", "probename", "pid", "tid", "cpu"})
_PROBE_KEYS = {"probeprov": 0, "probemod": 1, "probefunc": 2, "probename": 3}
_COLUMN_VALUES = frozenset({"pid", "tid", "cpu"})
_FUNCS = frozenset({"count", "sum", "min", "max"})


@dataclass(frozen=True)
class ColumnAgg:
    name: str
    func: str
    keys: tuple[tuple[str, Any], ...]  # ("probe", field number) or ("column", name)
    value: str | None  # a header column, None for count()
    field: tuple[str, int, bool] | None = None  # or an event field: (name, size, signed)


@dataclass(frozen=True)
class ColumnClause:
    function: str
    descriptions: list[Any]
    aggregations: tuple[ColumnAgg, ...]


def columnar_plan(program: A.Program, clauses: list[Any], globals_declared: set[str]) -> list[ColumnClause] | None:
    """The column-wise form of the event clauses, or ``None`` when some clause needs records."""
    plan = []
    for clause, info in zip(program.clauses, clauses, strict=False):
        specials = [d.special for d in info.descriptions]
        if any(s in ("timer", "ERROR") for s in specials):
            return None
        if all(s in ("BEGIN", "END") for s in specials):
            continue
        if any(s is not None for s in specials) or clause.predicate is not None:
            return None
        aggregations = []
        for stmt in clause.body:
            if not isinstance(stmt, A.ExprStmt) or not isinstance(stmt.expr, A.AggCall):
                return None
            call = stmt.expr
            if call.func not in _FUNCS:
                return None
            keys = []
            for key in call.keys:
                if not isinstance(key, A.Ident) or key.scope or key.name not in COLUMN_KEYS or key.name in globals_declared:
                    return None
                keys.append(("probe", _PROBE_KEYS[key.name]) if key.name in _PROBE_KEYS else ("column", key.name))
            value = None
            event_field = None
            if call.func != "count":
                arg = call.args[0]
                path = getattr(arg, "path", None)
                if isinstance(arg, A.Member) and path is not None and len(path) == 1 and isinstance(arg.ty, IntType):
                    event_field = (path[0], arg.ty.size, arg.ty.signed)
                elif not isinstance(arg, A.Ident) or arg.scope or arg.name not in _COLUMN_VALUES or arg.name in globals_declared:
                    return None
                else:
                    value = arg.name
            aggregations.append(ColumnAgg(call.name, call.func, tuple(keys), value, event_field))
        plan.append(ColumnClause(info.function, info.descriptions, tuple(aggregations)))
    return plan if plan else None
