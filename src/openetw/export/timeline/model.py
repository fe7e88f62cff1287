"""The timeline model: what a trace looks like on a time axis, whatever file it is written to.

A timeline is a stream of items in time order (``ts`` in nanoseconds since 1970, UTC):

* ``Process`` / ``Thread``: a process or thread and its name, before its first item;
* ``Slice`` (given twice, as ``SliceBegin`` then ``SliceEnd``): a Start/Stop pair, on its
  thread when it began and ended there and nests with the thread's other slices, else async
  (its own track in the process); ``parent`` is the span of the related activity (a flow);
* ``Instant``: any other event, its decoded fields as ``args``;
* ``Counter``: a value an event carries (disk bytes, GC heap sizes), per counter name;
* ``Switch`` / ``Wakeup``: kernel CSwitch and ReadyThread (CPU scheduling);
* ``Sample``: a SampledProfile with the named frames of its stack (innermost first; kernel
  then user part, compressed stacks resolved), or of the sampled address alone.

Encoders (``perfetto``, ``chrome``, ``otlp``) write these; none of them looks at records.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "Counter",
    "Frame",
    "Instant",
    "Item",
    "Process",
    "Sample",
    "Slice",
    "SliceBegin",
    "SliceEnd",
    "Switch",
    "Thread",
    "Wakeup",
]


class Process:
    __slots__ = ("pid", "name", "ts")

    def __init__(self, pid: int, name: str, ts: int) -> None:
        self.pid, self.name, self.ts = pid, name, ts


class Thread:
    __slots__ = ("pid", "tid", "name", "ts")

    def __init__(self, pid: int, tid: int, name: str, ts: int) -> None:
        self.pid, self.tid, self.name, self.ts = pid, tid, name, ts


class Slice:
    """A Start/Stop pair. ``end``/``end_tid`` are set when the Stop comes; ``thread`` says
    whether it is drawn on its thread (else async, ``id`` naming its track)."""

    __slots__ = (
        "id", "ts", "end", "pid", "tid", "end_tid", "category", "name", "args", "end_args", "activity", "related",
        "parent", "thread", "begin_key", "end_key", "level", "message", "pair", "lost", "committed",
    )  # fmt: skip

    def __init__(self, number: int, ts: int, pid: int, tid: int, category: str, name: str, args: dict[str, Any],
                 activity: bytes | None, related: bytes | None, begin_key: tuple[int, int], level: int = 4) -> None:  # fmt: skip
        self.id, self.ts, self.pid, self.tid = number, ts, pid, tid
        self.end: int = ts
        self.end_tid: int = tid
        self.category, self.name, self.args = category, name, args
        self.end_args: dict[str, Any] = {}
        self.activity, self.related = activity, related
        self.parent: Slice | None = None
        self.thread = True
        self.begin_key = begin_key
        self.end_key = begin_key
        self.level = level
        self.message: str | None = None
        self.pair: tuple[Any, ...] = ()
        self.lost = False
        self.committed = False


class SliceBegin:
    __slots__ = ("span", "ts")

    def __init__(self, span: Slice) -> None:
        self.span, self.ts = span, span.ts


class SliceEnd:
    __slots__ = ("span", "ts")

    def __init__(self, span: Slice) -> None:
        self.span, self.ts = span, span.end


class Instant:
    __slots__ = ("ts", "pid", "tid", "category", "name", "args", "level", "header", "message")

    def __init__(self, ts: int, pid: int, tid: int, category: str, name: str, args: dict[str, Any], level: int,
                 header: dict[str, Any] | None = None, message: str | None = None) -> None:  # fmt: skip
        self.ts, self.pid, self.tid, self.category, self.name = ts, pid, tid, category, name
        self.args, self.level, self.header, self.message = args, level, header, message


class Counter:
    __slots__ = ("ts", "pid", "name", "value")

    def __init__(self, ts: int, pid: int, name: str, value: float) -> None:
        self.ts, self.pid, self.name, self.value = ts, pid, name, value


class Switch:
    """CSwitch: ``cpu`` leaves ``old_tid`` for ``new_tid`` (wait reason, mode and state of the old)."""

    __slots__ = ("ts", "cpu", "old_tid", "new_tid", "old_pid", "new_pid", "new_priority", "old_priority",
                 "wait_reason", "wait_mode", "state", "wait_time")  # fmt: skip

    def __init__(self, ts: int, cpu: int, old_tid: int, new_tid: int, old_pid: int, new_pid: int, new_priority: int,
                 old_priority: int, wait_reason: int, wait_mode: int, state: int, wait_time: int) -> None:  # fmt: skip
        self.ts, self.cpu, self.old_tid, self.new_tid = ts, cpu, old_tid, new_tid
        self.old_pid, self.new_pid = old_pid, new_pid
        self.new_priority, self.old_priority = new_priority, old_priority
        self.wait_reason, self.wait_mode, self.state, self.wait_time = wait_reason, wait_mode, state, wait_time


class Wakeup:
    """ReadyThread: ``tid`` made ready on ``cpu`` (by the thread running there, ``waker_tid``)."""

    __slots__ = ("ts", "cpu", "tid", "pid", "waker_tid", "adjust_reason", "adjust_increment", "flags")

    def __init__(self, ts: int, cpu: int, tid: int, pid: int, waker_tid: int, adjust_reason: int, adjust_increment: int,
                 flags: int) -> None:  # fmt: skip
        self.ts, self.cpu, self.tid, self.pid, self.waker_tid = ts, cpu, tid, pid, waker_tid
        self.adjust_reason, self.adjust_increment, self.flags = adjust_reason, adjust_increment, flags


class Frame(NamedTuple):
    """A stack frame as ``openetw stacks`` names it (``openetw.events.frames``): ``name`` is
    ``module!function``, else ``module!+0xoffset``, else ``?!0xaddress``; ``module`` the short
    module name ("?" outside any image); ``path`` the image's file (or the .NET module's IL
    path, "" when unknown) mapped at ``base`` (0 when unknown); ``build_id`` the image's GNU
    build id or PDB identity (GUID and age) in hex, "" when the trace gives none."""

    name: str
    module: str
    path: str
    base: int
    address: int
    build_id: str = ""


class Sample:
    __slots__ = ("ts", "cpu", "pid", "tid", "frames")

    def __init__(self, ts: int, cpu: int, pid: int, tid: int, frames: tuple[Frame, ...]) -> None:
        self.ts, self.cpu, self.pid, self.tid, self.frames = ts, cpu, pid, tid, frames


Item = Process | Thread | SliceBegin | SliceEnd | Instant | Counter | Switch | Wakeup | Sample
