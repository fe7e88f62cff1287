"""Traces made on the spot for the timeline tests: kernel scheduling and samples, and user
Start/Stop events with activity ids (what the corpus lacks)."""

from __future__ import annotations

import random
import struct
import time
import uuid
from pathlib import Path

from openetw.etl.build import build_system_record
from openetw.etl.extended import related_activity_item
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel import KernelEventMapper
from openetw.kernel.procfs import ProcessInfo, ThreadInfo
from openetw.testing.builder import EventRecordBuilder

READY = struct.Struct("<IbbbB")
SAMPLE = struct.Struct("<QIHH")
STACK_HEAD = struct.Struct("<qII")
PROCESSES = {100: (100, 102), 101: (101, 103)}


class _NoProc:
    def command_line(self, pid: int) -> str | None:
        return None

    def thread_group(self, tid: int) -> int | None:
        return None

    def image(self, pid: int) -> str | None:
        return None

    def status(self, tid: int) -> dict[str, str]:
        return {}


def kernel_sched_trace(path: Path, steps: int = 2000, seed: int = 11, cpus: int = 3) -> Path:
    """Process/thread rundown, then context switches, wake-ups and samples with stacks on ``cpus`` CPUs."""
    rng = random.Random(seed)
    mapper = KernelEventMapper({"process", "thread", "cswitch"}, _NoProc())
    now = time.monotonic_ns()
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", number_of_processors=cpus)
    running = dict.fromkeys(range(cpus), 0)
    threads = [tid for tids in PROCESSES.values() for tid in tids]
    with EtlWriter(path, header=header) as writer:
        rundown = [ProcessInfo(pid, 1, f"app{pid}", f"app{pid} --serve", 0, tuple(ThreadInfo(tid, f"worker{tid}") for tid in tids))
                   for pid, tids in PROCESSES.items()]  # fmt: skip
        writer.write_all(mapper.rundown(rundown, now))
        for step in range(1, steps):
            ts, cpu, roll = now + step * 10_000, rng.randrange(cpus), rng.random()
            if roll < 0.5:
                new = rng.choice(threads + [0])
                switch = {"prev_pid": running[cpu], "next_pid": new, "prev_state": rng.choice([0, 1, 2]), "prev_prio": 120, "next_prio": 120}
                running[cpu] = new
                writer.write_all(mapper.map("sched_switch", ts, cpu, switch))
            elif roll < 0.7:
                woken = rng.choice(threads)
                payload = READY.pack(woken, 1, 2, 0, 0)
                writer.write(build_system_record(hook_id=0x05 << 8 | 50, version=2, pid=0, tid=running[cpu], timestamp=ts, cpu=cpu, user_data=payload))
            else:
                tid = rng.choice(threads)
                pid = next(pid for pid, tids in PROCESSES.items() if tid in tids)
                ip = 0x7FF6_0000_1000 + rng.randrange(64) * 16
                writer.write(build_system_record(hook_id=0x0F << 8 | 46, version=2, pid=0, tid=0, timestamp=ts, cpu=cpu,
                                                 user_data=SAMPLE.pack(ip, tid, 1, 0)))  # fmt: skip
                if roll < 0.9:  # most samples have a stack
                    depth = rng.randrange(1, 6)
                    frames = [ip] + [0x7FF6_0000_8000 + rng.randrange(8) * 64 for _ in range(depth)]
                    stack = STACK_HEAD.pack(ts, pid, tid) + struct.pack(f"<{len(frames)}Q", *frames)
                    writer.write(build_system_record(hook_id=0x18 << 8 | 32, version=2, pid=pid, tid=tid, timestamp=ts + 1, cpu=cpu, user_data=stack))
    return path


def activity_id(number: int) -> uuid.UUID:
    return uuid.UUID(int=(number << 64) | 0x1234_5678_9ABC_DEF0)


def activity_trace(path: Path) -> Path:
    """Requests (task 1) on two threads with nested operations (task 2) whose activities say
    their parent; one operation ends on another thread (async); one Stop has no Start."""
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="Requests")
    base = time.monotonic_ns()
    events: list[tuple[int, int, int, int, int, uuid.UUID, uuid.UUID | None, str]] = []

    def pair(start: int, stop: int, task: int, tid: int, act: int, parent: int | None, name: str, stop_tid: int | None = None) -> None:
        related = activity_id(parent) if parent is not None else None
        events.append((start, 1, task, tid, act, activity_id(act), related, f"{name}Start"))
        events.append((stop, 2, task, stop_tid or tid, act, activity_id(act), None, f"{name}Stop"))

    for number in range(20):
        t0 = number * 1000
        tid = 200 + number % 2
        request = 1 + number * 10
        pair(t0, t0 + 900, 1, tid, request, None, "Request")
        pair(t0 + 100, t0 + 300, 2, tid, request + 1, request, "Query")
        pair(t0 + 400, t0 + 800, 2, tid, request + 2, request, "Render", stop_tid=tid if number % 5 else 299)
        events.append((t0 + 500, 0, 0, tid, 0, activity_id(request + 2), None, "Progress"))
    events.append((30_000, 2, 1, 200, 0, activity_id(999), None, "RequestStop"))
    events.sort(key=lambda item: item[0])
    with EtlWriter(path, header=header) as writer:
        for at, opcode, task, tid, _act, activity, related, name in events:
            extended = (related_activity_item(related),) if related is not None else ()
            builder = EventRecordBuilder("Contoso.Requests", 1 + opcode + task * 4, opcode=opcode, task=task, level=4,
                                         pid=4000, tid=tid, timestamp=base + at * 1000, activity_id=activity, extended=extended)  # fmt: skip
            builder.add_property("step", name).add_property("at", at)
            writer.write(builder.pack_tracelogging(name, provider_name="Contoso.Requests"))
    return path
