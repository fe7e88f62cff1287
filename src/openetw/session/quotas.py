"""Per-user limits, so that no user starves the others of the machine's 64 sessions.

A user other than root may hold at most ``sessions_per_user`` sessions, and never the last
``reserved_for_root`` of the table's slots: however many users share the machine, root can
always start a session. Pools (one per producer connection and session) and control
connections are limited per user the same way (root has no limit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from openetw.errors import InvalidArgument
from openetw.session.config import MAX_SESSIONS
from openetw.session.errors import TooManySessions

__all__ = ["DEFAULT_QUOTAS", "UserQuotas"]


@dataclass(frozen=True)
class UserQuotas:
    sessions_per_user: int = 8
    reserved_for_root: int = 4
    pools_per_user: int = 512
    connections_per_user: int = 256

    def __post_init__(self) -> None:
        for name in ("sessions_per_user", "pools_per_user", "connections_per_user"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1, not {getattr(self, name)}")
        if not 0 <= self.reserved_for_root < MAX_SESSIONS:
            raise InvalidArgument(f"reserved_for_root must be from 0 to {MAX_SESSIONS - 1}, not {self.reserved_for_root}")

    def check_session(self, owner_uids: Iterable[int], uid: int) -> None:
        """``TooManySessions`` when ``uid`` may not create one more session, the table's
        sessions being owned by ``owner_uids`` (one entry per session)."""
        if uid == 0:
            return
        owners = list(owner_uids)
        mine = owners.count(uid)
        if mine >= self.sessions_per_user:
            raise TooManySessions(f"uid {uid} already holds {mine} trace sessions (at most {self.sessions_per_user} per user)")
        if len(owners) >= MAX_SESSIONS - self.reserved_for_root:
            raise TooManySessions(
                f"only the {self.reserved_for_root} trace session slots kept for root are free ({len(owners)} of {MAX_SESSIONS} in use)"
            )

    def allows_pool(self, pools_of_user: int, uid: int) -> bool:
        return uid == 0 or pools_of_user < self.pools_per_user

    def allows_connection(self, connections_of_user: int, uid: int) -> bool:
        return uid == 0 or connections_of_user < self.connections_per_user


DEFAULT_QUOTAS = UserQuotas()
