"""GUIDs as ETW stores and derives them.

Windows stores GUIDs little-endian in their first three fields (``uuid.UUID(bytes_le=...)``).
Records carry raw 16-byte GUIDs; converting them costs a microsecond, so conversions are cached.
"""

from __future__ import annotations

import uuid

try:  # the builtin SHA-1 loads in a fraction of hashlib's time (which loads OpenSSL)
    from _sha1 import sha1 as _sha1  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import sha1 as _sha1

_ETW_NAME_NAMESPACE = bytes.fromhex("482C2DB2C39047C887F81A15BFC130FB")
_CACHE_LIMIT = 1 << 16
_from_le_cache: dict[bytes, uuid.UUID] = {}

NULL_GUID = uuid.UUID(int=0)


def guid_from_le(raw: bytes) -> uuid.UUID:
    """The GUID stored in Windows layout in ``raw`` (16 bytes)."""
    found = _from_le_cache.get(raw)
    if found is None:
        found = uuid.UUID(bytes_le=bytes(raw))
        if len(_from_le_cache) < _CACHE_LIMIT:
            _from_le_cache[bytes(raw)] = found
    return found


def guid_to_le(value: uuid.UUID) -> bytes:
    return value.bytes_le


def parse_guid(text: str | uuid.UUID) -> uuid.UUID:
    """Accepts ``{...}``, plain and upper-case forms; raises ``ValueError`` otherwise."""
    if isinstance(text, uuid.UUID):
        return text
    return uuid.UUID(text.strip().strip("{}"))


def provider_guid_from_name(name: str) -> uuid.UUID:
    """ETW's name hash (TraceLogging, EventSource, LoggingChannel).

    SHA-1 over a fixed namespace followed by the upper-cased name in UTF-16BE; the first 16
    bytes with the version nibble forced to 5, read as a little-endian GUID.
    """
    digest = bytearray(_sha1(_ETW_NAME_NAMESPACE + name.upper().encode("utf-16-be")).digest()[:16])
    digest[7] = (digest[7] & 0x0F) | 0x50
    return uuid.UUID(bytes_le=bytes(digest))


def format_guid(value: uuid.UUID | None) -> str:
    """Lower-case, no braces (the form ``--json`` output uses)."""
    return "" if value is None else str(value)
