"""A kernel session as root where tracefs is not mounted: ``openetw kernel start`` mounts it and
says so. Run in a mount namespace of its own (``unshare -m --propagation private``), where any
tracefs and debugfs are unmounted first: nothing outside the namespace is touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openetw.kernel.control import KERNEL_DIR_ENV

SRC = Path(__file__).resolve().parents[2] / "src"

_SCRIPT = """
set -u
for point in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug; do
    while umount -l "$point" 2>/dev/null; do :; done
done
"$PY" -c 'from openetw.kernel import find_tracefs; assert find_tracefs() is None, find_tracefs()' || exit 90
"$PY" -m openetw kernel start mounttest --flags process,thread -o "$OUT" --json > "$DIR/start.json" 2> "$DIR/start.err" || exit 91
"$PY" -c 'import subprocess, sys; subprocess.run([sys.executable, "-c", "pass"], check=True)'
"$PY" -m openetw kernel stop mounttest --json > "$DIR/stop.json" || exit 92
grep ' /sys/kernel/tracing tracefs ' /proc/mounts > "$DIR/mounts" || exit 93
"""


def _need_root_and_unshare() -> str:
    unshare = shutil.which("unshare")
    reason = None
    if os.geteuid() != 0:
        reason = "mounting tracefs needs root"
    elif unshare is None:
        reason = "unshare(1) is not installed"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI this test runs: {reason}")
        pytest.skip(reason)
    assert unshare is not None
    return unshare


def test_kernel_start_mounts_tracefs_when_it_is_not_mounted(tmp_path: Path) -> None:
    unshare = _need_root_and_unshare()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(PY=sys.executable, OUT=str(tmp_path / "k.etl"), DIR=str(tmp_path), PYTHONPATH=str(SRC))
    env[KERNEL_DIR_ENV] = str(tmp_path / "run")
    result = subprocess.run([unshare, "-m", "--propagation", "private", "sh", "-c", _SCRIPT], env=env,
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    logs = {name: (tmp_path / name).read_text() for name in ("start.err",) if (tmp_path / name).exists()}
    assert result.returncode == 0, (result.returncode, result.stderr, logs)
    started = json.loads((tmp_path / "start.json").read_text())
    assert started["state"] == "running"
    assert started["tracefs_mounted"] == "tracefs at /sys/kernel/tracing"
    assert "mounted tracefs at /sys/kernel/tracing" in (tmp_path / "start.err").read_text()
    stopped = json.loads((tmp_path / "stop.json").read_text())
    assert stopped["state"] == "stopped" and stopped["records_written"] > 0
