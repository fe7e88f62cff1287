"""Which programs may run column-wise: aggregations and predicates over columns of a file's events.

A program qualifies when every event clause has only aggregating statements, each one of
``count``, ``sum``, ``min``, ``max``, ``avg``, ``quantize`` or ``lquantize``, whose value is a
header column (``pid``, ``tid``, ``cpu``), an integer event field (``args->Field``; the runner
also needs every event it reads to have the field where the compiled core's field columns reach
it: ``openetw.probe.run.fields``), or arithmetic over those and constants (``+ - * & | ^``,
unary ``-`` and ``~``: exact modulo 2**64, so wrapped to the expression's type it is what the
compiled clause computes), keyed by header columns, event fields and probe names; a clause's
predicate may compare such values with each other and with constants, or test one alone (true
when not 0), joined by ``&&``, ``||`` and ``!``. A key may also be a string event field (the
runner needs it to be text the field columns read). The program must have no timer or ERROR
clause (their order relative to events would matter). Such a program gives the same
aggregations whether its clauses run record by record or over columns; the runner picks the
column-wise path then.

Values follow D's integer rules as the compiled clauses do: a field is a value of its declared
type; a comparison is made in the checker's common type (unsigned when it is; see
``compare_values``); the shown value of an aggregation is decided by
``openetw.probe.lang.aggregate.aggregate_value``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openetw.probe.lang import ast as A
from openetw.probe.lang.aggregate import value_is_unsigned
from openetw.probe.lang.types import IntType, StringType

__all__ = ["COLUMN_KEYS", "ColumnAgg", "ColumnClause", "ColumnExpr", "columnar_plan", "compare_values"]

COLUMN_KEYS = frozenset({"probeprov", "probemod", "probefunc", "probename", "pid", "tid", "cpu"})
_PROBE_KEYS = {"probeprov": 0, "probemod": 1, "probefunc": 2, "probename": 3}
_COLUMN_VALUES = frozenset({"pid", "tid", "cpu"})
_FUNCS = frozenset({"count", "sum", "min", "max", "avg", "quantize", "lquantize"})
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_ARITHMETIC = frozenset({"+", "-", "*", "&", "|", "^"})  # exact modulo 2**64, as the clause's wrap to its type is

ColumnExpr = tuple[Any, ...]
"""A lowered value or condition: ``("lit", value)``, ``("column", name)`` (a header column,
uint32), ``("field", name, size, signed)``, ``("arith", op, left, right, size, signed)`` (``+ - * &
| ^`` wrapped to that type), ``("unary", op, operand, size, signed)`` (``-`` or ``~``), ``("cmp",
op, left, right, size, signed)`` (compared in that common type; a value tested alone is compared
``!= 0`` in its own type), ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``."""


@dataclass(frozen=True)
class ColumnAgg:
    name: str
    func: str
    keys: tuple[tuple[str, Any], ...]  # ("probe", field number), ("column", name), ("field", (name, size, signed)) or ("text", name)
    value: str | None  # a header column, None for count() or a field
    field: tuple[str, int, bool] | None = None  # or an event field: (name, size, signed)
    params: tuple[int, ...] = ()  # lquantize's low, high, step
    expr: ColumnExpr | None = None  # or arithmetic over columns, fields and constants (``ColumnExpr``)


@dataclass(frozen=True)
class ColumnClause:
    function: str
    descriptions: list[Any]
    aggregations: tuple[ColumnAgg, ...]
    predicate: ColumnExpr | None = None

    def fields(self) -> set[str]:
        """The event fields the clause reads (predicate, keys, values), strings included."""
        found = {agg.field[0] for agg in self.aggregations if agg.field is not None}
        found |= {key[1][0] for agg in self.aggregations for key in agg.keys if key[0] == "field"}
        found |= set().union(*(_expr_fields(agg.expr) for agg in self.aggregations))
        return found | _expr_fields(self.predicate) | self.text_fields()

    def text_fields(self) -> set[str]:
        """The string event fields the clause's keys read."""
        return {key[1] for agg in self.aggregations for key in agg.keys if key[0] == "text"}


def compare_values(op: str, left: Any, right: Any) -> Any:
    """``left op right`` for numpy arrays or scalars already in the common type."""
    import operator

    return {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}[op](left, right)


def _expr_fields(expr: ColumnExpr | None) -> set[str]:
    if expr is None or expr[0] in ("lit", "column"):
        return set()
    if expr[0] == "field":
        return {expr[1]}
    if expr[0] in ("cmp", "arith"):
        return _expr_fields(expr[2]) | _expr_fields(expr[3])
    if expr[0] == "unary":
        return _expr_fields(expr[2])
    return set().union(*(_expr_fields(part) for part in expr[1:]))


def _field_of(arg: A.Expr) -> tuple[str, int, bool] | None:
    path = getattr(arg, "path", None)
    if isinstance(arg, A.Member) and path is not None and len(path) == 1 and isinstance(arg.ty, IntType):
        return (path[0], arg.ty.size, arg.ty.signed)
    return None


def _text_field_of(arg: A.Expr) -> str | None:
    path = getattr(arg, "path", None)
    if isinstance(arg, A.Member) and path is not None and len(path) == 1 and isinstance(arg.ty, StringType):
        return str(path[0])
    return None


def _header_column(arg: A.Expr, globals_declared: set[str]) -> str | None:
    if isinstance(arg, A.Ident) and not arg.scope and arg.name in _COLUMN_VALUES and arg.name not in globals_declared:
        return arg.name
    return None


def _value(arg: A.Expr, globals_declared: set[str]) -> ColumnExpr | None:
    if isinstance(arg, A.IntLit):
        return ("lit", arg.value)
    if isinstance(arg, A.Unary) and arg.op == "-" and isinstance(arg.operand, A.IntLit):
        return ("lit", -arg.operand.value)
    field = _field_of(arg)
    if field is not None:
        return ("field", *field)
    column = _header_column(arg, globals_declared)
    if column is not None:
        return ("column", column)
    ty = getattr(arg, "ty", None)
    if isinstance(arg, A.Binary) and arg.op in _ARITHMETIC and isinstance(ty, IntType) and isinstance(arg.left.ty, IntType) \
            and isinstance(arg.right.ty, IntType):  # fmt: skip
        left, right = _value(arg.left, globals_declared), _value(arg.right, globals_declared)
        return None if left is None or right is None else ("arith", arg.op, left, right, ty.size, ty.signed)
    if isinstance(arg, A.Unary) and arg.op in ("-", "~", "+") and isinstance(ty, IntType) and isinstance(arg.operand.ty, IntType):
        inner = _value(arg.operand, globals_declared)
        if inner is None or arg.op == "+":
            return inner
        return ("unary", arg.op, inner, ty.size, ty.signed)
    return None


def _condition(expr: A.Expr, globals_declared: set[str]) -> ColumnExpr | None:
    """The lowered form of a predicate, or ``None`` when it needs records."""
    if isinstance(expr, A.Binary) and expr.op in _COMPARISONS:
        common = getattr(expr, "common", None)
        left, right = _value(expr.left, globals_declared), _value(expr.right, globals_declared)
        if left is None or right is None or not isinstance(common, IntType) or not isinstance(expr.left.ty, IntType) or not isinstance(expr.right.ty, IntType):
            return None
        return ("cmp", expr.op, left, right, common.size, common.signed)
    if isinstance(expr, A.Binary) and expr.op in ("&&", "||"):
        a, b = _condition(expr.left, globals_declared), _condition(expr.right, globals_declared)
        return None if a is None or b is None else ("and" if expr.op == "&&" else "or", a, b)
    if isinstance(expr, A.Unary) and expr.op == "!":
        inner = _condition(expr.operand, globals_declared)
        return None if inner is None else ("not", inner)
    ty = getattr(expr, "ty", None)
    value = _value(expr, globals_declared) if isinstance(ty, IntType) else None
    if value is not None:  # a value tested alone: true when not 0
        return ("cmp", "!=", value, ("lit", 0), ty.size, ty.signed)  # type: ignore[union-attr]
    return None


def columnar_plan(program: A.Program, clauses: list[Any], globals_declared: set[str]) -> list[ColumnClause] | None:
    """The column-wise form of the event clauses, or ``None`` when some clause needs records."""
    plan = []
    for clause, info in zip(program.clauses, clauses, strict=False):
        specials = [d.special for d in info.descriptions]
        if any(s in ("timer", "ERROR") for s in specials):
            return None
        if all(s in ("BEGIN", "END") for s in specials):
            continue
        if any(s is not None for s in specials):
            return None
        predicate = None
        if clause.predicate is not None:
            predicate = _condition(clause.predicate, globals_declared)
            if predicate is None:
                return None
        aggregations = []
        for stmt in clause.body:
            if not isinstance(stmt, A.ExprStmt) or not isinstance(stmt.expr, A.AggCall):
                return None
            agg = _aggregation(stmt.expr, globals_declared)
            if agg is None:
                return None
            aggregations.append(agg)
        plan.append(ColumnClause(info.function, info.descriptions, tuple(aggregations), predicate))
    return plan if plan else None


def _aggregation(call: A.AggCall, globals_declared: set[str]) -> ColumnAgg | None:
    if call.func not in _FUNCS:
        return None
    keys: list[tuple[str, Any]] = []
    for key in call.keys:
        field = _field_of(key)
        if field is not None:
            keys.append(("field", field))
            continue
        text = _text_field_of(key)
        if text is not None:
            keys.append(("text", text))
            continue
        if not isinstance(key, A.Ident) or key.scope or key.name not in COLUMN_KEYS or key.name in globals_declared:
            return None
        keys.append(("probe", _PROBE_KEYS[key.name]) if key.name in _PROBE_KEYS else ("column", key.name))
    value = None
    event_field = None
    expr = None
    params: tuple[int, ...] = ()
    if call.func != "count":
        arg = call.args[0]
        event_field = _field_of(arg)
        if event_field is None:
            value = _header_column(arg, globals_declared)
            if value is None:
                expr = _value(arg, globals_declared)
                if expr is None or expr[0] not in ("arith", "unary"):
                    return None
                if call.func in ("quantize", "lquantize") and value_is_unsigned(expr[-2], expr[-1]):
                    return None  # buckets of 64-bit unsigned values: record by record
        elif call.func in ("quantize", "lquantize") and value_is_unsigned(event_field[1], event_field[2]):
            return None  # buckets of 64-bit unsigned values: record by record
        if call.func == "lquantize":
            numbers = []
            for extra in call.args[1:]:
                lowered = _value(extra, globals_declared)
                if lowered is None or lowered[0] != "lit":
                    return None
                numbers.append(lowered[1])
            params = tuple(numbers)
    return ColumnAgg(call.name, call.func, tuple(keys), value, event_field, params, expr)
