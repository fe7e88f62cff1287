"""The D program as a typed tree: what the parser builds and the checker annotates.

Every node keeps the line and column it starts at; the checker sets ``ty`` on expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AggCall", "AggRef", "Assign", "Binary", "Block", "Call", "Cast", "Clause", "Conditional", "Decl", "Expr",
    "ExprStmt", "Ident", "If", "Index", "IntLit", "Member", "Node", "Program", "ProbeSpec", "SizeofType", "Stmt",
    "StrLit", "TypeName", "Unary", "IncDec",
]  # fmt: skip


@dataclass(eq=False)
class Node:
    line: int
    column: int


@dataclass(eq=False)
class Expr(Node):
    ty: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class IntLit(Expr):
    value: int
    suffix: str = ""


@dataclass(eq=False)
class StrLit(Expr):
    value: str


@dataclass(eq=False)
class Ident(Expr):
    """A variable or built-in: ``name``; ``scope`` is ``""`` (global/built-in), ``self`` or ``this``."""

    name: str
    scope: str = ""


@dataclass(eq=False)
class Index(Expr):
    """``name[k1, k2]``: an associative array element."""

    name: str
    keys: list[Expr]


@dataclass(eq=False)
class AggRef(Expr):
    """``@name`` (``name`` is ``""`` for ``@``) as printa/trunc/clear take it."""

    name: str


@dataclass(eq=False)
class AggCall(Node):
    """``@name[keys] = func(args)``."""

    name: str
    keys: list[Expr]
    func: str
    args: list[Expr]


@dataclass(eq=False)
class Unary(Expr):
    op: str
    operand: Expr


@dataclass(eq=False)
class IncDec(Expr):
    op: str  # "++" or "--"
    target: Expr
    prefix: bool


@dataclass(eq=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class Conditional(Expr):
    test: Expr
    then: Expr
    other: Expr


@dataclass(eq=False)
class Assign(Expr):
    op: str  # "=", "+=", ...
    target: Expr
    value: Expr


@dataclass(eq=False)
class Call(Expr):
    name: str
    args: list[Expr]


@dataclass(eq=False)
class Member(Expr):
    """``base.name`` or ``base->name`` (``arrow``); ``args->F`` is a Member on Ident ``args``."""

    base: Expr
    name: str
    arrow: bool


@dataclass(eq=False)
class TypeName(Node):
    """A type as written: ``base`` (``uint32_t``, ``struct nt`_EVENT_HEADER``, a typedef) and pointer depth."""

    base: str
    pointers: int = 0
    array: int | None = None


@dataclass(eq=False)
class Cast(Expr):
    type: TypeName
    operand: Expr


@dataclass(eq=False)
class SizeofType(Expr):
    type: TypeName


@dataclass(eq=False)
class Stmt(Node):
    pass


@dataclass(eq=False)
class ExprStmt(Stmt):
    expr: Expr | AggCall


@dataclass(eq=False)
class Block(Stmt):
    body: list[Stmt]


@dataclass(eq=False)
class If(Stmt):
    test: Expr
    then: Stmt
    other: Stmt | None


@dataclass(eq=False)
class ProbeSpec(Node):
    text: str


@dataclass(eq=False)
class Clause(Node):
    probes: list[ProbeSpec]
    predicate: Expr | None
    body: list[Stmt]
    number: int = 0


@dataclass(eq=False)
class Decl(Node):
    """A top-level declaration: ``int x;`` (kind ``var``), ``typedef``/``struct`` definitions (``type``)."""

    kind: str
    name: str
    type: TypeName | None = None
    members: list[tuple[TypeName, str, int, int]] | None = None  # struct: (type, name, line, column)
    struct_name: str | None = None


@dataclass(eq=False)
class Program(Node):
    decls: list[Decl]
    clauses: list[Clause]
    pragmas: list[tuple[str, str, int]]
    source: str = "<program>"
