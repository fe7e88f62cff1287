"""Tests must not leave the machine's trace service running (a test that installs a manifest with
an Admin channel, or runs a command needing the service, without ``OPENETW_SOCKET`` starts it):
the tests that start one are named at the end, and what they started is stopped.

What this run started, and only that: ``tests/conftest.py`` gives the test process a token in
``RUN_MARKER`` that every child inherits, the trace service it spawns included. At the end a
service on a machine socket is stopped when its environment carries this run's token; any other
(one that ran before, another user's, another test run's on a shared machine) is left alone.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest

from openetw.ipc.paths import SYSTEM_SOCKET, user_socket

# The environment variable holding this run's token, inherited by every process the tests start.
RUN_MARKER = "OPENETW_TESTS_RUN"

_SOCKETS = {str(SYSTEM_SOCKET), str(user_socket())}
_started_by: list[str] = []
_logs: dict[Path, int] = {}
_before: set[int] = set()


def mark_this_run() -> str:
    """Give this process (and so every process it starts) the run's token; the token."""
    token = os.environ.get(RUN_MARKER) or f"{os.getpid()}-{uuid.uuid4().hex}"
    os.environ[RUN_MARKER] = token
    return token


def machine_services() -> set[int]:
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


def started_by_this_run(pid: int) -> bool:
    """Whether the process carries this run's token (a process whose environment cannot be read,
    another user's, is not ours)."""
    token = os.environ.get(RUN_MARKER)
    if not token:
        return False
    try:
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{RUN_MARKER}={token}".encode() in environment


def stop_services_of_this_run(candidates: Iterable[int]) -> list[int]:
    """SIGTERM those of ``candidates`` this run started; the pids signalled."""
    stopped = []
    for pid in candidates:
        if not started_by_this_run(pid):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        stopped.append(pid)
    return stopped


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
    mark_this_run()
    _before.update(machine_services())
    _logs.update(_log_sizes())


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    sizes = _log_sizes()
    if sizes != _logs:
        _started_by.append(nodeid)
        _logs.update(sizes)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_services_of_this_run(machine_services() - _before)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _started_by:
        terminalreporter.write_line("tests that started the machine's trace service (set OPENETW_SOCKET): " + ", ".join(_started_by), yellow=True)
