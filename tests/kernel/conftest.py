"""The tracefs that the live kernel tests read: root only, mounted here when it is not yet."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from openetw.kernel import find_tracefs


@pytest.fixture
def tracefs_root() -> Path:
    if os.geteuid() != 0:
        pytest.skip("kernel tests need root (tracefs is root only)")
    root = find_tracefs()
    if root is None:
        target = Path("/sys/kernel/tracing")
        result = subprocess.run(["mount", "-t", "tracefs", "nodev", str(target)], capture_output=True, check=False)
        root = find_tracefs()
        if root is None:
            pytest.skip(f"tracefs not mounted and mounting failed: {result.stderr.decode(errors='replace').strip()}")
    return root
