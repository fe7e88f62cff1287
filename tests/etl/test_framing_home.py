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
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

import openetw

SRC = Path(openetw.__file__).parent
HOME = frozenset({"etl/layouts.py", "etl/framing.py"})
# Being rewritten onto etl/framing.py's constants (the consumer's block-based index); remove each
# entry when its module is converted. Nothing else may be added here.
PENDING: frozenset[str] = frozenset()


def framing_patterns(text: str) -> list[tuple[int, str]]:
    """(line, what) for every framing pattern in the code of ``text``."""
    lines: dict[int, list[tokenize.TokenInfo]] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP):
            lines.setdefault(token.start[0], []).append(token)
    found: list[tuple[int, str]] = []
    for line, tokens in sorted(lines.items()):
        names = [t.string for t in tokens if t.type == tokenize.NAME]
        marker = any("marker" in name.lower() and not name.isupper() for name in names)
        for before, token, after in zip([None, *tokens[:-1]], tokens, [*tokens[1:], None], strict=True):
            if token.type != tokenize.NUMBER:
                continue
            text_ = token.string.lower()
            beside = {t.string for t in (before, after) if t is not None}
            if text_ == "0x30":
                found.append((line, "the buffer's Offset position"))
            elif text_ in ("0x48", "0x50") and beside & {"+", "-", "+=", "-="}:
                found.append((line, "a header size used as an offset"))
            elif text_ in ("0xc0", "0x90", "0xd0"):
                found.append((line, "a marker flag byte"))
            elif marker and text_ in ("0x80", "0xff", "0xffffffff"):
                found.append((line, "a marker compared with a number"))
            elif marker and text_ in ("16", "24", "30") and before is not None and before.string == ">>":
                found.append((line, "the marker split by hand"))
        if marker and any(name.startswith("HEADER_TYPE_") for name in names):
            found.append((line, "a header-type code compared with a marker"))
    return found


def modules() -> list[str]:
    return sorted(path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py"))


@pytest.mark.parametrize("module", [m for m in modules() if m not in HOME | PENDING])
def test_no_module_restates_record_framing(module: str) -> None:
    found = framing_patterns((SRC / module).read_text())
    assert not found, "\n".join(f"{module}:{line}: {what} (take it from openetw.etl.framing)" for line, what in found)


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
