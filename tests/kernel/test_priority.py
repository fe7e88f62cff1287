"""boost_reader raises the recording process's priority or says why it could not."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading

import pytest

from openetw.kernel import priority
from openetw.kernel.priority import boost_reader
from tests.service.harness import as_other_user

CHILD = (
    "from openetw.kernel.priority import boost_reader\nprint(repr(boost_reader()))\nprint(repr(boost_reader()))\n"
    "print(open('/proc/self/autogroup').read().strip() if __import__('os').path.exists('/proc/self/autogroup')"
    " else 'nice %d' % __import__('os').getpriority(0, 0))"
)


def _run(*prefix: str) -> list[str]:
    # a new session: the child's autogroup is its own, the test runner's is untouched
    done = subprocess.run([*prefix, sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, start_new_session=True)
    return done.stdout.splitlines()


def test_root_gets_the_boost_once():
    if os.geteuid() != 0:
        pytest.skip("raising a priority needs root")
    first, second, state = _run()
    assert (first.startswith("'autogroup ") and first.endswith("-> -10'")) or (first.startswith("'thread nice ") and " -> -10 (" in first)
    assert second == "None"  # already boosted
    assert state.endswith("nice -10")


def test_refusal_is_a_note_not_an_error():
    if os.geteuid() != 0:
        first, _, _ = _run()
    else:
        # A forked child that dropped to another account: it runs nothing from the checkout,
        # which that account may not be able to enter.
        # A new session: its own autogroup, at nice 0 whatever the test runner's is.
        first = repr(as_other_user(lambda: {"setsid": os.setsid(), "note": boost_reader()})["note"])
    assert first.startswith("'reader priority unchanged: ") and "not permitted" in first


def test_a_refused_autogroup_falls_back_to_the_thread_nice_value(monkeypatch):
    # A process in the kernel's default autogroup cannot reweigh it: the kernel answers EINVAL.
    def refuse(nice: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(priority, "_write_autogroup_nice", refuse)
    monkeypatch.setattr(priority, "_read", lambda path: "1" if path == priority._AUTOGROUP_ENABLED else "/autogroup-0 nice 0")
    seen: dict[str, object] = {}

    def reader() -> None:  # a thread of its own: only its nice value changes
        seen["said"] = boost_reader()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, 0)

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join()
    said = seen["said"]
    assert isinstance(said, str)
    if os.geteuid() == 0:
        assert said == f"thread nice {os.getpriority(os.PRIO_PROCESS, 0)} -> -10 (autogroup nice -10 Invalid argument)"
        assert seen["nice"] == -10
    else:
        assert said.startswith("reader priority unchanged: autogroup nice -10 Invalid argument; thread nice -10 not permitted")
    assert os.getpriority(os.PRIO_PROCESS, 0) != -10 or os.geteuid() != 0  # the test's own thread is untouched
