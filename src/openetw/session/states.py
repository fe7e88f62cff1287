"""The session life cycle as a table: (state, command) -> next state.

::

    created ──start──▶ running ──stop──▶ stopping ──stop_complete──▶ stopped
       │  └───stop (nothing to drain)──────────────────────────────────▲
       └──────────── fail (from created, running, stopping) ──▶ failed

A failed session stays failed: every command but ``query``, ``remove`` and a repeated ``fail``
is refused. A pair missing from ``TRANSITIONS`` is refused with ``InvalidSessionState``.
``REMOVE`` leads to ``None``: the session leaves the table.
"""

from __future__ import annotations

import enum

from openetw.session.errors import InvalidSessionState

__all__ = ["Command", "LIVE_STATES", "SessionState", "TRANSITIONS", "next_state"]


class SessionState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Command(enum.Enum):
    START = "start"
    STOP = "stop"
    STOP_COMPLETE = "stop_complete"
    FAIL = "fail"
    UPDATE = "update"
    FLUSH = "flush"
    SNAPSHOT = "snapshot"
    ENABLE = "enable"
    DISABLE = "disable"
    CAPTURE_STATE = "capture_state"
    QUERY = "query"
    REMOVE = "remove"


# Sessions in these states hold their enable rules (and count towards the per-provider limits).
LIVE_STATES = frozenset({SessionState.CREATED, SessionState.RUNNING, SessionState.STOPPING})

_C, _R, _SG, _SD, _F = (
    SessionState.CREATED,
    SessionState.RUNNING,
    SessionState.STOPPING,
    SessionState.STOPPED,
    SessionState.FAILED,
)

TRANSITIONS: dict[tuple[SessionState, Command], SessionState | None] = {
    (_C, Command.START): _R,
    (_C, Command.STOP): _SD,
    (_C, Command.FAIL): _F,
    (_C, Command.UPDATE): _C,
    (_C, Command.ENABLE): _C,
    (_C, Command.DISABLE): _C,
    (_C, Command.QUERY): _C,
    (_C, Command.REMOVE): None,
    (_R, Command.STOP): _SG,
    (_R, Command.FAIL): _F,
    (_R, Command.UPDATE): _R,
    (_R, Command.FLUSH): _R,
    (_R, Command.SNAPSHOT): _R,
    (_R, Command.ENABLE): _R,
    (_R, Command.DISABLE): _R,
    (_R, Command.CAPTURE_STATE): _R,
    (_R, Command.QUERY): _R,
    (_SG, Command.STOP_COMPLETE): _SD,
    (_SG, Command.FAIL): _F,
    (_SG, Command.QUERY): _SG,
    (_SD, Command.QUERY): _SD,
    (_SD, Command.REMOVE): None,
    (_F, Command.FAIL): _F,
    (_F, Command.QUERY): _F,
    (_F, Command.REMOVE): None,
}


def next_state(state: SessionState, command: Command) -> SessionState | None:
    """The state ``command`` leads to from ``state``; ``InvalidSessionState`` when it is not allowed."""
    try:
        return TRANSITIONS[(state, command)]
    except KeyError:
        allowed = sorted(c.value for (s, c) in TRANSITIONS if s is state)
        raise InvalidSessionState(
            f"cannot {command.value} a {state.value} session (allowed: {', '.join(allowed)})",
            state=state,
            command=command,
        ) from None
