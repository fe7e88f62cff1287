"""The Event Log's structured XPath (what Event Viewer's "Filter Current Log" writes), evaluated on
a source's ``Columns``.

The subset Windows accepts for event queries: ``*[System[...]]`` (or ``Event/System[...]``)
with ``and``, ``or``, ``not(...)``, parentheses and, inside ``System``: ``Provider[@Name='X']``,
``EventID``, ``Level``, ``Task``, ``Opcode``, ``Keywords`` (``band(Keywords, 0x10)``),
``TimeCreated[@SystemTime>='2024-01-01T00:00:00Z']`` and ``TimeCreated[timediff(@SystemTime) <=
86400000]`` (milliseconds before ``now``), ``Execution[@ProcessID=4 and @ThreadID=8]``,
``Channel='System'`` and ``Security[@UserID='S-1-5-18']``; comparisons ``= != < <= > >=``.
This module does no I/O.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument
from openetw.viewer.model import Columns

__all__ = ["xpath_mask"]

_TOKEN = re.compile(r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<num>0[xX][0-9a-fA-F]+|\d+)|(?P<op><=|>=|!=|=|<|>)|(?P<punct>[\[\]()*,/])"
                    r"|(?P<name>@?[A-Za-z_][\w.-]*))")  # fmt: skip
_INT_FIELDS = {"EventID": "id", "Level": "level", "Task": "task", "Opcode": "opcode"}
_EPOCH_FILETIME = 116444736000000000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        found = _TOKEN.match(text, at)
        if found is None or found.end() == at:
            raise InvalidArgument(f"XPath: cannot read {text[at:at + 20]!r}")
        kind = found.lastgroup or ""
        out.append((kind, found.group(kind)))
        at = found.end()
    return out


def _filetime(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) as FILETIME, to the 100 ns."""
    found = re.fullmatch(r"([^.]+?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", text.strip())
    try:
        if found is None:
            raise ValueError(text)
        when = datetime.fromisoformat(found.group(1) + (found.group(3) or "Z").replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"XPath: {text!r} is not a time") from None
    ticks = int((found.group(2) or "0")[:7].ljust(7, "0"))
    return (when - _EPOCH) // timedelta(seconds=1) * 10_000_000 + ticks + _EPOCH_FILETIME


class _Parser:
    def __init__(self, text: str, columns: Columns, now_filetime: int) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.columns = columns
        self.now = now_filetime
        self.all = np.ones(len(columns), dtype=bool)

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise InvalidArgument(f"XPath: ended early{f', expected {expected!r}' if expected else ''}")
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise InvalidArgument(f"XPath: expected {expected!r}, found {token[1]!r}")
        self.at += 1
        return token

    def query(self) -> np.ndarray:
        if self.peek() == "*":
            self.take()
        elif self.peek() == "Event":
            self.take()
            if self.peek() == "/":
                self.take()
                return self.path_in("Event")
        if self.peek() is None:
            return self.all
        self.take("[")
        mask = self.expr("Event")
        self.take("]")
        if self.peek() is not None:
            raise InvalidArgument(f"XPath: unexpected {self.peek()!r} at the end")
        return mask

    def expr(self, node: str) -> np.ndarray:
        mask = self.conj(node)
        while self.peek() == "or":
            self.take()
            mask = mask | self.conj(node)
        return mask

    def conj(self, node: str) -> np.ndarray:
        mask = self.unit(node)
        while self.peek() == "and":
            self.take()
            mask = mask & self.unit(node)
        return mask

    def unit(self, node: str) -> np.ndarray:
        token = self.peek()
        if token == "(":
            self.take()
            mask = self.expr(node)
            self.take(")")
            return mask
        if token == "not":
            self.take()
            self.take("(")
            mask = ~self.expr(node)
            self.take(")")
            return mask
        if token == "band":
            return self.band()
        if token == "timediff":
            return self.timediff()
        return self.path_in(node)

    def path_in(self, node: str) -> np.ndarray:
        kind, name = self.take()
        if kind != "name":
            raise InvalidArgument(f"XPath: expected a name, found {name!r}")
        if self.peek() == "/":
            self.take()
            return self.path_in(name)
        if self.peek() == "[":
            self.take()
            mask = self.expr(name)
            self.take("]")
            return mask
        if self.peek() in ("=", "!=", "<", "<=", ">", ">="):
            _, op = self.take()
            value_kind, value = self.take()
            return self.compare(node, name, op, value_kind, value)
        if name == "System" or name == node:
            return self.all
        raise InvalidArgument(f"XPath: {name} needs a condition")

    def compare(self, node: str, name: str, op: str, kind: str, value: str) -> np.ndarray:
        text = value[1:-1] if kind == "str" else value
        if name in _INT_FIELDS:
            return _op(getattr(self.columns, _INT_FIELDS[name]), op, _number(text))
        if name == "@Name" and node == "Provider":
            return self._label("provider", op, text)
        if name == "Channel":
            return self._label("channel", op, text)
        if name == "@UserID" and node == "Security":
            return self._label("user", op, text)
        if name == "@SystemTime" and node == "TimeCreated":
            return _op(self.columns.time, op, _filetime(text))
        if name == "@ProcessID" and node == "Execution":
            return _op(self.columns.process, op, _number(text))
        if name == "@ThreadID" and node == "Execution":
            return _op(self.columns.thread, op, _number(text))
        if name == "Keywords":
            return _op(self.columns.keyword.astype(np.uint64), op, np.uint64(_number(text)))
        raise InvalidArgument(f"XPath: no field {name} in {node} (fields: Provider/@Name, EventID, Level, Task, Opcode, Keywords, "
                              "TimeCreated/@SystemTime, Execution/@ProcessID, @ThreadID, Channel, Security/@UserID)")  # fmt: skip

    def _label(self, column: str, op: str, text: str) -> np.ndarray:
        if op not in ("=", "!="):
            raise InvalidArgument(f"XPath: names compare with = or !=, not {op}")
        labels = self.columns.labels.get(column, [])
        codes = [code for code, label in enumerate(labels) if label.lower() == text.lower()]
        found = np.isin(getattr(self.columns, column), codes)
        return found if op == "=" else ~found

    def band(self) -> np.ndarray:
        self.take("band")
        self.take("(")
        field = self.take()[1]
        if field != "Keywords":
            raise InvalidArgument("XPath: band() takes Keywords")
        self.take(",")
        bits = np.uint64(_number(self.take()[1]))
        self.take(")")
        mask: np.ndarray = (self.columns.keyword & bits) != 0
        return mask

    def timediff(self) -> np.ndarray:
        self.take("timediff")
        self.take("(")
        self.take("@SystemTime")
        self.take(")")
        _, op = self.take()
        milliseconds = _number(self.take()[1])
        age = self.now - self.columns.time
        return _op(age, op, milliseconds * 10_000)


def _number(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise InvalidArgument(f"XPath: {text!r} is not a number") from None


def _op(column: np.ndarray, op: str, value: Any) -> np.ndarray:
    result: np.ndarray
    if op == "=":
        result = column == value
    elif op == "!=":
        result = column != value
    elif op == "<":
        result = column < value
    elif op == "<=":
        result = column <= value
    elif op == ">":
        result = column > value
    elif op == ">=":
        result = column >= value
    else:
        raise InvalidArgument(f"XPath: no operator {op}")
    return result


def xpath_mask(text: str, columns: Columns, now: float | None = None) -> np.ndarray:
    """The rows an Event Log XPath query selects (see the module doc)."""
    now_filetime = int((time.time() if now is None else now) * 10_000_000) + _EPOCH_FILETIME
    return _Parser(text, columns, now_filetime).query()
