"""A kernel trace made on the spot: processes that start and stop, context switches, disk I/O."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel import KernelEventMapper
from openetw.kernel.procfs import ProcessInfo, ThreadInfo


class _NoProc:
    def command_line(self, pid: int) -> str | None:
        return None

    def thread_group(self, tid: int) -> int | None:
        return None

    def image(self, pid: int) -> str | None:
        return None

    def status(self, tid: int) -> dict[str, str]:
        return {}


def _step(rng: random.Random, live: list[int], running: dict[int, int], next_pid: list[int]) -> list[tuple[str, int, dict[str, Any]]]:
    roll, cpu = rng.random(), rng.randrange(2)
    if roll < 0.1:
        parent, child = rng.choice(live), next_pid[0]
        next_pid[0] += 1
        live.append(child)
        return [
            ("sched_process_fork", cpu, {"parent_pid": parent, "child_pid": child, "parent_comm": "bash", "child_comm": "bash"}),
            ("sched_process_exec", cpu, {"pid": child, "filename": f"/usr/bin/tool{child % 7}"}),
        ]
    if roll < 0.17 and len(live) > 3:
        pid = rng.choice(live[2:])
        live.remove(pid)
        return [("sched_process_exit", cpu, {"pid": pid, "comm": "tool", "group_dead": 1})]
    if roll < 0.75:
        new = rng.choice(live)
        switch = {"prev_pid": running[cpu], "next_pid": new, "prev_state": 1, "prev_prio": 120, "next_prio": 120}
        running[cpu] = new
        return [("sched_switch", cpu, switch)]
    pid, size = rng.choice(live), rng.choice([512, 4096, 8192, 65536])
    common = {"dev": 8 << 20, "sector": rng.randrange(1 << 20), "nr_sector": size // 512, "rwbs": rng.choice(["R", "WS"])}
    return [("block_rq_issue", cpu, {**common, "bytes": size, "common_pid": pid}), ("block_rq_complete", cpu, {**common, "common_pid": 0})]


def kernel_trace(path: Path, steps: int = 3000, seed: int = 7) -> Path:
    """Writes the trace to ``path``: two processes from rundown, then ``steps`` random actions."""
    rng = random.Random(seed)
    mapper = KernelEventMapper({"process", "thread", "cswitch", "disk_io"}, _NoProc())
    now = time.monotonic_ns()
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", number_of_processors=2)
    live, running, next_pid = [100, 101], {0: 0, 1: 0}, [1000]
    with EtlWriter(path, header=header) as writer:
        rundown = [ProcessInfo(100, 1, "bash", "bash -i", 0, (ThreadInfo(100, "bash"),)),
                   ProcessInfo(101, 1, "sshd", "sshd", 0, (ThreadInfo(101, "sshd"),))]  # fmt: skip
        writer.write_all(mapper.rundown(rundown, now))
        for step in range(1, steps):
            for name, cpu, values in _step(rng, live, running, next_pid):
                writer.write_all(mapper.map(name, now + step * 1000 + rng.randrange(900), cpu, values))
    return path
