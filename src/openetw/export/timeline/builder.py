"""The timeline of records: one pass, names from the trace's rundown and process events.

``timeline(records, registry)`` yields the items of ``openetw.export.timeline.model`` in time
order. Kernel CSwitch and ReadyThread records become ``Switch`` and ``Wakeup``; a SampledProfile
becomes a ``Sample`` with the frames of the StackWalk/Stack record of the same thread and time
(compressed stacks, StackKey records, are not resolved: their samples carry the sampled address
only); Start/Stop events pair into slices (``openetw.export.timeline.slices``); every other
record is an ``Instant`` with its decoded fields, and a ``Counter`` too when it carries one
(disk transfer bytes, .NET GC generation sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from openetw.etl.record import EventRecord
from openetw.events.decoded import provider_key
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.export.pipeline import _Identities, _process_names, _provider_filter
from openetw.export.source import Selection
from openetw.export.timeline.model import Counter, Frame, Instant, Item, Process, Sample, Switch, Thread, Wakeup
from openetw.export.timeline.slices import Pairing, pair_key
from openetw.tdh.context import KERNEL_PROCESS_PROVIDER, DecodeContext
from openetw.tdh.format import format_event_message
from openetw.tdh.registry import SchemaRegistry

__all__ = ["TimelineStats", "timeline", "FILETIME_UNIX_TICKS"]

FILETIME_UNIX_TICKS = UNIX_EPOCH_FILETIME  # its former name
_KERNEL = frozenset({"system", "compact", "perfinfo"})
_THREAD_GROUP, _PERFINFO_GROUP, _STACKWALK_GROUP = 0x05, 0x0F, 0x18
_CSWITCH, _READY_THREAD, _SAMPLE, _STACK = 36, 50, 46, 32
# The fields a scheduling event or a sample must have decoded to be drawn as one (a record cut
# short decodes to fewer: it stays an ordinary instant event).
_SWITCH_FIELDS = frozenset({
    "NewThreadID", "OldThreadID", "NewThreadPriority", "OldThreadPriority", "OldThreadWaitReason", "OldThreadWaitMode",
    "OldThreadState", "NewThreadWaitTime",
})  # fmt: skip
_READY_FIELDS = frozenset({"AwakenedThreadID", "AdjustReason", "AdjustIncrement", "Flags"})
_SAMPLE_FIELDS = frozenset({"ThreadId", "InstructionPointer"})
_NO_ID = 0xFFFFFFFF
_PROCESS_GROUP, _IMAGE_GROUP = 0x03, 0x14
_THREAD_LIFETIME = frozenset({1, 2, 3, 4})  # Start, End, DCStart, DCEnd
_IMAGE_LOAD = 10
_IMAGE_PRESENT = frozenset({_IMAGE_LOAD, 3})  # Load, DCStart
_KEPT_IMAGES = 4096
_KERNEL_PROCESS = KERNEL_PROCESS_PROVIDER.bytes_le
_PENDING_SAMPLES = 256
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


def timeline(
    records: Iterable[EventRecord], registry: SchemaRegistry, *, selection: Selection | None = None,
    stats: TimelineStats | None = None, messages: bool = False,
) -> Iterator[Item]:  # fmt: skip
    """The timeline of ``records`` (in time order). ``messages`` renders each event's message
    (``Instant.message`` and ``Slice.message``: what OTLP sends as a log body)."""
    selection = selection if selection is not None else Selection()
    stats = stats if stats is not None else TimelineStats()
    yield from _Builder(registry, selection, stats, messages).items(records)


_Push = Callable[[tuple[int, int], Item], None]
"""Pairing.push: an item at (ts, record position)."""


class _Threads:
    """Which process each thread is in and which images each process loaded, learned from the
    kernel's thread and image events (the fields decoded anyway); addresses resolved to frames."""

    def __init__(self) -> None:
        self.process: dict[int, int] = {}  # thread id -> process id
        self._images: dict[int, list[tuple[int, int, str]]] = {}
        self._frames: dict[tuple[int, int], Frame] = {}  # an image's frames as first seen (images rarely move)

    def learn(self, group: int, opcode: int, args: dict[str, Any]) -> None:
        """Take what a thread start/end or an image load/rundown says."""
        if group == _THREAD_GROUP and opcode in _THREAD_LIFETIME and args:
            learned = args.get("TThreadId", args.get("ThreadId"))
            owner = args.get("ProcessId", args.get("ProcessID"))
            if isinstance(learned, int) and isinstance(owner, int):
                self.process[learned] = owner
        elif (group == _IMAGE_GROUP or (group == _PROCESS_GROUP and opcode == _IMAGE_LOAD)) and opcode in _IMAGE_PRESENT:
            base, size = args.get("ImageBase", args.get("BaseAddress")), args.get("ImageSize", args.get("ModuleSize"))
            file_name = args.get("FileName", args.get("ImageFileName"))
            owner = args.get("ProcessId", args.get("ProcessID"))
            if isinstance(base, int) and isinstance(size, int) and isinstance(file_name, str) and isinstance(owner, int):
                known = self._images.setdefault(owner, [])
                if len(known) >= _KEPT_IMAGES:
                    del known[: _KEPT_IMAGES // 2]
                known.append((base, size, file_name))
                self._frames.clear()

    def frames_of(self, pid: int, addresses: Iterable[int]) -> tuple[Frame, ...]:
        frames = []
        known_frames = self._frames
        for address in addresses:
            frame = known_frames.get((pid, address))
            if frame is None:
                image = self._image_at(pid, address)
                frame = ("", 0, address) if image is None else (image[2], image[0], address)
                if len(known_frames) >= _KEPT_FRAMES:
                    known_frames.clear()
                known_frames[(pid, address)] = frame
            frames.append(frame)
        return tuple(frames)

    def _image_at(self, pid: int, address: int) -> tuple[int, int, str] | None:
        for owner in (pid, 0) if pid else (0,):
            for image in reversed(self._images.get(owner, ())):
                if image[0] <= address < image[0] + image[1]:
                    return image
        return None


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


class _Samples:
    """Samples wait for the stack of their thread and time, and are given out in their order: the
    oldest once its stack came (or when too many wait: stacks that never come, compressed ones)."""

    def __init__(self, push: _Push) -> None:
        self._push = push
        self._pending: dict[tuple[int, int], Sample] = {}  # oldest first
        self._stacked: set[tuple[int, int]] = set()

    def add(self, key: tuple[int, int], sample: Sample) -> None:
        if key in self._pending:  # the idle thread, sampled on two processors at once
            self.release(everything=True)
        self._pending[key] = sample
        if self._stacked or len(self._pending) > _PENDING_SAMPLES:  # else the oldest still waits for its stack
            self.release()

    def waiting(self, key: tuple[int, int]) -> Sample | None:
        """The sample ``key`` names if it still waits for its stack."""
        return None if key in self._stacked else self._pending.get(key)

    def stacked(self, key: tuple[int, int]) -> None:
        self._stacked.add(key)
        self.release()

    def release(self, everything: bool = False) -> None:
        pending, stacked = self._pending, self._stacked
        while pending:
            oldest = next(iter(pending))
            if not (everything or oldest in stacked or len(pending) > _PENDING_SAMPLES):
                return
            stacked.discard(oldest)
            sample = pending.pop(oldest)
            self._push((sample.ts, -1), sample)


class _Builder:
    """One pass over the records: each record is filtered, decoded, then becomes scheduling or a
    sample (kernel records), a slice's start or stop, or an instant (with its counters)."""

    def __init__(self, registry: SchemaRegistry, selection: Selection, stats: TimelineStats, messages: bool) -> None:
        self._registry = registry
        self._stats = stats
        self._messages = messages
        # the context learns processes (names) and manifests; threads and images are learned
        # here, from the fields decoded anyway
        self._context = DecodeContext(registry, learn_threads=False, learn_images=False)
        self._identity_of = _Identities(registry, self._context).of
        self._accept_provider = _provider_filter(selection)
        self._start, self._end = selection.start, selection.end
        self._out: list[Item] = []
        self._pairing = Pairing(self._out.append)
        self._push = self._pairing.push
        self._threads = _Threads()
        self._names = _Names(_process_names(self._context), self._push)
        self._samples = _Samples(self._push)
        self._compiled: dict[tuple[int, int], Any] = {}
        self._categories: dict[bytes | None, str] = {}
        self._totals: dict[tuple[int, str], float] = {}

    def items(self, records: Iterable[EventRecord]) -> Iterator[Item]:
        out, stats, observe, names = self._out, self._stats, self._context.observe, self._names
        identity_of, accept_provider = self._identity_of, self._accept_provider
        decode, kernel, event_item = self._args, self._kernel, self._event
        start, end = self._start, self._end
        windowed = start is not None or end is not None
        position = -1
        for position, record in enumerate(records):
            kind = record.kind
            if kind == "unknown":
                stats.unknown += 1
                continue
            observe(record)
            if kind in _KERNEL:
                if (record.hook_id or 0) >> 8 == _PROCESS_GROUP:
                    names.forget()
            elif record.provider_guid_bytes == _KERNEL_PROCESS:
                names.forget()
            filetime = record.filetime
            if windowed and ((start is not None and filetime < start) or (end is not None and filetime > end)):
                continue
            schema, provider, event = identity_of(record)
            if accept_provider is not None and not accept_provider(record, provider):
                continue
            ts = (filetime - FILETIME_UNIX_TICKS) * 100
            key = (ts, position)
            args = decode(record, schema)
            if kind not in _KERNEL or not kernel(record, args, ts, key, filetime):
                event_item(record, schema, provider, event, args, ts, key, filetime)
            if out:
                yield from out
                out.clear()
        self._samples.release(everything=True)
        self._pairing.finish()
        yield from out
        out.clear()
        self._finish(position + 1)

    def _args(self, record: EventRecord, schema: Any) -> dict[str, Any]:
        """The record's fields by its compiled decoder (none without a schema)."""
        if schema is None:
            self._stats.undecodable += 1
            return {}
        ckey = (id(schema), record.pointer_size)
        decoder = self._compiled.get(ckey)
        if decoder is None or decoder.schema is not schema:
            decoder = self._compiled[ckey] = self._registry.compiled(schema, record.pointer_size)
        fields: dict[str, Any] = decoder(record.user_data)[0]
        return fields

    # -- kernel records: what they teach, scheduling and samples --------------------------------
    def _kernel(self, record: EventRecord, args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> bool:
        """Learn from a kernel record; True when it became a switch, a wakeup, a sample or a
        sample's stack (else it is an ordinary event)."""
        group, opcode = (record.hook_id or 0) >> 8, record.opcode
        self._threads.learn(group, opcode, args)
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
        if group == _STACKWALK_GROUP and opcode == _STACK:
            return self._stack(args)
        return False

    def _named_thread(self, tid: int, ts: int, filetime: int, key: tuple[int, int]) -> int:
        """The process of ``tid`` (0 when unknown), both named."""
        pid = self._threads.process.get(tid) or 0
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
        frames = self._threads.frames_of(sample_pid, (args["InstructionPointer"],))
        self._samples.add((sampled, record.timestamp), Sample(ts, record.cpu, sample_pid, sampled, frames))
        self._stats.samples += 1

    def _stack(self, args: dict[str, Any]) -> bool:
        """A StackWalk record gives its frames to the sample of its thread and time, if one waits."""
        sample_key = (args["StackThread"], args["EventTimeStamp"])
        sample = self._samples.waiting(sample_key)
        if sample is None:
            return False
        sample.frames = self._threads.frames_of(args["StackProcess"] or sample.pid, args["Stack"])
        self._stats.samples_with_stacks += 1
        self._samples.stacked(sample_key)
        return True

    # -- events: slices, instants, counters -----------------------------------------------------
    def _event(self, record: EventRecord, schema: Any, provider: str | None, event: str | None,
               args: dict[str, Any], ts: int, key: tuple[int, int], filetime: int) -> None:  # fmt: skip
        pid, tid = self._owner(record, args)
        self._names.ensure(pid, tid, ts, filetime, key)
        guid = record.provider_guid_bytes
        category = self._categories.get(guid) if provider is None else provider
        if category is None:
            category = self._categories[guid] = provider_key(record)
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
        """The record's process and thread; a record without them (a kernel record of no thread)
        is given the thread its fields name, and that thread's process."""
        pid, tid = record.pid, record.tid
        if pid == _NO_ID or tid == _NO_ID:
            tid = 0
            for field_name in _THREAD_FIELDS:
                value = args.get(field_name)
                if isinstance(value, int):
                    tid = value
                    break
            pid = (self._threads.process.get(tid) or 0) if tid else 0
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
