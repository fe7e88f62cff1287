"""The session table: ETW's controller semantics as a sans-IO state machine.

Every command checks the transition table, changes the sessions, and returns the actions the
driver must carry out (open a pool, notify a provider, flush, finish). Nothing here opens files
or sockets, starts threads or reads the clock: the caller passes ``now`` (seconds, any epoch).
Commands given a ``caller`` check its credentials first; ``caller=None`` is the service itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from openetw.errors import InvalidArgument
from openetw.provider_names import resolve_provider_name
from openetw.session.actions import (
    Action,
    FinishSession,
    FlushSession,
    OpenPool,
    SessionUpdated,
    SnapshotToFile,
    StartSession,
)
from openetw.session.config import (
    MAX_KERNEL_SESSIONS,
    MAX_SESSIONS,
    RESERVED_KERNEL_SLOTS,
    LogMode,
    SessionConfig,
    SessionKind,
    is_reserved_name,
    resolve_provider,
)
from openetw.session.describe import SessionInfo, describe_session
from openetw.session.enable import EnableRule, EnableState, EventFilters
from openetw.session.errors import (
    AccessDenied,
    InvalidSessionConfig,
    NoSuchSession,
    ProviderNotEnabled,
    ReservedSessionName,
    SessionExists,
    TooManyKernelSessions,
    TooManySessions,
)
from openetw.session.model import Caller, Session
from openetw.session.providers import ProviderRegistry, Registration
from openetw.session.routing import Router
from openetw.session.states import Command, SessionState, next_state

__all__ = ["SessionRef", "SessionTable"]

SessionRef = int | str
Actions = list[Action]
SessionInfos = list[SessionInfo]
# Settings a running session may change (ControlTrace UPDATE); a created one may change all but these.
UPDATABLE_WHILE_RUNNING = frozenset({"file_name", "max_file_mb", "flush_timer", "maximum_buffers"})
FIXED_SETTINGS = frozenset({"name", "kind", "providers"})


class SessionTable:
    """At most 64 sessions (8 of them kernel sessions), their enable rules and their statistics.

    ``admin_gids`` are groups whose members control every session, as root does (ETW's
    "Performance Log Users"). ``kernel_uids`` may create kernel sessions (root by default).
    """

    def __init__(self, *, admin_gids: frozenset[int] = frozenset(), kernel_uids: frozenset[int] = frozenset({0})):
        self.admin_gids = frozenset(admin_gids)
        self.kernel_uids = frozenset(kernel_uids)
        self._sessions: dict[int, Session] = {}
        self._by_name: dict[str, int] = {}
        self._next_session_id = 1
        self._router = Router(self._sessions)

    # --- lookup -------------------------------------------------------------------------------

    @property
    def registry(self) -> ProviderRegistry:
        return self._router.registry

    def session(self, ref: SessionRef) -> Session:
        """A session by id or by name (names compare without case)."""
        if isinstance(ref, str):
            session_id = self._by_name.get(ref.casefold())
            found = None if session_id is None else self._sessions.get(session_id)
        else:
            found = self._sessions.get(ref)
        if found is None:
            raise NoSuchSession(f"no trace session {ref!r}")
        return found

    def __iter__(self) -> Iterator[Session]:
        return iter(tuple(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    # --- access -------------------------------------------------------------------------------

    def is_privileged(self, uid: int, gids: frozenset[int] | tuple[int, ...] = ()) -> bool:
        return uid == 0 or bool(self.admin_gids.intersection(gids))

    def check_access(self, session: Session | SessionRef, uid: int, gids: frozenset[int] | tuple[int, ...] = ()) -> None:
        """Only the owner, root or a member of ``admin_gids`` may control or query a session."""
        found = session if isinstance(session, Session) else self.session(session)
        if uid != found.owner_uid and not self.is_privileged(uid, gids):
            raise AccessDenied(f"uid {uid} may not control trace session {found.name!r} (owner uid {found.owner_uid})")

    def _get(self, ref: SessionRef, caller: Caller | None, command: Command) -> Session:
        """The session, once the caller may touch it and ``command`` is allowed in its state."""
        session = self.session(ref)
        if caller is not None:
            self.check_access(session, caller.uid, caller.gids)
        next_state(session.state, command)
        return session

    @staticmethod
    def _move(session: Session, command: Command) -> None:
        state = next_state(session.state, command)
        assert state is not None, "removal is not a state change"
        session.state = state

    # --- life cycle ---------------------------------------------------------------------------

    def create(self, config: SessionConfig, owner: Caller, *, now: float = 0.0) -> Session:
        """A new session in the created state, with the providers its config names enabled."""
        if config.kind is SessionKind.KERNEL:
            self.check_kernel_caller(owner)
        if config.kind is SessionKind.USER and is_reserved_name(config.name):
            raise ReservedSessionName(f"{config.name!r} is reserved for a kernel logger")
        if config.name.casefold() in self._by_name:
            raise SessionExists(f"a trace session named {config.name!r} already exists")
        self._check_capacity(config)
        session = Session(self._next_session_id, self._free_logger_id(), config, owner.uid, owner.gid, created_at=now)
        self._next_session_id += 1
        self._sessions[session.session_id] = session
        self._by_name[config.name.casefold()] = session.session_id
        try:
            for enable in config.providers:
                self._router.set_rule(session, enable.provider_guid, enable.rule, enable.provider_name, pending=enable.by_name)
        except Exception:
            self._forget(session)
            raise
        return session

    def check_kernel_caller(self, caller: Caller) -> None:
        """Only ``kernel_uids`` may create kernel sessions (AccessDenied names what else to do)."""
        if caller.uid not in self.kernel_uids:
            raise AccessDenied(
                f"uid {caller.uid} may not create kernel trace sessions: they record every process of the"
                f" machine, so only {_uids(self.kernel_uids)} may. Instead: run the command as root"
                " (sudo openetw session start NAME --kernel-flags ...); ask root to start it (members of the"
                " service's admin group may then consume it in real time); or trace user-mode providers in an"
                " ordinary session (no kernel flags)"
            )

    def _check_capacity(self, config: SessionConfig) -> None:
        if len(self._sessions) >= MAX_SESSIONS:
            raise TooManySessions(f"all {MAX_SESSIONS} trace sessions are in use")
        if config.kind is not SessionKind.KERNEL or is_reserved_name(config.name):
            return
        ordinary = sum(1 for s in self._sessions.values() if s.kind is SessionKind.KERNEL and not is_reserved_name(s.name))
        if ordinary >= MAX_KERNEL_SESSIONS - RESERVED_KERNEL_SLOTS:
            raise TooManyKernelSessions(
                f"all {MAX_KERNEL_SESSIONS - RESERVED_KERNEL_SLOTS} kernel session slots are in use"
                f" ({RESERVED_KERNEL_SLOTS} more are kept for the reserved loggers)"
            )

    def _free_logger_id(self) -> int:
        taken = {s.logger_id for s in self._sessions.values()}
        return next(i for i in range(1, MAX_SESSIONS + 1) if i not in taken)

    def _forget(self, session: Session) -> None:
        self._router.drop_session(session)
        del self._sessions[session.session_id]
        del self._by_name[session.name.casefold()]

    def start(self, ref: SessionRef, *, now: float = 0.0, caller: Caller | None = None) -> Actions:
        session = self._get(ref, caller, Command.START)
        self._move(session, Command.START)
        session.started_at = session.last_flush_at = now
        actions: Actions = [StartSession(session.session_id, session.logger_id, session.config)]
        return actions + self._reconcile(session.rules)

    def stop(self, ref: SessionRef, *, now: float = 0.0, caller: Caller | None = None) -> Actions:
        """Stop a session; a running one drains (``stopping``) until ``stop_complete``."""
        session = self._get(ref, caller, Command.STOP)
        was_running = session.receiving
        self._move(session, Command.STOP)
        actions = self._reconcile(session.rules)
        if was_running:
            actions.append(FinishSession(session.session_id))
        else:
            session.stopped_at = now
        return actions

    def stop_complete(self, ref: SessionRef, *, now: float = 0.0) -> Actions:
        """The driver has written the last buffers and closed the output."""
        session = self._get(ref, None, Command.STOP_COMPLETE)
        self._move(session, Command.STOP_COMPLETE)
        session.stopped_at = now
        # A classic provider the session held may now pass to a waiting session.
        return self._reconcile(session.rules)

    def fail(self, ref: SessionRef, reason: str, *, now: float = 0.0) -> Actions:
        """The session cannot go on (its file failed, say). It stays failed until removed."""
        session = self._get(ref, None, Command.FAIL)
        was_running = session.receiving
        if session.state is not SessionState.FAILED:
            session.failure = reason
            session.stopped_at = now
        self._move(session, Command.FAIL)
        actions = self._reconcile(session.rules)
        if was_running:
            actions.append(FinishSession(session.session_id, failed=True))
        return actions

    def remove(self, ref: SessionRef, *, caller: Caller | None = None) -> Actions:
        """Forget a created, stopped or failed session; its name and logger id become free."""
        session = self._get(ref, caller, Command.REMOVE)
        providers = list(session.rules)
        self._forget(session)
        return self._reconcile(providers)

    def update(self, ref: SessionRef, *, caller: Caller | None = None, **changes: Any) -> Actions:
        session = self._get(ref, caller, Command.UPDATE)
        fixed = set(changes) & FIXED_SETTINGS
        if session.state is SessionState.RUNNING:
            fixed |= set(changes) - UPDATABLE_WHILE_RUNNING
        if fixed:
            raise InvalidSessionConfig(f"cannot change {', '.join(sorted(fixed))} of a {session.state.value} session")
        try:
            if isinstance(changes.get("mode"), str):
                changes["mode"] = LogMode(changes["mode"])
            session.config = session.config.with_changes(**changes)
        except (TypeError, ValueError) as error:
            if isinstance(error, InvalidSessionConfig):
                raise
            raise InvalidSessionConfig(f"bad session setting: {error}") from None
        return [SessionUpdated(session.session_id, session.config)]

    def flush(self, ref: SessionRef, *, now: float = 0.0, caller: Caller | None = None) -> Actions:
        session = self._get(ref, caller, Command.FLUSH)
        session.last_flush_at = now
        return [FlushSession(session.session_id)]

    def snapshot(self, ref: SessionRef, file_name: str, *, caller: Caller | None = None) -> Actions:
        """Write a buffering session's memory to a file, as a circular in-memory trace is meant to be used."""
        session = self._get(ref, caller, Command.SNAPSHOT)
        if session.config.mode is not LogMode.BUFFERING:
            raise InvalidSessionConfig(f"only buffering sessions take snapshots; {session.name!r} is {session.config.mode.value}")
        if not file_name:
            raise InvalidSessionConfig("a snapshot needs a file name")
        return [SnapshotToFile(session.session_id, file_name)]

    def due_flushes(self, now: float) -> Actions:
        """Flush-timer ticks: every running session whose timer has run out since its last flush."""
        due: Actions = []
        for session in self._sessions.values():
            deadline = _flush_deadline(session)
            if deadline is not None and now >= deadline:
                session.last_flush_at = now
                due.append(FlushSession(session.session_id))
        return due

    def next_flush_at(self) -> float | None:
        deadlines = [d for d in map(_flush_deadline, self._sessions.values()) if d is not None]
        return min(deadlines, default=None)

    # --- enable rules and providers -----------------------------------------------------------

    def enable(
        self,
        ref: SessionRef,
        provider: uuid.UUID | str,
        *,
        level: int = 0,
        match_any: int = 0,
        match_all: int = 0,
        properties: int = 0,
        filters: EventFilters | None = None,
        caller: Caller | None = None,
    ) -> Actions:
        """EnableTraceEx2(ENABLE_PROVIDER): add or replace the session's rule for a provider: a GUID or a
        name (``openetw.provider_names``); a name nothing registered yet stays pending until one does."""
        session = self._get(ref, caller, Command.ENABLE)
        rule = EnableRule(level, match_any, match_all, int(properties), filters or EventFilters())
        resolved = resolve_provider_name(provider, registered=lambda name: self._router.registry.guid_for_name(name, session.owner_uid))
        self._router.set_rule(session, resolved.guid, rule, resolved.name, pending=resolved.hashed)
        return self._reconcile([resolved.guid])

    def disable(self, ref: SessionRef, provider: uuid.UUID | str, *, caller: Caller | None = None) -> Actions:
        session = self._get(ref, caller, Command.DISABLE)
        provider_guid = self._enabled_provider(session, provider)
        self._router.drop_rule(session, provider_guid)
        return self._reconcile([provider_guid])

    def capture_state(self, ref: SessionRef, provider: uuid.UUID | str, *, caller: Caller | None = None) -> Actions:
        session = self._get(ref, caller, Command.CAPTURE_STATE)
        return self._router.capture_state(session, self._enabled_provider(session, provider))

    def _enabled_provider(self, session: Session, provider: uuid.UUID | str) -> uuid.UUID:
        provider_guid, name = resolve_provider(provider)
        if provider_guid not in session.rules and name:  # enabled by a name that resolved elsewhere
            provider_guid = next((g for g, n in session.provider_names.items() if n.casefold() == name.casefold()), provider_guid)
        if provider_guid not in session.rules:
            raise ProviderNotEnabled(f"session {session.name!r} does not enable provider {provider}")
        return provider_guid

    def register_provider(
        self, connection_id: int, provider: uuid.UUID | str, pid: int, exe: str, *, classic: bool = False, name: str | None = None,
        uid: int | None = None,
    ) -> tuple[Registration, Actions]:
        """EventRegister: the registration and its first enable state (``name``, ``uid``: the provider's)."""
        provider_guid, hashed_name = resolve_provider(provider)
        registration, actions = self._router.register(connection_id, provider_guid, pid, exe, classic=classic, provider_name=name or hashed_name, uid=uid)
        return registration, self._note_pools(actions)

    def unregister_provider(self, registration_id: int) -> Actions:
        return self._note_pools(self._router.unregister(registration_id))

    def connection_closed(self, connection_id: int) -> Actions:
        """A producer process went away: drop its registrations and close its pools."""
        return self._note_pools(self._router.connection_closed(connection_id))

    def sessions_for(
        self,
        provider_guid: uuid.UUID,
        level: int,
        keyword: int,
        event_id: int,
        pid: int | None = None,
        exe: str | None = None,
    ) -> tuple[int, ...]:
        """Ids of the running sessions that take this event, in enable order."""
        return self._router.sessions_for(provider_guid, level, keyword, event_id, pid, exe)

    def enable_state(self, provider: uuid.UUID | str, pid: int | None = None, exe: str | None = None) -> EnableState:
        """The state a registration of ``provider`` in process (pid, exe) gets."""
        return self._router.enable_state(resolve_provider(provider)[0], pid, exe)

    def pools_of(self, ref: SessionRef) -> tuple[int, ...]:
        return self._router.pools_of(self.session(ref).session_id)

    def _reconcile(self, provider_guids: Iterable[uuid.UUID]) -> Actions:
        return self._note_pools(self._router.reconcile(list(provider_guids)))

    def _note_pools(self, actions: Actions) -> Actions:
        # A new pool's lost-events counter starts at zero.
        for action in actions:
            if isinstance(action, OpenPool):
                self._sessions[action.session_id].pool_losses_seen[action.connection_id] = 0
        return actions

    # --- statistics ---------------------------------------------------------------------------

    def buffer_written(self, ref: SessionRef, events: int) -> None:
        self.session(ref).statistics.buffer_written(events)

    def events_lost(self, ref: SessionRef, count: int) -> None:
        self.session(ref).statistics.add_events_lost(count)

    def pool_events_lost(self, ref: SessionRef, connection_id: int, total: int) -> int:
        """Count a pool header's cumulative ``events_lost``; returns how many are new.

        Read the header a last time while carrying out its ``ClosePool``: a later ``OpenPool`` for
        the same process and session starts the count from zero again.
        """
        session = self.session(ref)
        seen = session.pool_losses_seen.get(connection_id, 0)
        if total < seen:
            raise InvalidArgument(f"pool of connection {connection_id} reports {total} events lost after {seen}")
        session.statistics.add_events_lost(total - seen)
        session.pool_losses_seen[connection_id] = total
        return total - seen

    def log_buffer_lost(self, ref: SessionRef, count: int = 1) -> None:
        self.session(ref).statistics.add_log_buffers_lost(count)

    def realtime_buffer_lost(self, ref: SessionRef, count: int = 1) -> None:
        self.session(ref).statistics.add_realtime_buffers_lost(count)

    def set_buffer_counts(self, ref: SessionRef, buffers: int, free_buffers: int) -> None:
        self.session(ref).statistics.set_buffer_counts(buffers, free_buffers)

    def statistics(self, ref: SessionRef) -> dict[str, int]:
        return self.session(ref).statistics.as_dict()

    # --- query --------------------------------------------------------------------------------

    def query(self, ref: SessionRef, *, caller: Caller | None = None) -> SessionInfo:
        """ControlTrace(QUERY): settings, state and statistics, as plain JSON-ready values."""
        session = self._get(ref, caller, Command.QUERY)
        return describe_session(session, self._router.pools_of(session.session_id))

    def list(self, *, caller: Caller | None = None) -> SessionInfos:
        """QueryAllTraces: every session the caller may see, by logger id."""
        visible = [
            s
            for s in self._sessions.values()
            if caller is None or caller.uid == s.owner_uid or self.is_privileged(caller.uid, caller.gids)
        ]
        visible.sort(key=lambda s: s.logger_id)
        return [describe_session(s, self._router.pools_of(s.session_id)) for s in visible]


def _uids(uids: frozenset[int]) -> str:
    return "root" if uids == {0} else "uids " + ", ".join(str(uid) for uid in sorted(uids))


def _flush_deadline(session: Session) -> float | None:
    config = session.config
    if not session.receiving or config.flush_timer == 0 or config.mode is LogMode.BUFFERING:
        return None
    return (session.last_flush_at or 0.0) + config.flush_timer
