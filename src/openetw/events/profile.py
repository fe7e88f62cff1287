"""A trace's stacks as samples with named frames: what stack views and flame graphs read.

``load_profile(records, ...)`` joins stacks to their events (``events.stacks``), keeps the
events asked for (``SampledProfile`` by default: PerfView's CPU Stacks) of the processes,
threads and time window asked for, and names every frame (``events.frames``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from openetw.events.frames import Frame, FrameNamer, NamingStats
from openetw.events.stacks import StackCollector, StackStats, event_matches
from openetw.events.trace_state import TraceState, module_name
from openetw.tdh.registry import SchemaRegistry

__all__ = ["Profile", "StackSample", "load_profile", "process_label"]


@dataclass(slots=True)
class StackSample:
    """One event with its named stack (frames innermost first)."""

    pid: int
    tid: int
    process: str
    filetime: int
    event: str
    frames: tuple[Frame, ...]
    weight: int = 1


@dataclass(slots=True)
class Profile:
    samples: list[StackSample]
    state: TraceState
    stacks: StackStats
    naming: NamingStats
    events: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        counted = getattr(self.samples, "total", None)  # samples kept as columns count themselves
        return int(counted) if counted is not None else sum(sample.weight for sample in self.samples)

    def as_json(self) -> dict[str, Any]:
        return {"samples": self.total, "stacks": self.stacks.as_json(), "naming": self.naming.as_json(), "events": dict(self.events)}


def _process_name(state: TraceState, pid: int, when: int) -> str | None:
    """The trace's name of the process; without process events (a Linux trace of images and
    samples only), its program: the first image it has loaded then that is no shared library."""
    name = state.process_name(pid, when)
    if name is None and pid:
        programs = [
            image for image in state.images(pid)
            if image.start <= when <= image.end and ".so" not in image.file_name and not image.file_name.startswith("[")
        ]  # fmt: skip
        if programs:
            name = module_name(min(programs, key=lambda image: image.start).file_name)
    return name


def process_label(state: TraceState, pid: int, when: int) -> str:
    """``Name (pid)``, as PerfView's stacks name a process (``Process (pid)`` when unnamed)."""
    name = _process_name(state, pid, when) or ("Idle" if pid == 0 else "Process")
    return f"{name} ({pid})"


def _process_matches(state: TraceState, pid: int, when: int, wanted: str) -> bool:
    if wanted.isdigit():
        return pid == int(wanted)
    name = (_process_name(state, pid, when) or "").lower()
    wanted = wanted.lower()
    return name == wanted or name == wanted.rsplit(".", 1)[0]


def load_profile(
    records: Iterable[Any], *, registry: SchemaRegistry | None = None, event: str | None = "SampledProfile",
    process: str | None = None, thread: int | None = None, start: int | None = None, end: int | None = None,
    symbol_dirs: Iterable[str | os.PathLike[str]] = (), kallsyms: str | None = None,
    perf_map_dir: str | os.PathLike[str] | None = None, elf: bool = True,
) -> Profile:  # fmt: skip
    """The named stacks of ``records`` (in time order). ``event`` None keeps every event with a
    stack; ``start``/``end`` are FILETIMEs (inclusive); ``process`` is a pid or a process name."""
    state = TraceState(registry)
    collector = StackCollector(state)
    for record in records:
        collector.observe(record)
    joined = collector.finish()
    namer = FrameNamer(state, symbol_dirs=symbol_dirs, kallsyms=kallsyms, perf_map_dir=perf_map_dir, elf=elf)
    samples: list[StackSample] = []
    events: dict[str, int] = {}
    for stack in joined:
        events[stack.event] = events.get(stack.event, 0) + 1
        if event is not None and not event_matches(stack.event, event):
            continue
        when = stack.filetime
        if (start is not None and when < start) or (end is not None and when > end):
            continue
        if thread is not None and stack.tid != thread:
            continue
        if process is not None and not _process_matches(state, stack.pid, when, process):
            continue
        frames = tuple(namer.names(stack.pid, stack.addresses, when))
        samples.append(StackSample(stack.pid, stack.tid, process_label(state, stack.pid, when), when, stack.event, frames))
    return Profile(samples, state, collector.stats, namer.stats, events)
