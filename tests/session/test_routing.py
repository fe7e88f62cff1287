"""Registrations, enable-before-register, and the actions the table returns instead of doing I/O."""

from __future__ import annotations

import pytest

from openetw.session import (
    DISABLED,
    CaptureState,
    ClosePool,
    EventFilters,
    FinishSession,
    FlushSession,
    InvalidSessionConfig,
    LogMode,
    NotifyProvider,
    OpenPool,
    SessionTable,
    SessionUpdated,
    StartSession,
)
from tests.session.helpers import ALICE, OTHER_PROVIDER, PROVIDER, config, file_config


def kinds(actions: list) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_enable_before_register_applies_when_the_provider_registers() -> None:
    table = SessionTable()
    session = table.create(config("A"), ALICE)
    assert table.enable("A", PROVIDER, level=4) == []  # created: nothing to tell anyone yet
    assert table.start("A", now=0.0) == [StartSession(session.session_id, session.logger_id, session.config)]
    registration, actions = table.register_provider(9, PROVIDER, 4242, "/usr/bin/app")
    assert kinds(actions) == ["OpenPool", "NotifyProvider"]
    pool, notify = actions
    assert pool == OpenPool(session.session_id, 9, session.logger_id, 64 * 1024, 4, 256, 1000)
    assert isinstance(notify, NotifyProvider)
    assert (notify.connection_id, notify.provider_guid, notify.registration_id) == (9, PROVIDER, registration.registration_id)
    assert notify.state.enabled and notify.state.max_level == 4
    assert [e.logger_id for e in notify.state.sessions] == [session.logger_id]
    assert registration.enable_state == notify.state


def test_register_with_no_session_gets_no_actions() -> None:
    table = SessionTable()
    registration, actions = table.register_provider(1, PROVIDER, 1, "app")
    assert actions == [] and registration.enable_state == DISABLED


def test_start_opens_pools_before_notifying_and_stop_notifies_before_closing() -> None:
    table = SessionTable()
    session = table.create(file_config("A"), ALICE)
    table.enable("A", PROVIDER)
    table.enable("A", OTHER_PROVIDER)
    table.register_provider(1, PROVIDER, 10, "one")
    table.register_provider(1, OTHER_PROVIDER, 10, "one")  # same process: one pool
    table.register_provider(2, PROVIDER, 20, "two")
    started = table.start("A")
    assert kinds(started) == ["StartSession", "OpenPool", "OpenPool", "NotifyProvider", "NotifyProvider", "NotifyProvider"]
    assert {(a.session_id, a.connection_id) for a in started if isinstance(a, OpenPool)} == {
        (session.session_id, 1), (session.session_id, 2)
    }  # fmt: skip
    assert table.pools_of("A") == (1, 2)
    stopped = table.stop("A")
    assert kinds(stopped) == ["NotifyProvider"] * 3 + ["ClosePool", "ClosePool", "FinishSession"]
    assert all(not a.state.enabled for a in stopped if isinstance(a, NotifyProvider))
    assert stopped[-1] == FinishSession(session.session_id)
    assert table.pools_of("A") == ()


def test_notifications_only_when_the_state_changes() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.start("A")
    table.register_provider(1, PROVIDER, 10, "app")
    assert kinds(table.enable("A", PROVIDER, level=3)) == ["OpenPool", "NotifyProvider"]
    assert table.enable("A", PROVIDER, level=3) == []  # the same rule again
    assert kinds(table.enable("A", PROVIDER, level=5)) == ["NotifyProvider"]  # pool already there
    assert kinds(table.disable("A", PROVIDER)) == ["NotifyProvider", "ClosePool"]


def test_process_filters_decide_which_processes_get_a_pool() -> None:
    table = SessionTable()
    session = table.create(config("A"), ALICE)
    table.start("A")
    table.register_provider(1, PROVIDER, 10, "/usr/bin/wanted")
    table.register_provider(2, PROVIDER, 20, "/usr/bin/other")
    actions = table.enable("A", PROVIDER, filters=EventFilters(exe_names=frozenset({"WANTED"})))
    assert [a for a in actions if isinstance(a, OpenPool)] == [
        OpenPool(session.session_id, 1, session.logger_id, 65536, 4, 256, 1000)
    ]
    assert [a.connection_id for a in actions if isinstance(a, NotifyProvider)] == [1]
    assert table.sessions_for(PROVIDER, 0, 0, 1, 20, "/usr/bin/other") == ()
    assert table.sessions_for(PROVIDER, 0, 0, 1, 10, "/usr/bin/wanted") == (session.session_id,)


def test_unregister_and_connection_close_release_pools() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.enable("A", PROVIDER)
    table.enable("A", OTHER_PROVIDER)
    table.start("A")
    first, _ = table.register_provider(1, PROVIDER, 10, "app")
    table.register_provider(1, OTHER_PROVIDER, 10, "app")
    table.register_provider(2, PROVIDER, 20, "app2")
    assert table.unregister_provider(first.registration_id) == []  # OTHER_PROVIDER still needs the pool
    closed = table.connection_closed(1)
    assert closed == [ClosePool(table.session("A").session_id, 1)]
    assert table.pools_of("A") == (2,)
    assert len(table.registry) == 1


def test_classic_provider_belongs_to_the_first_session_that_enabled_it() -> None:
    table = SessionTable()
    first = table.create(config("First"), ALICE)
    second = table.create(config("Second"), ALICE)
    for name in ("First", "Second"):
        table.enable(name, PROVIDER)  # not registered yet: both rules are accepted
        table.start(name)
    _, actions = table.register_provider(1, PROVIDER, 10, "legacy", classic=True)
    notify = next(a for a in actions if isinstance(a, NotifyProvider))
    assert notify.state.session_ids == {first.session_id}
    assert table.sessions_for(PROVIDER, 0, 0, 0) == (first.session_id,)
    # While the first session drains it keeps the provider; once stopped, the waiting one takes over.
    table.stop("First")
    assert table.sessions_for(PROVIDER, 0, 0, 0) == ()
    handover = table.stop_complete("First")
    assert kinds(handover) == ["OpenPool", "NotifyProvider"]
    assert table.sessions_for(PROVIDER, 0, 0, 0) == (second.session_id,)


def test_removing_a_created_session_frees_its_classic_provider() -> None:
    table = SessionTable()
    table.create(config("Idle"), ALICE)
    table.enable("Idle", PROVIDER)
    second = table.create(config("Busy"), ALICE)
    table.enable("Busy", PROVIDER)
    table.start("Busy")
    table.register_provider(1, PROVIDER, 10, "legacy", classic=True)
    assert table.sessions_for(PROVIDER, 0, 0, 0) == ()  # "Idle" enabled it first
    assert kinds(table.remove("Idle")) == ["OpenPool", "NotifyProvider"]
    assert table.sessions_for(PROVIDER, 0, 0, 0) == (second.session_id,)


def test_manifest_provider_goes_to_every_session() -> None:
    table = SessionTable()
    ids = []
    for name in ("A", "B", "C"):
        ids.append(table.create(config(name), ALICE).session_id)
        table.enable(name, PROVIDER, level=4)
        table.start(name)
    _, actions = table.register_provider(1, PROVIDER, 10, "modern")
    assert kinds(actions) == ["OpenPool"] * 3 + ["NotifyProvider"]
    assert table.sessions_for(PROVIDER, 4, 0, 0) == tuple(ids)
    assert table.sessions_for(PROVIDER, 5, 0, 0) == ()


def test_capture_state_asks_each_enabled_registration() -> None:
    table = SessionTable()
    session = table.create(config("A"), ALICE)
    table.enable("A", PROVIDER)
    table.start("A")
    one, _ = table.register_provider(1, PROVIDER, 10, "app")
    two, _ = table.register_provider(2, PROVIDER, 20, "app")
    assert table.capture_state("A", PROVIDER) == [
        CaptureState(1, PROVIDER, one.registration_id, session.session_id, session.logger_id),
        CaptureState(2, PROVIDER, two.registration_id, session.session_id, session.logger_id),
    ]


def test_failure_tears_down_like_a_stop() -> None:
    table = SessionTable()
    session = table.create(config("A"), ALICE)
    table.enable("A", PROVIDER)
    table.start("A")
    table.register_provider(1, PROVIDER, 10, "app")
    actions = table.fail("A", "write failed: ENOSPC", now=7.0)
    assert kinds(actions) == ["NotifyProvider", "ClosePool", "FinishSession"]
    assert actions[-1] == FinishSession(session.session_id, failed=True)
    assert table.query("A")["failure"] == "write failed: ENOSPC"
    assert table.sessions_for(PROVIDER, 0, 0, 0) == ()


def test_flush_timer_and_manual_flush() -> None:
    table = SessionTable()
    table.create(config("A", flush_timer=2), ALICE)
    table.create(config("NoTimer", flush_timer=0), ALICE)
    table.create(config("Mem", mode=LogMode.BUFFERING), ALICE)
    for name in ("A", "NoTimer", "Mem"):
        table.start(name, now=100.0)
    a = table.session("A").session_id
    assert table.next_flush_at() == 102.0
    assert table.due_flushes(101.9) == []
    assert table.due_flushes(102.0) == [FlushSession(a)]
    assert table.due_flushes(103.0) == []
    assert table.flush("A", now=103.5) == [FlushSession(a)]  # restarts the timer
    assert table.next_flush_at() == 105.5
    table.update("A", flush_timer=10)
    assert table.next_flush_at() == 113.5
    table.stop("A")
    assert table.next_flush_at() is None


def test_update_while_running_is_limited() -> None:
    table = SessionTable()
    table.create(file_config("A"), ALICE)
    assert table.update("A", buffer_size_kb=128)[0].config.buffer_size_kb == 128
    table.start("A")
    actions = table.update("A", file_name="/tmp/next.etl", maximum_buffers=100)
    assert actions == [SessionUpdated(table.session("A").session_id, table.session("A").config)]
    assert table.query("A")["file_name"] == "/tmp/next.etl"
    with pytest.raises(InvalidSessionConfig):
        table.update("A", buffer_size_kb=256)
    with pytest.raises(InvalidSessionConfig):
        table.update("A", name="B")
    with pytest.raises(InvalidSessionConfig):
        table.update("A", maximum_buffers=1)  # below the minimum
    with pytest.raises(InvalidSessionConfig):
        table.update("A", colour="blue")
    with pytest.raises(InvalidSessionConfig):
        table.update("A", mode="tape")
    assert table.query("A")["maximum_buffers"] == 100
