"""The suite runs apart from its caller and from whoever else uses the machine: no OPENETW_*
setting of the caller reaches a test or its children, the manifest stores and logs are the
run's own, and the guard stops only the trace services this run started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openetw.ipc.paths import user_socket
from openetw.manifest.store import default_data_dirs
from tests import machine_service_guard as guard
from tests.conftest import KEPT_SETTINGS, PRIVATE_DATA_DIR

# A process that looks like the machine's trace service to the guard (its command line names a
# machine socket) but only sleeps: it never listens, so no real service is disturbed.
LOOKALIKE = [sys.executable, "-c", "import time; time.sleep(120)", "service", "run", "--socket", str(user_socket())]


def lookalike(environment: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(LOOKALIKE, env=environment, start_new_session=True)
    deadline = time.monotonic() + 30
    while process.pid not in guard.machine_services():  # until the command line is in /proc
        assert time.monotonic() < deadline, "the look-alike service never showed up"
        time.sleep(0.01)
    return process


def test_no_caller_setting_reaches_the_tests_or_their_children() -> None:
    leftovers = {name for name in os.environ if name.startswith("OPENETW_")} - {"OPENETW_DATA_DIR", guard.RUN_MARKER, *KEPT_SETTINGS}
    assert leftovers == set()
    code = "import os; print(sorted(n for n in os.environ if n.startswith('OPENETW_')))"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert set(eval(child)) <= {"OPENETW_DATA_DIR", guard.RUN_MARKER, *KEPT_SETTINGS}


def test_the_manifest_stores_and_logs_are_the_runs_own(own_data_dir: str) -> None:
    user, system = default_data_dirs()
    assert (user, system) == (Path(own_data_dir), Path(own_data_dir) / "system")
    assert user.parent == Path(PRIVATE_DATA_DIR) and Path(PRIVATE_DATA_DIR).name.startswith("openetw-tests-data-")


_DIRECTORIES_SEEN: set[str] = set()


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_has_its_own_stores(turn: int, own_data_dir: str) -> None:
    """What one test installs stays its own: the second turn's directory is not the first's."""
    assert own_data_dir not in _DIRECTORIES_SEEN
    _DIRECTORIES_SEEN.add(own_data_dir)


def test_the_guard_leaves_a_foreign_service_alone_and_stops_its_own() -> None:
    foreign_environment = {name: value for name, value in os.environ.items() if name != guard.RUN_MARKER}
    foreign = lookalike(foreign_environment)  # started as another user or another run would
    own = lookalike(dict(os.environ))  # started as the tests start one: with the run's token
    try:
        assert not guard.started_by_this_run(foreign.pid)
        assert guard.started_by_this_run(own.pid)
        stopped = guard.stop_services_of_this_run({foreign.pid, own.pid})
        assert stopped == [own.pid]
        assert own.wait(timeout=30) == -15  # SIGTERM
        assert foreign.poll() is None, "the guard stopped a service this run did not start"
    finally:
        for process in (foreign, own):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def test_another_runs_token_is_not_this_runs() -> None:
    other_run = dict(os.environ, **{guard.RUN_MARKER: "another-run"})
    process = lookalike(other_run)
    try:
        assert not guard.started_by_this_run(process.pid)
        assert guard.stop_services_of_this_run([process.pid]) == []
        assert process.poll() is None
    finally:
        process.kill()
        process.wait(timeout=30)


@pytest.mark.parametrize("name", ["OPENETW_LOGS_DIR", "OPENETW_DATA_DIR", "OPENETW_SOCKET", "OPENETW_INDEX_DIR"])
def test_a_setting_the_caller_gave_is_dropped_when_the_suite_starts(name: str) -> None:
    code = f"import os, tests.conftest; print(os.environ.get({name!r}))"
    environment = dict(os.environ, **{name: "/callers/own/place"})
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environment, cwd=root, check=True)
    seen = done.stdout.strip().splitlines()[-1]
    assert seen != "/callers/own/place"
    if name == "OPENETW_DATA_DIR":
        assert Path(seen).name.startswith("openetw-tests-data-")
