"""Helpers shared by the benchmarks: timing (best of N, imports excluded) and table printing."""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"


def best_of(fn: Callable[[], int], repeat: int = 3, *, clock: Callable[[], float] = time.perf_counter) -> tuple[float, int]:
    """Runs ``fn`` ``repeat`` times; returns (best seconds on ``clock``, what fn returned).

    ``clock=time.thread_time`` counts this thread's CPU time only: on a shared machine, time
    spent waiting for a CPU is then left out (what a reader thread costs, not how long it waited)."""
    best, result = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        start = clock()
        result = fn()
        best = min(best, clock() - start)
    return best, result


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def machine_note() -> str:
    return f"{os.cpu_count()} cores, Python {sys.version.split()[0]}; shared machine, numbers are noisy"


# -- a private trace service and steered child processes ------------------------------------------

_START_TIMEOUT = 20.0


@contextmanager
def private_service(prefix: str = "openetw-bench-") -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A trace service on a socket in a temporary directory; OPENETW_SOCKET points there for this
    process and its children while it runs. Stopped (killed if need be), the environment restored
    and the directory removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    socket_path = directory / "control.sock"
    saved = {name: os.environ.get(name) for name in ("OPENETW_SOCKET", "OPENETW_NO_AUTOSTART")}
    os.environ.update(OPENETW_SOCKET=str(socket_path), OPENETW_NO_AUTOSTART="1")
    read_end, write_end = os.pipe()
    with open(directory / "service.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket_path), "--ready-fd", str(write_end)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,),
        )  # fmt: skip
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], _START_TIMEOUT)
        if not ready or not os.read(read_end, 16).startswith(b"ready"):
            raise RuntimeError(f"the trace service did not start: {(directory / 'service.log').read_text()}")
        yield process, directory
    finally:
        os.close(read_end)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(directory, ignore_errors=True)


class StdioChild:
    """A child process steered with words on its stdin, answering JSON lines on its stdout."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.pid = self.process.pid

    def read(self, timeout: float = 120.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(f"child process {self.pid} did not answer")
        return json.loads(line)  # type: ignore[no-any-return]

    def tell(self, word: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(word.encode() + b"\n")

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.tell("exit")
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
