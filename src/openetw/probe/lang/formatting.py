"""``printf`` formats (DTrace's conversions) checked at compile time and applied at run time."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

__all__ = ["MAX_FORMAT_WIDTH", "Format", "FormatError", "parse_format"]

_CONVERSION = re.compile(r"%([-+ 0#']*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|L|z|j|t)?(@[diuxX]?|[diuoxXcsSpaAeEfgGY%])")
_INT_CONVERSIONS = set("diuoxXcp")
_FLOAT_CONVERSIONS = set("aAeEfgG")
_MASK64 = (1 << 64) - 1
_EPOCH_NS = 0
MAX_FORMAT_WIDTH = 65535
"""The widest field width or precision a conversion may ask for (``%65535d``): a larger one is
refused when the program compiles rather than padding a line with gigabytes."""


class FormatError(ValueError):
    """A format string with an unknown conversion or an argument of the wrong kind."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


def parse_format(text: str) -> list[tuple[str, str, str]]:
    """The pieces of a format: ("lit", text, "") or ("conv", python spec, conversion letter)."""
    pieces: list[tuple[str, str, str]] = []
    pos = 0
    while True:
        at = text.find("%", pos)
        if at < 0:
            if pos < len(text):
                pieces.append(("lit", text[pos:], ""))
            return pieces
        if at > pos:
            pieces.append(("lit", text[pos:at], ""))
        match = _CONVERSION.match(text, at)
        if match is None:
            raise FormatError(f"invalid conversion {text[at:at + 3]!r} in format", at)
        flags, width, precision, _length, conv = match.groups()
        if "*" in (width or "") or "*" in (precision or ""):
            raise FormatError("'*' widths are not supported in formats", at)
        for what, number in (("width", width), ("precision", precision)):
            if number is not None and int(number) > MAX_FORMAT_WIDTH:
                raise FormatError(f"{what} {int(number)} of conversion {match.group(0)!r} is above the largest, {MAX_FORMAT_WIDTH}", at)
        if conv == "%":
            pieces.append(("lit", "%", ""))
        else:
            spec = "%" + flags.replace("'", "") + (width or "") + (f".{precision}" if precision is not None else "")
            pieces.append(("conv", spec, conv))
        pos = match.end()


class Format:
    """A compiled format: ``kinds`` says what each argument must be ("int", "str", "any")."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pieces = parse_format(text)
        self.kinds: list[str] = []
        self.aggregation_slot: int | None = None
        for kind, _spec, conv in self.pieces:
            if kind != "conv":
                continue
            if conv.startswith("@"):
                self.aggregation_slot = len(self.kinds)
                self.kinds.append("agg")
            elif conv in _INT_CONVERSIONS or conv in _FLOAT_CONVERSIONS or conv == "Y":
                self.kinds.append("int")
            else:
                self.kinds.append("any")

    def format(self, args: tuple[Any, ...] | list[Any]) -> str:
        out = []
        index = 0
        for kind, spec, conv in self.pieces:
            if kind == "lit":
                out.append(spec)
                continue
            value = args[index]
            index += 1
            out.append(_convert(spec, conv, value))
        return "".join(out)


def _convert(spec: str, conv: str, value: Any) -> str:
    if conv.startswith("@"):
        conv = conv[1:] or "d"
        if not isinstance(value, int):
            return (spec + "s") % (value,)
    if conv in "di":
        return (spec + "d") % value if isinstance(value, int) else (spec + "s") % (value,)
    if conv in "uoxX":
        text: str = (spec + ("d" if conv == "u" else conv)) % (value & _MASK64)
        return text
    if conv == "p":
        return (spec + "s") % ("0x%x" % (value & _MASK64))
    if conv == "c":
        return (spec + "c") % chr(value & 0xFF)
    if conv in "sS":
        return (spec + "s") % (value,)
    if conv == "Y":
        when = datetime.fromtimestamp(value / 1e9, tz=UTC)
        return (spec + "s") % when.strftime("%Y %b %d %H:%M:%S")
    return (spec + {"a": "e", "A": "E"}.get(conv, conv)) % float(value)
