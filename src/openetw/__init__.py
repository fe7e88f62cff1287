"""openetw: Event Tracing for Windows, the whole system, in Python on Linux."""

from __future__ import annotations

from openetw.errors import (
    AccessDenied,
    DecodeError,
    EtlFormatError,
    InvalidArgument,
    ManifestError,
    OpenEtwError,
    ServiceError,
    SessionError,
)
from openetw.guids import provider_guid_from_name

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "DecodeError",
    "EtlFormatError",
    "InvalidArgument",
    "ManifestError",
    "OpenEtwError",
    "ServiceError",
    "SessionError",
    "provider_guid_from_name",
]
