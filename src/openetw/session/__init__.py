"""Trace sessions, sans-IO: the session table, enable rules, routing and statistics.

``SessionTable`` takes commands (create, start, stop, update, flush, enable, disable, a provider
registering or going away) and returns actions for the trace service to carry out. It does no
I/O and reads no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.session.actions import (
        Action,
        CaptureState,
        ClosePool,
        FinishSession,
        FlushSession,
        NotifyProvider,
        OpenPool,
        SessionUpdated,
        SnapshotToFile,
        StartSession,
    )
    from openetw.session.autologger import parse_autologger_config
    from openetw.session.config import (
        MAX_KERNEL_SESSIONS,
        MAX_SESSIONS,
        MAX_SESSIONS_PER_CLASSIC_PROVIDER,
        MAX_SESSIONS_PER_PROVIDER,
        RESERVED_KERNEL_SLOTS,
        RESERVED_SESSION_NAMES,
        LogFileMode,
        LogMode,
        ProviderEnable,
        SessionConfig,
        SessionKind,
        resolve_provider,
    )
    from openetw.session.enable import (
        ALL_KEYWORDS,
        DISABLED,
        EnableProperty,
        EnableRule,
        EnableState,
        EventFilters,
        SessionEnable,
    )
    from openetw.session.errors import (
        AccessDenied,
        ClassicProviderInUse,
        InvalidSessionConfig,
        InvalidSessionState,
        NoSuchRegistration,
        NoSuchSession,
        ProviderNotEnabled,
        ReservedSessionName,
        SessionError,
        SessionExists,
        TooManyKernelSessions,
        TooManySessions,
        TooManySessionsForProvider,
    )
    from openetw.session.model import ROOT, Caller, Session
    from openetw.session.providers import ProviderRegistry, Registration
    from openetw.session.states import TRANSITIONS, Command, SessionState, next_state
    from openetw.session.stats import COUNTER_KEYS, GAUGE_KEYS, STATISTICS_KEYS, SessionStatistics
    from openetw.session.table import SessionTable

__all__ = [
    "ALL_KEYWORDS",
    "AccessDenied",
    "Action",
    "COUNTER_KEYS",
    "CaptureState",
    "Caller",
    "ClassicProviderInUse",
    "ClosePool",
    "Command",
    "DISABLED",
    "EnableProperty",
    "EnableRule",
    "EnableState",
    "EventFilters",
    "FinishSession",
    "FlushSession",
    "GAUGE_KEYS",
    "InvalidSessionConfig",
    "InvalidSessionState",
    "LogFileMode",
    "LogMode",
    "MAX_KERNEL_SESSIONS",
    "MAX_SESSIONS",
    "MAX_SESSIONS_PER_CLASSIC_PROVIDER",
    "MAX_SESSIONS_PER_PROVIDER",
    "NoSuchRegistration",
    "NoSuchSession",
    "NotifyProvider",
    "OpenPool",
    "ProviderEnable",
    "ProviderNotEnabled",
    "ProviderRegistry",
    "RESERVED_KERNEL_SLOTS",
    "RESERVED_SESSION_NAMES",
    "ROOT",
    "Registration",
    "ReservedSessionName",
    "STATISTICS_KEYS",
    "Session",
    "SessionConfig",
    "SessionEnable",
    "SessionError",
    "SessionExists",
    "SessionKind",
    "SessionState",
    "SessionStatistics",
    "SessionTable",
    "SessionUpdated",
    "SnapshotToFile",
    "StartSession",
    "TRANSITIONS",
    "TooManyKernelSessions",
    "TooManySessions",
    "TooManySessionsForProvider",
    "next_state",
    "parse_autologger_config",
    "resolve_provider",
]

# Each name loads its module on first use, so that importing one module of the package (or the
# package) loads nothing else: a program pays at start-up for the modules it uses only.
_LAZY: dict[str, str] = {
    "Action": "openetw.session.actions",
    "CaptureState": "openetw.session.actions",
    "ClosePool": "openetw.session.actions",
    "FinishSession": "openetw.session.actions",
    "FlushSession": "openetw.session.actions",
    "NotifyProvider": "openetw.session.actions",
    "OpenPool": "openetw.session.actions",
    "SessionUpdated": "openetw.session.actions",
    "SnapshotToFile": "openetw.session.actions",
    "StartSession": "openetw.session.actions",
    "parse_autologger_config": "openetw.session.autologger",
    "MAX_KERNEL_SESSIONS": "openetw.session.config",
    "MAX_SESSIONS": "openetw.session.config",
    "MAX_SESSIONS_PER_CLASSIC_PROVIDER": "openetw.session.config",
    "MAX_SESSIONS_PER_PROVIDER": "openetw.session.config",
    "RESERVED_KERNEL_SLOTS": "openetw.session.config",
    "RESERVED_SESSION_NAMES": "openetw.session.config",
    "LogFileMode": "openetw.session.config",
    "LogMode": "openetw.session.config",
    "ProviderEnable": "openetw.session.config",
    "SessionConfig": "openetw.session.config",
    "SessionKind": "openetw.session.config",
    "resolve_provider": "openetw.session.config",
    "ALL_KEYWORDS": "openetw.session.enable",
    "DISABLED": "openetw.session.enable",
    "EnableProperty": "openetw.session.enable",
    "EnableRule": "openetw.session.enable",
    "EnableState": "openetw.session.enable",
    "EventFilters": "openetw.session.enable",
    "SessionEnable": "openetw.session.enable",
    "AccessDenied": "openetw.session.errors",
    "ClassicProviderInUse": "openetw.session.errors",
    "InvalidSessionConfig": "openetw.session.errors",
    "InvalidSessionState": "openetw.session.errors",
    "NoSuchRegistration": "openetw.session.errors",
    "NoSuchSession": "openetw.session.errors",
    "ProviderNotEnabled": "openetw.session.errors",
    "ReservedSessionName": "openetw.session.errors",
    "SessionError": "openetw.session.errors",
    "SessionExists": "openetw.session.errors",
    "TooManyKernelSessions": "openetw.session.errors",
    "TooManySessions": "openetw.session.errors",
    "TooManySessionsForProvider": "openetw.session.errors",
    "ROOT": "openetw.session.model",
    "Caller": "openetw.session.model",
    "Session": "openetw.session.model",
    "ProviderRegistry": "openetw.session.providers",
    "Registration": "openetw.session.providers",
    "TRANSITIONS": "openetw.session.states",
    "Command": "openetw.session.states",
    "SessionState": "openetw.session.states",
    "next_state": "openetw.session.states",
    "COUNTER_KEYS": "openetw.session.stats",
    "GAUGE_KEYS": "openetw.session.stats",
    "STATISTICS_KEYS": "openetw.session.stats",
    "SessionStatistics": "openetw.session.stats",
    "SessionTable": "openetw.session.table",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
