"""ETW's limits: 64 sessions, 8 kernel sessions (2 reserved), reserved and duplicate names, 8 sessions per provider."""

from __future__ import annotations

import pytest

from openetw.session import (
    MAX_KERNEL_SESSIONS,
    MAX_SESSIONS,
    MAX_SESSIONS_PER_PROVIDER,
    RESERVED_KERNEL_SLOTS,
    ROOT,
    ClassicProviderInUse,
    ProviderEnable,
    ReservedSessionName,
    SessionError,
    SessionExists,
    SessionKind,
    SessionTable,
    TooManyKernelSessions,
    TooManySessions,
    TooManySessionsForProvider,
)
from tests.session.helpers import ALICE, BOB, OTHER_PROVIDER, PROVIDER, config, kernel_config


def test_sixty_four_sessions_and_the_sixty_fifth_is_refused() -> None:
    table = SessionTable()
    for i in range(MAX_SESSIONS):
        table.create(config(f"S{i}"), ALICE)
    assert len(table) == 64
    with pytest.raises(TooManySessions):
        table.create(config("S64"), ALICE)
    assert len(table) == 64


def test_logger_ids_are_1_to_64_and_reused_when_freed() -> None:
    table = SessionTable()
    sessions = [table.create(config(f"S{i}"), ALICE) for i in range(MAX_SESSIONS)]
    assert sorted(s.logger_id for s in sessions) == list(range(1, 65))
    table.remove("S9")
    table.remove("S3")
    assert table.create(config("again"), ALICE).logger_id == 4
    assert table.create(config("and again"), ALICE).logger_id == 10


def test_session_ids_are_never_reused() -> None:
    table = SessionTable()
    first = table.create(config("A"), ALICE)
    table.remove(first.session_id)
    assert table.create(config("A"), ALICE).session_id != first.session_id


@pytest.mark.parametrize("name", ["NT Kernel Logger", "Global Logger", "nt kernel logger", "GLOBAL LOGGER"])
def test_reserved_names_are_refused_for_ordinary_sessions(name: str) -> None:
    table = SessionTable()
    with pytest.raises(ReservedSessionName):
        table.create(config(name), ALICE)
    assert len(table) == 0


def test_reserved_names_are_kernel_sessions() -> None:
    table = SessionTable()
    table.create(kernel_config("NT Kernel Logger"), ROOT)
    assert table.session("nt kernel logger").kind is SessionKind.KERNEL


@pytest.mark.parametrize("second", ["Trace", "TRACE", "trace"])
def test_duplicate_names_are_refused_without_case(second: str) -> None:
    table = SessionTable()
    table.create(config("Trace"), ALICE)
    with pytest.raises(SessionExists):
        table.create(config(second), BOB)
    with pytest.raises(SessionExists):
        table.create(kernel_config(second), ROOT)



def test_kernel_sessions_six_ordinary_plus_two_reserved() -> None:
    table = SessionTable()
    ordinary = MAX_KERNEL_SESSIONS - RESERVED_KERNEL_SLOTS
    for i in range(ordinary):
        table.create(kernel_config(f"K{i}"), ROOT)
    with pytest.raises(TooManyKernelSessions):
        table.create(kernel_config("K-extra"), ROOT)
    # The reserved loggers still fit: their slots were kept.
    table.create(kernel_config("NT Kernel Logger"), ROOT)
    table.create(kernel_config("Global Logger"), ROOT)
    assert sum(1 for s in table if s.kind is SessionKind.KERNEL) == MAX_KERNEL_SESSIONS
    with pytest.raises(TooManySessions):  # TooManyKernelSessions is a TooManySessions
        table.create(kernel_config("K-more"), ROOT)
    # User sessions are not affected by the kernel limit.
    table.create(config("user"), ALICE)


def test_kernel_sessions_count_towards_the_sixty_four() -> None:
    table = SessionTable()
    for i in range(6):
        table.create(kernel_config(f"K{i}"), ROOT)
    for i in range(MAX_SESSIONS - 6):
        table.create(config(f"U{i}"), ALICE)
    with pytest.raises(TooManySessions):
        table.create(kernel_config("NT Kernel Logger"), ROOT)


def test_ninth_session_on_one_provider_is_refused() -> None:
    table = SessionTable()
    for i in range(MAX_SESSIONS_PER_PROVIDER):
        table.create(config(f"S{i}"), ALICE)
        table.enable(f"S{i}", PROVIDER, level=i)
    table.create(config("ninth"), ALICE)
    with pytest.raises(TooManySessionsForProvider):
        table.enable("ninth", PROVIDER)
    # Another provider is fine, and so is changing an existing rule.
    table.enable("ninth", OTHER_PROVIDER)
    table.enable("S0", PROVIDER, level=5)
    assert table.session("S0").rules[PROVIDER].level == 5


def test_the_per_provider_limit_counts_live_sessions_only() -> None:
    table = SessionTable()
    for i in range(MAX_SESSIONS_PER_PROVIDER):
        table.create(config(f"S{i}"), ALICE)
        table.enable(f"S{i}", PROVIDER)
    table.start("S0")
    table.stop("S0")
    table.stop_complete("S0")
    table.fail("S1", "disk full")
    table.create(config("new1"), ALICE)
    table.create(config("new2"), ALICE)
    table.enable("new1", PROVIDER)
    table.enable("new2", PROVIDER)
    table.create(config("new3"), ALICE)
    with pytest.raises(TooManySessionsForProvider):
        table.enable("new3", PROVIDER)


def test_a_second_session_on_a_registered_classic_provider_is_refused() -> None:
    table = SessionTable()
    table.register_provider(1, PROVIDER, 10, "app", classic=True)
    table.create(config("A"), ALICE)
    table.create(config("B"), ALICE)
    table.enable("A", PROVIDER)
    with pytest.raises(ClassicProviderInUse):
        table.enable("B", PROVIDER)
    table.enable("A", PROVIDER, level=3)  # updating the owner's rule is fine
    table.disable("A", PROVIDER)
    table.enable("B", PROVIDER)  # free again


def test_create_with_too_many_provider_sessions_leaves_nothing_behind() -> None:
    table = SessionTable()
    for i in range(MAX_SESSIONS_PER_PROVIDER):
        table.create(config(f"S{i}", providers=(ProviderEnable(PROVIDER),)), ALICE)
    with pytest.raises(TooManySessionsForProvider):
        table.create(config("late", providers=(ProviderEnable(OTHER_PROVIDER), ProviderEnable(PROVIDER))), ALICE)
    assert len(table) == MAX_SESSIONS_PER_PROVIDER
    with pytest.raises(SessionError):
        table.session("late")
    # OTHER_PROVIDER's rule from the refused session is gone too.
    table.create(config("check"), ALICE)
    table.start("check")
    table.enable("check", OTHER_PROVIDER, level=1)
    assert table.sessions_for(OTHER_PROVIDER, 1, 0, 1) == (table.session("check").session_id,)


def test_every_refusal_is_a_session_error() -> None:
    for error in (TooManySessions, TooManyKernelSessions, ReservedSessionName, SessionExists,
                  TooManySessionsForProvider, ClassicProviderInUse):  # fmt: skip
        assert issubclass(error, SessionError)
