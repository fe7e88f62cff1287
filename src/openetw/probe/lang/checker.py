"""The checker: resolves types and variables of a parsed program and annotates every expression.

Type errors (a string where an integer is needed, a member or event field that does not exist,
an aggregation used two ways) are found here, before anything runs, with the D line and column.
``fields_of(probe texts)`` (from the probe catalog) types ``args->Field``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openetw.probe.lang import ast as A
from openetw.probe.lang.aggregate import value_is_unsigned
from openetw.probe.lang.errors import ProbeCompileError
from openetw.probe.lang.etw_types import ETW_TYPES
from openetw.probe.lang.types import (
    EVENT_HEADER,
    INT,
    INT64,
    STRING,
    UINT64,
    VOID,
    ArrayType,
    IntType,
    PointerType,
    StringType,
    StructType,
    Type,
    arith_type,
    base_type,
)  # fmt: skip

__all__ = ["AGGREGATIONS", "DESTRUCTIVE", "AggSpec", "CheckedProgram", "FieldsOf", "check"]

FieldsOf = Callable[[list[str]], "dict[str, Any] | None"]
"""The fields (name -> Type, or name -> dict for a struct) the events of these probes have;
``None`` when no matched event has a known schema."""

_U32 = IntType("uint32_t", 4, False)
BUILTINS: dict[str, Type] = {
    "pid": _U32, "tid": _U32, "ppid": _U32, "cpu": _U32, "timestamp": UINT64, "walltimestamp": UINT64,
    "execname": STRING, "probeprov": STRING, "probemod": STRING, "probefunc": STRING, "probename": STRING,
    "errno": IntType("int", 4, True), **{f"arg{i}": INT64 for i in range(10)},
}  # fmt: skip
AGGREGATIONS: dict[str, tuple[int, int]] = {  # name -> (min args, max args)
    "count": (0, 0), "sum": (1, 1), "avg": (1, 1), "min": (1, 1), "max": (1, 1), "stddev": (1, 1),
    "quantize": (1, 1), "lquantize": (4, 4), "llquantize": (5, 5),
}  # fmt: skip
# Subroutines and actions: name -> (min args, max args, result type)
FUNCTIONS: dict[str, tuple[int, int, Type]] = {
    "strlen": (1, 1, UINT64), "strjoin": (2, 2, STRING), "substr": (2, 3, STRING), "strstr": (2, 2, STRING),
    "index": (2, 3, INT64), "rindex": (2, 3, INT64), "basename": (1, 1, STRING), "dirname": (1, 1, STRING),
    "lltostr": (1, 2, STRING), "stringof": (1, 1, STRING), "toupper": (1, 1, STRING), "tolower": (1, 1, STRING),
    "strtoll": (1, 2, INT64),
    "trace": (1, 1, VOID), "printf": (1, 99, VOID), "print": (1, 1, VOID), "printa": (1, 99, VOID),
    "exit": (1, 1, VOID), "trunc": (1, 2, VOID), "clear": (1, 1, VOID), "normalize": (2, 2, VOID),
    "denormalize": (1, 1, VOID), "sizeof": (1, 1, UINT64),
    "etw_trace": (5, 5 + 3 * 128, VOID), "system": (1, 99, VOID), "stop": (0, 0, VOID),
    "stack": (0, 1, STRING), "ustack": (0, 2, STRING), "copyinstr": (1, 2, STRING),
}  # fmt: skip
DESTRUCTIVE = frozenset({"system", "stop"})
"""Actions that change the system: refused unless destructive actions are allowed (``-w``)."""
_STRING_ARGS = {"strlen": (0,), "strjoin": (0, 1), "substr": (0,), "strstr": (0, 1), "index": (0, 1), "rindex": (0, 1),
                "basename": (0,), "dirname": (0,), "toupper": (0,), "tolower": (0,), "strtoll": (0,)}  # fmt: skip
_INT_ARGS = {"substr": (1, 2), "index": (2,), "rindex": (2,), "lltostr": (0, 1), "exit": (0,), "trunc": (1,), "normalize": (1,), "strtoll": (1,),
             "stack": (0,), "ustack": (0, 1), "copyinstr": (0, 1)}  # fmt: skip


@dataclass
class AggSpec:
    """One aggregation: its function, key types and (for lquantize/llquantize) parameters."""

    name: str
    func: str
    keys: list[Type]
    params: tuple[int, ...] = ()
    line: int = 0
    unsigned: bool = False
    """Its values are of a 64-bit unsigned type (``uint64_t``, a pointer): sums wrap and show unsigned."""


@dataclass
class CheckedProgram:
    program: A.Program
    globals: dict[str, Type] = field(default_factory=dict)
    arrays: dict[str, tuple[list[Type], Type]] = field(default_factory=dict)
    thread_vars: dict[str, Type] = field(default_factory=dict)
    clause_vars: list[dict[str, Type]] = field(default_factory=list)
    aggregations: dict[str, AggSpec] = field(default_factory=dict)
    structs: dict[str, StructType] = field(default_factory=dict)
    destructive: list[tuple[str, int, int]] = field(default_factory=list)  # (action, line, column)


def check(program: A.Program, fields_of: FieldsOf | None = None) -> CheckedProgram:
    return _Checker(program, fields_of).run()


class _Checker:
    def __init__(self, program: A.Program, fields_of: FieldsOf | None) -> None:
        self.program = program
        self.fields_of = fields_of
        self.out = CheckedProgram(program)
        self.typedefs: dict[str, Type] = {}
        self.structs: dict[str, StructType] = {"nt`_EVENT_HEADER": EVENT_HEADER, "_EVENT_HEADER": EVENT_HEADER}
        self.pending: dict[tuple[str, str], list[A.Assign]] = {}
        self.typing: set[int] = set()
        self.clause: A.Clause | None = None
        self.this_vars: dict[str, Type] = {}
        self.fields_cache: dict[int, dict[str, Any] | None] = {}
        self.agg_refs: list[A.AggRef] = []
        self.inferring: set[tuple[str, str]] = set()

    def error(self, message: str, node: A.Node | Any) -> ProbeCompileError:
        return ProbeCompileError(message, line=node.line, column=node.column, source=self.program.source)

    # -- declarations ---------------------------------------------------------------------------
    def resolve(self, name: A.TypeName) -> Type:
        if name.base.startswith("struct "):
            tag = name.base[len("struct ") :]
            ty: Type | None = self.structs.get(tag)
            if ty is None:
                raise self.error(f"unknown struct '{tag}'", name)
        else:
            ty = self.typedefs.get(name.base) or base_type(name.base)
            if ty is None:
                raise self.error(f"unknown type '{name.base}'", name)
        for _ in range(name.pointers):
            ty = PointerType(ty)
        if name.array is not None:
            ty = ArrayType(ty, name.array)
        return ty

    def declare(self) -> None:
        for decl in self.program.decls:
            if decl.kind == "struct":
                struct = StructType(decl.name, display=f"struct {decl.name}")
                for type_name, member, line, column in decl.members or []:
                    if member in struct.members:
                        message = f"member '{member}' is declared twice in struct {decl.name}"
                        raise ProbeCompileError(message, line=line, column=column, source=self.program.source)
                    ty = self.resolve(type_name)
                    if isinstance(ty, (StringType,)) or ty is VOID:
                        raise ProbeCompileError(f"member '{member}' cannot have type {ty}", line=line, column=column, source=self.program.source)
                    struct.add(member, ty)
                self.structs[decl.name] = struct.finish()
            elif decl.kind == "typedef":
                assert decl.type is not None
                ty = self.resolve(decl.type)
                if isinstance(ty, StructType) and ty.display.startswith("struct ") and ty is not EVENT_HEADER:
                    ty.display = decl.name  # print() shows the struct by its typedef name
                self.typedefs[decl.name] = ty
            else:
                assert decl.type is not None
                ty = self.resolve(decl.type)
                if ty is VOID or isinstance(ty, StructType):
                    raise self.error(f"variable '{decl.name}' cannot have type {ty}", decl)
                if decl.name in self.out.globals:
                    raise self.error(f"variable '{decl.name}' is declared twice", decl)
                self.out.globals[decl.name] = ty
        for name, ty in self.typedefs.items():
            if isinstance(ty, StructType) and ty.display.startswith("struct <"):
                ty.display = name
        self.out.structs = dict(self.structs)

    # -- the program ----------------------------------------------------------------------------
    def run(self) -> CheckedProgram:
        self.declare()
        for clause in self.program.clauses:
            for stmt in clause.body:
                self._collect(stmt, clause)
            if clause.predicate is not None:
                self._collect_expr(clause.predicate, clause)
        for clause in self.program.clauses:
            self.clause = clause
            self.this_vars = {}
            if clause.predicate is not None:
                self.expr(clause.predicate)
                self.need_scalar(clause.predicate, "a predicate")
            for stmt in clause.body:
                self.stmt(stmt)
            self.out.clause_vars.append(self.this_vars)
        for ref in self.agg_refs:
            if ref.name not in self.out.aggregations:
                raise self.error(f"@{ref.name} is never given an aggregating function", ref)
        return self.out

    def _collect(self, stmt: A.Stmt, clause: A.Clause) -> None:
        if isinstance(stmt, A.Block):
            for inner in stmt.body:
                self._collect(inner, clause)
        elif isinstance(stmt, A.If):
            self._collect_expr(stmt.test, clause)
            self._collect(stmt.then, clause)
            if stmt.other is not None:
                self._collect(stmt.other, clause)
        elif isinstance(stmt, A.ExprStmt) and isinstance(stmt.expr, A.Expr):
            self._collect_expr(stmt.expr, clause)

    def _collect_expr(self, expr: Any, clause: A.Clause) -> None:
        if isinstance(expr, A.IncDec):
            target = expr.target
            if isinstance(target, A.Ident) and target.scope != "this":
                self.pending.setdefault((target.scope, target.name), []).append(expr)  # type: ignore[arg-type]
            elif isinstance(target, A.Index):
                self.pending.setdefault(("[]", target.name), []).append(expr)  # type: ignore[arg-type]
        if isinstance(expr, A.Assign):
            target = expr.target
            if isinstance(target, A.Ident) and target.scope != "this":
                self.pending.setdefault((target.scope, target.name), []).append(expr)
            elif isinstance(target, A.Index):
                self.pending.setdefault(("[]", target.name), []).append(expr)
        if isinstance(expr, A.Node):
            for value in vars(expr).values():
                if isinstance(value, A.Expr):
                    self._collect_expr(value, clause)
                elif isinstance(value, list):
                    for item in value:
                        if isinstance(item, A.Expr):
                            self._collect_expr(item, clause)

    def _infer(self, scope: str, name: str) -> Type | None:
        """The type of a variable from its first assignment (typed now if not yet); a variable read
        while its own assignment is being typed (``n = n + 1``) is taken to be an integer."""
        if (scope, name) in self.inferring:
            return INT64
        self.inferring.add((scope, name))
        try:
            return self._infer_from(scope, name)
        finally:
            self.inferring.discard((scope, name))

    def _infer_from(self, scope: str, name: str) -> Type | None:
        for assign in self.pending.get((scope, name), []):
            if isinstance(assign, A.IncDec):
                return INT64
            if id(assign) in self.typing:
                continue
            self.typing.add(id(assign))
            saved = (self.clause, self.this_vars)
            try:
                return self.assigned_type(assign.value, assign.op)
            finally:
                self.clause, self.this_vars = saved
                self.typing.discard(id(assign))
        return None

    def assigned_type(self, value: A.Expr, op: str) -> Type:
        ty = value.ty if value.ty is not None else self.expr(value)
        if op != "=":
            return INT64
        if isinstance(ty, IntType):
            return ty if ty.size == 8 else INT64 if ty.signed else UINT64
        if isinstance(ty, (StringType, PointerType)):
            return ty
        raise self.error(f"a value of type {ty} cannot be stored in a variable", value)

    # -- statements -----------------------------------------------------------------------------
    def stmt(self, stmt: A.Stmt) -> None:
        if isinstance(stmt, A.Block):
            for inner in stmt.body:
                self.stmt(inner)
        elif isinstance(stmt, A.If):
            self.expr(stmt.test)
            self.need_scalar(stmt.test, "a condition")
            self.stmt(stmt.then)
            if stmt.other is not None:
                self.stmt(stmt.other)
        elif isinstance(stmt, A.ExprStmt):
            if isinstance(stmt.expr, A.AggCall):
                self.aggregation(stmt.expr)
            else:
                self.expr(stmt.expr)

    def aggregation(self, call: A.AggCall) -> None:
        where = getattr(call, "func_at", (call.line, call.column))
        at = A.Node(*where)
        limits = AGGREGATIONS.get(call.func)
        if limits is None:
            raise self.error(f"'{call.func}' is not an aggregating function (count, sum, avg, min, max, stddev, quantize, lquantize, llquantize)", at)
        if not limits[0] <= len(call.args) <= limits[1]:
            raise self.error(f"{call.func}() takes {limits[0]} argument(s), not {len(call.args)}", at)
        keys = []
        for key in call.keys:
            ty = self.expr(key)
            if isinstance(ty, StructType) or ty is VOID:
                raise self.error(f"an aggregation key cannot be of type {ty}", key)
            keys.append(STRING if isinstance(ty, StringType) else INT64 if ty.is_int() else ty)
        unsigned = False
        for number, arg in enumerate(call.args):
            ty = self.expr(arg)
            self.need_int(arg, f"{call.func}()")
            if number == 0 and call.func != "count":
                unsigned = isinstance(ty, PointerType) or (isinstance(ty, IntType) and value_is_unsigned(ty.size, ty.signed))
        params: tuple[int, ...] = ()
        if call.func in ("lquantize", "llquantize"):
            values = []
            for arg in call.args[1:]:
                if not isinstance(arg, A.IntLit) and not (isinstance(arg, A.Unary) and arg.op == "-" and isinstance(arg.operand, A.IntLit)):
                    raise self.error(f"{call.func}() parameters must be integer constants", arg)
                values.append(arg.value if isinstance(arg, A.IntLit) else -arg.operand.value)  # type: ignore[attr-defined]
            params = tuple(values)
            if call.func == "lquantize":
                low, high, step = params
                if step <= 0 or high <= low:
                    raise self.error("lquantize() needs low < high and a positive step", call.args[1])
            else:
                factor, low_mag, high_mag, steps = params
                if factor < 2 or low_mag < 0 or high_mag < low_mag or steps < 1 or (steps > factor ** (low_mag or 1) and steps % factor):
                    raise self.error("llquantize() needs factor >= 2, 0 <= low <= high and steps dividing factor**low", call.args[1])
        spec = AggSpec(call.name, call.func, keys, params, call.line, unsigned)
        known = self.out.aggregations.get(call.name)
        if known is not None and known.unsigned != unsigned:
            known.unsigned = False  # unsigned and signed values in one aggregation: kept signed
        shown = f"@{call.name}"
        if known is None:
            self.out.aggregations[call.name] = spec
        elif known.func != spec.func or known.params != spec.params:
            raise self.error(f"{shown} is {known.func}() at line {known.line}, not {spec.func}()", at)
        elif len(known.keys) != len(spec.keys) or any(a != b for a, b in zip(known.keys, spec.keys, strict=False)):
            raise self.error(f"{shown} has keys ({', '.join(map(str, known.keys))}) at line {known.line}, not ({', '.join(map(str, spec.keys))})", call)

    # -- expressions ----------------------------------------------------------------------------
    def need_int(self, expr: A.Expr, what: str) -> None:
        if not expr.ty.is_int():
            raise self.error(f"{what} needs an integer, not {expr.ty}", expr)

    def need_scalar(self, expr: A.Expr, what: str) -> None:
        if not (expr.ty.is_int() or isinstance(expr.ty, StringType)):
            raise self.error(f"{what} needs an integer or a string, not {expr.ty}", expr)

    def expr(self, expr: A.Expr) -> Type:
        ty = self._expr(expr)
        expr.ty = ty
        return ty

    def _expr(self, e: A.Expr) -> Type:
        if isinstance(e, A.IntLit):
            if "u" in e.suffix:
                return UINT64 if e.value > 0xFFFFFFFF or "l" in e.suffix else IntType("unsigned int", 4, False)
            if e.value > 0x7FFFFFFFFFFFFFFF:
                return UINT64
            if e.value > 0x7FFFFFFF or "l" in e.suffix:
                return INT64
            return INT
        if isinstance(e, A.StrLit):
            return STRING
        if isinstance(e, A.Ident):
            return self.variable(e)
        if isinstance(e, A.Index):
            return self.array(e)
        if isinstance(e, A.AggRef):
            raise self.error(f"@{e.name} can only be given to printa, trunc, clear or normalize", e)
        if isinstance(e, A.Unary):
            return self.unary(e)
        if isinstance(e, A.IncDec):
            target = self.expr(e.target)
            self.lvalue(e.target)
            if not target.is_int():
                raise self.error(f"'{e.op}' needs an integer variable, not {target}", e)
            return target
        if isinstance(e, A.Binary):
            return self.binary(e)
        if isinstance(e, A.Conditional):
            self.expr(e.test)
            self.need_scalar(e.test, "'?:'")
            a, b = self.expr(e.then), self.expr(e.other)
            if isinstance(a, StringType) and isinstance(b, StringType):
                return STRING
            if a.is_int() and b.is_int():
                return a if isinstance(a, PointerType) and a == b else arith_type(a, b)
            raise self.error(f"'?:' branches have types {a} and {b}", e)
        if isinstance(e, A.Assign):
            return self.assign(e)
        if isinstance(e, A.Call):
            return self.call(e)
        if isinstance(e, A.Member):
            return self.member(e)
        if isinstance(e, A.Cast):
            target = self.resolve(e.type)
            source = self.expr(e.operand)
            if isinstance(target, StructType):
                raise self.error(f"cannot cast to a struct ({target}); cast to a pointer to it", e)
            if isinstance(target, StringType):
                if not isinstance(source, StringType):
                    raise self.error(f"cannot cast {source} to string (use lltostr or stringof)", e)
                return STRING
            if not source.is_int():
                raise self.error(f"cannot cast {source} to {target}", e)
            return target
        if isinstance(e, A.SizeofType):
            ty = self.resolve(e.type)
            e.size = ty.size  # type: ignore[attr-defined]
            return UINT64
        raise self.error("unsupported expression", e)

    def variable(self, e: A.Ident) -> Type:
        if e.scope == "this":
            ty = self.this_vars.get(e.name)
            if ty is None:
                raise self.error(f"this->{e.name} is read before it is assigned in this clause", e)
            return ty
        if e.scope == "self":
            ty = self.out.thread_vars.get(e.name)
            if ty is None:
                ty = self._infer("self", e.name)
                if ty is None:
                    raise self.error(f"self->{e.name} is never assigned", e)
                self.out.thread_vars[e.name] = ty
            return ty
        if e.name in BUILTINS:
            return BUILTINS[e.name]
        if e.name == "args":
            raise self.error("args needs a field: args->Name", e)
        if e.name in ("self", "this"):
            raise self.error(f"{e.name} needs a variable name: {e.name}->name", e)
        ty = self.out.globals.get(e.name)
        if ty is None:
            if e.name in self.out.arrays or ("[]", e.name) in self.pending:
                raise self.error(f"'{e.name}' is an associative array: index it with {e.name}[key]", e)
            ty = self._infer("", e.name)
            if ty is None:
                raise self.error(f"undefined variable '{e.name}'", e)
            self.out.globals[e.name] = ty
        return ty

    def array(self, e: A.Index) -> Type:
        keys = [self.expr(key) for key in e.keys]
        for key in e.keys:
            if not (key.ty.is_int() or isinstance(key.ty, StringType)):
                raise self.error(f"an array key cannot be of type {key.ty}", key)
        kinds: list[Type] = [STRING if isinstance(k, StringType) else INT64 for k in keys]
        known = self.out.arrays.get(e.name)
        if known is None:
            if e.name in self.out.globals or e.name in BUILTINS:
                raise self.error(f"'{e.name}' is not an associative array", e)
            value = self._infer("[]", e.name)
            if value is None:
                raise self.error(f"associative array '{e.name}' is never assigned", e)
            known = self.out.arrays.setdefault(e.name, (kinds, value))
        if known[0] != kinds:
            raise self.error(f"'{e.name}' has keys ({', '.join(map(str, known[0]))}), not ({', '.join(map(str, kinds))})", e)
        return known[1]

    def lvalue(self, target: A.Expr) -> None:
        if isinstance(target, A.Ident) and not target.scope and (target.name in BUILTINS or target.name == "args"):
            raise self.error(f"'{target.name}' is a built-in variable and cannot be assigned", target)
        if isinstance(target, (A.Member, A.Unary)):
            raise self.error("memory of a traced event cannot be assigned", target)

    def assign(self, e: A.Assign) -> Type:
        target = e.target
        self.lvalue(target)
        value = self.expr(e.value)
        if isinstance(value, StructType) or value is VOID:
            raise self.error(f"a value of type {value} cannot be assigned", e.value)
        if e.op != "=" and not value.is_int():
            raise self.error(f"'{e.op}' needs an integer, not {value}", e.value)
        if isinstance(target, A.Ident) and target.scope == "this" and target.name not in self.this_vars:
            self.this_vars[target.name] = self.assigned_type(e.value, e.op)
        current = self.expr(target)
        if isinstance(current, StringType) != isinstance(value, StringType):
            what = target.name if isinstance(target, (A.Ident, A.Index)) else "the target"
            raise self.error(f"cannot assign {value} to '{what}' of type {current}", e)
        if e.op != "=" and not current.is_int():
            raise self.error(f"'{e.op}' needs an integer variable, not {current}", e)
        return current

    def unary(self, e: A.Unary) -> Type:
        ty = self.expr(e.operand)
        if e.op == "*":
            if not isinstance(ty, PointerType):
                raise self.error(f"'*' needs a pointer, not {ty}", e)
            if ty.target is VOID:
                raise self.error("cannot dereference a void pointer", e)
            return ty.target
        if e.op == "&":
            if not isinstance(e.operand, (A.Member, A.Unary)) or not isinstance(ty, (StructType, ArrayType)):
                raise self.error("'&' takes a struct member read from memory", e)
            return PointerType(ty)
        if e.op == "!":
            self.need_scalar(e.operand, "'!'")
            return INT
        self.need_int(e.operand, f"'{e.op}'")
        return arith_type(ty, INT)

    def binary(self, e: A.Binary) -> Type:
        a, b = self.expr(e.left), self.expr(e.right)
        op = e.op
        if op in ("&&", "||", "^^"):
            self.need_scalar(e.left, f"'{op}'")
            self.need_scalar(e.right, f"'{op}'")
            return INT
        strings = isinstance(a, StringType), isinstance(b, StringType)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            if strings[0] != strings[1]:
                raise self.error(f"cannot compare {a} with {b}", e)
            if not strings[0]:
                self.need_int(e.left, f"'{op}'")
                self.need_int(e.right, f"'{op}'")
                e.common = arith_type(a, b)  # type: ignore[attr-defined]
            return INT
        if any(strings):
            raise self.error(f"operator '{op}' cannot be applied to a string", e)
        self.need_int(e.left, f"'{op}'")
        self.need_int(e.right, f"'{op}'")
        if op in ("+", "-") and isinstance(a, PointerType) and not isinstance(b, PointerType):
            return a
        if op == "+" and isinstance(b, PointerType) and not isinstance(a, PointerType):
            return b
        if op in ("<<", ">>"):
            return arith_type(a, INT)
        return arith_type(a, b)

    def member(self, e: A.Member) -> Type:
        if isinstance(e.base, A.Ident) and e.base.name == "args" and not e.base.scope and e.arrow:
            return self.event_field(e, [e.name])
        if isinstance(e.base, A.Member) and _args_path(e.base) is not None and not e.arrow:
            path = _args_path(e.base)
            assert path is not None
            return self.event_field(e, [*path, e.name])
        base = self.expr(e.base)
        if e.arrow:
            if not isinstance(base, PointerType) or not isinstance(base.target, StructType):
                raise self.error(f"'->' needs a pointer to a struct, not {base}", e)
            struct = base.target
        else:
            if not isinstance(base, StructType):
                raise self.error(f"'.' needs a struct, not {base}", e)
            struct = base
        found = struct.members.get(e.name)
        if found is None:
            raise self.error(f"{struct} has no member '{e.name}' (members: {', '.join(struct.members)})", e)
        e.offset = found[1]  # type: ignore[attr-defined]
        return found[0]

    def event_field(self, e: A.Member, path: list[str]) -> Type:
        assert self.clause is not None
        key = id(self.clause)
        if key not in self.fields_cache:
            self.fields_cache[key] = self.fields_of([p.text for p in self.clause.probes]) if self.fields_of else None
        fields = self.fields_cache[key]
        shown = "args->" + ".".join(path)
        if fields is None:
            raise self.error(f"{shown}: no event these probes match has a known schema", e)
        e.path = path  # type: ignore[attr-defined]
        current: Any = fields
        for depth, part in enumerate(path):
            if not isinstance(current, dict) or part not in current:
                where = "args->" + ".".join(path[:depth]) if depth else "the events of these probes"
                names = ", ".join(sorted(current)) if isinstance(current, dict) else "none"
                raise self.error(f"{shown}: {where} has no field '{part}' (fields: {names})", e)
            current = current[part]
        if isinstance(current, dict):
            raise self.error(f"{shown} is a struct: name one of its members ({', '.join(sorted(current))})", e)
        if current is None:
            raise self.error(f"{shown} has different types in the events these probes match", e)
        assert isinstance(current, Type)
        return current

    def call(self, e: A.Call) -> Type:
        spec = FUNCTIONS.get(e.name)
        if spec is None:
            if e.name in AGGREGATIONS:
                raise self.error(f"{e.name}() is an aggregating function: assign it to an aggregation (@a = {e.name}(...))", e)
            raise self.error(f"unknown function '{e.name}'", e)
        low, high, result = spec
        if not low <= len(e.args) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise self.error(f"{e.name}() takes {wanted} argument(s), not {len(e.args)}", e)
        for position, arg in enumerate(e.args):
            if isinstance(arg, A.AggRef):
                if e.name not in ("printa", "trunc", "clear", "normalize", "denormalize"):
                    raise self.error(f"{e.name}() cannot take an aggregation", arg)
                arg.ty = VOID
                self.agg_refs.append(arg)
                continue
            self.expr(arg)
            if position in _STRING_ARGS.get(e.name, ()) and not isinstance(arg.ty, StringType):
                raise self.error(f"argument {position + 1} of {e.name}() must be a string, not {arg.ty}", arg)
            if position in _INT_ARGS.get(e.name, ()) and not arg.ty.is_int():
                raise self.error(f"argument {position + 1} of {e.name}() must be an integer, not {arg.ty}", arg)
        if e.name in ("trunc", "clear", "normalize", "denormalize") and not isinstance(e.args[0], A.AggRef):
            raise self.error(f"{e.name}() takes an aggregation first (@name)", e.args[0])
        if e.name == "printa":
            rest = e.args[1:] if isinstance(e.args[0], A.StrLit) else e.args
            if not rest or not all(isinstance(a, A.AggRef) for a in rest):
                raise self.error("printa() takes an optional format string then aggregations", e)
        if e.name in ("printf", "system") and not isinstance(e.args[0], A.StrLit):
            raise self.error(f"{e.name}() needs a format string constant first", e.args[0])
        if e.name in DESTRUCTIVE:
            self.out.destructive.append((e.name, e.line, e.column))
        if e.name == "etw_trace":
            self.etw_trace(e)
        if e.name == "trace" and isinstance(e.args[0].ty, StructType):
            raise self.error("trace() takes a scalar; print() a struct", e.args[0])
        if e.name == "stringof" and not (e.args[0].ty.is_int() or isinstance(e.args[0].ty, StringType)):
            raise self.error(f"stringof() cannot take {e.args[0].ty}", e.args[0])
        return result

    def etw_trace(self, e: A.Call) -> None:
        """``etw_trace(provider, guid, event, level, keyword, [type, name, value]...)``: constant
        type and field names, values of the type's kind, ``etw_struct`` counts that fit."""
        for position in range(3):
            if not isinstance(e.args[position].ty, StringType):
                raise self.error(f"argument {position + 1} of etw_trace() (provider name, GUID, event name) must be a string", e.args[position])
        for position in (3, 4):
            if not e.args[position].ty.is_int():
                raise self.error(f"argument {position + 1} of etw_trace() (level, keyword) must be an integer", e.args[position])
        guid = e.args[1]
        if isinstance(guid, A.StrLit):
            try:
                uuid.UUID(guid.value.strip("{}"))
            except ValueError:
                raise self.error(f"etw_trace(): {guid.value!r} is not a provider GUID", guid) from None
        rest = e.args[5:]
        if len(rest) % 3:
            raise self.error("etw_trace() fields come in threes: \"etw_<type>\", \"name\", value", e)
        open_structs: list[int] = []  # members still to come in each open etw_struct
        for at in range(0, len(rest), 3):
            kind, name, value = rest[at : at + 3]
            if not isinstance(kind, A.StrLit) or kind.value not in ETW_TYPES:
                shown = repr(kind.value) if isinstance(kind, A.StrLit) else "an expression"
                raise self.error(f"etw_trace(): the field type must be one of {', '.join(ETW_TYPES)}, not {shown}", kind)
            if not isinstance(name, A.StrLit) or not name.value:
                raise self.error("etw_trace(): a field name is a non-empty string constant", name)
            spec = ETW_TYPES[kind.value]
            if open_structs:
                open_structs[-1] -= 1
            if spec.value == "string" and not isinstance(value.ty, StringType):
                raise self.error(f"etw_trace(): {kind.value} field {name.value!r} takes a string, not {value.ty}", value)
            if spec.value in ("int", "float") and not value.ty.is_int():
                raise self.error(f"etw_trace(): {kind.value} field {name.value!r} takes an integer, not {value.ty}", value)
            if spec.value == "count":
                if not isinstance(value, A.IntLit) or value.value < 1:
                    raise self.error("etw_trace(): an etw_struct's value is its member count, a constant above zero", value)
                open_structs.append(value.value)
            while open_structs and open_structs[-1] == 0:
                open_structs.pop()
        if open_structs:
            raise self.error(f"etw_trace(): an etw_struct announces {open_structs[-1]} more member(s) than follow", e)


def _args_path(e: A.Expr) -> list[str] | None:
    if isinstance(e, A.Member):
        if isinstance(e.base, A.Ident) and e.base.name == "args" and not e.base.scope and e.arrow:
            return [e.name]
        if not e.arrow:
            inner = _args_path(e.base)
            return None if inner is None else [*inner, e.name]
    return None
