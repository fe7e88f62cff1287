"""What the session table asks its driver (the trace service) to do. Plain data, no behaviour.

Commands return lists of actions in the order they must be carried out: pools open before a
provider is told to write into them, and a provider is told to stop before its pools close.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openetw.session.config import SessionConfig
from openetw.session.enable import EnableState

__all__ = [
    "Action",
    "CaptureState",
    "ClosePool",
    "FinishSession",
    "FlushSession",
    "NotifyProvider",
    "OpenPool",
    "SessionUpdated",
    "SnapshotToFile",
    "StartSession",
]


@dataclass(frozen=True)
class StartSession:
    """Open the session's output (file descriptor, real-time queue) and start its flush timer."""

    session_id: int
    logger_id: int
    config: SessionConfig


@dataclass(frozen=True)
class OpenPool:
    """Create a buffer pool for this session in the producer process behind ``connection_id``."""

    session_id: int
    connection_id: int
    logger_id: int
    buffer_size: int
    minimum_buffers: int
    maximum_buffers: int
    flush_interval_ms: int


@dataclass(frozen=True)
class NotifyProvider:
    """Send a registration its new enable state (enable callback, ``enabled`` flag, pools to use)."""

    connection_id: int
    provider_guid: uuid.UUID
    state: EnableState
    registration_id: int


@dataclass(frozen=True)
class ClosePool:
    """Take the pool's remaining buffers (FULL and FILLING), write them, then release the pool."""

    session_id: int
    connection_id: int


@dataclass(frozen=True)
class CaptureState:
    """Ask a registration to log its state into a session (EVENT_CONTROL_CODE_CAPTURE_STATE)."""

    connection_id: int
    provider_guid: uuid.UUID
    registration_id: int
    session_id: int
    logger_id: int


@dataclass(frozen=True)
class FlushSession:
    """Take every non-empty buffer of the session's pools now (ControlTrace FLUSH or the timer)."""

    session_id: int


@dataclass(frozen=True)
class SnapshotToFile:
    """Write a buffering session's in-memory buffers to ``file_name``; the session keeps running."""

    session_id: int
    file_name: str


@dataclass(frozen=True)
class SessionUpdated:
    """The session's settings changed (ControlTrace UPDATE): apply ``config`` to output and pools."""

    session_id: int
    config: SessionConfig


@dataclass(frozen=True)
class FinishSession:
    """All pools are closed: write what is left and close the output.

    After a stop, the driver then calls ``SessionTable.stop_complete``; after a failure
    (``failed`` true) the session is already in its final state.
    """

    session_id: int
    failed: bool = False


Action = (
    StartSession
    | OpenPool
    | NotifyProvider
    | ClosePool
    | CaptureState
    | FlushSession
    | SnapshotToFile
    | SessionUpdated
    | FinishSession
)
