"""Per-user limits and the provider security table, as plain objects."""

from __future__ import annotations

import uuid

import pytest

from openetw.errors import AccessDenied, InvalidArgument
from openetw.session import MAX_SESSIONS, TooManySessions
from openetw.session.quotas import UserQuotas
from openetw.session.security import DEFAULT_SECURED, Principal, ProviderSecurity

SECURITY = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")


def test_a_user_holds_at_most_its_share_and_never_roots_slots() -> None:
    quotas = UserQuotas(sessions_per_user=8, reserved_for_root=4)
    quotas.check_session([1000] * 7, 1000)
    with pytest.raises(TooManySessions, match="at most 8 per user"):
        quotas.check_session([1000] * 8, 1000)
    many_users = list(range(2000, 2000 + (MAX_SESSIONS - 4)))
    with pytest.raises(TooManySessions, match="kept for root"):
        quotas.check_session(many_users, 1000)
    quotas.check_session(many_users + [5] * 3, 0)  # root takes the reserved slots
    with pytest.raises(InvalidArgument):
        UserQuotas(sessions_per_user=0)
    assert not UserQuotas(pools_per_user=2).allows_pool(2, 1000) and UserQuotas(pools_per_user=2).allows_pool(99, 0)


def test_secured_providers_are_roots_until_root_names_others() -> None:
    table = ProviderSecurity()
    assert SECURITY in DEFAULT_SECURED and table.is_secured(SECURITY)
    with pytest.raises(AccessDenied, match="Security-Auditing"):
        table.check_register(SECURITY, 1000, [1000])
    table.check_register(SECURITY, 0, [0])
    table.check_register(uuid.uuid4(), 1000, [1000])  # not secured: anyone
    before = table.guid_bytes()
    with pytest.raises(AccessDenied):
        table.secure(SECURITY, [Principal("user", 1000)], caller_uid=1000)
    table.secure(SECURITY, [Principal("group", 50)], caller_uid=0)
    assert table.guid_bytes() is not before and SECURITY.bytes_le in table.guid_bytes()
    table.check_register(SECURITY, 1000, [1000, 50])
    with pytest.raises(AccessDenied):
        table.check_register(SECURITY, 1001, [1001])
    entry = next(e for e in table.as_json() if e["guid"] == str(SECURITY))
    assert entry["owners"] == [{"kind": "group", "id": 50}, {"kind": "user", "id": 0}]
    with pytest.raises(InvalidArgument):
        Principal("robot", 1)
