"""boost_reader raises the recording process's priority or says why it could not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from openetw.kernel.priority import boost_reader

CHILD = "from openetw.kernel.priority import boost_reader\nprint(repr(boost_reader()))\nprint(repr(boost_reader()))\nprint(open('/proc/self/autogroup').read().strip() if __import__('os').path.exists('/proc/self/autogroup') else 'nice %d' % __import__('os').getpriority(0, 0))"


def _run(*prefix: str) -> list[str]:
    # a new session: the child's autogroup is its own, the test runner's is untouched
    done = subprocess.run([*prefix, sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, start_new_session=True)
    return done.stdout.splitlines()


def test_root_gets_the_boost_once():
    if os.geteuid() != 0:
        pytest.skip("raising a priority needs root")
    first, second, state = _run()
    assert first.startswith("'autogroup ") or first.startswith("'process nice ")
    assert first.endswith("-> -10'")
    assert second == "None"  # already boosted
    assert state.endswith("nice -10")


def test_refusal_is_a_note_not_an_error():
    if os.geteuid() != 0:
        first, _, _ = _run()
    else:
        setpriv = "/usr/bin/setpriv"
        if not os.path.exists(setpriv):
            pytest.skip("setpriv is needed to run the check without privileges")
        first, _, _ = _run(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    assert first.startswith("'reader priority unchanged: ") and "not permitted" in first
