"""Provider registrations (EventRegister / RegisterTraceGuids) as the trace service knows them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from openetw.session.enable import DISABLED, EnableState
from openetw.session.errors import NoSuchRegistration

__all__ = ["ProviderRegistry", "Registration"]


@dataclass
class Registration:
    """One registered provider handle in one producer process.

    ``enable_state`` is the state the provider was last told about; the session table keeps it
    current and only sends a ``NotifyProvider`` when it changes.
    """

    registration_id: int
    connection_id: int
    provider_guid: uuid.UUID
    pid: int
    exe: str
    classic: bool = False
    provider_name: str | None = None
    enable_state: EnableState = field(default=DISABLED)
    uid: int | None = None  # the producer's user

    def may_name_for(self, owner_uid: int | None) -> bool:
        """Whether the name this registration carries may resolve a name for a session of
        ``owner_uid``: its own user's sessions and every session when it runs as root. Another
        user's process cannot take an enable by name away from the provider it was meant for."""
        return owner_uid is None or self.uid is None or self.uid in (0, owner_uid)


class ProviderRegistry:
    """Registrations indexed by id, by provider GUID and by control connection."""

    def __init__(self) -> None:
        self._by_id: dict[int, Registration] = {}
        self._by_provider: dict[uuid.UUID, dict[int, Registration]] = {}
        self._by_connection: dict[int, dict[int, Registration]] = {}
        self._next_id = 1

    def add(
        self,
        connection_id: int,
        provider_guid: uuid.UUID,
        pid: int,
        exe: str,
        *,
        classic: bool = False,
        provider_name: str | None = None,
        uid: int | None = None,
    ) -> Registration:
        registration = Registration(self._next_id, connection_id, provider_guid, pid, exe, classic, provider_name, uid=uid)
        self._next_id += 1
        self._by_id[registration.registration_id] = registration
        self._by_provider.setdefault(provider_guid, {})[registration.registration_id] = registration
        self._by_connection.setdefault(connection_id, {})[registration.registration_id] = registration
        return registration

    def remove(self, registration_id: int) -> Registration:
        registration = self.get(registration_id)
        del self._by_id[registration_id]
        _discard(self._by_provider, registration.provider_guid, registration_id)
        _discard(self._by_connection, registration.connection_id, registration_id)
        return registration

    def get(self, registration_id: int) -> Registration:
        try:
            return self._by_id[registration_id]
        except KeyError:
            raise NoSuchRegistration(f"no provider registration {registration_id}") from None

    def for_provider(self, provider_guid: uuid.UUID) -> tuple[Registration, ...]:
        return tuple(self._by_provider.get(provider_guid, {}).values())

    def for_connection(self, connection_id: int) -> tuple[Registration, ...]:
        return tuple(self._by_connection.get(connection_id, {}).values())

    def guid_for_name(self, name: str, owner_uid: int | None = None) -> uuid.UUID | None:
        """The GUID of the latest registration carrying ``name`` (case-insensitive), if any; with
        ``owner_uid``, only of a process of that user or of root (``Registration.may_name_for``)."""
        key = name.casefold()
        found = None
        for registration in self._by_id.values():
            if registration.provider_name and registration.provider_name.casefold() == key and registration.may_name_for(owner_uid):
                found = registration.provider_guid
        return found

    def is_registered(self, provider_guid: uuid.UUID) -> bool:
        return provider_guid in self._by_provider

    def is_classic(self, provider_guid: uuid.UUID) -> bool:
        return any(r.classic for r in self._by_provider.get(provider_guid, {}).values())

    def providers(self) -> frozenset[uuid.UUID]:
        return frozenset(self._by_provider)

    def __iter__(self) -> Iterator[Registration]:
        return iter(tuple(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)


_K = TypeVar("_K")


def _discard(index: dict[_K, dict[int, Registration]], key: _K, registration_id: int) -> None:
    entries = index[key]
    del entries[registration_id]
    if not entries:
        del index[key]
