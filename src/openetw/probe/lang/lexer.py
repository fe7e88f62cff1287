"""Tokens of the D language, with their line and column.

The lexer is driven by the parser: a probe description (``etw:d1d93ef7-...:0xff_0x...:12``)
is not made of ordinary tokens, so the parser asks for it as raw text (``probe_spec``) where a
clause begins. ``#pragma D option`` lines are collected apart; ``$1``..``$9`` are macro
arguments, replaced by their values here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from openetw.probe.lang.errors import ProbeCompileError

__all__ = ["Lexer", "Token"]

_OPERATORS = sorted(
    [">>=", "<<=", "++", "--", "->", "==", "!=", "<=", ">=", "&&", "||", "^^", "<<", ">>", "+=", "-=", "*=", "/=",
     "%=", "&=", "|=", "^=", "+", "-", "*", "/", "%", "&", "|", "^", "!", "~", "<", ">", "=", "?", ":", ";", ",",
     ".", "(", ")", "[", "]", "{", "}", "@"],
    key=len,
    reverse=True,
)  # fmt: skip
_OPERATOR = re.compile("|".join(re.escape(op) for op in _OPERATORS))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:`[A-Za-z_][A-Za-z0-9_]*)*")
_IDENT_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | set("0123456789")
_SPEC_CHARS = _IDENT_CHARS | set(":-*?.[]!`$~+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "int", "str", "ident", "agg", "op", "eof"
    text: str
    line: int
    column: int
    value: object = None

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of program"
        return f"'{self.text}'"


class Lexer:
    """Tokens of ``source`` on demand; ``pragmas`` holds the ``#pragma D option`` settings."""

    def __init__(self, source: str, *, name: str = "<program>", macros: list[str] | None = None, target: int | None = None) -> None:
        self.target = target
        self.text = source
        self.name = name
        self.macros = list(macros or [])
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.pragmas: list[tuple[str, str, int]] = []
        self._peeked: Token | None = None
        self._peeked_at: tuple[int, int, int] = (0, 1, 0)

    # -- errors ---------------------------------------------------------------------------------
    def error(self, message: str, token: Token | None = None) -> ProbeCompileError:
        line, column = (token.line, token.column) if token is not None else (self.line, self.pos - self.line_start + 1)
        return ProbeCompileError(message, line=line, column=column, source=self.name)

    # -- whitespace, comments, pragmas ----------------------------------------------------------
    def _skip(self) -> None:
        text = self.text
        n = len(text)
        while self.pos < n:
            ch = text[self.pos]
            if ch == "\n":
                self.pos += 1
                self.line += 1
                self.line_start = self.pos
            elif ch in " \t\r\f\v":
                self.pos += 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("comment is not closed (expected '*/')")
                self._advance_to(end + 2)
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            elif ch == "#" and not text[self.line_start : self.pos].strip():
                end = text.find("\n", self.pos)
                end = n if end < 0 else end
                self._directive(text[self.pos : end])
                self.pos = end
            else:
                return

    def _advance_to(self, end: int) -> None:
        chunk = self.text[self.pos : end]
        newlines = chunk.count("\n")
        if newlines:
            self.line += newlines
            self.line_start = self.pos + chunk.rfind("\n") + 1
        self.pos = end

    def _directive(self, line_text: str) -> None:
        words = line_text[1:].split()
        if len(words) >= 3 and words[0] == "pragma" and words[1] == "D" and words[2] == "option" and len(words) == 4:
            name, _, value = words[3].partition("=")
            self.pragmas.append((name, value, self.line))
            return
        if words and words[0] == "pragma":
            raise self.error(f"unsupported pragma {line_text.strip()!r} (expected '#pragma D option name=value')")
        raise self.error(f"unsupported preprocessor directive {line_text.strip()!r}")

    # -- tokens ---------------------------------------------------------------------------------
    def peek(self) -> Token:
        if self._peeked is None:
            self._peeked_at = (self.pos, self.line, self.line_start)
            self._peeked = self._scan()
        return self._peeked

    def next(self) -> Token:
        token = self.peek()
        self._peeked = None
        return token

    def probe_spec(self) -> Token:
        """A probe description as raw text (``provider:module:function:name`` with wildcards)."""
        if self._peeked is not None:
            self.pos, self.line, self.line_start = self._peeked_at
            self._peeked = None
        self._skip()
        start, column = self.pos, self.pos - self.line_start + 1
        text = self.text
        while self.pos < len(text) and text[self.pos] in _SPEC_CHARS:
            self.pos += 1
        spec = text[start : self.pos]
        if not spec:
            found = self.peek()
            raise self.error(f"expected a probe description, found {found.describe()}", found)
        return Token("spec", self._expand_spec(spec, start), self.line, column)

    def _expand_spec(self, spec: str, start: int) -> str:
        if "$" not in spec:
            return spec
        out = []
        i = 0
        while i < len(spec):
            if spec.startswith("$target", i):
                out.append(str(self._target(start + i)))
                i += len("$target")
            elif spec[i] == "$" and i + 1 < len(spec) and spec[i + 1].isdigit():
                out.append(str(self._macro(int(spec[i + 1]), start + i)))
                i += 2
            else:
                out.append(spec[i])
                i += 1
        return "".join(out)

    def _target(self, at: int) -> int:
        if self.target is None:
            raise ProbeCompileError(
                "$target is the process of -p PID or -c CMD, and neither was given",
                line=self.line, column=at - self.line_start + 1, source=self.name,
            )  # fmt: skip
        return self.target

    def _macro(self, number: int, at: int) -> str:
        if number == 0:
            return self.name
        if number > len(self.macros):
            raise ProbeCompileError(
                f"macro argument ${number} is not defined ({len(self.macros)} given)",
                line=self.line, column=at - self.line_start + 1, source=self.name,
            )  # fmt: skip
        return self.macros[number - 1]

    def _scan(self) -> Token:
        self._skip()
        text = self.text
        line, column, start = self.line, self.pos - self.line_start + 1, self.pos
        if self.pos >= len(text):
            return Token("eof", "", line, column)
        ch = text[self.pos]
        if ch in _IDENT_START:
            match = _IDENT.match(text, start)
            assert match is not None
            self.pos = match.end()
            return Token("ident", match.group(), line, column)
        if ch.isdigit():
            return self._number(line, column)
        if ch == '"':
            return self._string(line, column)
        if ch == "'":
            return self._char(line, column)
        if ch == "$" and text.startswith("$target", self.pos) and (text[self.pos + 7 : self.pos + 8] or " ") not in _IDENT_CHARS:
            self.pos += len("$target")
            return Token("int", "$target", line, column, (self._target(start), ""))
        if ch == "$":
            double = text.startswith("$$", self.pos)
            digits_at = self.pos + (2 if double else 1)
            if digits_at < len(text) and text[digits_at].isdigit():
                self.pos = digits_at + 1
                value = self._macro(int(text[digits_at]), start)
                raw = text[start : self.pos]
                if not double:
                    try:
                        number = int(value, 0)
                    except ValueError:
                        pass
                    else:
                        return Token("int", raw, line, column, (number, ""))
                return Token("str", raw, line, column, value)
            raise self.error(f"unexpected character {ch!r}")
        if ch == "@":
            end = self.pos + 1
            while end < len(text) and text[end] in _IDENT_CHARS:
                end += 1
            self.pos = end
            return Token("agg", text[start:end], line, column, text[start + 1 : end])
        match = _OPERATOR.match(text, start)
        if match is not None:
            self.pos = match.end()
            return Token("op", match.group(), line, column)
        raise self.error(f"unexpected character {ch!r}")

    def _number(self, line: int, column: int) -> Token:
        text = self.text
        start = end = self.pos
        if text.startswith(("0x", "0X"), start):
            end = start + 2
            while end < len(text) and text[end] in "0123456789abcdefABCDEF":
                end += 1
            digits = text[start:end]
            if len(digits) == 2:
                raise self.error("expected hexadecimal digits after '0x'")
            value = int(digits, 16)
        else:
            while end < len(text) and text[end].isdigit():
                end += 1
            digits = text[start:end]
            value = int(digits, 8) if len(digits) > 1 and digits[0] == "0" and all(c in "01234567" for c in digits) else int(digits)
        suffix_start = end
        while end < len(text) and text[end] in "uUlL":
            end += 1
        suffix = text[suffix_start:end].lower()
        if end < len(text) and text[end] in _IDENT_CHARS:
            self.pos = end
            raise self.error(f"invalid digit or suffix {text[end]!r} in number {text[start:end + 1]!r}")
        self.pos = end
        return Token("int", text[start:end], line, column, (value, suffix))

    def _string(self, line: int, column: int) -> Token:
        text = self.text
        i = self.pos + 1
        out = []
        while True:
            if i >= len(text) or text[i] == "\n":
                self.pos = i
                raise ProbeCompileError("string is not closed (expected '\"')", line=line, column=column, source=self.name)
            ch = text[i]
            if ch == '"':
                break
            if ch == "\\" and i + 1 < len(text):
                nxt = text[i + 1]
                if nxt in _ESCAPES:
                    out.append(_ESCAPES[nxt])
                    i += 2
                    continue
                raise ProbeCompileError(f"unknown escape '\\{nxt}' in string", line=line, column=column + i - self.pos, source=self.name)
            out.append(ch)
            i += 1
        raw = text[self.pos : i + 1]
        self.pos = i + 1
        return Token("str", raw, line, column, "".join(out))

    def _char(self, line: int, column: int) -> Token:
        text = self.text
        end = text.find("'", self.pos + 1)
        if end < 0:
            raise self.error("character constant is not closed (expected \"'\")")
        body = text[self.pos + 1 : end]
        if body.startswith("\\") and len(body) == 2 and body[1] in _ESCAPES:
            body = _ESCAPES[body[1]]
        if len(body) != 1:
            raise self.error(f"invalid character constant '{body}'")
        self.pos = end + 1
        return Token("int", text[self.pos - len(body) - 2 : self.pos], line, column, (ord(body), ""))
