"""Statistics: the exact keys, counters that only grow, lost-event accounting from pool headers."""

from __future__ import annotations

import json

import pytest

from openetw.errors import InvalidArgument
from openetw.session import (
    COUNTER_KEYS,
    STATISTICS_KEYS,
    Caller,
    SessionConfig,
    SessionKind,
    SessionStatistics,
    SessionTable,
)
from tests.session.helpers import ALICE, PROVIDER, config, file_config

EXPECTED_KEYS = (
    "buffers",
    "free_buffers",
    "events_written",
    "events_lost",
    "buffers_written",
    "log_buffers_lost",
    "realtime_buffers_lost",
    "events_rejected",
    "events_truncated",
)


def test_statistics_keys_are_exactly_these() -> None:
    assert STATISTICS_KEYS == EXPECTED_KEYS
    table = SessionTable()
    table.create(config("A"), ALICE)
    assert tuple(table.statistics("A")) == EXPECTED_KEYS
    assert all(value == 0 for value in table.statistics("A").values())


def test_query_holds_settings_state_and_statistics() -> None:
    table = SessionTable()
    session = table.create(file_config("A", max_file_mb=10), ALICE, now=50.0)
    table.enable("A", PROVIDER, level=5, match_any=0x30)
    table.start("A", now=60.0)
    info = table.query("A")
    assert set(EXPECTED_KEYS) <= set(info)
    assert info["name"] == "A" and info["state"] == "running" and info["mode"] == "sequential-file"
    assert info["logger_id"] == session.logger_id and info["file_name"] == "/tmp/A.etl"
    assert info["log_file_mode"] == 0x1 and info["max_file_mb"] == 10
    assert info["created_at"] == 50.0 and info["started_at"] == 60.0
    assert info["providers"][0]["guid"] == str(PROVIDER) and info["providers"][0]["match_any"] == 0x30
    json.dumps(info)  # plain data


def test_query_shows_a_kernel_session_s_flags_source_and_profile_rate() -> None:
    table = SessionTable()
    kernel = SessionConfig("K", kind=SessionKind.KERNEL, kernel_flags=("profile", "image"), kernel_buffer_kb=64,
                           kernel_source="tracefs", kernel_profile_rate_hz=500)  # fmt: skip
    table.create(kernel, Caller(0, 0))
    table.create(file_config("U"), ALICE)
    info = table.query("K")
    assert (info["kernel_flags"], info["kernel_buffer_kb"]) == (["image", "profile"], 64)
    assert (info["kernel_source"], info["kernel_profile_rate_hz"]) == ("tracefs", 500)
    assert not {"kernel_flags", "kernel_source", "kernel_profile_rate_hz"} & set(table.query("U"))


def test_counters_add_up_exactly() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.buffer_written("A", events=10)
    table.buffer_written("A", events=0)
    table.buffer_written("A", events=5)
    table.events_lost("A", 3)
    table.log_buffer_lost("A")
    table.realtime_buffer_lost("A", 2)
    table.set_buffer_counts("A", buffers=8, free_buffers=6)
    assert table.statistics("A") == {
        "buffers": 8,
        "free_buffers": 6,
        "events_written": 15,
        "events_lost": 3,
        "buffers_written": 3,
        "log_buffers_lost": 1,
        "realtime_buffers_lost": 2,
        "events_rejected": 0,
        "events_truncated": 0,
    }


@pytest.mark.parametrize(
    "count",
    [
        lambda t: t.buffer_written("A", events=-1),
        lambda t: t.events_lost("A", -5),
        lambda t: t.log_buffer_lost("A", -1),
        lambda t: t.realtime_buffer_lost("A", -1),
        lambda t: t.events_lost("A", 1.5),
        lambda t: t.set_buffer_counts("A", 2, 3),
    ],
)
def test_no_counter_is_ever_decremented(count: object) -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.events_lost("A", 4)
    before = table.statistics("A")
    with pytest.raises(InvalidArgument):
        count(table)  # type: ignore[operator]
    assert table.statistics("A") == before


def test_pool_header_losses_are_counted_once() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.enable("A", PROVIDER)
    table.start("A")
    table.register_provider(7, PROVIDER, 10, "app")
    assert table.pool_events_lost("A", 7, 5) == 5
    assert table.pool_events_lost("A", 7, 5) == 0
    assert table.pool_events_lost("A", 7, 12) == 7
    with pytest.raises(InvalidArgument):
        table.pool_events_lost("A", 7, 11)
    assert table.statistics("A")["events_lost"] == 12
    # The pool closes; the last reading still counts only what is new.
    table.disable("A", PROVIDER)
    assert table.pool_events_lost("A", 7, 13) == 1
    # A new pool for the same process starts from zero again.
    table.enable("A", PROVIDER)
    assert table.pool_events_lost("A", 7, 2) == 2
    assert table.statistics("A")["events_lost"] == 15


def test_counters_survive_stop_and_failure() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.start("A")
    table.buffer_written("A", 3)
    table.fail("A", "boom")
    table.buffer_written("A", 2)  # the service may still drain after a failure
    assert table.query("A")["events_written"] == 5 and table.query("A")["state"] == "failed"


def test_counter_keys_are_statistics_keys() -> None:
    assert set(COUNTER_KEYS) < set(STATISTICS_KEYS)
    stats = SessionStatistics()
    stats.buffer_written(4)
    assert stats.as_dict()["buffers_written"] == 1
