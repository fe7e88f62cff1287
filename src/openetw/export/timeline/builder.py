"""The timeline of records: one pass on the trace's state (``openetw.events.trace_state``).

``timeline(records, registry)`` yields the items of ``openetw.export.timeline.model`` in time
order. Kernel CSwitch and ReadyThread records become ``Switch`` and ``Wakeup``; a SampledProfile
becomes a ``Sample`` with the stack of its thread and time (the StackWalk/Stack, StackKeyKernel
and StackKeyUser records after it: kernel part, then user part, compressed stacks resolved from
``Naming.keys``), frames named as ``openetw stacks`` names them (``openetw.events.frames``:
module!function, .NET methods, kernel symbols, PDB publics); Start/Stop events pair into slices (``openetw.export.timeline.slices``); every other
record is an ``Instant`` with its decoded fields, and a ``Counter`` too when it carries one
(disk transfer bytes, .NET GC generation sizes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from openetw.etl.record import EventRecord
from openetw.events.decoded import provider_key
from openetw.events.frames import FrameNamer
from openetw.events.stacks import USER_PART, StackKeys, StackPart, stack_part
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.events.trace_state import TraceState, names_frames
from openetw.export.pipeline import _Identities, _process_names, _provider_filter
from openetw.export.source import Selection
from openetw.export.timeline.model import Counter, Frame, Instant, Item, Process, Sample, Switch, Thread, Wakeup
from openetw.export.timeline.slices import Pairing, pair_key
from openetw.tdh.context import KERNEL_PROCESS_PROVIDER, DecodeContext
from openetw.tdh.format import format_event_message
from openetw.tdh.registry import SchemaRegistry

__all__ = ["FILETIME_UNIX_TICKS", "Naming", "TimelineStats", "learn_naming", "timeline"]

FILETIME_UNIX_TICKS = UNIX_EPOCH_FILETIME  # its former name
_KERNEL = frozenset({"system", "compact", "perfinfo"})
_THREAD_GROUP, _PERFINFO_GROUP, _STACKWALK_GROUP = 0x05, 0x0F, 0x18
_CSWITCH, _READY_THREAD, _SAMPLE = 36, 50, 46
_STACK_PARTS = frozenset({32, 37, 38})  # StackWalk/Stack, StackKeyKernel, StackKeyUser
# The fields a scheduling event or a sample must have decoded to be drawn as one (a record cut
# short decodes to fewer: it stays an ordinary instant event).
_SWITCH_FIELDS = frozenset({
    "NewThreadID", "OldThreadID", "NewThreadPriority", "OldThreadPriority", "OldThreadWaitReason", "OldThreadWaitMode",
    "OldThreadState", "NewThreadWaitTime",
})  # fmt: skip
_READY_FIELDS = frozenset({"AwakenedThreadID", "AdjustReason", "AdjustIncrement", "Flags"})
_SAMPLE_FIELDS = frozenset({"ThreadId", "InstructionPointer"})
_NO_ID = 0xFFFFFFFF
_PROCESS_GROUP = 0x03
_KERNEL_PROCESS = KERNEL_PROCESS_PROVIDER.bytes_le
_PENDING_SAMPLES = 1 << 16
_NEVER = 1 << 63
_STACK_WAIT = 5_000_000  # 0.5 s in FILETIME ticks: less than the Perfetto writer's reorder window
_KEPT_FRAMES = 1 << 16
_THREAD_FIELDS = ("ThreadId", "TThreadId", "IssuingThreadId", "StackThread", "ThreadID")
_COUNTERS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "DiskIO/Read": (("TransferSize", "Disk read bytes", True),),
    "DiskIO/Write": (("TransferSize", "Disk write bytes", True),),
    "FileIO/Read": (("IoSize", "File read bytes", True),),
    "FileIO/Write": (("IoSize", "File write bytes", True),),
    "GarbageCollection/GCHeapStats": (
        ("GenerationSize0", "GC gen0 bytes", False), ("GenerationSize1", "GC gen1 bytes", False),
        ("GenerationSize2", "GC gen2 bytes", False), ("GenerationSize3", "GC large object heap bytes", False),
    ),
    "Memory/MemInfo": (("FreePages", "Free pages", False), ("ZeroPages", "Zero pages", False)),
}  # fmt: skip
"""Events that carry counters: (field, counter name, cumulative)."""


@dataclass(slots=True)
class TimelineStats:
    """What a timeline pass read and made."""

    records: int = 0
    unknown: int = 0
    instants: int = 0
    slices: int = 0
    lost_starts: int = 0
    lost_stops: int = 0
    switches: int = 0
    wakeups: int = 0
    samples: int = 0
    samples_with_stacks: int = 0
    counters: int = 0
    undecodable: int = 0
    unresolved_keys: int = 0
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _slice_name(event: str) -> str:
    if "/" in event:
        return event.rsplit("/", 1)[0]
    for suffix in ("Start", "Stop", "Begin", "End"):
        if event.endswith(suffix) and len(event) > len(suffix):
            return event[: -len(suffix)]
    return event


@dataclass(slots=True)
class Naming:
    """How samples' frames are named (``openetw.events.frames.FrameNamer``): ``symbol_dirs`` of
    PDBs, ``kallsyms`` text, where ``perf-PID.map`` files are (None: not looked for); and what a
    first pass over the trace learned (``learn_naming``): its ``state`` (images, PDB identities,
    .NET methods: a trace's rundown, at its end, tells what existed all along) and its compressed
    stacks' definitions (``keys``, written after their use). Without them, frames are named from
    what the pass has met so far."""

    symbol_dirs: tuple[str, ...] = ()
    kallsyms: str | None = None
    perf_map_dir: str | None = None
    state: TraceState | None = None
    keys: StackKeys | None = None


def learn_naming(records: Iterable[EventRecord], registry: SchemaRegistry, naming: Naming) -> None:
    """A first pass over ``records``: ``naming.state`` and ``naming.keys`` from the whole trace
    (the state observes only what names frames, and learns no manifests: the registry is left as the
    timeline's pass will find it)."""
    state = naming.state = TraceState(registry, learn_manifests=False, learn_threads=False)
    keys = naming.keys = StackKeys()
    observe, define = state.observe, keys.define
    for record in records:
        if record.kind in _KERNEL and (record.hook_id or 0) >> 8 == _STACKWALK_GROUP:
            define(record)
        elif names_frames(record):
            observe(record)


def timeline(
    records: Iterable[EventRecord], registry: SchemaRegistry, *, selection: Selection | None = None,
    stats: TimelineStats | None = None, messages: bool = False, naming: Naming | None = None,
) -> Iterator[Item]:  # fmt: skip
    """The timeline of ``records`` (in time order). ``messages`` renders each event's message
    (``Instant.message`` and ``Slice.message``: what OTLP sends as a log body)."""
    selection = selection if selection is not None else Selection()
    stats = stats if stats is not None else TimelineStats()
    yield from _Builder(registry, selection, stats, messages, naming or Naming()).items(records)


_Push = Callable[[tuple[int, int], Item], None]
"""Pairing.push: an item at (ts, record position)."""


class _Frames:
    """Addresses named as ``openetw stacks`` names them (``events.frames.FrameNamer`` on the
    trace's state), with the image or .NET module each frame is in: the model's frames."""

    def __init__(self, state: TraceState, namer: FrameNamer) -> None:
        self._state = state
        self._namer = namer
        self._frames: dict[tuple[int, int], Frame] = {}

    def of(self, pid: int, addresses: Iterable[int], when: int) -> tuple[Frame, ...]:
        known = self._frames
        frames = []
        for address in addresses:
            frame = known.get((pid, address))
            if frame is None:
                frame = self._frame(pid, address, when)
                if len(known) >= _KEPT_FRAMES:
                    known.clear()
                known[(pid, address)] = frame
            frames.append(frame)
        return tuple(frames)

    def _frame(self, pid: int, address: int, when: int) -> Frame:
        named = self._namer.name(pid, address, when)
        state = self._state
        image = state.image_at(pid, address, when) if named.source != "managed" else None
        if image is not None:
            build_id = state.build_id(image)
            if build_id is None:
                identity = state.identity(image)
                build_id = identity.key if identity is not None else None
            return Frame(named.label, named.module, image.file_name, image.base, address, build_id or "")
        if named.source == "managed":
            method = state.method_at(pid, address, when)
            path = (state.method_module(method) if method is not None else None) or ""
            return Frame(named.label, named.module, path, 0, address)
        return Frame(named.label, named.module, "", 0, address)


class _Names:
    """The ``Process`` and ``Thread`` items: a process each time its name changes, a thread once."""

    def __init__(self, process_name: Callable[[int, int], str | None], push: _Push) -> None:
        self._process_name = process_name
        self._push = push
        self._named: dict[int, str] = {}
        self._current: dict[int, str] = {}  # names looked up since the last process event
        self._threads: set[tuple[int, int]] = set()

    def forget(self) -> None:
        """A process began or ended: names are looked up again."""
        self._current.clear()

    def known(self, pid: int, tid: int) -> bool:
        """Whether ``ensure`` would name nothing now."""
        return pid in self._current and (pid, tid) in self._threads

    def ensure(self, pid: int, tid: int, ts: int, filetime: int, key: tuple[int, int]) -> None:
        """Name ``pid`` and ``tid`` before the first item that needs them."""
        if pid in self._current and (pid, tid) in self._threads:
            return
        name = self._current.get(pid)
        if name is None:
            name = self._current[pid] = self._process_name(pid, filetime) or ("Idle" if pid == 0 else f"Process {pid}")
            if self._named.get(pid) != name:
                self._named[pid] = name
                self._push(key, Process(pid, name, ts))
        if (pid, tid) not in self._threads:
            self._threads.add((pid, tid))
            self._push(key, Thread(pid, tid, f"{name} {tid}", ts))


class _Waiting:
    """A sample waiting for its stack: the parts come so far, and the process they name."""

    __slots__ = ("sample", "filetime", "timestamp", "pid", "parts", "stacked")

    def __init__(self, sample: Sample, filetime: int, timestamp: int) -> None:
        self.sample, self.filetime, self.timestamp = sample, filetime, timestamp
        self.pid = -1
        self.parts: list[StackPart] = []
        self.stacked = False


class _Samples:
    """Samples wait for the stack of their thread and time (a kernel part, then a user part, each
    addresses or the key of a compressed stack) and are given out in their order: the oldest once
    its user part came, or once the trace is ``_STACK_WAIT`` past it (kernel-only stacks, stacks
    that never come; a user part is logged when the thread returns to user mode, within 0.1 s on
    PerfView's net.4.5.2 trace), or when ``_PENDING_SAMPLES`` wait."""

    def __init__(self, push: _Push, frames: _Frames, keys: StackKeys, stats: TimelineStats) -> None:
        self._push = push
        self._frames = frames
        self._keys = keys
        self._stats = stats
        self._pending: deque[_Waiting] = deque()  # oldest first
        self._by_stamp: dict[tuple[int, int], list[_Waiting]] = {}  # (thread, timestamp): the idle thread is
        # sampled on several processors at once
        self._now = 0
        self.deadline = _NEVER  # when the oldest waiting sample stops waiting (a FILETIME)

    def add(self, tid: int, timestamp: int, sample: Sample, filetime: int) -> None:
        waiting = _Waiting(sample, filetime, timestamp)
        pending = self._pending
        pending.append(waiting)
        self._by_stamp.setdefault((tid, timestamp), []).append(waiting)
        self._now = filetime
        oldest = pending[0]
        if oldest.stacked or oldest.filetime < filetime - _STACK_WAIT or len(pending) > _PENDING_SAMPLES:
            self.release()
        elif oldest is waiting:
            self.deadline = filetime + _STACK_WAIT

    def attach(self, tid: int, timestamp: int, cpu: int, pid: int, part: StackPart) -> bool:
        """Give ``part`` to the sample of ``tid`` at ``timestamp`` if one waits for that part (on
        ``cpu`` first)."""
        candidates = self._by_stamp.get((tid, timestamp))
        if not candidates:
            return False
        rank = part[0]
        chosen = None
        for waiting in candidates:
            if waiting.stacked or any(known[0] == rank for known in waiting.parts):
                continue
            if waiting.sample.cpu == cpu:
                chosen = waiting
                break
            chosen = chosen or waiting
        if chosen is None:
            return False
        if not chosen.parts:
            chosen.pid = pid
        chosen.parts.append(part)
        if rank == USER_PART:
            chosen.stacked = True
            self.release()
        return True

    def expire(self, now: int) -> None:
        """The trace is at ``now``: samples that waited ``_STACK_WAIT`` go."""
        self._now = now
        self.release()

    def release(self, everything: bool = False) -> None:
        pending, by_stamp = self._pending, self._by_stamp
        expired = self._now - _STACK_WAIT
        while pending:
            oldest = pending[0]
            if not (everything or oldest.stacked or oldest.filetime < expired or len(pending) > _PENDING_SAMPLES):
                self.deadline = oldest.filetime + _STACK_WAIT
                return
            pending.popleft()
            sample = oldest.sample
            stamp = (sample.tid, oldest.timestamp)
            same = by_stamp[stamp]
            if len(same) == 1:
                del by_stamp[stamp]
            else:
                same.remove(oldest)
            if oldest.parts:
                self._give_stack(oldest)
            self._push((sample.ts, -1), sample)
        self.deadline = _NEVER

    def _give_stack(self, waiting: _Waiting) -> None:
        addresses: list[int] = []
        for _rank, _width, content in sorted(waiting.parts, key=lambda part: part[0]):
            if isinstance(content, tuple):
                addresses.extend(content)
                continue
            resolved = self._keys.resolve(content, waiting.timestamp)
            if resolved is None:
                self._stats.unresolved_keys += 1
                continue
            addresses.extend(resolved)
        if addresses:
            sample = waiting.sample
            pid = waiting.pid if waiting.pid != _NO_ID else sample.pid
            sample.frames = self._frames.of(pid, addresses, waiting.filetime)
            self._stats.samples_with_stacks += 1


class _Builder:
    """One pass over the records: each record is filtered, decoded, then becomes scheduling or a
    sample (kernel records), a slice's start or stop, or an instant (with its counters)."""

    def __init__(self, registry: SchemaRegistry, selection: Selection, stats: TimelineStats, messages: bool,
                 naming: Naming) -> None:  # fmt: skip
        self._registry = registry
        self._stats = stats
        self._messages = messages
        # processes and threads as the pass meets them (the names and thread owners of items);
        # frames are named on the whole trace's state when a first pass gave it (``Naming.state``)
        self._context: DecodeContext = TraceState(registry) if naming.state is None else DecodeContext(registry, learn_images=False)
        self._identity_of = _Identities(registry, self._context).of
        self._accept_provider = _provider_filter(selection)
        self._start, self._end = selection.start, selection.end
        self._out: list[Item] = []
        self._pairing = Pairing(self._out.append)
        self._push = self._pairing.push
        self._names = _Names(_process_names(self._context), self._push)
        state = naming.state if naming.state is not None else self._context
        assert isinstance(state, TraceState)
        self.namer = FrameNamer(
            state, symbol_dirs=naming.symbol_dirs, kallsyms=naming.kallsyms, perf_map_dir=naming.perf_map_dir,
        )  # fmt: skip
        self._frames = _Frames(state, self.namer)
        self._keys = naming.keys if naming.keys is not None else StackKeys()
        self._define_keys = naming.keys is None
        self._samples = _Samples(self._push, self._frames, self._keys, stats)
        self._compiled: dict[tuple[int, int], Any] = {}
        self._categories: dict[bytes | None, str] = {}
        self._totals: dict[tuple[int, str], float] = {}

    def items(self, records: Iterable[EventRecord]) -> Iterator[Item]:
        out, step = self._out, self.step
        position = -1
        for position, record in enumerate(records):
            step(position, record)
            if out:
                yield from out
                out.clear()
        yield from self.finish(position + 1)

    def finish(self, records: int) -> list[Item]:
        """The items still waiting once every record was stepped (``records`` of them), and the
        pass's totals counted."""
        self._samples.release(everything=True)
        self._pairing.finish()
        last = list(self._out)
        self._out.clear()
        self._finish(records)
        return last

    @property
    def out(self) -> list[Item]:
        """The items made so far and not yet taken (the caller clears it)."""
        return self._out

    @property
    def names(self) -> _Names:
        return self._names

    @property
    def pairing(self) -> Pairing:
        return self._pairing

    def identity(self, record: EventRecord) -> tuple[Any, str | None, str | None]:
        """(schema, provider, event) of ``record``, as the pass names it now."""
        return self._identity_of(record)

    def category(self, record: EventRecord, provider: str | None) -> str:
        if provider is not None:
            return provider
        guid = record.provider_guid_bytes
        category = self._categories.get(guid)
        if category is None:
            category = self._categories[guid] = provider_key(record)
        return category

    def decoder(self, schema: Any, pointer_size: int) -> Any:
        """The compiled decoder of ``schema`` (made once)."""
        ckey = (id(schema), pointer_size)
        decoder = self._compiled.get(ckey)
        if decoder is None or decoder.schema is not schema:
            decoder = self._compiled[ckey] = self._registry.compiled(schema, pointer_size)
        return decoder

    def step(self, position: int, record: EventRecord) -> None:
        """One record at ``position`` of the stream: its items go to ``out``."""
        stats, samples = self._stats, self._samples
        kind = record.kind
        if kind == "unknown":
            stats.unknown += 1
            return
        # a kernel record is observed after it is decoded, the state reading the fields decoded
        # here; any other first (an EventSource's manifest names the provider of its own chunk)
        observe = self._context.observe
        kernel_kind = kind in _KERNEL
        if kernel_kind:
            if (record.hook_id or 0) >> 8 == _PROCESS_GROUP:
                self._names.forget()
        else:
            observe(record)
            if record.provider_guid_bytes == _KERNEL_PROCESS:
                self._names.forget()
        filetime = record.filetime
        if filetime > samples.deadline:
            samples.expire(filetime)
        start, end = self._start, self._end
        if (start is not None and filetime < start) or (end is not None and filetime > end):
            if kernel_kind:
                observe(record)
            return
        schema, provider, event = self._identity_of(record)
        accept_provider = self._accept_provider
        if accept_provider is not None and not accept_provider(record, provider):
            if kernel_kind:
                observe(record)
            return
        args = self._args(record, schema)
        if kernel_kind:
            observe(record, args if schema is not None else None)
        ts = (filetime - FILETIME_UNIX_TICKS) * 100
        key = (ts, position)
        if not kernel_kind or not self._kernel(record, args, ts, key, filetime):
            self._event(record, schema, provider, event, args, ts, key, filetime)

    def _args(self, record: EventRecord, schema: Any) -> dict[str, Any]:
        """The record's fields by its compiled decoder (none without a schema)."""
        if schema is None:
            self._stats.undecodable += 1
            return {}
        fields: dict[str, Any] = self.decoder(schema, record.pointer_size)(record.user_data)[0]
        return fields

    # -- kernel records: what they teach, scheduling and samples --------------------------------
    def _kernel(self, record: EventRecord, args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> bool:
        """A kernel record: True when it became a switch, a wakeup, a sample or a sample's
        stack (else it is an ordinary event)."""
        group, opcode = (record.hook_id or 0) >> 8, record.opcode
        if group == _STACKWALK_GROUP:
            if opcode in _STACK_PARTS:
                return self._stack(record, opcode)
            if self._define_keys:  # no first pass gave the definitions: those seen so far serve
                self._keys.define(record, opcode)
            return False
        if not args:
            return False
        if group == _THREAD_GROUP and opcode == _CSWITCH and _SWITCH_FIELDS <= args.keys():
            self._switch(record, args, ts, key, filetime)
            return True
        if group == _THREAD_GROUP and opcode == _READY_THREAD and _READY_FIELDS <= args.keys():
            self._wakeup(record, args, ts, key, filetime)
            return True
        if group == _PERFINFO_GROUP and opcode == _SAMPLE and _SAMPLE_FIELDS <= args.keys():
            self._sample(record, args, ts, key, filetime)
            return True
        return False

    def _named_thread(self, tid: int, ts: int, filetime: int, key: tuple[int, int]) -> int:
        """The process of ``tid`` (the latest the trace gave it; 0 when unknown), both named."""
        pid = self._context.thread_process(tid) or 0
        self._names.ensure(pid, tid, ts, filetime, key)
        return pid

    def _switch(self, record: EventRecord, args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> None:
        new_tid, old_tid = args["NewThreadID"], args["OldThreadID"]
        new_pid = self._named_thread(new_tid, ts, filetime, key)
        old_pid = self._named_thread(old_tid, ts, filetime, key)
        self._push(key, Switch(
            ts, record.cpu, old_tid, new_tid, old_pid, new_pid, args["NewThreadPriority"],
            args["OldThreadPriority"], args["OldThreadWaitReason"], args["OldThreadWaitMode"],
            args["OldThreadState"], args["NewThreadWaitTime"],
        ))  # fmt: skip
        self._stats.switches += 1

    def _wakeup(self, record: EventRecord, args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> None:
        woken = args["AwakenedThreadID"]
        woken_pid = self._named_thread(woken, ts, filetime, key)
        tid = record.tid
        self._push(key, Wakeup(
            ts, record.cpu, woken, woken_pid, tid if tid != _NO_ID else 0, args["AdjustReason"],
            args["AdjustIncrement"], args["Flags"],
        ))  # fmt: skip
        self._stats.wakeups += 1

    def _sample(self, record: EventRecord, args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> None:
        sampled = args["ThreadId"]
        sample_pid = self._named_thread(sampled, ts, filetime, key)
        frames = self._frames.of(sample_pid, (args["InstructionPointer"],), filetime)
        self._samples.add(sampled, record.timestamp, Sample(ts, record.cpu, sample_pid, sampled, frames), filetime)
        self._stats.samples += 1

    def _stack(self, record: EventRecord, opcode: int) -> bool:
        """A StackWalk record (addresses, or a compressed stack's key) gives its part to the
        sample of its thread and time, if one waits for it."""
        found = stack_part(record, opcode)
        if found is None:
            return False
        when, pid, tid, part = found
        return part is not None and self._samples.attach(tid, when, record.cpu, pid, part)

    # -- events: slices, instants, counters -----------------------------------------------------
    def _event(self, record: EventRecord, schema: Any, provider: str | None, event: str | None,
               args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> None:  # fmt: skip
        pid, tid = self._owner(record, args)
        self._names.ensure(pid, tid, ts, filetime, key)
        guid = record.provider_guid_bytes
        category = self.category(record, provider)
        kind = record.kind
        name = event or (f"event {record.id}" if kind == "event" else f"{kind} {record.hook_id or record.opcode}")
        message = None
        if self._messages and schema is not None and schema.message is not None:
            message = format_event_message(self._registry.decode(schema, record.user_data, record.pointer_size))
        opcode = record.opcode
        if kind == "event" and opcode in (1, 2):
            activity = record.activity_guid_bytes
            pair = pair_key(guid, record.task, pid, tid, activity)
            if opcode == 1:
                related = record.related_activity_id
                self._pairing.start(key, pair, ts, pid, tid, category, _slice_name(name), args, activity,
                                    None if related is None else related.bytes_le, record.level)  # fmt: skip
                if message is not None:
                    self._pairing.open_slice(pair).message = message
                return
            if self._pairing.stop(key, pair, ts, tid, args):
                return
        self._push(key, Instant(ts, pid, tid, category, name, args, record.level, None, message))
        self._stats.instants += 1
        if event is not None:
            self._counters(name, args, pid, ts, key)

    def _owner(self, record: EventRecord, args: dict[str, Any]) -> tuple[int, int]:
        """The record's process and thread (``owner``)."""
        return self.owner(record.pid, record.tid, args)

    def owner(self, pid: int, tid: int, args: dict[str, Any]) -> tuple[int, int]:
        """The process and thread of a record with header ``pid`` and ``tid`` and fields ``args``:
        a record without them (a kernel record of no thread) is given the thread its fields
        name, and that thread's process."""
        if pid == _NO_ID or tid == _NO_ID:
            tid = 0
            for field_name in _THREAD_FIELDS:
                value = args.get(field_name)
                if isinstance(value, int):
                    tid = value
                    break
            pid = (self._context.thread_process(tid) or 0) if tid else 0
        return pid, tid

    def _counters(self, name: str, args: dict[str, Any], pid: int, ts: int, key: tuple[int, int]) -> None:
        carried = _COUNTERS.get(name)
        if carried is None:
            return
        for field_name, counter, cumulative in carried:
            value = args.get(field_name)
            if isinstance(value, (int, float)):
                counter_pid = 0 if cumulative else pid
                if cumulative:
                    value = self._totals[(counter_pid, counter)] = self._totals.get((counter_pid, counter), 0) + value
                self._push(key, Counter(ts, counter_pid, counter, value))
                self._stats.counters += 1

    def _finish(self, records: int) -> None:
        stats, pairing = self._stats, self._pairing
        stats.records += records
        stats.slices += pairing.slices
        stats.lost_starts += pairing.lost_starts
        stats.lost_stops += pairing.lost_stops
        stats.errors.extend(str(error) for error in self._context.manifest_errors)
        stats.errors.extend(self.namer.stats.symbol_errors)
