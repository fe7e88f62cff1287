"""Numbers, dates and addresses as .NET prints them with the en-US culture.

PerfView's text is .NET's ``ToString``: ``n0`` puts thousands separators in integers, ``n3``
rounds a double to three decimals (half away from zero, after .NET Framework's 15 significant
digits), addresses are ``0x`` and at least eight lower-case hex digits (``x8``), ``bool`` is
``True``/``False``, a GUID is its lower-case ``D`` form, and date-times are
``yy/MM/dd HH:mm:ss.ffffff`` in UTC.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

__all__ = [
    "address",
    "as_signed",
    "boolean",
    "date_time",
    "guid",
    "n0",
    "n3",
    "n3_exact",
    "single",
    "truncate",
]

_THREE_PLACES = Decimal("0.001")
_MAX_SHOWN = 20


def as_signed(value: int, bits: int) -> int:
    """``value`` read back as a two's-complement integer of ``bits`` bits."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def n0(value: int) -> str:
    """``1234567`` -> ``1,234,567`` (``int.ToString("n0")``)."""
    return f"{value:,}"


def _n3_decimal(value: Decimal) -> str:
    rounded = value.quantize(_THREE_PLACES, rounding=ROUND_HALF_UP)
    if rounded == 0:
        rounded = abs(rounded)
    return f"{rounded:,.3f}"


def n3(value: float) -> str:
    """A double with three decimals and separators, as .NET Framework rounds it."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return _n3_decimal(Decimal(f"{value:.15g}"))


def n3_exact(value: Fraction) -> str:
    """An exact ratio (a time in milliseconds) rounded the way ``n3`` rounds a double."""
    return n3(value.numerator / value.denominator) if value.denominator else "0.000"


def single(value: float) -> str:
    """A ``float`` (System.Single) as ``ToString()`` prints it: up to 7 significant digits."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    text = f"{value:.7g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = exponent[0]
        digits = exponent[1:].lstrip("0").rjust(2, "0")
        text = f"{mantissa}E{sign}{digits}"
    return text


def address(value: int) -> str:
    """``0x`` and at least eight lower-case hex digits (``ulong.ToString("x8")``)."""
    return f"0x{value & 0xFFFFFFFFFFFFFFFF:08x}"


def boolean(value: object) -> str:
    return "True" if value else "False"


def guid(value: uuid.UUID) -> str:
    return str(value)


def date_time(value: datetime) -> str:
    """``yy/MM/dd HH:mm:ss.ffffff`` in UTC (a naive value is taken as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%y/%m/%d %H:%M:%S.") + f"{value.microsecond:06d}"


def truncate(text: str) -> str:
    """At most 20 characters, then ``...``; newlines escaped (as the test that made the baselines does)."""
    if len(text) > _MAX_SHOWN:
        text = text[:_MAX_SHOWN] + "..."
    return text.replace("\n", "\\n").replace("\r", "\\r")
