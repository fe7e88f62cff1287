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
    out: list[str] = []
    position = 0
    for match in _TOKEN.finditer(text):
        out.append(text[position : match.start()])
        position = match.end()
        parameter_number, insert_number, spec, escape = match.groups()
        if parameter_number is not None:
            resolved = parameter(int(parameter_number)) if parameter is not None else None
            out.append(resolved if resolved is not None else "%" + parameter_number)
        elif insert_number is not None:
            number = int(insert_number)
            if number == 0:
                return "".join(out)
            if number <= len(inserts):
                out.append(_format_insert(inserts[number - 1], spec))
            else:
                out.append(match.group(0))
        elif escape is not None:
            if escape == "n":
                out.append(newline)
            else:
                out.append(_ESCAPES.get(escape, escape))
        # A lone "%" at the very end renders as nothing, as FormatMessage does.
    out.append(text[position:])
    return "".join(out)


def _format_insert(value: object, spec: str | None) -> str:
    if spec is None or spec in ("s", "S", "ws", "ls"):
        return str(value)
    conversion = _LENGTH_MODIFIERS.sub("", spec)
    if conversion.endswith("S"):
        conversion = conversion[:-1] + "s"
    if conversion.endswith("u"):
        conversion = conversion[:-1] + "d"
    try:
        return ("%" + conversion) % value
    except (TypeError, ValueError, OverflowError):
        return str(value)
