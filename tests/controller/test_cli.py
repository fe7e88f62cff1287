"""``openetw service``, ``session``, ``providers`` and ``trace`` against a real service."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.cli.session_commands import parse_provider_spec
from openetw.controller import Session
from openetw.errors import InvalidArgument
from tests.service.harness import (
    Producer,
    ServiceProcess,
    indices,
)

PROVIDER = "Test.Cli"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Test.Cli", ("Test.Cli", {})),
        ("Test.Cli:0x10", ("Test.Cli", {"any": 0x10})),
        ("Test.Cli:0x10:4", ("Test.Cli", {"any": 0x10, "level": 4})),
        ("Test.Cli::verbose", ("Test.Cli", {"level": 5})),
        ("{5eadbeef-0000-4000-8000-000000000001}:3:2:0x1", ("{5eadbeef-0000-4000-8000-000000000001}", {"any": 3, "level": 2, "all": 1})),
    ],
)
def test_provider_specs(spec: str, expected: tuple) -> None:
    assert parse_provider_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", ":1", "a:b", "a:1:loud", "a:1:2:3:4"])
def test_bad_provider_specs(spec: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_provider_spec(spec)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_session_from_start_to_stop(service: ServiceProcess, producers, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "cli.etl"
    producer: Producer = producers()
    producer.register(PROVIDER)
    started = run_json(capsys, "session", "start", "Cli", "-p", f"{PROVIDER}:0x1:4", "-o", str(output), "--buffer-size", "8")
    assert started["state"] == "running" and started["buffer_size_kb"] == 8
    assert producer.wait_enabled(PROVIDER)
    assert producer.write(PROVIDER, 12) == 12
    flushed = run_json(capsys, "session", "flush", "Cli")
    assert flushed["events_written"] == 12
    assert [s["name"] for s in run_json(capsys, "session", "list")] == ["Cli"]
    (provider,) = [p for p in run_json(capsys, "providers") if p["pid"] == producer.pid]
    assert provider["sessions"] == ["Cli"]
    updated = run_json(capsys, "session", "update", "Cli", "--disable", PROVIDER, "--flush-timer", "3")
    assert updated["providers"] == [] and updated["flush_timer"] == 3
    assert not producer.wait_enabled(PROVIDER, False)
    stopped = run_json(capsys, "session", "stop", "Cli")
    assert stopped["state"] == "stopped" and stopped["events_written"] == 12
    assert sorted(indices(output)) == list(range(12))
    assert main(["session", "query", "Cli"]) == 1
    assert "no trace session" in capsys.readouterr().err


def test_readable_output_and_service_status(service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["session", "start", "Shown", "-o", str(tmp_path / "s.etl")]) == 0
    assert "started trace session Shown" in capsys.readouterr().out
    assert main(["session", "query", "Shown"]) == 0
    out = capsys.readouterr().out
    assert "Shown: running, sequential-file" in out and "events_written=0" in out
    status = run_json(capsys, "service", "status")
    assert status["pid"] == service.pid and status["sessions"] == 1
    assert main(["service", "stop"]) == 0
    assert service.process.wait(timeout=15) == 0
    assert main(["session", "list"]) == 0
    assert "no trace sessions" in capsys.readouterr().out


def test_trace_prints_events_as_they_arrive(service: ServiceProcess, producers) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    with Session.start("Watched", mode="realtime", providers=[PROVIDER]) as session:
        viewer = subprocess.Popen(
            [sys.executable, "-m", "openetw", "trace", "--session", "Watched", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while session.info()["realtime_consumers"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert producer.wait_enabled(PROVIDER)
            producer.write(PROVIDER, 3, event="Shown")
            session.flush()
        except BaseException:
            viewer.kill()
            raise
    try:
        out, err = viewer.communicate(timeout=15)
    finally:
        viewer.kill()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["provider"], line["event"], line["fields"]["index"]) for line in lines] == [(PROVIDER, "Shown", str(i)) for i in range(3)]
    assert "3 events" in err

