"""The provider runtime against a real service: registration, enable state and callback, writes,
capture state, activity ids, manifest events, fork, and a service that comes and goes."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openetw.controller import Session
from openetw.etl.extended import EXT_RELATED_ACTIVITYID
from openetw.manifest.winmeta import InType
from openetw.provider import Provider, TraceLoggingProvider, activity
from openetw.session import ALL_KEYWORDS
from tests.service.harness import (
    Producer,
    ServiceProcess,
    decoded,
    indices,
    read_events,
    start_service,
)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


def test_without_a_service_a_provider_is_disabled_and_writes_nothing(service_env: Path) -> None:
    calls = Calls()
    with TraceLoggingProvider("Test.Alone", callback=calls) as provider:
        assert provider.enabled is False
        assert provider.is_enabled() is False
        assert provider.write("Nothing", level=1, value=1) is False
        assert provider.registration_id is None
    assert calls.calls == []


def test_enable_callback_flag_and_is_enabled_follow_the_sessions(service: ServiceProcess, tmp_path: Path) -> None:
    calls = Calls()
    provider = TraceLoggingProvider("Test.Callback", callback=calls).register()
    try:
        assert provider.registration_id is not None and not provider.enabled
        with Session.start("A", output=tmp_path / "a.etl") as first:
            first.enable("Test.Callback", level=3, any=0x6, all=0x4)
            assert wait_for(lambda: bool(calls.calls))
            assert provider.enabled
            assert calls.calls[-1] == (True, 3, 0x6, 0x4, calls.calls[-1][4], False)
            assert provider.is_enabled(3, 0x2) and provider.is_enabled(1, 0)
            assert not provider.is_enabled(4, 0x2) and not provider.is_enabled(3, 0x8)
            with Session.start("B", mode="realtime") as second:
                second.enable("Test.Callback", level=0)
                assert wait_for(lambda: calls.calls[-1][1] == 255)
                assert calls.calls[-1][2] == ALL_KEYWORDS  # a session with any=0 takes every keyword
                assert provider.is_enabled(5, 0x8)
            assert wait_for(lambda: calls.calls[-1][1] == 3)
            assert provider.write("Tick", level=3, keyword=0x4, index=1)
            assert not provider.write("Tick", level=4, keyword=0x4, index=2)
            assert not provider.write("Tick", level=3, keyword=0x2, index=3)  # lacks the "all" bit
        assert wait_for(lambda: calls.calls[-1][0] is False)
        assert not provider.enabled
    finally:
        provider.unregister()
    assert indices(tmp_path / "a.etl") == [1]


def test_capture_state_calls_back_and_the_state_events_reach_the_session(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "state.etl"
    producer: Producer = producers()
    producer.register("Test.State")
    with Session.start("State", output=output, providers=["Test.State"]) as session:
        assert producer.wait_enabled("Test.State")
        assert session.capture_state("Test.State") == 1
        assert wait_for(lambda: any(call[4] for call in producer.send("callbacks", name="Test.State")["calls"]))
    assert [name for _, name, _ in decoded(read_events(output))] == ["State"]


def test_a_forked_child_registers_on_its_own(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "fork.etl"
    producer: Producer = producers()
    producer.register("Test.Fork")
    with Session.start("Fork", output=output, providers=["Test.Fork"]):
        assert producer.wait_enabled("Test.Fork")
        child = producer.send("fork_write", name="Test.Fork", count=25)
        assert child["child_enabled"] is True
        assert child["child_written"] == 25
        assert producer.write("Test.Fork", 10, start=100) == 10
    child_pid = child["child_pid"]
    assert sorted(indices(output, event="Child", pid=child_pid)) == list(range(25))
    assert sorted(indices(output, event="Tick", pid=producer.pid)) == list(range(100, 110))
    assert {r.pid for r in read_events(output)} == {producer.pid, child_pid}


def test_activity_ids_and_the_transfer_reach_the_file(service: ServiceProcess, tmp_path: Path) -> None:
    output = tmp_path / "activity.etl"
    provider = TraceLoggingProvider("Test.Activity").register()
    try:
        with Session.start("Activity", output=output, providers=["Test.Activity"]):
            assert wait_for(lambda: provider.enabled)
            outer = uuid.uuid4()
            with activity(outer):
                with activity() as inner:
                    provider.write("First", value=1)
                    provider.write("Second", value=2)
    finally:
        provider.unregister()
    first, second = read_events(output)
    assert first.activity_id == second.activity_id == inner
    related = [item.data for item in first.extended if item.ext_type == EXT_RELATED_ACTIVITYID]
    assert related == [outer.bytes_le]
    assert not [item for item in second.extended if item.ext_type == EXT_RELATED_ACTIVITYID]


def test_a_manifest_provider_writes_encoded_and_raw_events(service: ServiceProcess, tmp_path: Path) -> None:
    output = tmp_path / "manifest.etl"
    guid = uuid.UUID("5eadbeef-0000-4000-8000-00000000babe")
    provider = Provider(guid).register()
    started = provider.event((1, 0, 0, 4, 0, 0, 0x10), [("port", InType.UINT16), ("name", InType.UNICODESTRING)])
    try:
        with Session.start("Manifest", output=output) as session:
            session.enable(guid, level=4, filters={"event_ids": [1, 2]})
            assert wait_for(lambda: provider.enabled)
            assert provider.write(started, 8080, "web")
            assert provider.write((2, 0, 0, 4, 0, 0, 0), b"\x01\x02", b"\x03")
            assert not provider.write((3, 0, 0, 4, 0, 0, 0), b"filtered out by event id")
            assert not provider.write((1, 0, 0, 5, 0, 0, 0), b"too verbose")
    finally:
        provider.unregister()
    first, second = read_events(output)
    assert (first.provider_id, first.id, first.level, first.keyword) == (guid, 1, 4, 0x10)
    assert first.user_data == struct.pack("<H", 8080) + "web\0".encode("utf-16-le")
    assert (second.id, second.user_data) == (2, b"\x01\x02\x03")


def test_a_provider_survives_its_service_and_attaches_to_the_next(service_env: Path, tmp_path: Path) -> None:
    first_service = start_service(service_env)
    provider = TraceLoggingProvider("Test.Comeback").register()
    try:
        Session.start("Before", mode="realtime", providers=["Test.Comeback"])
        assert wait_for(lambda: provider.enabled)
        first_service.kill()
        assert wait_for(lambda: not provider.enabled)
        assert provider.write("Lost", value=1) is False
        second_service = start_service(service_env)
        try:
            output = tmp_path / "after.etl"
            with Session.start("After", output=output, providers=["Test.Comeback"]):
                assert wait_for(lambda: provider.enabled)
                assert provider.write("Back", index=7)
            assert indices(output) == [7]
        finally:
            second_service.kill()
    finally:
        provider.unregister()
