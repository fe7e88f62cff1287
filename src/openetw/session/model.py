"""A session as the table keeps it, and the credentials of whoever asks."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from openetw.session.config import SessionConfig, SessionKind
from openetw.session.enable import EnableRule
from openetw.session.states import SessionState
from openetw.session.stats import SessionStatistics

__all__ = ["Caller", "ROOT", "Session"]


@dataclass(frozen=True)
class Caller:
    """Peer credentials of a controller (SO_PEERCRED plus supplementary groups)."""

    uid: int
    gid: int
    gids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "gids", frozenset(self.gids) | {self.gid})


ROOT = Caller(0, 0)


@dataclass
class Session:
    """One trace session. Read it freely; change it only through ``SessionTable``."""

    session_id: int
    logger_id: int
    config: SessionConfig
    owner_uid: int
    owner_gid: int
    created_at: float = 0.0
    state: SessionState = SessionState.CREATED
    # Insertion order is enable order (it decides which session keeps a classic provider).
    rules: dict[uuid.UUID, EnableRule] = field(default_factory=dict)
    provider_names: dict[uuid.UUID, str] = field(default_factory=dict)
    # Rules enabled by a name no provider had registered yet (kept under the name hash): the
    # first registration carrying that name takes the rule over.
    pending_names: dict[uuid.UUID, str] = field(default_factory=dict)
    statistics: SessionStatistics = field(default_factory=SessionStatistics)
    started_at: float | None = None
    stopped_at: float | None = None
    last_flush_at: float | None = None
    failure: str | None = None
    # Last cumulative ``events_lost`` read from each producer's pool header, by connection id.
    pool_losses_seen: dict[int, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def kind(self) -> SessionKind:
        return self.config.kind

    @property
    def receiving(self) -> bool:
        """Providers write to this session only while it runs."""
        return self.state is SessionState.RUNNING
