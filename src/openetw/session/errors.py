"""Why the session table refused a request: one subclass of ``SessionError`` per reason.

``AccessDenied`` comes from ``openetw.errors`` and is re-exported here so callers can catch every
refusal of this package from one place.
"""

from __future__ import annotations

from openetw.errors import AccessDenied, InvalidArgument, SessionError

__all__ = [
    "AccessDenied",
    "ClassicProviderInUse",
    "InvalidSessionConfig",
    "InvalidSessionState",
    "NoSuchRegistration",
    "NoSuchSession",
    "ProviderNotEnabled",
    "ReservedSessionName",
    "SessionError",
    "SessionExists",
    "TooManyKernelSessions",
    "TooManySessions",
    "TooManySessionsForProvider",
]


class TooManySessions(SessionError):
    """All logger slots are taken (ETW allows 64 sessions at once)."""


class TooManyKernelSessions(TooManySessions):
    """All kernel (system logger) slots are taken: 8 at most, 2 of them kept for the reserved names."""


class ReservedSessionName(SessionError):
    """The name belongs to a reserved kernel logger and cannot name an ordinary session."""


class SessionExists(SessionError):
    """A session with that name (compared without case, as ETW does) already exists."""


class NoSuchSession(SessionError):
    """No session has that id or name."""


class NoSuchRegistration(SessionError):
    """No provider registration has that id."""


class TooManySessionsForProvider(SessionError):
    """A manifest or TraceLogging provider is already enabled in 8 sessions."""


class ClassicProviderInUse(SessionError):
    """A classic (MOF/WPP) provider is already enabled in another session; it may have only one."""


class ProviderNotEnabled(SessionError):
    """Disable or capture-state named a provider the session does not enable."""


class InvalidSessionState(SessionError):
    """The command is not allowed in the session's current state (see ``TRANSITIONS``)."""

    def __init__(self, message: str, *, state: object = None, command: object = None) -> None:
        self.state = state
        self.command = command
        super().__init__(message)


class InvalidSessionConfig(SessionError, InvalidArgument):
    """A session or enable setting is out of range or inconsistent with the log mode."""
