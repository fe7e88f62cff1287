"""``make demo`` end to end: it succeeds, shows the Sample Driver's messages, leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MESSAGES = ("Driver Loaded", "IRP A Occurred", "Driver Unloaded")


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (the demo's files are all under it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_the_demo_tells_the_story_and_leaves_nothing_running(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("OPENETW_SOCKET", None)
    env.pop("OPENETW_DATA_DIR", None)
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py")], capture_output=True, text=True, timeout=180, env=env, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    live = [line for line in result.stdout.splitlines() if line.lstrip().startswith("live")]
    for message in MESSAGES:
        assert any(f'"{message}"' in line for line in live), (message, result.stdout)
    assert "OnlyIrpA:          3 events (3 SampleEventA)" in result.stdout
    assert "the .etl file:" in result.stdout
    system_log = result.stdout.split("$ openetw log query System", 1)[1].split("the System log:", 1)[0]
    assert [line.split(": ", 1)[1] for line in system_log.splitlines() if "Sample Driver" in line] == [
        "Driver Loaded", "IRP A Occurred", "IRP A Occurred", "IRP A Occurred", "Driver Unloaded"]
    assert processes_mentioning(str(tmp_path)) == []
