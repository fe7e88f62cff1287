"""The transition table, exhaustively: every state x every command, through the real table."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from openetw.session import (
    TRANSITIONS,
    Command,
    InvalidSessionState,
    LogMode,
    NoSuchSession,
    SessionState,
    SessionTable,
    next_state,
)
from tests.session.helpers import ALICE, OTHER_PROVIDER, PROVIDER, config

NAME = "Subject"

COMMANDS: dict[Command, Callable[[SessionTable], object]] = {
    Command.START: lambda t: t.start(NAME, now=1.0),
    Command.STOP: lambda t: t.stop(NAME, now=2.0),
    Command.STOP_COMPLETE: lambda t: t.stop_complete(NAME, now=3.0),
    Command.FAIL: lambda t: t.fail(NAME, "the disk is full"),
    Command.UPDATE: lambda t: t.update(NAME, flush_timer=5),
    Command.FLUSH: lambda t: t.flush(NAME),
    Command.SNAPSHOT: lambda t: t.snapshot(NAME, "/tmp/snapshot.etl"),
    Command.ENABLE: lambda t: t.enable(NAME, OTHER_PROVIDER),
    Command.DISABLE: lambda t: t.disable(NAME, PROVIDER),
    Command.CAPTURE_STATE: lambda t: t.capture_state(NAME, PROVIDER),
    Command.QUERY: lambda t: t.query(NAME),
    Command.REMOVE: lambda t: t.remove(NAME),
}

PATHS: dict[SessionState, tuple[Command, ...]] = {
    SessionState.CREATED: (),
    SessionState.RUNNING: (Command.START,),
    SessionState.STOPPING: (Command.START, Command.STOP),
    SessionState.STOPPED: (Command.START, Command.STOP, Command.STOP_COMPLETE),
    SessionState.FAILED: (Command.START, Command.FAIL),
}


def table_in(state: SessionState) -> SessionTable:
    table = SessionTable()
    table.create(config(NAME, mode=LogMode.BUFFERING), ALICE)
    table.enable(NAME, PROVIDER)
    table.register_provider(1, PROVIDER, 100, "app")
    for command in PATHS[state]:
        COMMANDS[command](table)
    assert table.session(NAME).state is state
    return table


def test_every_command_has_a_driver() -> None:
    assert set(COMMANDS) == set(Command)
    assert set(PATHS) == set(SessionState)


@pytest.mark.parametrize("state", list(SessionState), ids=lambda s: s.value)
@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.value)
def test_state_x_command(state: SessionState, command: Command) -> None:
    table = table_in(state)
    before = table.query(NAME)
    if (state, command) in TRANSITIONS:
        COMMANDS[command](table)
        expected = TRANSITIONS[(state, command)]
        if expected is None:
            with pytest.raises(NoSuchSession):
                table.session(NAME)
        else:
            assert table.session(NAME).state is expected
    else:
        with pytest.raises(InvalidSessionState) as refused:
            COMMANDS[command](table)
        assert refused.value.state is state and refused.value.command is command
        assert table.query(NAME) == before  # a refused command changes nothing


@pytest.mark.parametrize("state", list(SessionState), ids=lambda s: s.value)
@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.value)
def test_next_state_agrees_with_the_table(state: SessionState, command: Command) -> None:
    if (state, command) in TRANSITIONS:
        assert next_state(state, command) is TRANSITIONS[(state, command)]
    else:
        with pytest.raises(InvalidSessionState, match=f"cannot {command.value} a {state.value} session"):
            next_state(state, command)


def test_a_failed_session_stays_failed() -> None:
    allowed = {c for (s, c) in TRANSITIONS if s is SessionState.FAILED}
    assert allowed == {Command.QUERY, Command.REMOVE, Command.FAIL}
    assert all(TRANSITIONS[(SessionState.FAILED, c)] in (SessionState.FAILED, None) for c in allowed)
    table = table_in(SessionState.FAILED)
    table.fail(NAME, "a second reason")
    assert table.query(NAME)["failure"] == "the disk is full"  # the first cause is kept


def test_every_state_is_reachable_and_query_works_everywhere() -> None:
    reachable = {SessionState.CREATED} | {t for t in TRANSITIONS.values() if t is not None}
    assert reachable == set(SessionState)
    assert all((s, Command.QUERY) in TRANSITIONS for s in SessionState)


def test_stop_of_a_created_session_needs_no_draining() -> None:
    table = table_in(SessionState.CREATED)
    assert table.stop(NAME, now=4.0) == []
    assert table.session(NAME).state is SessionState.STOPPED
    assert table.query(NAME)["stopped_at"] == 4.0
