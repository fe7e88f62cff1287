"""Who may register which providers: ETW's TRACELOG_REGISTER_GUIDS right, per provider GUID.

A provider with no entry may be registered by anyone. A secured provider may be registered by
root and by the users and groups its entry names; the Security and System providers are
secured for root from the start. The service keeps the table (and saves it: see
``service/security_store.py``); ``openetw providers secure`` changes it (root only),
``openetw providers --json`` shows it. ``as_document``/``from_document`` are its saved form.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from openetw.errors import AccessDenied, InvalidArgument
from openetw.guids import format_guid

__all__ = ["DEFAULT_SECURED", "DOCUMENT_FORMAT", "Principal", "ProviderSecurity"]

DOCUMENT_FORMAT = 1  # the saved table's "format"
MAX_SAVED_PROVIDERS = 65536
MAX_OWNERS = 1024
MAX_NAME_CHARS = 1024

# Providers only root may register until root says otherwise: what they write is trusted as
# the system's own account of itself (logons, the event log, processes, the kernel logger).
DEFAULT_SECURED: dict[uuid.UUID, str] = {
    uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d"): "Microsoft-Windows-Security-Auditing",
    uuid.UUID("fc65ddd8-d6ef-4962-83d5-6e5cfe9ce148"): "Microsoft-Windows-Eventlog",
    uuid.UUID("a68ca8b7-004f-d7b6-a698-07e2de0f1f5d"): "Microsoft-Windows-Kernel-General",
    uuid.UUID("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716"): "Microsoft-Windows-Kernel-Process",
    uuid.UUID("9e814aad-3204-11d2-9a82-006008a86939"): "NT Kernel Logger (SystemTraceControlGuid)",
}


@dataclass(frozen=True, order=True)
class Principal:
    """A user (``kind`` "user", ``id`` a uid) or a group ("group", a gid)."""

    kind: str
    id: int

    def __post_init__(self) -> None:
        if self.kind not in ("user", "group"):
            raise InvalidArgument(f"a provider's owner is a user or a group, not {self.kind!r}")
        if type(self.id) is not int or not 0 <= self.id < 1 << 32:
            raise InvalidArgument(f"{self.kind} id {self.id!r} is not a 32-bit id")

    def admits(self, uid: int, gids: Iterable[int]) -> bool:
        return uid == self.id if self.kind == "user" else self.id in gids


ROOT = Principal("user", 0)


@dataclass
class _Entry:
    name: str | None
    owners: frozenset[Principal]


class ProviderSecurity:
    """The table: provider GUID -> the principals who may register it (root always may)."""

    def __init__(self, defaults: dict[uuid.UUID, str] | None = None) -> None:
        self._entries: dict[uuid.UUID, _Entry] = {}
        for guid, name in (DEFAULT_SECURED if defaults is None else defaults).items():
            self._entries[guid] = _Entry(name, frozenset({ROOT}))
        self._guid_bytes: frozenset[bytes] = frozenset()
        self._refresh()

    def _refresh(self) -> None:
        self._guid_bytes = frozenset(guid.bytes_le for guid in self._entries)

    def secure(self, guid: uuid.UUID, owners: Iterable[Principal], *, name: str | None = None, caller_uid: int) -> None:
        """Only ``owners`` (and root) may register ``guid`` from now on. Root only."""
        if caller_uid != 0:
            raise AccessDenied(f"uid {caller_uid} may not change who registers providers: only root may")
        chosen = frozenset(owners) | {ROOT}
        previous = self._entries.get(guid)
        self._entries[guid] = _Entry(name or (previous.name if previous else None), chosen)
        self._refresh()

    def is_secured(self, guid: uuid.UUID) -> bool:
        return guid in self._entries

    def check_register(self, guid: uuid.UUID, uid: int, gids: Iterable[int]) -> None:
        """``AccessDenied`` unless ``uid`` (with ``gids``) may register ``guid``."""
        entry = self._entries.get(guid)
        if entry is None or uid == 0:
            return
        groups = frozenset(gids)
        if not any(owner.admits(uid, groups) for owner in entry.owners):
            label = f"{entry.name} ({format_guid(guid)})" if entry.name else format_guid(guid)
            raise AccessDenied(f"uid {uid} may not register provider {label}: it is secured (openetw providers --json shows who may)")

    def guid_bytes(self) -> frozenset[bytes]:
        """The secured GUIDs as a record holds them (the same object until the table changes)."""
        return self._guid_bytes

    def as_json(self) -> list[dict[str, object]]:
        return [
            {"guid": format_guid(guid), "name": entry.name, "owners": [{"kind": p.kind, "id": p.id} for p in sorted(entry.owners)]}
            for guid, entry in sorted(self._entries.items(), key=lambda item: str(item[0]))
        ]

    def as_document(self) -> dict[str, object]:
        """The table as the service saves it."""
        return {"format": DOCUMENT_FORMAT, "providers": self.as_json()}

    def load_document(self, document: object) -> None:
        """Take the entries of a saved table (``as_document``), over the defaults: a saved entry
        names who else may register a provider; root always may. ``InvalidArgument`` (and the
        table unchanged) when any part of it is not what ``as_document`` writes."""
        if not isinstance(document, dict) or document.get("format") != DOCUMENT_FORMAT:
            raise InvalidArgument(f"not a provider security table of format {DOCUMENT_FORMAT}")
        rows = document.get("providers")
        if not isinstance(rows, list) or len(rows) > MAX_SAVED_PROVIDERS:
            raise InvalidArgument(f'"providers" must be a list of at most {MAX_SAVED_PROVIDERS} entries')
        entries: dict[uuid.UUID, _Entry] = {}
        for number, row in enumerate(rows):
            where = f"providers[{number}]"
            if not isinstance(row, dict):
                raise InvalidArgument(f"{where} is not an object")
            try:
                guid = uuid.UUID(str(row.get("guid")))
            except ValueError:
                raise InvalidArgument(f"{where}: {row.get('guid')!r} is not a GUID") from None
            name = row.get("name")
            if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME_CHARS):
                raise InvalidArgument(f"{where}: the name must be text of at most {MAX_NAME_CHARS} characters")
            owners = row.get("owners")
            if not isinstance(owners, list) or len(owners) > MAX_OWNERS:
                raise InvalidArgument(f"{where}: the owners must be a list of at most {MAX_OWNERS}")
            principals = set()
            for owner in owners:
                if not isinstance(owner, dict) or set(owner) != {"kind", "id"}:
                    raise InvalidArgument(f'{where}: an owner is {{"kind": "user"|"group", "id": N}}')
                principals.add(Principal(owner["kind"], owner["id"]))
            entries[guid] = _Entry(name, frozenset(principals) | {ROOT})
        for guid, entry in entries.items():
            previous = self._entries.get(guid)
            self._entries[guid] = _Entry(entry.name or (previous.name if previous else None), entry.owners)
        self._refresh()
