"""Trace sessions, sans-IO: the session table, enable rules, routing and statistics.

``SessionTable`` takes commands (create, start, stop, update, flush, enable, disable, a provider
registering or going away) and returns actions for the trace service to carry out. It does no
I/O and reads no clock.
"""

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
