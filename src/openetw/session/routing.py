"""Which sessions get a provider's events, and keeping every provider process told about it.

The router keeps, per provider GUID, the sessions that enabled it in enable order, and per
control connection the sessions it holds a pool for. After any change it recomputes the enable
state of the affected registrations and returns only the differences as actions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from openetw.session.actions import Action, CaptureState, ClosePool, NotifyProvider, OpenPool
from openetw.session.config import MAX_SESSIONS_PER_CLASSIC_PROVIDER, MAX_SESSIONS_PER_PROVIDER
from openetw.session.enable import EnableRule, EnableState, SessionEnable
from openetw.session.errors import ClassicProviderInUse, TooManySessionsForProvider
from openetw.session.model import Session
from openetw.session.providers import ProviderRegistry, Registration
from openetw.session.states import LIVE_STATES

__all__ = ["Router"]


class Router:
    def __init__(self, sessions: Mapping[int, Session]) -> None:
        self.registry = ProviderRegistry()
        self._sessions = sessions
        self._enablers: dict[uuid.UUID, list[int]] = {}
        self._pools: dict[int, set[int]] = {}

    # --- enable rules -------------------------------------------------------------------------

    def live_enablers(self, provider_guid: uuid.UUID) -> list[Session]:
        """Sessions holding a rule for the provider, in enable order, that are not stopped or failed."""
        found = (self._sessions[sid] for sid in self._enablers.get(provider_guid, ()))
        return [s for s in found if s.state in LIVE_STATES]

    def check_enable(self, session: Session, provider_guid: uuid.UUID) -> None:
        """Refuse a new (session, provider) pair over ETW's per-provider limits; updates always pass."""
        if provider_guid in session.rules:
            return
        others = len(self.live_enablers(provider_guid))
        if self.registry.is_classic(provider_guid) and others >= MAX_SESSIONS_PER_CLASSIC_PROVIDER:
            raise ClassicProviderInUse(
                f"classic provider {provider_guid} is already enabled in another session; it can only have one"
            )
        if others >= MAX_SESSIONS_PER_PROVIDER:
            raise TooManySessionsForProvider(
                f"provider {provider_guid} is already enabled in {others} sessions (at most {MAX_SESSIONS_PER_PROVIDER})"
            )

    def set_rule(
        self, session: Session, provider_guid: uuid.UUID, rule: EnableRule, name: str | None, *, pending: bool = False
    ) -> None:
        """Add or replace a rule. ``pending``: enabled by a name nothing registered yet, kept under
        the name hash until a registration carrying that name takes it over."""
        self.check_enable(session, provider_guid)
        if provider_guid not in session.rules:
            self._enablers.setdefault(provider_guid, []).append(session.session_id)
        session.rules[provider_guid] = rule
        if name:
            session.provider_names[provider_guid] = name
        if pending and name:
            session.pending_names[provider_guid] = name
        else:
            session.pending_names.pop(provider_guid, None)

    def drop_rule(self, session: Session, provider_guid: uuid.UUID) -> None:
        del session.rules[provider_guid]
        session.provider_names.pop(provider_guid, None)
        session.pending_names.pop(provider_guid, None)
        enablers = self._enablers[provider_guid]
        enablers.remove(session.session_id)
        if not enablers:
            del self._enablers[provider_guid]

    def drop_session(self, session: Session) -> None:
        for provider_guid in list(session.rules):
            self.drop_rule(session, provider_guid)

    # --- routing ------------------------------------------------------------------------------

    def _receiving(self, provider_guid: uuid.UUID) -> list[Session]:
        live = self.live_enablers(provider_guid)
        if self.registry.is_classic(provider_guid):
            # A classic provider belongs to the first session that enabled it; the others wait.
            live = live[:MAX_SESSIONS_PER_CLASSIC_PROVIDER]
        return [s for s in live if s.receiving]

    def sessions_for(
        self,
        provider_guid: uuid.UUID,
        level: int,
        keyword: int,
        event_id: int,
        pid: int | None,
        exe: str | None,
    ) -> tuple[int, ...]:
        return tuple(
            s.session_id
            for s in self._receiving(provider_guid)
            if s.rules[provider_guid].admits(level, keyword, event_id, pid, exe)
        )

    def enable_state(self, provider_guid: uuid.UUID, pid: int | None, exe: str | None) -> EnableState:
        return _state_for(self._receiving(provider_guid), provider_guid, pid, exe)

    # --- keeping providers and pools in step --------------------------------------------------

    def reconcile(self, provider_guids: Iterable[uuid.UUID], connections: Iterable[int] = ()) -> list[Action]:
        """Actions bringing the given providers' registrations (and their processes' pools) up to date.

        Order: pools to open, then notifications, then pools to close.
        """
        notifications: list[Action] = []
        touched = set(connections)
        for provider_guid in dict.fromkeys(provider_guids):
            receiving = self._receiving(provider_guid)
            for registration in self.registry.for_provider(provider_guid):
                state = _state_for(receiving, provider_guid, registration.pid, registration.exe)
                if state != registration.enable_state:
                    registration.enable_state = state
                    notifications.append(_notify(registration))
                    touched.add(registration.connection_id)
        opens, closes = self._pool_changes(touched)
        return opens + notifications + closes

    def _pool_changes(self, connections: Iterable[int]) -> tuple[list[Action], list[Action]]:
        opens: list[Action] = []
        closes: list[Action] = []
        for connection_id in sorted(connections):
            wanted: set[int] = set()
            for registration in self.registry.for_connection(connection_id):
                wanted |= registration.enable_state.session_ids
            held = self._pools.get(connection_id, set())
            for session_id in sorted(wanted - held):
                opens.append(_open_pool(self._sessions[session_id], connection_id))
            for session_id in sorted(held - wanted):
                closes.append(ClosePool(session_id, connection_id))
            if wanted:
                self._pools[connection_id] = wanted
            else:
                self._pools.pop(connection_id, None)
        return opens, closes

    def pools_of(self, session_id: int) -> tuple[int, ...]:
        """Connection ids of the processes holding a pool for the session."""
        return tuple(sorted(c for c, sessions in self._pools.items() if session_id in sessions))

    # --- registrations ------------------------------------------------------------------------

    def register(
        self,
        connection_id: int,
        provider_guid: uuid.UUID,
        pid: int,
        exe: str,
        *,
        classic: bool,
        provider_name: str | None,
        uid: int | None = None,
    ) -> tuple[Registration, list[Action]]:
        registration = self.registry.add(
            connection_id, provider_guid, pid, exe, classic=classic, provider_name=provider_name, uid=uid
        )
        moved = self._claim_pending(registration)
        return registration, self.reconcile([provider_guid, *moved])

    def _claim_pending(self, registration: Registration) -> list[uuid.UUID]:
        """Rules pending on the registration's name move to the GUID it registered with (only
        in sessions it may name for); returns the name-hash GUIDs they leave."""
        provider_guid, provider_name = registration.provider_guid, registration.provider_name
        if not provider_name:
            return []
        key = provider_name.casefold()
        moved: list[uuid.UUID] = []
        for session in list(self._sessions.values()):
            if not registration.may_name_for(session.owner_uid):
                continue
            for hashed, name in list(session.pending_names.items()):
                if name.casefold() != key:
                    continue
                if hashed == provider_guid:  # a TraceLogging provider: the hash was its GUID
                    del session.pending_names[hashed]
                    continue
                rule = session.rules[hashed]
                self.drop_rule(session, hashed)
                if provider_guid not in session.rules:
                    try:
                        self.set_rule(session, provider_guid, rule, provider_name)
                    except (ClassicProviderInUse, TooManySessionsForProvider):
                        pass  # over the provider's limits: as an enable by GUID would be refused
                moved.append(hashed)
        return moved

    def unregister(self, registration_id: int) -> list[Action]:
        registration = self.registry.remove(registration_id)
        return self.reconcile([registration.provider_guid], [registration.connection_id])

    def connection_closed(self, connection_id: int) -> list[Action]:
        gone = self.registry.for_connection(connection_id)
        for registration in gone:
            self.registry.remove(registration.registration_id)
        return self.reconcile([r.provider_guid for r in gone], [connection_id])

    def capture_state(self, session: Session, provider_guid: uuid.UUID) -> list[Action]:
        return [
            CaptureState(r.connection_id, provider_guid, r.registration_id, session.session_id, session.logger_id)
            for r in self.registry.for_provider(provider_guid)
            if session.session_id in r.enable_state.session_ids
        ]


def _state_for(receiving: list[Session], provider_guid: uuid.UUID, pid: int | None, exe: str | None) -> EnableState:
    return EnableState.from_sessions(
        SessionEnable(s.session_id, s.logger_id, s.rules[provider_guid])
        for s in receiving
        if s.rules[provider_guid].filters.admits_process(pid, exe)
    )


def _notify(registration: Registration) -> NotifyProvider:
    return NotifyProvider(
        registration.connection_id, registration.provider_guid, registration.enable_state, registration.registration_id
    )


def _open_pool(session: Session, connection_id: int) -> OpenPool:
    config = session.config
    return OpenPool(
        session.session_id,
        connection_id,
        session.logger_id,
        config.buffer_size,
        config.minimum_buffers,
        config.maximum_buffers,
        config.flush_timer * 1000,
    )
