"""Tests must not leave the machine's trace service running (a test that installs a manifest with
an Admin channel, or runs a command needing the service, without ``OPENETW_SOCKET`` starts it):
the tests that start one are named at the end, and what they started is stopped."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from openetw.ipc.paths import SYSTEM_SOCKET, user_socket

_SOCKETS = {str(SYSTEM_SOCKET), str(user_socket())}
_started_by: list[str] = []
_logs: dict[Path, int] = {}
_before: set[int] = set()


def _machine_services() -> set[int]:
    """Pids of ``openetw service run`` processes listening on a machine socket."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [word.decode(errors="replace") for word in argv]
        if "service" in words and "run" in words and "--socket" in words:
            place = words.index("--socket") + 1
            if place < len(words) and words[place] in _SOCKETS:
                found.add(int(entry))
    return found


def _log_sizes() -> dict[Path, int]:
    sizes = {}
    for socket in _SOCKETS:
        log = Path(socket).parent / "service.log"
        try:
            sizes[log] = log.stat().st_size
        except OSError:
            sizes[log] = 0
    return sizes


def pytest_sessionstart(session: pytest.Session) -> None:
    _before.update(_machine_services())
    _logs.update(_log_sizes())


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    sizes = _log_sizes()
    if sizes != _logs:
        _started_by.append(nodeid)
        _logs.update(sizes)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for pid in _machine_services() - _before:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _started_by:
        terminalreporter.write_line("tests that started the machine's trace service (set OPENETW_SOCKET): " + ", ".join(_started_by), yellow=True)
