"""Only the owner, root or an admin group may control a session; kernel sessions need privilege."""

from __future__ import annotations

import pytest

from openetw.errors import AccessDenied as BaseAccessDenied
from openetw.session import ROOT, AccessDenied, Caller, SessionError, SessionTable
from tests.session.helpers import ALICE, BOB, PROVIDER, config, kernel_config


def test_access_denied_is_the_projects_own() -> None:
    assert AccessDenied is BaseAccessDenied and issubclass(AccessDenied, SessionError)


def test_check_access_by_uid() -> None:
    table = SessionTable(admin_gids=frozenset({960}))
    session = table.create(config("A"), ALICE)
    table.check_access(session, ALICE.uid, ())
    table.check_access("A", 0, ())
    table.check_access(session.session_id, BOB.uid, (960,))  # member of the admin group
    with pytest.raises(AccessDenied, match="uid 1001"):
        table.check_access(session, BOB.uid, (BOB.gid, 1000))  # sharing the owner's group is not enough


@pytest.mark.parametrize(
    ("running", "command"),
    [
        (False, lambda t, c: t.start("A", caller=c)),
        (True, lambda t, c: t.stop("A", caller=c)),
        (True, lambda t, c: t.update("A", flush_timer=3, caller=c)),
        (True, lambda t, c: t.flush("A", caller=c)),
        (False, lambda t, c: t.query("A", caller=c)),
        (True, lambda t, c: t.enable("A", PROVIDER, caller=c)),
        (False, lambda t, c: t.remove("A", caller=c)),
    ],
)
def test_commands_check_the_caller(running: bool, command: object) -> None:
    def fresh() -> SessionTable:
        table = SessionTable()
        table.create(config("A"), ALICE)
        if running:
            table.start("A")
        return table

    table = fresh()
    before = table.query("A")
    with pytest.raises(AccessDenied):
        command(table, BOB)  # type: ignore[operator]
    assert table.query("A") == before
    command(table, ALICE)  # type: ignore[operator]
    command(fresh(), ROOT)  # type: ignore[operator]


def test_owner_is_recorded_and_listing_shows_only_ones_own() -> None:
    table = SessionTable()
    table.create(config("Alice's"), ALICE)
    table.create(config("Bob's"), BOB)
    assert table.query("Alice's")["owner_uid"] == 1000 and table.query("Alice's")["owner_gid"] == 1000
    assert [s["name"] for s in table.list(caller=ALICE)] == ["Alice's"]
    assert [s["name"] for s in table.list(caller=ROOT)] == ["Alice's", "Bob's"]
    assert [s["name"] for s in table.list()] == ["Alice's", "Bob's"]


def test_kernel_sessions_need_a_kernel_uid() -> None:
    table = SessionTable()
    with pytest.raises(AccessDenied):
        table.create(kernel_config("NT Kernel Logger"), ALICE)
    assert len(table) == 0
    table.create(kernel_config("NT Kernel Logger"), ROOT)
    permissive = SessionTable(kernel_uids=frozenset({0, ALICE.uid}))
    permissive.create(kernel_config("Mine"), ALICE)


def test_caller_groups_include_the_primary_group() -> None:
    assert Caller(5, 7, frozenset({8})).gids == frozenset({7, 8})
    table = SessionTable(admin_gids=frozenset({7}))
    table.create(config("A"), ALICE)
    table.stop("A", caller=Caller(5, 7))
