"""``make demo`` end to end: it succeeds, shows the Sample Driver's messages, leaves nothing running."""

from __future__ import annotations

import os
import shlex
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
    tour = tmp_path / "tour"
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py"), "--tour-dir", str(tour)],
        capture_output=True, text=True, timeout=180, env=env, cwd=REPO,
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
    run_the_readme_tour(tour, env)


def readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def tour_commands() -> list[list[str]]:
    """The commands of the README's tour: its first ``sh`` block, one command a line."""
    block = readme_section("A short tour").split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def run_the_readme_tour(tour: Path, env: dict[str, str]) -> None:
    """After the quick start's two commands the tour runs as written, from the checkout (here a
    directory holding what the demo left and the checkout's examples)."""
    (tour / "examples").symlink_to(REPO / "examples")
    commands = tour_commands()
    assert commands and all(argv[0] == "openetw" for argv in commands)
    for argv in commands:
        done = subprocess.run([sys.executable, "-m", "openetw", *argv[1:]], capture_output=True, text=True, timeout=120, env=env, cwd=tour)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr)
        assert done.stdout.strip(), argv


def test_the_quick_start_says_how_openetw_gets_on_the_path() -> None:
    quick_start = readme_section("Quick start").split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in quick_start.splitlines() if line.strip()]
    assert commands == [["make", "demo"], ["make", "test"]]  # exactly two commands on a fresh machine
    assert ". .venv/bin/activate" in readme_section("Quick start")  # and where the command is
