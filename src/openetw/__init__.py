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
    "Provider",
    "Session",
    "TraceLoggingProvider",
    "DecodeError",
    "EtlFormatError",
    "EtwLoggingHandler",
    "InvalidArgument",
    "ManifestError",
    "OpenEtwError",
    "ServiceError",
    "SessionError",
    "provider_guid_from_name",
]

# The runtime classes load on first use, so ``import openetw`` stays cheap for tools that only read files.
_LAZY = {
    "Provider": "openetw.provider.runtime",
    "TraceLoggingProvider": "openetw.provider.runtime",
    "Session": "openetw.controller.session",
    "EtwLoggingHandler": "openetw.provider.logging_handler",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # here, not above: `import openetw` loads only errors and guids

    return load(__name__, _LAZY, None, name)
