"""The Event Log's XPath 1.0 subset: the language, its parser and the checked tree.

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


The tree is checked as it is built: anything outside the subset never reaches a back end. The
back ends read it: ``records`` (an ``Event`` element tree, event by event), ``conditions`` (what
a store's columns answer), ``sql`` (those conditions over the log store) and ``columns`` (over
numpy columns); ``query`` holds the parsed ``Query`` and ``QueryList`` that offer all of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from openetw.errors import XPathError
from openetw.etl.intypes import FILETIME_EPOCH

__all__ = ["Call", "Compare", "Literal", "Logical", "Path", "Step", "XmlElement", "filetime_from_text", "number_value", "parse_path"]

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


def parse_path(text: str) -> Path:
    """The checked tree of one selector; ``XPathError`` names what is outside the subset and where."""
    return _Parser(text).query()


# -- the language's values -------------------------------------------------------------------------


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
    seconds = int((moment - FILETIME_EPOCH).total_seconds())
    return seconds * 10_000_000 + int(fraction)


def number_value(text: str) -> int | float:
    """A number as XPath reads it from text (decimal, ``0x`` hex, else a float; NaN when none)."""
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
