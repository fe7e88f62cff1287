"""Event message text: ``%1`` inserts and the FormatMessage escapes manifests use.

``%n`` with a number n (1..99) is the n-th template item, optionally with a printf-style
format between exclamation marks (``%1!08X!``). ``%%n`` is a parameter string (looked up in
the provider's parameter file on Windows; here through an optional callback). The escapes
``%n`` (newline), ``%r``, ``%t``, ``%b`` (space), ``%.``, ``%!``, ``%%`` and ``%0`` (end of
message) follow FormatMessage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = [
    "MAX_INSERT_WIDTH", "MAX_MESSAGE_CHARS", "TRUNCATION_MARK", "BoundedText", "TruncatedMessage", "clamp_spec",
    "format_message", "inserts_used", "limit_message", "wide_specs",
]  # fmt: skip

# A message comes with the trace (a manifest can travel inside an .etl file), so what it asks
# for is bounded: a ``%1!999999999d!`` width or precision is clamped to MAX_INSERT_WIDTH, and a
# rendered message longer than MAX_MESSAGE_CHARS is cut there and ends with TRUNCATION_MARK
# (it is then a ``TruncatedMessage``, which says how much was cut). The cut is made as the
# message is built (``BoundedText``): past the limit pieces are only counted, and an insert used
# many times is formatted once, so the work is proportional to the limit and the message's
# length as written, not to what it would expand to.
MAX_INSERT_WIDTH = 1024
MAX_MESSAGE_CHARS = 32 * 1024
TRUNCATION_MARK = " [message truncated]"
_SPEC_NUMBERS = re.compile(r"^([-+ #0]*)(\d*)(?:\.(\d*))?(.*)$", re.DOTALL)


class TruncatedMessage(str):
    """A rendered message cut at MAX_MESSAGE_CHARS; ``cut`` characters were left out."""

    cut: int = 0


def clamp_spec(spec: str) -> str:
    """``spec`` (a printf spec, without ``%``) with its width and precision at most MAX_INSERT_WIDTH."""
    match = _SPEC_NUMBERS.match(spec)
    if match is None:
        return spec
    flags, width, precision, rest = match.groups()
    if width and (len(width) > 6 or int(width) > MAX_INSERT_WIDTH):
        width = str(MAX_INSERT_WIDTH)
    if precision and (len(precision) > 6 or int(precision) > MAX_INSERT_WIDTH):
        precision = str(MAX_INSERT_WIDTH)
    return flags + width + ("" if precision is None else "." + precision) + rest


def wide_specs(text: str) -> list[tuple[int, str]]:
    """(insert number, spec) of each insert whose width or precision is above MAX_INSERT_WIDTH."""
    return [
        (int(match.group(2)), match.group(3))
        for match in _TOKEN.finditer(text)
        if match.group(2) is not None and match.group(3) is not None and clamp_spec(match.group(3)) != match.group(3)
    ]


class BoundedText:
    """A message built piece by piece, kept up to MAX_MESSAGE_CHARS; the rest only counted."""

    __slots__ = ("parts", "kept", "length")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.length = 0

    def add(self, piece: str) -> None:
        self.length += len(piece)
        room = MAX_MESSAGE_CHARS + 1 - self.kept
        if room > 0:
            kept = piece if len(piece) <= room else piece[:room]
            self.parts.append(kept)
            self.kept += len(kept)

    def text(self) -> str:
        """The message, or its first MAX_MESSAGE_CHARS characters and TRUNCATION_MARK."""
        text = "".join(self.parts)
        if self.length <= MAX_MESSAGE_CHARS:
            return text
        cut = TruncatedMessage(text[:MAX_MESSAGE_CHARS] + TRUNCATION_MARK)
        cut.cut = self.length - MAX_MESSAGE_CHARS
        return cut


def limit_message(text: str) -> str:
    """``text``, or its first MAX_MESSAGE_CHARS characters and TRUNCATION_MARK."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    cut = TruncatedMessage(text[:MAX_MESSAGE_CHARS] + TRUNCATION_MARK)
    cut.cut = len(text) - MAX_MESSAGE_CHARS
    return cut

_TOKEN = re.compile(r"%(?:%(\d+)|(\d{1,2})(?:!([^!]*)!)?|(.)|$)", re.DOTALL)
_ESCAPES = {"r": "\r", "t": "\t", "b": " ", ".": ".", "!": "!", "%": "%", " ": " "}
_LENGTH_MODIFIERS = re.compile(r"(?:I64|I32|ll|hh|[hlwIzjLqt])")


def inserts_used(text: str) -> list[int]:
    """The 1-based insert numbers a message refers to, in order of appearance."""
    found = []
    for match in _TOKEN.finditer(text):
        if match.group(2) is not None and match.group(2) != "0":
            found.append(int(match.group(2)))
    return found


def format_message(
    text: str,
    inserts: Sequence[object],
    *,
    newline: str = "\n",
    parameter: Callable[[int], str | None] | None = None,
) -> str:
    """``text`` with its inserts replaced by ``inserts`` (``%1`` is ``inserts[0]``).

    An insert beyond ``inserts`` is left as written. ``parameter`` resolves ``%%n``; without
    it, or when it returns ``None``, ``%%n`` renders as ``%n`` (FormatMessage's reading).
    """
    out = BoundedText()
    formatted: dict[tuple[int, str | None], str] = {}  # an insert used many times is formatted once
    position = 0
    for match in _TOKEN.finditer(text):
        out.add(text[position : match.start()])
        position = match.end()
        parameter_number, insert_number, spec, escape = match.groups()
        if parameter_number is not None:
            resolved = parameter(int(parameter_number)) if parameter is not None else None
            out.add(resolved if resolved is not None else "%" + parameter_number)
        elif insert_number is not None:
            number = int(insert_number)
            if number == 0:
                return out.text()
            if number <= len(inserts):
                piece = formatted.get((number, spec))
                if piece is None:
                    piece = formatted[number, spec] = _format_insert(inserts[number - 1], spec)
                out.add(piece)
            else:
                out.add(match.group(0))
        elif escape is not None:
            if escape == "n":
                out.add(newline)
            else:
                out.add(_ESCAPES.get(escape, escape))
        # A lone "%" at the very end renders as nothing, as FormatMessage does.
    out.add(text[position:])
    return out.text()


def _format_insert(value: object, spec: str | None) -> str:
    if spec is None or spec in ("s", "S", "ws", "ls"):
        return str(value)
    conversion = _LENGTH_MODIFIERS.sub("", clamp_spec(spec))
    if conversion.endswith("S"):
        conversion = conversion[:-1] + "s"
    if conversion.endswith("u"):
        conversion = conversion[:-1] + "d"
    try:
        return ("%" + conversion) % value
    except (TypeError, ValueError, OverflowError):
        return str(value)
