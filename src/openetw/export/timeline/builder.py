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

from collections.abc import Iterable, Iterator
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
    stats = stats if stats is not None else TimelineStats()
    selection = selection if selection is not None else Selection()
    # the context learns processes (names) and manifests; threads and images are learned here,
    # from the fields decoded anyway
    context = DecodeContext(registry, learn_threads=False, learn_images=False)
    identity_of, observe, process_name = _Identities(registry, context).of, context.observe, _process_names(context)
    thread_pids: dict[int, int] = {}
    images: dict[int, list[tuple[int, int, str]]] = {}

    def thread_process(tid: int, filetime: int) -> int | None:
        return thread_pids.get(tid)

    def image_at(pid: int, address: int) -> tuple[int, int, str] | None:
        for owner in (pid, 0) if pid else (0,):
            for image in reversed(images.get(owner, ())):
                if image[0] <= address < image[0] + image[1]:
                    return image
        return None
    accept_provider = _provider_filter(selection)
    start, end = selection.start, selection.end
    windowed = start is not None or end is not None
    out: list[Item] = []
    emit = out.append
    pairing = Pairing(emit)
    push = pairing.push
    compiled: dict[tuple[int, int], Any] = {}
    named: dict[int, str] = {}
    current: dict[int, str] = {}  # names looked up since the last process event
    threads: set[tuple[int, int]] = set()
    totals: dict[tuple[int, str], float] = {}
    pending: dict[tuple[int, int], Sample] = {}  # samples waiting for their stack, oldest first
    stacked: set[tuple[int, int]] = set()
    categories: dict[bytes | None, str] = {}
    known_frames: dict[tuple[int, int], Frame] = {}  # an image's frames as first seen (images rarely move)

    def name_of(pid: int, tid: int, ts: int, filetime: int, key: tuple[int, int]) -> None:
        name = current.get(pid)
        if name is None:
            name = current[pid] = process_name(pid, filetime) or ("Idle" if pid == 0 else f"Process {pid}")
            if named.get(pid) != name:
                named[pid] = name
                push(key, Process(pid, name, ts))
        if (pid, tid) not in threads:
            threads.add((pid, tid))
            push(key, Thread(pid, tid, f"{name} {tid}", ts))

    def frames_of(pid: int, addresses: Iterable[int], filetime: int) -> tuple[Frame, ...]:
        frames = []
        for address in addresses:
            frame = known_frames.get((pid, address))
            if frame is None:
                image = image_at(pid, address)
                frame = ("", 0, address) if image is None else (image[2], image[0], address)
                if len(known_frames) >= _KEPT_FRAMES:
                    known_frames.clear()
                known_frames[(pid, address)] = frame
            frames.append(frame)
        return tuple(frames)

    def release_samples(everything: bool = False) -> None:
        """Samples are given out in their order: the oldest once its stack came (or when too many
        wait: stacks that never come, compressed ones)."""
        while pending:
            oldest = next(iter(pending))
            if not (everything or oldest in stacked or len(pending) > _PENDING_SAMPLES):
                return
            stacked.discard(oldest)
            sample = pending.pop(oldest)
            push((sample.ts, -1), sample)

    position = -1
    for position, record in enumerate(records):
        kind = record.kind
        if kind == "unknown":
            stats.unknown += 1
            continue
        observe(record)
        if kind in _KERNEL:
            if (record.hook_id or 0) >> 8 == _PROCESS_GROUP:
                current.clear()  # a process began or ended: names are looked up again
        elif record.provider_guid_bytes == _KERNEL_PROCESS:
            current.clear()
        filetime = record.filetime
        if windowed and ((start is not None and filetime < start) or (end is not None and filetime > end)):
            continue
        schema, provider, event = identity_of(record)
        if accept_provider is not None and not accept_provider(record, provider):
            continue
        ts = (filetime - FILETIME_UNIX_TICKS) * 100
        key = (ts, position)
        args: dict[str, Any]
        if schema is not None:
            ckey = (id(schema), record.pointer_size)
            decoder = compiled.get(ckey)
            if decoder is None or decoder.schema is not schema:
                decoder = compiled[ckey] = registry.compiled(schema, record.pointer_size)
            args = decoder(record.user_data)[0]
        else:
            args = {}
            stats.undecodable += 1
        pid, tid = record.pid, record.tid
        if kind in _KERNEL:
            hook = record.hook_id or 0
            group, opcode = hook >> 8, record.opcode
            if group == _THREAD_GROUP and opcode in _THREAD_LIFETIME and args:
                learned = args.get("TThreadId", args.get("ThreadId"))
                owner = args.get("ProcessId", args.get("ProcessID"))
                if isinstance(learned, int) and isinstance(owner, int):
                    thread_pids[learned] = owner
            elif (group == _IMAGE_GROUP or (group == _PROCESS_GROUP and opcode == _IMAGE_LOAD)) and opcode in _IMAGE_PRESENT:
                base, size = args.get("ImageBase", args.get("BaseAddress")), args.get("ImageSize", args.get("ModuleSize"))
                file_name = args.get("FileName", args.get("ImageFileName"))
                owner = args.get("ProcessId", args.get("ProcessID"))
                if isinstance(base, int) and isinstance(size, int) and isinstance(file_name, str) and isinstance(owner, int):
                    known = images.setdefault(owner, [])
                    if len(known) >= _KEPT_IMAGES:
                        del known[: _KEPT_IMAGES // 2]
                    known.append((base, size, file_name))
                    known_frames.clear()
            if group == _THREAD_GROUP and opcode == _CSWITCH and args and _SWITCH_FIELDS <= args.keys():
                new_tid, old_tid = args["NewThreadID"], args["OldThreadID"]
                new_pid, old_pid = thread_pids.get(new_tid) or 0, thread_pids.get(old_tid) or 0
                if new_pid not in current or (new_pid, new_tid) not in threads:
                    name_of(new_pid, new_tid, ts, filetime, key)
                if old_pid not in current or (old_pid, old_tid) not in threads:
                    name_of(old_pid, old_tid, ts, filetime, key)
                push(key, Switch(
                    ts, record.cpu, old_tid, new_tid, old_pid, new_pid, args["NewThreadPriority"],
                    args["OldThreadPriority"], args["OldThreadWaitReason"], args["OldThreadWaitMode"],
                    args["OldThreadState"], args["NewThreadWaitTime"],
                ))  # fmt: skip
                stats.switches += 1
                continue
            if group == _THREAD_GROUP and opcode == _READY_THREAD and args and _READY_FIELDS <= args.keys():
                woken = args["AwakenedThreadID"]
                woken_pid = thread_pids.get(woken) or 0
                if woken_pid not in current or (woken_pid, woken) not in threads:
                    name_of(woken_pid, woken, ts, filetime, key)
                push(key, Wakeup(
                    ts, record.cpu, woken, woken_pid, tid if tid != _NO_ID else 0, args["AdjustReason"],
                    args["AdjustIncrement"], args["Flags"],
                ))  # fmt: skip
                stats.wakeups += 1
                continue
            if group == _PERFINFO_GROUP and opcode == _SAMPLE and args and _SAMPLE_FIELDS <= args.keys():
                sampled = args["ThreadId"]
                sample_pid = thread_pids.get(sampled) or 0
                if sample_pid not in current or (sample_pid, sampled) not in threads:
                    name_of(sample_pid, sampled, ts, filetime, key)
                ip = args["InstructionPointer"]
                sample_key = (sampled, record.timestamp)
                if sample_key in pending:  # the idle thread, sampled on two processors at once
                    release_samples(everything=True)
                frame = known_frames.get((sample_pid, ip))
                pending[sample_key] = Sample(
                    ts, record.cpu, sample_pid, sampled, (frame,) if frame is not None else frames_of(sample_pid, (ip,), filetime)
                )  # fmt: skip
                stats.samples += 1
                if stacked or len(pending) > _PENDING_SAMPLES:  # else the oldest still waits for its stack
                    release_samples()
                continue
            if group == _STACKWALK_GROUP and opcode == _STACK and args:
                sample_key = (args["StackThread"], args["EventTimeStamp"])
                sample = pending.get(sample_key)
                if sample is not None and sample_key not in stacked:
                    sample.frames = frames_of(args["StackProcess"] or sample.pid, args["Stack"], filetime)
                    stats.samples_with_stacks += 1
                    stacked.add(sample_key)
                    release_samples()
                    if out:
                        yield from out
                        out.clear()
                    continue
        if pid == _NO_ID or tid == _NO_ID:
            tid = 0
            for field_name in _THREAD_FIELDS:
                value = args.get(field_name)
                if isinstance(value, int):
                    tid = value
                    break
            pid = (thread_process(tid, filetime) or 0) if tid else 0
        if pid not in current or (pid, tid) not in threads:
            name_of(pid, tid, ts, filetime, key)
        guid = record.provider_guid_bytes
        category = categories.get(guid) if provider is None else provider
        if category is None:
            category = categories[guid] = provider_key(record)
        name = event or (f"event {record.id}" if kind == "event" else f"{kind} {record.hook_id or record.opcode}")
        message = None
        if messages and schema is not None and schema.message is not None:
            message = format_event_message(registry.decode(schema, record.user_data, record.pointer_size))
        opcode = record.opcode
        if kind == "event" and opcode in (1, 2):
            activity = record.activity_guid_bytes
            pair = pair_key(guid, record.task, pid, tid, activity)
            if opcode == 1:
                related = record.related_activity_id
                pairing.start(key, pair, ts, pid, tid, category, _slice_name(name), args, activity,
                              None if related is None else related.bytes_le, record.level)  # fmt: skip
                if message is not None:
                    pairing.open_slice(pair).message = message
                continue
            if pairing.stop(key, pair, ts, tid, args):
                if out:
                    yield from out
                    out.clear()
                continue
        push(key, Instant(ts, pid, tid, category, name, args, record.level, None, message))
        stats.instants += 1
        carried = _COUNTERS.get(name) if event is not None else None
        if carried is not None:
            for field_name, counter, cumulative in carried:
                value = args.get(field_name)
                if isinstance(value, (int, float)):
                    counter_pid = 0 if cumulative else pid
                    if cumulative:
                        value = totals[(counter_pid, counter)] = totals.get((counter_pid, counter), 0) + value
                    push(key, Counter(ts, counter_pid, counter, value))
                    stats.counters += 1
        if out:
            yield from out
            out.clear()
    release_samples(everything=True)
    pairing.finish()
    yield from out
    out.clear()
    stats.records += position + 1
    stats.slices += pairing.slices
    stats.lost_starts += pairing.lost_starts
    stats.lost_stops += pairing.lost_stops
    stats.errors.extend(str(error) for error in context.manifest_errors)
