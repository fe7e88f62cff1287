"""The Event Log's XPath 1.0 subset: parse a query, test events with it, turn it into SQL.

Pure. What is accepted is what Microsoft documents for event queries ("Consuming Events"):

* a selector rooted at ``*`` or ``Event``, with predicates, and child steps below it
  (``*[System[Level=2]]``, ``Event/System[EventID=4624]``);
* inside predicates: element names (the child axis, also spelled ``child::``), attributes
  (``@Name``, ``attribute::Name``), relative paths (``System/Level``), string and number
  literals, parentheses, ``and``, ``or``, ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``;
* the functions ``Band(a, b)`` (bitwise and: true when not 0; Event Viewer's filter spells it
  ``band``, and both spellings are taken), ``timediff(@SystemTime)`` (milliseconds from that time
  to now; with two arguments, from the second to the first) and ``position()``, and a number
  alone as a position predicate on a leaf (``Data[2]``); numbers in decimal or ``0x`` hex.

Strings compare exactly, as XPath 1.0 compares them (case matters); two times (``@SystemTime>='2024-01-01T00:00:00.000Z'``,
as Event Viewer's custom range writes) compare as times.

Everything else (``//``, ``..``, ``.``, other axes, ``|``, arithmetic, ``not()`` and the other
functions, variables, wildcards below the root) is refused by an ``XPathError`` naming the
construct and its 1-based column.

One parser, three back ends. ``parse_query`` gives a ``Query`` (``parse_query_list`` a
``QueryList`` from ``<QueryList>`` XML; ``parse_filter`` either, by the text's first character):

* records: ``query.matches(event_node, now)`` evaluates it over an ``XmlElement`` tree (``Event``
  with ``System`` and ``EventData`` children, as an event renders) — ``.evtx`` files, ``.etl``
  files, live events;
* columns: ``query.lowered(now)`` is the part of it the store's columns answer, a ``Condition``
  and whether it is exact (when not, it selects a superset, tested with ``matches``);
  ``eventlog.xpath_columns`` evaluates a ``Condition`` on numpy columns (the viewer);
* SQL: ``query.sql(now)`` is that condition as a ``WHERE`` clause over the log store.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from openetw.errors import XPathError
from openetw.etl.intypes import UNIX_EPOCH_FILETIME

__all__ = [
    "QUERY_COLUMNS",
    "Query",
    "QueryList",
    "SqlFilter",
    "XmlElement",
    "filetime_from_text",
    "parse_filter",
    "parse_query",
    "parse_query_list",
]

FILETIME_EPOCH_OFFSET = UNIX_EPOCH_FILETIME  # 1601-01-01 to 1970-01-01 in 100 ns units

# -- the event tree ------------------------------------------------------------------------------


@dataclass
class XmlElement:
    """An element of an event as queries see it: name, attributes, text, child elements."""

    name: str
    attributes: dict[str, str] = field(default_factory=dict)
    text: str = ""
    children: list[XmlElement] = field(default_factory=list)

    def child(self, name: str) -> XmlElement | None:
        for node in self.children:
            if node.name == name:
                return node
        return None

    def string_value(self) -> str:
        if not self.children:
            return self.text
        return self.text + "".join(c.string_value() for c in self.children)


# -- tokens --------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'[^']*'|"[^"]*")
    | (?P<number>0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?|\.\d+)
    | (?P<op>//|::|!=|<=|>=|\.\.|[\[\]()@/,=<>*|.+\-$])
    | (?P<name>[A-Za-z_][\w\-.]*(?::[A-Za-z_][\w\-.]*)?)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # string, number, op, name, end
    text: str
    column: int  # 1-based


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            column = position + 1 + (len(text[position:]) - len(text[position:].lstrip()))
            raise XPathError(f"unexpected character {text[column - 1]!r}", column)
        kind = match.lastgroup or "op"
        out.append(_Token(kind, match.group(kind), match.start(kind) + 1))
        position = match.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


# -- the tree of a query ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    attribute: bool
    name: str
    predicates: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Path:
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Literal:
    value: str | int | float


@dataclass(frozen=True)
class Compare:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class Logical:
    op: str  # and / or
    items: tuple[Any, ...]


@dataclass(frozen=True)
class Call:
    name: str  # Band, timediff, position
    args: tuple[Any, ...]


_REFUSED_FUNCTIONS = "functions other than Band(), timediff() and position()"
_FUNCTIONS = {"band": "Band", "timediff": "timediff", "position": "position"}
_AXES_REFUSED = {
    "descendant", "descendant-or-self", "parent", "ancestor", "ancestor-or-self", "following", "following-sibling",
    "preceding", "preceding-sibling", "self", "namespace",
}  # fmt: skip


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    # helpers
    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def at(self, text: str) -> bool:
        token = self.token
        return token.kind in ("op", "name") and token.text == text

    def expect(self, text: str) -> _Token:
        if not self.at(text):
            self.fail_here(f"expected {text!r}")
        return self.take()

    def fail_here(self, message: str) -> None:
        token = self.token
        found = "the end of the query" if token.kind == "end" else repr(token.text)
        raise XPathError(f"{message}, found {found}", token.column)

    def refuse(self, token: _Token) -> None:
        """``token`` starts a construct outside the subset: name it."""
        text = token.text
        names = {
            "//": "the descendant axis '//'",
            "..": "the parent step '..'",
            ".": "the self step '.'",
            "|": "the union operator '|'",
            "+": "arithmetic ('+')",
            "-": "arithmetic ('-')",
            "$": "variables ('$')",
            "*": "a wildcard step '*' below the root",
        }
        if text in names:
            what = names[text]
        elif text in ("div", "mod"):
            what = f"arithmetic ({text!r})"
        else:
            what = repr(text)
        raise XPathError(f"{what} is outside the Event Log's XPath subset", token.column)

    # grammar
    def query(self) -> Path:
        token = self.token
        if token.kind == "op" and token.text in ("//", "/"):
            if token.text == "//":
                self.refuse(token)
            raise XPathError("an absolute path is outside the Event Log's XPath subset (start with '*' or 'Event')", token.column)
        if not (self.at("*") or self.at("Event")):
            if token.kind == "name" and self.tokens[self.index + 1].text == "::":
                self._axis()  # refuses the axis or says what the root must be
            self.fail_here("a query starts with '*' or 'Event'")
        self.take()
        steps = [Step(False, "Event", self.predicates())]
        while self.at("/") or self.at("//"):
            if self.at("//"):
                self.refuse(self.token)
            self.take()
            steps.append(self.step())
        if self.token.kind != "end":
            if self.token.text in ("|", "//", "..", ".", "+", "-", "$", "div", "mod"):
                self.refuse(self.token)
            self.fail_here("expected '/' or '[' or the end of the query")
        return Path(tuple(steps))

    def _axis(self) -> bool:
        """At ``name::``: True for the attribute axis, False for child; refuses the others."""
        token = self.take()
        self.take()  # '::'
        if token.text == "child":
            return False
        if token.text == "attribute":
            return True
        what = f"the {token.text} axis" if token.text in _AXES_REFUSED else f"the axis {token.text!r}"
        raise XPathError(f"{what} is outside the Event Log's XPath subset (child and attribute only)", token.column)

    def step(self) -> Step:
        attribute = False
        if self.at("@"):
            self.take()
            attribute = True
        elif self.token.kind == "name" and self.tokens[self.index + 1].text == "::":
            attribute = self._axis()
        token = self.token
        if token.kind == "op" and token.text in ("*", "..", ".", "//", "$"):
            self.refuse(token)
        if token.kind != "name":
            self.fail_here("expected a name")
        self.take()
        if attribute:
            if self.at("["):
                self.fail_here("an attribute takes no predicate")
            return Step(True, token.text)
        return Step(False, token.text, self.predicates())

    def predicates(self) -> tuple[Any, ...]:
        found = []
        while self.at("["):
            self.take()
            if self.at("]"):
                self.fail_here("an empty predicate")
            found.append(self.expr())
            self.expect("]")
        return tuple(found)

    def expr(self) -> Any:
        items = [self.and_expr()]
        while self.at("or"):
            self.take()
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else Logical("or", tuple(items))

    def and_expr(self) -> Any:
        items = [self.comparison()]
        while self.at("and"):
            self.take()
            items.append(self.comparison())
        return items[0] if len(items) == 1 else Logical("and", tuple(items))

    def comparison(self) -> Any:
        left = self.value()
        if self.token.kind == "op" and self.token.text in ("=", "!=", "<", "<=", ">", ">="):
            op = self.take().text
            right = self.value()
            if self.token.kind == "op" and self.token.text in ("=", "!=", "<", "<=", ">", ">="):
                self.fail_here("comparisons do not chain")
            return Compare(op, left, right)
        if self.token.text in ("|", "+", "-", "div", "mod", "*") and self.token.kind in ("op", "name"):
            self.refuse(self.token)
        return left

    def value(self) -> Any:
        token = self.token
        if token.kind == "string":
            self.take()
            return Literal(token.text[1:-1])
        if token.kind == "number":
            self.take()
            if token.text[:2].lower() == "0x":
                return Literal(int(token.text, 16))
            number = float(token.text)
            return Literal(int(number) if number.is_integer() and "." not in token.text else number)
        if self.at("("):
            self.take()
            inner = self.expr()
            self.expect(")")
            return inner
        if token.kind == "op" and token.text in ("//", "..", ".", "$", "*", "|", "+", "-"):
            self.refuse(token)
        if token.kind == "name" and self.tokens[self.index + 1].text == "(":
            return self.call()
        if self.at("@") or token.kind == "name":
            steps = [self.step()]
            while self.at("/") or self.at("//"):
                if self.at("//"):
                    self.refuse(self.token)
                if steps[-1].attribute:
                    self.fail_here("an attribute has no children")
                self.take()
                steps.append(self.step())
            return Path(tuple(steps))
        self.fail_here("expected a value")
        raise AssertionError  # unreachable

    def call(self) -> Call:
        token = self.take()
        # Event Viewer's filter writes band(); Microsoft's documents write Band(): both are Band
        name = _FUNCTIONS.get(token.text.lower(), token.text)
        if name not in ("Band", "timediff", "position"):
            if name in ("not", "contains", "starts-with", "string", "number", "count", "last", "concat", "substring", "true", "false"):
                raise XPathError(f"the function {name}() is outside the Event Log's XPath subset ({_REFUSED_FUNCTIONS})", token.column)
            raise XPathError(f"unknown function {name}() ({_REFUSED_FUNCTIONS})", token.column)
        self.expect("(")
        args = []
        if not self.at(")"):
            args.append(self.expr())
            while self.at(","):
                self.take()
                args.append(self.expr())
        self.expect(")")
        wanted = {"Band": (2,), "timediff": (1, 2), "position": (0,)}[name]
        if len(args) not in wanted:
            raise XPathError(f"{name}() takes {' or '.join(map(str, wanted))} argument(s), not {len(args)}", token.column)
        return Call(name, tuple(args))


# -- evaluation ------------------------------------------------------------------------------------


def filetime_from_text(text: str) -> int | None:
    """A ``SystemTime`` attribute (``2026-11-26T19:05:50.1234567Z``) as a FILETIME."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z?", text.strip())
    if match is None:
        return None
    try:
        moment = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    fraction = (match.group(2) or "").ljust(7, "0")[:7]
    seconds = int((moment - datetime(1601, 1, 1, tzinfo=UTC)).total_seconds())
    return seconds * 10_000_000 + int(fraction)


def _number(text: str) -> int | float:
    text = text.strip()
    try:
        if text[:2].lower() == "0x":
            return int(text, 16)
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return math.nan


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
    a = _number(left) if isinstance(left, str) else left
    b = _number(right) if isinstance(right, str) else right
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


def _as_number(value: Any) -> int | float:
    if isinstance(value, list):
        strings = _strings(value) or []
        return _number(strings[0]) if strings else math.nan
    if isinstance(value, str):
        return _number(value)
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
        a, b = (_as_number(_evaluate(arg, ctx)) for arg in call.args)
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


# -- lowering: the conditions the columns of a store can answer -------------------------------------

# System child elements -> the log store's columns (see store.SCHEMA); every back end (SQL for the
# store, numpy masks for the viewer's columns) answers conditions on these names.
QUERY_COLUMNS = {
    "EventID": "event_id",
    "Version": "version",
    "Level": "level",
    "Task": "task",
    "Opcode": "opcode",
    "EventRecordID": "record_id",
    "Channel": "channel",
    "Computer": "computer",
}
_ATTRIBUTE_COLUMNS = {
    ("Provider", "Name"): "provider",
    ("Execution", "ProcessID"): "pid",
    ("Execution", "ThreadID"): "tid",
    ("Security", "UserID"): "user_sid",
    ("TimeCreated", "SystemTime"): "time_created",
}
TEXT_COLUMNS = frozenset({"channel", "computer", "provider", "user_sid"})
"""Columns compared as text: exactly, as XPath 1.0 compares strings (case matters)."""
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


@dataclass(frozen=True)
class ColumnTest:
    """``column op value``: a number, or text for ``TEXT_COLUMNS`` (``=``/``!=`` only)."""

    column: str
    op: str
    value: int | float | str


@dataclass(frozen=True)
class KeywordsAny:
    """``Band(Keywords, mask)``: some bit of ``mask`` is set."""

    mask: int


@dataclass(frozen=True)
class AllOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Condition, ...]


Condition = ColumnTest | KeywordsAny | AllOf | AnyOf
"""A query's conditions over the store's columns; ``AllOf(())`` selects every event."""


@dataclass(frozen=True)
class Lowered:
    """What the columns can answer of a query: ``condition`` selects exactly the query's events when
    ``exact``, else a superset of them (the rest is tested event by event with ``matches``)."""

    condition: Condition
    exact: bool


EVERYTHING: Condition = AllOf(())


class _Lowering:
    def __init__(self, now: int) -> None:
        self.now = now

    def conjuncts(self, expr: Any, context: str) -> tuple[list[Condition], bool]:
        """The conditions implied by ``expr`` in ``context``, and whether they are all of it."""
        if isinstance(expr, Logical) and expr.op == "and":
            parts: list[Condition] = []
            exact = True
            for item in expr.items:
                more, item_exact = self.conjuncts(item, context)
                parts += more
                exact = exact and item_exact
            return parts, exact
        whole = self.exact(expr, context)
        if whole is not None:
            return [whole], True
        return [], False

    def exact(self, expr: Any, context: str) -> Condition | None:
        """One condition equivalent to ``expr`` in ``context``, or None."""
        if isinstance(expr, Logical):
            parts = []
            for item in expr.items:
                part = self.exact(item, context)
                if part is None:
                    return None
                parts.append(part)
            return AllOf(tuple(parts)) if expr.op == "and" else AnyOf(tuple(parts))
        if isinstance(expr, Path) and len(expr.steps) == 1 and not expr.steps[0].attribute:
            step = expr.steps[0]
            if context == "Event" and step.name == "System":
                return self._all(step, "System", empty=EVERYTHING)
            if context == "System" and step.name in ("Provider", "TimeCreated", "Execution", "Security"):
                return self._all(step, step.name, empty=None)
            return None
        if isinstance(expr, Call) and expr.name == "Band" and context == "System":
            return self._keywords_and_mask(expr)
        if isinstance(expr, Compare):
            return self._compare(expr, context)
        return None

    def _all(self, step: Step, context: str, empty: Condition | None) -> Condition | None:
        if any(_is_position(p) for p in step.predicates):
            return None
        parts = [self.exact(pred, context) for pred in step.predicates]
        if any(p is None for p in parts):
            return None
        if not parts:
            return empty
        return AllOf(tuple(p for p in parts if p is not None))

    @staticmethod
    def _keywords_and_mask(call: Call) -> Condition | None:
        a, b = call.args
        if isinstance(b, Path) and isinstance(a, Literal):
            a, b = b, a
        if _is_child(a, "Keywords") and isinstance(b, Literal) and isinstance(b.value, int):
            return KeywordsAny(b.value & 0xFFFFFFFFFFFFFFFF)
        return None

    def _compare(self, expr: Compare, context: str) -> Condition | None:
        op, left, right = expr.op, expr.left, expr.right
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right, op = right, left, _FLIP[op]
        if not isinstance(right, Literal):
            return None
        value = right.value
        if isinstance(left, Call) and left.name == "timediff" and len(left.args) == 1 and context == "TimeCreated":
            if _is_attribute(left.args[0], "SystemTime") and isinstance(value, (int, float)) and op in ("<", "<=", ">", ">="):
                # now - time OP value  <=>  time FLIP(OP) now - value*10000
                return ColumnTest("time_created", _FLIP[op], self.now - int(value * 10_000))
            return None
        if isinstance(left, Call) and left.name == "Band" and context == "System" and op in ("!=", ">") and value == 0:
            return self._keywords_and_mask(left)
        column: str | None = None
        if context == "System" and isinstance(left, Path) and len(left.steps) == 1 and not left.steps[0].attribute:
            if left.steps[0].predicates:
                return None
            column = QUERY_COLUMNS.get(left.steps[0].name)
        elif context in ("Provider", "Execution", "Security", "TimeCreated") and isinstance(left, Path) and len(left.steps) == 1 and left.steps[0].attribute:
            column = _ATTRIBUTE_COLUMNS.get((context, left.steps[0].name))
        if column is None:
            return None
        if column == "time_created":
            moment = filetime_from_text(value) if isinstance(value, str) else None
            return None if moment is None else ColumnTest(column, op, moment)
        if column in TEXT_COLUMNS:
            if op not in ("=", "!="):
                return None
            text = str(value) if not isinstance(value, float) or not value.is_integer() else str(int(value))
            return ColumnTest(column, op, text)
        if isinstance(value, str):
            number = _number(value)
            if isinstance(number, float):
                return None  # compares as NaN: left to the evaluator
            value = number
        return ColumnTest(column, op, value)


def lower(path: Path, now: int) -> Lowered:
    """The conditions of a selector's ``Event`` predicates that the store's columns answer."""
    predicates = list(path.steps[0].predicates)
    if len(path.steps) == 2 and path.steps[1].name == "System" and not path.steps[1].attribute:
        predicates.append(Path(path.steps[1:]))  # Event/System[...] selects what *[System[...]] does
    elif len(path.steps) != 1:
        return Lowered(EVERYTHING, False)
    lowering = _Lowering(now)
    parts: list[Condition] = []
    exact = True
    for predicate in predicates:
        if _is_position(predicate):
            return Lowered(EVERYTHING, False)
        more, predicate_exact = lowering.conjuncts(predicate, "Event")
        parts += more
        exact = exact and predicate_exact
    return Lowered(AllOf(tuple(parts)) if parts else EVERYTHING, exact)


# -- the SQL back end (the log store) --------------------------------------------------------------


@dataclass(frozen=True)
class SqlFilter:
    """``where`` over the store's columns (``1`` selects all); ``exact``: no test left to make."""

    where: str
    params: tuple[Any, ...]
    exact: bool


def _signed64(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def condition_sql(condition: Condition, params: list[Any]) -> str:
    """``condition`` as a SQLite expression over the store's columns, its values added to ``params``."""
    if isinstance(condition, ColumnTest):
        params.append(condition.value)
        return f"{condition.column} {condition.op} ?"
    if isinstance(condition, KeywordsAny):
        params.append(_signed64(condition.mask))
        return "(keywords & ?) != 0"
    if not condition.items:
        return "1" if isinstance(condition, AllOf) else "0"
    joiner = " AND " if isinstance(condition, AllOf) else " OR "
    return "(" + joiner.join(condition_sql(item, params) for item in condition.items) + ")"


def _is_position(expr: Any) -> bool:
    return (isinstance(expr, Literal) and isinstance(expr.value, (int, float))) or (isinstance(expr, Call) and expr.name == "position")


def _is_child(expr: Any, name: str) -> bool:
    return isinstance(expr, Path) and len(expr.steps) == 1 and not expr.steps[0].attribute and expr.steps[0].name == name and not expr.steps[0].predicates


def _is_attribute(expr: Any, name: str) -> bool:
    return isinstance(expr, Path) and len(expr.steps) == 1 and expr.steps[0].attribute and expr.steps[0].name == name


# -- queries -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One parsed selector (``*[System[Level=2]]``)."""

    text: str
    path: Path

    def matches(self, event: XmlElement, now: int) -> bool:
        """Whether the selector selects ``event`` (an ``Event`` element) at ``now`` (FILETIME)."""
        return bool(_select(self.path.steps[:1], [_document(event)], now)) if len(self.path.steps) == 1 else bool(
            _select(self.path.steps, [_document(event)], now)
        )

    def lowered(self, now: int) -> Lowered:
        """The conditions the store's columns can answer (see ``Lowered``)."""
        return lower(self.path, now)

    def sql(self, now: int) -> SqlFilter:
        lowered = self.lowered(now)
        params: list[Any] = []
        where = condition_sql(lowered.condition, params)
        return SqlFilter(where, tuple(params), lowered.exact)


def _document(event: XmlElement) -> XmlElement:
    return XmlElement("#document", children=[event])


def parse_query(text: str) -> Query:
    """Parse one selector; ``XPathError`` names what is outside the subset and where."""
    if not text.strip():
        raise XPathError("an empty query", 1)
    return Query(text, _Parser(text).query())


@dataclass(frozen=True)
class QueryList:
    """``<QueryList>``: an event is selected when, in some Query, a Select whose path names the
    log (or names none) selects it and no Suppress of that Query for the log does."""

    # per Query: its Selects and its Suppresses, each with the log path it applies to
    queries: tuple[tuple[tuple[tuple[str | None, Query], ...], tuple[tuple[str | None, Query], ...]], ...]

    def for_log(self, log: str | None) -> list[tuple[list[Query], list[Query]]]:
        def applies(path: str | None) -> bool:
            return log is None or path is None or path.lower() == log.lower()

        found = []
        for selects, suppresses in self.queries:
            chosen = [q for path, q in selects if applies(path)]
            if chosen:
                found.append((chosen, [q for path, q in suppresses if applies(path)]))
        return found

    def paths(self) -> list[str]:
        """The logs its Selects name, in order of first mention (``wevtutil qe /sq`` reads these)."""
        found: dict[str, str] = {}
        for selects, suppresses in self.queries:
            for path, _ in (*selects, *suppresses):
                if path and path.lower() not in found:
                    found[path.lower()] = path
        return list(found.values())

    def lowered(self, now: int, log: str | None = None) -> Lowered:
        """What the columns answer: any Select for ``log``; exact when every Select is and
        nothing is suppressed (a Suppress is tested event by event)."""
        conditions: list[Condition] = []
        exact = True
        for selects, suppresses in self.for_log(log):
            for query in selects:
                lowered = query.lowered(now)
                conditions.append(lowered.condition)
                exact = exact and lowered.exact
            exact = exact and not suppresses
        return Lowered(AnyOf(tuple(conditions)), exact)

    def matches(self, event: XmlElement, now: int, log: str | None = None) -> bool:
        for selects, suppresses in self.for_log(log):
            if any(q.matches(event, now) for q in selects) and not any(q.matches(event, now) for q in suppresses):
                return True
        return False


def parse_query_list(text: str) -> QueryList:
    """Parse ``<QueryList><Query Id= Path=><Select Path=>...</Select><Suppress>...`` XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise XPathError(f"the query list is not well-formed XML: {exc}") from None
    if root.tag != "QueryList":
        raise XPathError(f"a query list's root element is QueryList, not {root.tag}")
    queries = []
    for query in root:
        if query.tag != "Query":
            raise XPathError(f"QueryList holds Query elements, not {query.tag}")
        selects: list[tuple[str | None, Query]] = []
        suppresses: list[tuple[str | None, Query]] = []
        for item in query:
            if item.tag not in ("Select", "Suppress"):
                raise XPathError(f"a Query holds Select and Suppress elements, not {item.tag}")
            parsed = parse_query((item.text or "").strip())
            (selects if item.tag == "Select" else suppresses).append((item.get("Path") or query.get("Path"), parsed))
        if not selects:
            raise XPathError(f"Query {query.get('Id', '?')} has no Select")
        queries.append((tuple(selects), tuple(suppresses)))
    if not queries:
        raise XPathError("the query list holds no Query")
    return QueryList(tuple(queries))


def parse_filter(text: str) -> Query | QueryList:
    """A selector, or a ``<QueryList>`` (what Event Viewer's filter dialog shows on its XML tab)."""
    return parse_query_list(text) if text.lstrip().startswith("<") else parse_query(text)
