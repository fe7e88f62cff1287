"""Record framing stays in its home: ``etl/layouts.py`` and ``etl/framing.py`` say it, nothing else.

The scan reads the code of every module under ``src/openetw`` (strings and comments are not
code) for the framing patterns that were once restated by hand:

* the buffer's Offset position, ``0x30``;
* header sizes used as record offsets (``0x48``, ``0x50`` added or subtracted);
* the marker flag bytes (``0xC0``, ``0x90``, ``0xD0``; ``0x80``, ``0xFF`` or ``0xFFFFFFFF`` next
  to a marker);
* the marker split by hand (a marker shifted by 16, 24 or 30 bits);
* a header-type code of ``layouts.py`` compared with a marker.

A module that needs one of these takes it from ``openetw.etl.framing`` by name.

The compiled core's C (``_native/*.c``) is read the same way, and for two more things it would
otherwise restate: a record or buffer field reached by a number (``st32(p + 8, tid)``: a load,
store or ``memcpy`` whose address adds a number), and the record alignment typed in (``& ~7``,
``% 8``). Its offsets come from the generated ``OE_*_AT`` constants (``_native/gen_*.py`` render
them from ``etl/layouts.py``); an offset that is not a layout's is written with ``sizeof``.
"""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import openetw

SRC = Path(openetw.__file__).parent
HOME = frozenset({"etl/layouts.py", "etl/framing.py"})
# Being rewritten onto etl/framing.py's constants (the consumer's block-based index); remove each
# entry when its module is converted. Nothing else may be added here.
PENDING: frozenset[str] = frozenset()


Token = tuple[int, str, str]  # (line, kind: "name" | "number" | "op", text)


def framing_patterns(text: str) -> list[tuple[int, str]]:
    """(line, what) for every framing pattern in the code of ``text`` (Python)."""
    kinds = {tokenize.NAME: "name", tokenize.NUMBER: "number", tokenize.OP: "op"}
    tokens = [
        (token.start[0], kinds[token.type], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type in kinds
    ]
    return _framing(tokens)


def _by_line(tokens: Iterable[Token]) -> dict[int, list[Token]]:
    lines: dict[int, list[Token]] = {}
    for token in tokens:
        lines.setdefault(token[0], []).append(token)
    return lines


def _framing(tokens: list[Token]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for line, on_line in sorted(_by_line(tokens).items()):
        names = [text for _, kind, text in on_line if kind == "name"]
        marker = any("marker" in name.lower() and not name.isupper() for name in names)
        for before, token, after in zip([None, *on_line[:-1]], on_line, [*on_line[1:], None], strict=True):
            if token[1] != "number":
                continue
            text_ = _number(token[2])
            beside = {t[2] for t in (before, after) if t is not None}
            if text_ == "0x30":
                found.append((line, "the buffer's Offset position"))
            elif text_ in ("0x48", "0x50") and beside & {"+", "-", "+=", "-="}:
                found.append((line, "a header size used as an offset"))
            elif text_ in ("0xc0", "0x90", "0xd0"):
                found.append((line, "a marker flag byte"))
            elif marker and text_ in ("0x80", "0xff", "0xffffffff"):
                found.append((line, "a marker compared with a number"))
            elif marker and text_ in ("16", "24", "30") and before is not None and before[2] == ">>":
                found.append((line, "the marker split by hand"))
        if marker and any(name.startswith("HEADER_TYPE_") for name in names):
            found.append((line, "a header-type code compared with a marker"))
    return found


def _number(text: str) -> str:
    """A number token as the scan compares it: lower case, without C's integer suffixes."""
    return text.lower().rstrip("ul") or "0"


_C_TOKENS = re.compile(
    r"""(?P<comment>/\*.*?\*/|//[^\n]*)
      |(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
      |(?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
      |(?P<name>[A-Za-z_]\w*)
      |(?P<op>->|<<|>>|\+\+|--|[-+*/%&|^~!<>=]=?|[()\[\]{},;?:.#])
      |(?P<space>\s+)
      |(?P<other>.)""",
    re.S | re.X,
)
# a load or store through an address; memcpy and memcmp take two addresses
_C_ADDRESSES = {
    **{f"{op}{bits}": 1 for op in ("rd", "ld", "st") for bits in (8, 16, 32, 64)},
    "publish32": 1,
    "acquire32": 1,
    "memset": 1,
    "memcpy": 2,
    "memcmp": 2,
}


def c_tokens(text: str) -> Iterator[Token]:
    """The code tokens of C ``text``: comments and string or character literals are not code."""
    line = 1
    for match in _C_TOKENS.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        if kind in ("name", "number", "op"):
            yield line, kind, match.group()
        line += match.group().count("\n")


def _arguments(tokens: list[Token], open_at: int) -> list[list[Token]]:
    """The arguments of the call whose ``(`` is ``tokens[open_at]``."""
    arguments: list[list[Token]] = [[]]
    depth = 0
    for token in tokens[open_at + 1 :]:
        text = token[2]
        if text in "([{":
            depth += 1
        elif text in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif text == "," and depth == 0:
            arguments.append([])
            continue
        arguments[-1].append(token)
    return arguments


def _typed_in_offset(address: list[Token]) -> bool:
    """Whether an address adds (or takes) a bare number: ``p + 8``, not ``p + 4 * i``."""
    depth = 0
    terms: list[list[Token]] = [[]]
    for token in address:
        text = token[2]
        if text in "([":
            depth += 1
        elif text in ")]":
            depth -= 1
        if depth == 0 and text in ("+", "-") and terms[-1]:
            terms.append([])
            continue
        terms[-1].append(token)
    return any(len(term) == 1 and term[0][1] == "number" and _number(term[0][2]) != "0" for term in terms[1:])


def c_patterns(text: str) -> list[tuple[int, str]]:
    """(line, what) for every framing pattern, typed-in offset or alignment in C ``text``."""
    tokens = list(c_tokens(text))
    found = _framing(tokens)
    for at, (line, kind, name) in enumerate(tokens):
        if kind == "name" and name in _C_ADDRESSES and at + 1 < len(tokens) and tokens[at + 1][2] == "(":
            addresses = _arguments(tokens, at + 1)[: _C_ADDRESSES[name]]
            if any(_typed_in_offset(address) for address in addresses):
                found.append((line, f"a field reached by a typed-in offset in {name}() (use a generated OE_*_AT)"))
    for line, on_line in sorted(_by_line(tokens).items()):
        texts = [text for _, _, text in on_line]
        numbers = {_number(text) for _, kind, text in on_line if kind == "number"}
        modulo_8 = any(a == "%" and _number(b) == "8" for a, b in itertools.pairwise(texts))
        if ("~" in texts and numbers & {"7", "8"}) or modulo_8:
            found.append((line, "the record alignment typed in (use OE_RECORD_ALIGNMENT)"))
    return sorted(found)


def modules() -> list[str]:
    return sorted(path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py"))


# C sources of other formats: ``_evtx.c`` reads the Event Log file format, whose offsets it takes
# from ``evtx/layout.py`` through its own generated header (``gen_evtx.py``); ETL's framing rules
# (marker bytes, record offsets) do not apply to BinXml's token bytes. ``_nettrace.c`` walks the rows
# of EventPipe traces, whose flags and row sizes come from ``nettrace/events.py`` (``gen_nettrace.py``).
OTHER_FORMATS = {"_native/_evtx.c", "_native/_nettrace.c"}

# Lines whose number only looks like an ETL marker byte, each with what it is.
NOT_FRAMING = {
    ("_native/_read.c", "(uint8_t)(0xC0 | (c >> 6))"): "UTF-8's lead byte of a two-byte sequence",
}


def c_sources() -> list[str]:
    found = (path.relative_to(SRC).as_posix() for path in (SRC / "_native").glob("*.c"))
    return sorted(source for source in found if source not in OTHER_FORMATS)


@pytest.mark.parametrize("module", [m for m in modules() if m not in HOME | PENDING])
def test_no_module_restates_record_framing(module: str) -> None:
    found = framing_patterns((SRC / module).read_text())
    assert not found, "\n".join(f"{module}:{line}: {what} (take it from openetw.etl.framing)" for line, what in found)


@pytest.mark.parametrize("source", c_sources())
def test_no_c_source_types_in_a_layout(source: str) -> None:
    text = (SRC / source).read_text()
    lines = text.splitlines()
    allowed = {code for (where, code) in NOT_FRAMING if where == source}
    found = [(line, what) for line, what in c_patterns(text) if not any(code in lines[line - 1] for code in allowed)]
    assert not found, "\n".join(f"{source}:{line}: {what}" for line, what in found)


def test_the_c_sources_are_scanned() -> None:
    assert {"_native/_read.c", "_native/_tracefs.c", "_native/_write.c"} <= set(c_sources())


def test_pending_modules_exist() -> None:
    assert set(modules()) >= PENDING


@pytest.mark.parametrize(
    "code",
    [
        "end = struct.unpack_from('<I', data, 0x30)[0]",
        "pos = offset + 0x48",
        "typed = flags & 0xC0 == 0xC0",
        "kind = marker >> 16 & 0xFF",
        "done = marker == 0xFFFFFFFF",
        "system = (marker >> 16) & 0xFF == L.HEADER_TYPE_SYSTEM64",
    ],
)
def test_the_scan_finds_each_pattern(code: str) -> None:
    assert framing_patterns(code + "\n")


def test_the_scan_reads_code_not_text() -> None:
    assert not framing_patterns('"""marker flags 0xC0, Offset at 0x30"""\nx = 1  # marker >> 24 & 0xC0\n')
    assert not framing_patterns("digest[7] = (digest[7] & 0x0F) | 0x50\n")


@pytest.mark.parametrize(
    "code",
    [
        "st32(p + 8, (uint32_t)tid);",
        "memcpy(&tid, r + 8, 4);",
        "memcpy(p + 24, cae, n);",
        "uint64_t hi = rd64(h + OE_CLASSIC_GUID_AT + 8);",
        "Py_ssize_t aligned = (end + 7) & ~(Py_ssize_t)7;",
        "int bad = used % 8;",
        "uint32_t end = rd32(d + 0x30);",
        "if ((marker & 0xC0) == 0xC0) {",
    ],
)
def test_the_c_scan_finds_each_pattern(code: str) -> None:
    assert c_patterns("static void f(void) {\n    " + code + "\n}\n")


def test_the_c_scan_reads_code_not_text() -> None:
    code = """/* st32(p + 8, tid): offset 0x30, aligned (end + 7) & ~7 */
// memcpy(p + 24, cae, n) % 8
static const char *why = "p + 8 & ~7 0xC0";
static void f(uint8_t *p, Py_ssize_t i, uint32_t tid) {
    st32(p + OE_EH_THREADID_AT, tid);
    st16(p + 2 * i, 0);
    memcpy(p + OE_EH_PROVIDERID_AT, q, 16);
    st16(p + sizeof(uint16_t), 0);
}
"""
    assert not c_patterns(code)
