"""Decoded values in the form a typed column gives them back, for comparing the two."""

from __future__ import annotations

import ipaddress
import math
import struct
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

_UNIX = datetime(1970, 1, 1, tzinfo=UTC)
_FILETIME_TO_UNIX_MICROS = 11_644_473_600_000_000


def expected(value: Any, kind: pa.DataType) -> Any:
    """``value`` (as ``openetw.tdh`` decodes it) as Arrow's ``to_pylist`` gives it for ``kind``."""
    if value is None:
        return None
    if pa.types.is_list(kind):
        items = value if isinstance(value, (list, tuple)) else [value]
        return [expected(item, kind.value_type) for item in items]
    if pa.types.is_struct(kind):
        return {field.name: expected(value.get(field.name), field.type) for field in kind}
    if pa.types.is_timestamp(kind):
        if isinstance(value, datetime):
            return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return _UNIX + timedelta(microseconds=value // 10 - _FILETIME_TO_UNIX_MICROS)
    if pa.types.is_float32(kind):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if pa.types.is_string(kind):
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).hex()
        if isinstance(value, (uuid.UUID, ipaddress.IPv4Address, ipaddress.IPv6Address)):
            return str(value)
        return value if isinstance(value, str) else str(value)
    return value


def same(left: Any, right: Any) -> bool:
    """Equal, with NaN equal to NaN."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return bool(left == right)
