"""Decoded values as JSON-safe data: integers stay integers, everything else becomes plain text.

``json_value`` keeps the structure (lists for arrays, objects for structs) and turns GUIDs into
their lower-case text, date-times into ISO 8601 (``Z`` when UTC), bytes into lower-case hex and
IP addresses into their usual text. Floats that JSON cannot hold (NaN, infinities) become text.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["json_value", "json_properties"]


def json_value(value: Any) -> Any:
    """One decoded value (scalar, list or struct) as something ``json.dumps`` accepts."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return value.isoformat(timespec="microseconds")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return str(value)


def json_properties(decoded: Mapping[str, Any]) -> dict[str, Any]:
    """Every decoded property (name -> JSON-safe value), in schema order."""
    return {name: json_value(value) for name, value in decoded.items()}
