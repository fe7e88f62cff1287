"""Kernel probes attribute every system call of a loaded machine, or count what they could not:
``dd bs=1`` makes a known number of writes (one per byte), run with two busy loops beside it
(root, a private trace service)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.service.harness import kill_recorders, need_tracefs, start_service

BYTES = 60_000
PROGRAM = """
syscall::write:entry /pid == $target/ { @writes = count(); }
syscall:::entry /execname == "dd"/ { @by_name = count(); }
proc:::exit /pid == $target/ { @exits = count(); }
"""
LOSSES = ("events_lost", "buffers_lost", "syscalls_unattributed", "kernel_trace_unfinished")


def test_a_loaded_run_attributes_every_system_call_of_its_command_or_counts_it(tmp_path: Path) -> None:
    need_tracefs()
    socket_path = tmp_path / "control.sock"
    running = start_service(socket_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(OPENETW_SOCKET=str(socket_path), OPENETW_NO_AUTOSTART="1")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        command = f"dd if=/dev/zero of=/dev/null bs=1 count={BYTES} status=none"
        result = subprocess.run([sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", "-c", command, "-n", PROGRAM],
                                env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    finally:
        for process in busy:
            process.kill()
            process.wait()
        running.kill()
        kill_recorders(running.pid)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    maps = {name: value for r in records if r["type"] == "map" for name, value in r["data"].items()}
    lost = next(r["data"] for r in records if r["type"] == "lost")
    reported = sum(int(lost.get(name, 0)) for name in LOSSES)
    # Exactly one write per byte (status=none: dd writes nothing else), within what was reported lost.
    assert abs(maps["@writes"] - BYTES) <= reported, (maps, lost)
    # Each byte is a read and a write, plus the loader's and dd's own few calls.
    assert 2 * BYTES - reported <= maps["@by_name"] <= 2 * BYTES + 200 + reported, (maps, lost)
    # The run ends after the kernel trace passed the command's exit.
    assert maps["@exits"] == 1, (maps, lost)
