"""The D parser: a program's text into a ``Program`` tree (recursive descent, C precedence).

Errors name the line, the column and the token that was expected.
"""

from __future__ import annotations

from openetw.probe.lang import ast as A
from openetw.probe.lang.errors import ProbeCompileError
from openetw.probe.lang.lexer import Lexer, Token
from openetw.probe.lang.types import BASE_TYPE_WORDS, is_base_type

__all__ = ["parse"]

_ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
# Binary operators by precedence, lowest first (``?:`` and assignment are handled apart).
_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"||"}), frozenset({"^^"}), frozenset({"&&"}), frozenset({"|"}), frozenset({"^"}), frozenset({"&"}),
    frozenset({"==", "!="}), frozenset({"<", "<=", ">", ">="}), frozenset({"<<", ">>"}), frozenset({"+", "-"}),
    frozenset({"*", "/", "%"}),
)  # fmt: skip
_DECL_STARTS = frozenset({"typedef", "struct", "self", "this"})


def parse(source: str, *, name: str = "<program>", macros: list[str] | None = None, target: int | None = None) -> A.Program:
    """Parse a D program (``macros`` are the values of ``$1``..``$9``, ``target`` of ``$target``)."""
    return _Parser(Lexer(source, name=name, macros=macros, target=target)).program()


class _Parser:
    def __init__(self, lexer: Lexer) -> None:
        self.lx = lexer
        self.typedefs: set[str] = set()
        self._no_division = False  # whether '/' ends the expression (in a predicate) rather than divides

    # -- helpers --------------------------------------------------------------------------------
    def error(self, message: str, token: Token) -> ProbeCompileError:
        return ProbeCompileError(message, line=token.line, column=token.column, source=self.lx.name)

    def expected(self, what: str, token: Token | None = None) -> ProbeCompileError:
        token = token or self.lx.peek()
        return self.error(f"expected {what}, found {token.describe()}", token)

    def at(self, text: str) -> bool:
        token = self.lx.peek()
        return token.kind == "op" and token.text == text

    def accept(self, text: str) -> Token | None:
        if self.at(text):
            return self.lx.next()
        return None

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.expected(f"'{text}'")
        return self.lx.next()

    def ident(self, what: str = "an identifier") -> Token:
        token = self.lx.peek()
        if token.kind != "ident":
            raise self.expected(what)
        return self.lx.next()

    def starts_type(self, token: Token) -> bool:
        return token.kind == "ident" and (is_base_type(token.text) or token.text in self.typedefs or token.text == "struct")

    # -- program --------------------------------------------------------------------------------
    def program(self) -> A.Program:
        decls: list[A.Decl] = []
        clauses: list[A.Clause] = []
        while True:
            token = self.lx.peek()
            if token.kind == "eof":
                break
            if token.kind == "ident" and (token.text in _DECL_STARTS or self.starts_type(token)):
                decls.extend(self.declaration())
            else:
                clause = self.clause()
                clause.number = len(clauses)
                clauses.append(clause)
        return A.Program(1, 1, decls, clauses, list(self.lx.pragmas), source=self.lx.name)

    def declaration(self) -> list[A.Decl]:
        token = self.lx.next()
        if token.text == "typedef":
            kind_token = self.lx.peek()
            if kind_token.kind == "ident" and kind_token.text == "struct":
                self.lx.next()
                struct_name = None
                if self.lx.peek().kind == "ident":
                    struct_name = self.lx.next().text
                members = self.struct_body() if self.at("{") else None
                if members is None and struct_name is None:
                    raise self.expected("'{' or a struct name")
                pointers = 0
                while self.accept("*"):
                    pointers += 1
                alias = self.ident("a type name")
                self.expect(";")
                self.typedefs.add(alias.text)
                decls = []
                if members is not None:
                    decls.append(A.Decl(token.line, token.column, "struct", struct_name or f"<anonymous {alias.text}>", members=members))
                base = f"struct {struct_name or f'<anonymous {alias.text}>'}"
                decls.append(A.Decl(token.line, token.column, "typedef", alias.text, type=A.TypeName(alias.line, alias.column, base, pointers)))
                return decls
            type_name = self.type_name()
            alias = self.ident("a type name")
            self.expect(";")
            self.typedefs.add(alias.text)
            return [A.Decl(token.line, token.column, "typedef", alias.text, type=type_name)]
        if token.text == "struct":
            name = self.ident("a struct name")
            if self.at("{"):
                members = self.struct_body()
                self.expect(";")
                return [A.Decl(token.line, token.column, "struct", name.text, members=members)]
            type_name = A.TypeName(token.line, token.column, f"struct {name.text}", self.pointers())
            return [self.variable_decl(token, type_name)]
        if token.text in ("self", "this"):
            raise self.error(f"'{token.text}' declarations are not supported; assign {token.text}->name instead", token)
        type_name = self.type_name_after(token)
        return [self.variable_decl(token, type_name)]

    def variable_decl(self, start: Token, type_name: A.TypeName) -> A.Decl:
        name = self.ident("a variable name")
        self.expect(";")
        return A.Decl(start.line, start.column, "var", name.text, type=type_name)

    def struct_body(self) -> list[tuple[A.TypeName, str, int, int]]:
        self.expect("{")
        members = []
        while not self.accept("}"):
            type_name = self.type_name()
            name = self.ident("a member name")
            if self.accept("["):
                size = self.lx.next()
                if size.kind != "int":
                    raise self.expected("an array size", size)
                type_name.array = size.value[0]  # type: ignore[index]
                self.expect("]")
            self.expect(";")
            members.append((type_name, name.text, name.line, name.column))
        return members

    def pointers(self) -> int:
        count = 0
        while self.accept("*"):
            count += 1
        return count

    def type_name(self) -> A.TypeName:
        token = self.lx.next()
        if not self.starts_type(token):
            raise self.expected("a type name", token)
        return self.type_name_after(token)

    def type_name_after(self, token: Token) -> A.TypeName:
        if token.text == "struct":
            name = self.ident("a struct name")
            return A.TypeName(token.line, token.column, f"struct {name.text}", self.pointers())
        words = [token.text]
        while token.text in BASE_TYPE_WORDS and self.lx.peek().kind == "ident" and self.lx.peek().text in BASE_TYPE_WORDS:
            words.append(self.lx.next().text)
        return A.TypeName(token.line, token.column, " ".join(words), self.pointers())

    # -- clauses --------------------------------------------------------------------------------
    def clause(self) -> A.Clause:
        first = self.lx.probe_spec()
        probes = [A.ProbeSpec(first.line, first.column, first.text)]
        while self.accept(","):
            spec = self.lx.probe_spec()
            probes.append(A.ProbeSpec(spec.line, spec.column, spec.text))
        predicate = None
        if self.at("/"):
            self.lx.next()
            predicate = self.expression(no_division=True)
            self.expect("/")
        if not self.at("{"):
            raise self.expected("'{' (a clause body)" if predicate is not None else "'/' (a predicate), ',' or '{'")
        body = self.block_body()
        return A.Clause(first.line, first.column, probes, predicate, body)

    def block_body(self) -> list[A.Stmt]:
        self.expect("{")
        body: list[A.Stmt] = []
        while not self.accept("}"):
            if self.lx.peek().kind == "eof":
                raise self.expected("'}'")
            body.append(self.statement())
        return body

    def statement(self) -> A.Stmt:
        token = self.lx.peek()
        if token.kind == "op" and token.text == "{":
            return A.Block(token.line, token.column, self.block_body())
        if token.kind == "op" and token.text == ";":
            self.lx.next()
            return A.Block(token.line, token.column, [])
        if token.kind == "ident" and token.text == "if":
            self.lx.next()
            self.expect("(")
            test = self.expression()
            self.expect(")")
            then = self.statement()
            other = None
            nxt = self.lx.peek()
            if nxt.kind == "ident" and nxt.text == "else":
                self.lx.next()
                other = self.statement()
            return A.If(token.line, token.column, test, then, other)
        stmt = self.aggregation() if token.kind == "agg" else A.ExprStmt(token.line, token.column, self.expression())
        if not self.at("}"):
            self.expect(";")
        return stmt

    def aggregation(self) -> A.ExprStmt:
        token = self.lx.next()
        keys: list[A.Expr] = []
        if self.accept("["):
            keys = self.arguments("]")
        if not self.at("="):
            raise self.expected("'=' (an aggregation is assigned a function: @a = count())")
        self.lx.next()
        func = self.ident("an aggregating function")
        self.expect("(")
        args = self.arguments(")")
        call = A.AggCall(token.line, token.column, str(token.value), keys, func.text, args)
        call_pos = (func.line, func.column)
        call.func_at = call_pos  # type: ignore[attr-defined]
        return A.ExprStmt(token.line, token.column, call)

    def arguments(self, closing: str) -> list[A.Expr]:
        args: list[A.Expr] = []
        if self.accept(closing):
            return args
        while True:
            args.append(self.assignment())
            if self.accept(closing):
                return args
            if not self.at(","):
                raise self.expected(f"',' or '{closing}'")
            self.lx.next()

    # -- expressions ----------------------------------------------------------------------------
    def expression(self, no_division: bool = False) -> A.Expr:
        saved = self._no_division
        self._no_division = no_division
        try:
            return self.assignment()
        finally:
            self._no_division = saved

    def assignment(self) -> A.Expr:
        left = self.conditional()
        token = self.lx.peek()
        if token.kind == "op" and token.text in _ASSIGN_OPS:
            self.lx.next()
            if not isinstance(left, (A.Ident, A.Index, A.Member, A.Unary)) or (isinstance(left, A.Unary) and left.op != "*"):
                raise self.error(f"the left side of '{token.text}' cannot be assigned", token)
            value = self.assignment()
            return A.Assign(left.line, left.column, token.text, left, value)
        return left

    def conditional(self) -> A.Expr:
        test = self.binary(0)
        if self.at("?"):
            self.lx.next()
            then = self.assignment()
            self.expect(":")
            other = self.conditional()
            return A.Conditional(test.line, test.column, test, then, other)
        return test

    def binary(self, level: int) -> A.Expr:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        ops = _LEVELS[level]
        while True:
            token = self.lx.peek()
            if token.kind != "op" or token.text not in ops:
                return left
            if token.text == "/" and self._no_division:
                return left  # the predicate's closing '/'
            self.lx.next()
            right = self.binary(level + 1)
            left = A.Binary(token.line, token.column, token.text, left, right)

    def unary(self) -> A.Expr:
        token = self.lx.peek()
        if token.kind == "op":
            if token.text in ("!", "~", "-", "+", "*", "&"):
                self.lx.next()
                return A.Unary(token.line, token.column, token.text, self.unary())
            if token.text in ("++", "--"):
                self.lx.next()
                return A.IncDec(token.line, token.column, token.text, self.unary(), True)
            if token.text == "(":
                self.lx.next()
                inner = self.lx.peek()
                if self.starts_type(inner):
                    type_name = self.type_name()
                    self.expect(")")
                    return A.Cast(token.line, token.column, type_name, self.unary())
                expr = self.expression(no_division=False)
                self.expect(")")
                return self.postfix(expr)
        if token.kind == "ident" and token.text == "sizeof":
            self.lx.next()
            if self.at("("):
                self.lx.next()
                if self.starts_type(self.lx.peek()):
                    type_name = self.type_name()
                    self.expect(")")
                    return A.SizeofType(token.line, token.column, type_name)
                expr = self.expression()
                self.expect(")")
                return A.Call(token.line, token.column, "sizeof", [expr])
            return A.Call(token.line, token.column, "sizeof", [self.unary()])
        return self.postfix(self.primary())

    def postfix(self, expr: A.Expr) -> A.Expr:
        while True:
            token = self.lx.peek()
            if token.kind != "op":
                return expr
            if token.text in ("->", "."):
                self.lx.next()
                name = self.ident("a member name")
                if isinstance(expr, A.Ident) and token.text == "->" and expr.name in ("self", "this") and not expr.scope:
                    expr = A.Ident(expr.line, expr.column, name.text, expr.name)
                else:
                    expr = A.Member(expr.line, expr.column, expr, name.text, token.text == "->")
            elif token.text == "[":
                if not isinstance(expr, A.Ident) or expr.scope:
                    raise self.error("only associative arrays can be indexed here", token)
                self.lx.next()
                keys = self.arguments("]")
                if not keys:
                    raise self.error("an associative array needs at least one key", token)
                expr = A.Index(expr.line, expr.column, expr.name, keys)
            elif token.text == "(":
                if not isinstance(expr, A.Ident) or expr.scope:
                    raise self.error("only functions can be called", token)
                self.lx.next()
                expr = A.Call(expr.line, expr.column, expr.name, self.arguments(")"))
            elif token.text in ("++", "--"):
                self.lx.next()
                expr = A.IncDec(expr.line, expr.column, token.text, expr, False)
            else:
                return expr

    def primary(self) -> A.Expr:
        token = self.lx.next()
        if token.kind == "int":
            literal: tuple[int, str] = token.value  # type: ignore[assignment]
            return A.IntLit(token.line, token.column, literal[0], literal[1])
        if token.kind == "str":
            return A.StrLit(token.line, token.column, str(token.value))
        if token.kind == "ident":
            return A.Ident(token.line, token.column, token.text)
        if token.kind == "agg":
            return A.AggRef(token.line, token.column, str(token.value))
        raise self.expected("an expression", token)
