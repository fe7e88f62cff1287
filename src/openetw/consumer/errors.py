"""Why a consumer could not do what was asked: subclasses of the project's errors."""

from __future__ import annotations

from openetw.errors import DecodeError, InvalidArgument, OpenEtwError, ServiceError

__all__ = [
    "EventsDropped",
    "KernelTraceUnavailable",
    "LiveSessionUnavailable",
    "PropertyNotFound",
    "PropertyTypeMismatch",
    "TraceStateError",
]


class LiveSessionUnavailable(ServiceError):
    """A real-time session was asked for, and live sessions need the trace service."""


class KernelTraceUnavailable(ServiceError):
    """The kernel trace (NT Kernel Logger on Linux) is not available yet."""


class PropertyNotFound(DecodeError, KeyError):
    """The event's schema has no property of that name (or the event has no schema at all)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return DecodeError.__str__(self)


class PropertyTypeMismatch(DecodeError, TypeError):
    """``parse(name, type)`` found a value of another type."""


class TraceStateError(InvalidArgument):
    """The trace cannot do that now (enable after start, process before open, ...)."""


class EventsDropped(OpenEtwError):
    """An iterator's consumer did not keep up and events were dropped (``count`` of them)."""

    def __init__(self, message: str, *, count: int) -> None:
        self.count = count
        super().__init__(message)
