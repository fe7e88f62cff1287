"""MOF source text as classes: the tokens and declarations ``mofcomp`` reads, nothing more.

This is the syntax half of ``openetw.tdh.mof_file``: it turns the text into ``MofClassDecl``
objects (name, parent, qualifiers, properties, line numbers) without deciding what they mean
for event tracing. What it understands::

    #pragma namespace("\\\\.\\root\\wmi")            (any #pragma line: skipped)
    [Dynamic, Guid("{...}"), Description("x") : amended, EventType{1, 2}]
    class Name : Parent
    {
        [WmiDataId(1), format("x"), read] uint32 Field;
        [WmiDataId(2), MAX(16)] uint8 Bytes[];
        uint32 Method([in] uint32 x);                (methods: skipped)
        uint32 Defaulted = 5;                        (default values: skipped)
    };
    instance of Foo { ... };                         (instances: skipped)
    qualifier Foo : boolean = false;                 (qualifier declarations: skipped)

Qualifier values are strings (adjacent literals joined), integers, reals, ``true``/``false``/
``null``, or ``{...}`` lists of those; a qualifier without a value is ``True``. Names of classes
and qualifiers are case-insensitive, as in MOF; ``qualifiers`` are keyed in lower case.
Comments are ``//`` and ``/* */``. Errors carry the line they were found on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from openetw.errors import ManifestError

__all__ = ["MAX_MOF_CHARS", "MofClassDecl", "MofError", "MofPropertyDecl", "Qualifier", "parse_declarations"]

MAX_MOF_CHARS = 16 * 1024 * 1024
_MAX_NUMBER_CHARS = 64


class MofError(ManifestError):
    """A MOF file is malformed or describes an event layout ETW cannot decode."""

    def __str__(self) -> str:
        where = self.path or "<mof>"
        if self.line is not None:
            where += f":{self.line}"
        if self.element:
            where += f": class {self.element}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Qualifier:
    name: str  # as written
    value: Any  # str, int, float, bool, None, or a tuple of those
    line: int


@dataclass
class MofPropertyDecl:
    name: str
    type_name: str  # as written: uint32, string, object, MyClass (with ``ref``)...
    is_ref: bool
    array: int | bool | None  # False: scalar; None: ``name[]``; n: ``name[n]``
    qualifiers: dict[str, Qualifier]
    line: int


@dataclass
class MofClassDecl:
    name: str
    parent: str | None
    qualifiers: dict[str, Qualifier]
    properties: list[MofPropertyDecl] = field(default_factory=list)
    line: int = 0


class _Token(NamedTuple):
    kind: str  # name, string, number, punct, end
    value: Any
    line: int


_TOKEN = re.compile(
    r"""
     (?P<space>[ \t\r\f\v]+)
    |(?P<newline>\n)
    |(?P<comment>//[^\n]*)
    |(?P<block>/\*.*?\*/)
    |(?P<pragma>\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<char>'(?:[^'\\\n]|\\.)')
    |(?P<number>[-+]?(?:0[xX][0-9A-Fa-f]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
    |(?P<name>[A-Za-z_$][A-Za-z0-9_]*)
    |(?P<punct>[\[\](){},;:=])
    """,
    re.X | re.S,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "'": "'", "\\": "\\", "0": "\0"}
_HEX_ESCAPE = re.compile(r"[0-9A-Fa-f]{1,4}")
_KEYWORD_VALUES = {"true": True, "false": False, "null": None}


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "xX":
            digits = _HEX_ESCAPE.match(body, i + 2)
            if digits:
                out.append(chr(int(digits.group(), 16)))
                i = digits.end()
                continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _number(text: str, line: int, path: str | None) -> int | float:
    if len(text) > _MAX_NUMBER_CHARS:
        raise MofError(f"number of {len(text)} characters", path=path, line=line)
    body = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    if body[:2].lower() == "0x":
        return sign * int(body[2:], 16)
    if any(c in body for c in ".eE"):
        return float(text)
    return sign * int(body, 10)


def tokenize(text: str, path: str | None = None) -> list[_Token]:
    tokens: list[_Token] = []
    line = 1
    pos = 0
    end = len(text)
    match = _TOKEN.match
    while pos < end:
        found = match(text, pos)
        if found is None:
            rest = text[pos : pos + 2]
            if rest.startswith("/*"):
                raise MofError("comment never closed (no */)", path=path, line=line)
            if rest[:1] in "\"'":
                raise MofError("string never closed on its line", path=path, line=line)
            raise MofError(f"unexpected character {text[pos]!r}", path=path, line=line)
        kind = found.lastgroup
        value = found.group()
        if kind == "name":
            tokens.append(_Token("name", value, line))
        elif kind == "punct":
            tokens.append(_Token("punct", value, line))
        elif kind == "string" or kind == "char":
            tokens.append(_Token("string", _unescape(value[1:-1]), line))
        elif kind == "number":
            tokens.append(_Token("number", _number(value, line, path), line))
        elif kind == "pragma" and not value.startswith("#pragma"):
            raise MofError(f"unknown directive {value.split()[0]!r} (only #pragma is MOF)", path=path, line=line)
        line += value.count("\n")
        pos = found.end()
    tokens.append(_Token("end", None, line))
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token], path: str | None) -> None:
        self.tokens = tokens
        self.pos = 0
        self.path = path
        self.element: str | None = None

    # -- tokens ----------------------------------------------------------------------------------
    @property
    def current(self) -> _Token:
        return self.tokens[self.pos]

    def error(self, message: str, token: _Token | None = None) -> MofError:
        return MofError(message, path=self.path, line=(token or self.current).line, element=self.element)

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def at(self, punct: str) -> bool:
        token = self.current
        return token.kind == "punct" and token.value == punct

    def at_name(self, *names: str) -> bool:
        token = self.current
        return token.kind == "name" and token.value.lower() in names

    def expect(self, punct: str, what: str) -> _Token:
        if not self.at(punct):
            raise self.error(f"expected {punct!r} {what}, found {self.describe(self.current)}")
        return self.take()

    def name(self, what: str) -> _Token:
        if self.current.kind != "name":
            raise self.error(f"expected {what}, found {self.describe(self.current)}")
        return self.take()

    @staticmethod
    def describe(token: _Token) -> str:
        if token.kind == "end":
            return "the end of the file"
        if token.kind == "string":
            return "a string"
        return repr(str(token.value))

    # -- declarations ----------------------------------------------------------------------------
    def declarations(self) -> list[MofClassDecl]:
        classes: list[MofClassDecl] = []
        while self.current.kind != "end":
            self.element = None
            qualifiers = self.qualifier_list() if self.at("[") else {}
            if self.at_name("class"):
                classes.append(self.class_decl(qualifiers))
            elif self.at_name("instance"):
                self.skip_instance()
            elif self.at_name("qualifier"):
                self.skip_statement()
            elif self.at(";"):
                self.take()
            else:
                raise self.error(f"expected a class declaration, found {self.describe(self.current)}")
        return classes

    def class_decl(self, qualifiers: dict[str, Qualifier]) -> MofClassDecl:
        keyword = self.take()
        name = self.name("a class name").value
        self.element = name
        parent = None
        if self.at(":"):
            self.take()
            parent = self.name("the parent class name").value
        decl = MofClassDecl(name, parent, qualifiers, line=keyword.line)
        self.expect("{", f"to open class {name}")
        while not self.at("}"):
            if self.current.kind == "end":
                raise self.error(f"class {name} is never closed (no '}}')", keyword)
            member = self.member()
            if member is not None:
                decl.properties.append(member)
        self.take()
        if self.at(";"):
            self.take()
        return decl

    def member(self) -> MofPropertyDecl | None:
        qualifiers = self.qualifier_list() if self.at("[") else {}
        if self.at(";"):
            self.take()
            return None
        type_token = self.name("a property type")
        is_ref = False
        if self.at_name("ref"):
            self.take()
            is_ref = True
        name = self.name("a property name")
        if self.at("("):  # a method: its parameters and return type mean nothing to a trace
            self.skip_balanced("(", ")")
            self.expect(";", f"after method {name.value}")
            return None
        array: int | bool | None = False
        if self.at("["):
            self.take()
            if self.current.kind == "number":
                size = self.take()
                if not isinstance(size.value, int):
                    raise self.error(f"array size of {name.value} must be an integer", size)
                array = size.value
            else:
                array = None
            self.expect("]", f"to close the array size of {name.value}")
        if self.at("="):
            self.skip_until(";")
        self.expect(";", f"after property {name.value}")
        return MofPropertyDecl(name.value, type_token.value, is_ref, array, qualifiers, name.line)

    # -- qualifiers ------------------------------------------------------------------------------
    def qualifier_list(self) -> dict[str, Qualifier]:
        self.expect("[", "to open qualifiers")
        found: dict[str, Qualifier] = {}
        while True:
            token = self.name("a qualifier name")
            value: Any = True
            if self.at("("):
                self.take()
                value = self.value_or_list()
                self.expect(")", f"to close qualifier {token.value}")
            elif self.at("{"):
                value = self.value_list()
            if self.at(":"):  # flavors: ToInstance, ToSubclass, Amended, Restricted...
                self.take()
                self.name("a qualifier flavor")
                while self.current.kind == "name":
                    self.take()
            key = token.value.lower()
            if key in found:
                raise self.error(f"qualifier {token.value} given twice", token)
            found[key] = Qualifier(token.value, value, token.line)
            if self.at(","):
                self.take()
                continue
            self.expect("]", "to close qualifiers")
            return found

    def value_or_list(self) -> Any:
        return self.value_list() if self.at("{") else self.value()

    def value_list(self) -> tuple[Any, ...]:
        self.expect("{", "to open a value list")
        values: list[Any] = []
        while not self.at("}"):
            values.append(self.value())
            if not self.at("}"):
                self.expect(",", "between values")
        self.take()
        return tuple(values)

    def value(self) -> Any:
        token = self.current
        if token.kind == "string":
            parts = []
            while self.current.kind == "string":
                parts.append(self.take().value)
            return "".join(parts)
        if token.kind == "number":
            return self.take().value
        if token.kind == "name" and token.value.lower() in _KEYWORD_VALUES:
            self.take()
            return _KEYWORD_VALUES[token.value.lower()]
        raise self.error(f"expected a value, found {self.describe(token)}")

    # -- skipping what event tracing does not use --------------------------------------------------
    def skip_balanced(self, opening: str, closing: str) -> None:
        start = self.expect(opening, "")
        depth = 1
        while depth:
            token = self.take()
            if token.kind == "end":
                raise self.error(f"{opening!r} is never closed", start)
            if token.kind == "punct":
                depth += (token.value == opening) - (token.value == closing)

    def skip_until(self, punct: str) -> None:
        start = self.current
        while not self.at(punct):
            if self.current.kind == "end":
                raise self.error(f"expected {punct!r} before the end of the file", start)
            if self.at("{"):
                self.skip_balanced("{", "}")
            else:
                self.take()

    def skip_instance(self) -> None:
        self.skip_until("{")
        self.skip_balanced("{", "}")
        if self.at(";"):
            self.take()

    def skip_statement(self) -> None:
        self.skip_until(";")
        self.take()


def decode_mof_bytes(data: bytes) -> str:
    """MOF text from file bytes: UTF-16 (with a byte order mark, as mofcomp writes), UTF-8, else cp1252."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise MofError(f"not valid UTF-16: {exc.reason}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def parse_declarations(text: str, path: str | None = None) -> list[MofClassDecl]:
    """The classes declared in MOF ``text`` (instances, qualifier declarations and pragmas left out)."""
    if len(text) > MAX_MOF_CHARS:
        raise MofError(f"MOF text of {len(text)} characters is over the {MAX_MOF_CHARS} accepted", path=path)
    if "\0" in text:
        raise MofError("MOF text contains NUL characters (binary data?)", path=path, line=text.count("\n", 0, text.index("\0")) + 1)
    return _Parser(tokenize(text, path), path).declarations()
