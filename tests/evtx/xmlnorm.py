"""Comparing XML renderings of one event the way a reader would: same elements, attributes and text.

Readers agree on content but not on presentation: whitespace, quotes, ``<a/>`` or ``<a></a>``,
``{GUID}`` braces and case, zero-padded hex, how many digits of a time they print, an optional
attribute left empty or left out. ``canonical`` removes exactly those differences.
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

_FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)

_GUID = re.compile(r"^\{?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\}?$")
_TIME = re.compile(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?(?:Z| UTC|\+00:00)?$")
_HEX = re.compile(r"^0x([0-9a-fA-F]+)$")


def canonical_value(text: str | None, rounding: str = "truncate") -> str:
    """``rounding``: how a reader goes from 100 ns ticks to microseconds: ``truncate``, or
    ``python-evtx`` (through a float, as that reader does: give it the full-precision text)."""
    text = (text or "").strip()
    match = _GUID.match(text)
    if match:
        return match.group(1).upper()
    match = _TIME.match(text)
    if match:
        fraction = match.group(3) or ""
        if rounding == "python-evtx" and len(fraction) > 6:
            # python-evtx goes through a float: fromtimestamp(ticks * 1e-7 - 11644473600).
            base = datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}+00:00")
            ticks = (int((base - _FILETIME_EPOCH).total_seconds()) * 10_000_000) + int((fraction + "0000000")[:7])
            shown = datetime.fromtimestamp(float(ticks) * 1e-7 - 11644473600, UTC)
            return shown.replace(tzinfo=None).isoformat(timespec="microseconds")
        digits = (fraction + "000000")[:6]
        return f"{match.group(1)}T{match.group(2)}.{digits}"
    if text in ("True", "False"):
        return text.lower()
    match = _HEX.match(text)
    if match:
        return hex(int(match.group(1), 16))
    return re.sub(r"\s+", " ", text)


def _control(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x20 and code not in (0x09, 0x0A, 0x0D) else ""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _canon(element: ET.Element, rounding: str) -> tuple[Any, ...]:
    attributes = tuple(
        sorted((_local(k), canonical_value(v, rounding)) for k, v in element.attrib.items() if v.strip() != "" and k != "xmlns")
    )
    children = tuple(_canon(child, rounding) for child in element)
    text = "".join(element.itertext()) if not len(element) else (element.text or "")
    return (_local(element.tag), attributes, canonical_value(text, rounding), children)


def canonical(xml_text: str, rounding: str = "truncate") -> tuple[Any, ...]:
    """The event's content with presentation removed (raises ``ET.ParseError`` on bad XML)."""
    xml_text = re.sub(r"^\s*<\?xml[^>]*\?>", "", xml_text)
    # Control characters (raw, or as XML 1.1 character references) become visible escapes.
    xml_text = re.sub(r"&#x([0-9a-fA-F]{1,2});", lambda m: _control(int(m.group(1), 16)) or m.group(0), xml_text)
    xml_text = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", lambda m: _control(ord(m.group(0))), xml_text)
    return _canon(ET.fromstring(xml_text.strip()), rounding)


def same_binary(hex_text: str, base64_text: str) -> bool:
    """python-evtx prints binary values in base64 where others print hex, and drops control characters."""
    if hex_text == base64_text or re.sub(r"\\x[01][0-9a-f]", "", hex_text) == base64_text:
        return True
    wrapped = re.fullmatch(r"<string>(.*)</string>", base64_text, re.S)  # its items of a string array
    if wrapped:
        return hex_text == wrapped.group(1)
    try:
        return bytes.fromhex(hex_text) == base64.b64decode(base64_text, validate=True)
    except ValueError:
        return False


def first_difference(a: tuple[Any, ...], b: tuple[Any, ...], path: str = "", *, same: Any = None) -> str | None:
    """Where two canonical trees first differ (``None`` when equal); ``same(a, b)`` compares texts."""
    here = f"{path}/{a[0]}"
    if a[0] != b[0]:
        return f"{path}: element {a[0]!r} != {b[0]!r}"
    if a[1] != b[1]:
        return f"{here}: attributes {a[1]!r} != {b[1]!r}"
    if a[2] != b[2] and not (same is not None and same(a[2], b[2])):
        return f"{here}: text {a[2]!r} != {b[2]!r}"
    if len(a[3]) != len(b[3]):
        return f"{here}: {len(a[3])} children != {len(b[3])}: {[c[0] for c in a[3]]} vs {[c[0] for c in b[3]]}"
    for x, y in zip(a[3], b[3], strict=False):
        found = first_difference(x, y, here, same=same)
        if found:
            return found
    return None


def timestamp_of(text: str) -> datetime | None:
    match = _TIME.match(text.strip())
    if not match:
        return None
    return datetime.fromisoformat(canonical_value(text))
