"""The timeline as a Perfetto trace (``.perfetto-trace``: a ``Trace`` protobuf, packets appended).

Sequences (``trusted_packet_sequence_id``), each with increasing packet timestamps:

* 1: track descriptors (a process track per process, a thread track per thread, an async track
  per async span, a counter track per counter) and track events (slices, instants, counters,
  flows) with interned event names, categories and argument names;
* 2: callstack samples (``PerfSample``) with interned callstacks, frames (``rel_pc``), function
  names (``module!function`` as ``openetw stacks`` names frames, else ``module!+0xoffset``),
  mappings (the images and .NET modules, with their paths and build ids);
* 16 + cpu: kernel scheduling as Perfetto's ETW events (``EtwTraceEventBundle`` of
  ``CSwitchEtwEvent`` and ``ReadyThreadEtwEvent``), which its importer turns into CPU
  scheduling tracks and wake-ups.

A sequence's first packet clears its incremental state; interned tables are started over
(cleared again) when they grow past a bound, so memory stays flat.

Every timestamped item (track events, samples, scheduling events) is held for
:data:`REORDER_WINDOW_NS` (1 s) and written in time order: a kernel trace's records are in time
order per buffer, but a sample read late from its perf ring, or a process event from the proc
connector, can follow newer records (Perfetto refuses a packet older than the one before it on
its sequence). At most :data:`HELD_LIMIT` (65,536) items wait: in a trace denser than that per
second the oldest are written as more come, so memory stays flat whatever the trace (the items
that came in order wait in a queue, only the others in a heap). One that comes later than the
window, or older than an item already written on its sequence, is not written and is counted
(``PerfettoWriter.late``, in the export's summary).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable
from typing import IO, Any

from openetw._native import module as native_module
from openetw.export.timeline.model import (
    Counter,
    Frame,
    Instant,
    Item,
    Process,
    Sample,
    Slice,
    SliceBegin,
    SliceEnd,
    Switch,
    Thread,
    Wakeup,
)
from openetw.export.timeline.protowire import (
    bytes_field,
    double_field,
    fixed64_field,
    sint_field,
    string_field,
    tag,
    varint,
    varint_field,
)

__all__ = ["PerfettoWriter", "write_perfetto"]

TRACK_SEQUENCE, SAMPLE_SEQUENCE, ETW_SEQUENCE_BASE = 1, 2, 16
_NATIVE = native_module("_timeline")
_CLEARED, _NEEDS_STATE = 1, 2
_SLICE_BEGIN, _SLICE_END, _INSTANT, _COUNTER = 1, 2, 3, 4
_PROCESS_UUID, _THREAD_UUID, _ASYNC_UUID, _COUNTER_UUID = 1 << 60, 2 << 60, 3 << 60, 4 << 60
_INTERNED_LIMIT = 1 << 15
_BUNDLE_EVENTS = 512
_MAX_ARGS = 64
_ARG_CACHE = 1 << 16  # encoded arguments by (name, value, type): the same values come again and again
_HASHABLE = frozenset({int, str, bool, float})
_MAX_TEXT = 4096
_PACKET = b"\x0a"  # Trace.packet = 1, length-delimited
_SMALL_UINTS: list[bytes] = [varint_field(3, value) for value in range(16384)]  # DebugAnnotation.uint_value
_TIMESTAMP = b"\x40"  # TracePacket.timestamp = 8, varint
_TRACK_STATE = {flags: varint_field(10, TRACK_SEQUENCE) + varint_field(13, flags) for flags in (_NEEDS_STATE, _NEEDS_STATE | _CLEARED)}
_SAMPLE_STATE = {flags: varint_field(10, SAMPLE_SEQUENCE) + varint_field(13, flags) for flags in (_NEEDS_STATE, _NEEDS_STATE | _CLEARED)}
_UINT = b"\x18"  # DebugAnnotation.uint_value = 3, varint
_LENGTHS = [varint(size) for size in range(128)]
_ANNOTATION = b"\x22"  # TrackEvent.debug_annotations = 4, length-delimited
_TRACK_EVENT = b"\x5a"  # TracePacket.track_event = 11, length-delimited
_INTERNED_DATA = tag(12, 2)  # TracePacket.interned_data, length-delimited
_STRING_VALUE = tag(6, 2)  # DebugAnnotation.string_value, length-delimited
_HEADS = 1 << 14  # encoded (type, track, category, name) of track events, per interning generation


def _annotation_value(value: Any) -> bytes:
    kind = type(value)
    if kind is int:
        if 0 <= value < 16384:
            small: bytes = _SMALL_UINTS[value]
            return small
        if 0 <= value < 1 << 64:
            return b"\x18" + varint(int(value))
    if isinstance(value, bool):
        return varint_field(2, int(value))
    if isinstance(value, int):
        if 0 <= value < 1 << 64:
            return varint_field(3, value)
        if -(1 << 63) <= value < 0:
            return varint_field(4, value)
        return string_field(6, str(value))
    if isinstance(value, float):
        return double_field(5, value)
    if isinstance(value, str):
        return string_field(6, value[:_MAX_TEXT])
    if isinstance(value, (bytes, bytearray, memoryview)):
        return string_field(6, bytes(value[:_MAX_TEXT // 2]).hex())
    return string_field(6, str(value)[:_MAX_TEXT])


class _Interned:
    """One interned table of a sequence: text -> iid."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}


class PerfettoWriter:
    """Writes timeline items to a binary stream as Perfetto trace packets."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._tracks: set[int] = set()
        self._processes: dict[int, str] = {}
        self._threads: dict[tuple[int, int], str] = {}
        self._counters: dict[tuple[int, str], int] = {}
        self._names: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._arg_names: dict[str, int] = {}
        self._arg_cache: dict[tuple[str, Any, type], bytes] = {}
        self._arg_prefixes: dict[str, bytes] = {}
        self._heads: dict[tuple[int, int, str | None, str | None], bytes] = {}
        self._track_cleared = False
        self._track_started = False
        self._async_free: dict[tuple[int, str], list[int]] = {}
        self._async_of: dict[int, int] = {}
        self._async_made = 0
        self._sample_state: dict[str, dict[Any, int]] = {}
        self._sample_entries = 0  # entries of all the tables of _sample_state
        self._sample_cleared = False
        self._bundles: dict[int, list[bytes]] = {}
        self._bundle_start: dict[int, int] = {}
        # timestamped items waiting their turn, in (ts, arrival) order: those that came in time
        # order in a queue, the others in a heap
        self._queue: deque[tuple[int, int, Item]] = deque()
        self._held: list[tuple[int, int, Item]] = []
        self._held_count = 0
        self._newest = 0
        self._released: dict[int, int] = {}  # sequence -> time of its last item written
        self.late = 0
        """Samples and scheduling events that came more than the window after newer ones: not written."""
        self.packets = 0
        self.bytes = 0

    # -- output -------------------------------------------------------------------------------
    def _packet(self, body: bytes) -> None:
        data = _PACKET + varint(len(body)) + body
        self._buffer.append(data)
        self._buffered += len(data)
        self.packets += 1
        if self._buffered >= 1 << 20:
            self._drain()

    def _drain(self) -> None:
        if self._buffer:
            data = b"".join(self._buffer)
            self._out.write(data)
            self.bytes += len(data)
            self._buffer.clear()
            self._buffered = 0

    # -- sequence 1: tracks and track events ----------------------------------------------------
    def _track_packet(self, body: bytes, interned: bytes, ts: int | None) -> None:
        if self._track_cleared and ts is not None:
            packet = _TIMESTAMP + varint(ts) + _TRACK_STATE[_NEEDS_STATE] + body
            if interned:
                packet += bytes_field(12, interned)
            data = _PACKET + varint(len(packet)) + packet
            self._buffer.append(data)
            self._buffered += len(data)
            self.packets += 1
            if self._buffered >= 1 << 20:
                self._drain()
            return
        flags = _NEEDS_STATE
        head = b""
        if not self._track_cleared:
            self._track_cleared = True
            flags |= _CLEARED
            if not self._track_started:
                self._track_started = True
                head = varint_field(87, 1)  # first_packet_on_sequence
        parts = [head]
        if ts is not None:
            parts.append(varint_field(8, ts))
        parts.append(varint_field(10, TRACK_SEQUENCE))
        parts.append(varint_field(13, flags))
        parts.append(body)
        if interned:
            parts.append(bytes_field(12, interned))
        self._packet(b"".join(parts))

    def _descriptor(self, uuid: int, body: bytes) -> None:
        self._tracks.add(uuid)
        self._track_packet(bytes_field(60, varint_field(1, uuid) + body), b"", None)

    def _process_track(self, pid: int, name: str | None = None) -> int:
        uuid = _PROCESS_UUID | pid
        if uuid not in self._tracks or (name is not None and self._processes.get(pid) != name):
            text = name if name is not None else self._processes.get(pid, f"Process {pid}")
            self._processes[pid] = text
            self._descriptor(uuid, bytes_field(3, varint_field(1, pid) + string_field(6, text)))
        return uuid

    def _thread_track(self, pid: int, tid: int, name: str | None = None) -> int:
        uuid = _THREAD_UUID | (pid & 0xFFFFFFFF) << 32 | (tid & 0xFFFFFFFF)
        if uuid not in self._tracks or (name is not None and self._threads.get((pid, tid)) != name):
            parent = self._process_track(pid)
            text = name if name is not None else self._threads.get((pid, tid), str(tid))
            self._threads[(pid, tid)] = text
            thread = varint_field(1, pid) + varint_field(2, tid) + string_field(5, text)
            self._descriptor(uuid, varint_field(5, parent) + bytes_field(4, thread))
        return uuid

    def _begin_track(self, span: Slice) -> int:
        """The track a slice begins on: its thread's, or a free async track of its process and name
        (async tracks are reused once their slice ended: as many as slices overlap at most)."""
        if span.thread or span.lost:
            return self._thread_track(span.pid, span.tid)
        free = self._async_free.setdefault((span.pid, span.name), [])
        if free:
            uuid = free.pop()
        else:
            self._async_made += 1
            uuid = _ASYNC_UUID | self._async_made
            parent = self._process_track(span.pid)
            self._descriptor(uuid, varint_field(5, parent) + string_field(2, span.name))
        self._async_of[span.id] = uuid
        return uuid

    def _end_track(self, span: Slice) -> int:
        if span.thread or span.lost:
            return self._thread_track(span.pid, span.tid)
        uuid = self._async_of.pop(span.id)
        self._async_free[(span.pid, span.name)].append(uuid)
        return uuid

    def _flow_track(self, span: Slice) -> int:
        """Where a flow leaves ``span``: its async track while it is open, else its thread."""
        found = self._async_of.get(span.id)
        return found if found is not None else self._thread_track(span.pid, span.tid)

    def _counter_track(self, pid: int, name: str) -> int:
        uuid = self._counters.get((pid, name))
        if uuid is None:
            uuid = self._counters[(pid, name)] = _COUNTER_UUID | len(self._counters)
            parent = self._process_track(pid)
            self._descriptor(uuid, varint_field(5, parent) + string_field(2, name) + bytes_field(8, b""))
        return uuid

    def _reset_interning(self) -> None:
        if len(self._names) + len(self._categories) + len(self._arg_names) > _INTERNED_LIMIT:
            self._names.clear()
            self._categories.clear()
            self._arg_names.clear()
            self._arg_cache.clear()
            self._arg_prefixes.clear()
            self._heads.clear()
            self._track_cleared = False

    def _intern(self, table: dict[str, int], text: str, field: int, new: list[bytes]) -> int:
        iid = table.get(text)
        if iid is None:
            iid = table[text] = len(table) + 1
            new.append(bytes_field(field, varint_field(1, iid) + string_field(2, text)))
        return iid

    def _arg_prefix(self, key: str, new: list[bytes]) -> bytes:
        """DebugAnnotation.name_iid of argument ``key`` (interned now if it is new)."""
        iid = self._arg_names.get(key)
        if iid is None:
            iid = self._intern(self._arg_names, key, 3, new)
        prefix = self._arg_prefixes[key] = varint_field(1, iid)
        return prefix

    def _track_event(self, ts: int, kind: int, track: int, name: str | None, category: str | None,
                     args: dict[str, Any] | None, extra: bytes = b"") -> None:  # fmt: skip
        if len(self._names) + len(self._categories) + len(self._arg_names) > _INTERNED_LIMIT:
            self._reset_interning()
        new: list[bytes] = []
        heads = self._heads
        head_key = (kind, track, category, name)
        head = heads.get(head_key)
        if head is None:  # the names are interned once per generation: a known head interns nothing
            head = varint_field(9, kind) + varint_field(11, track)
            if category is not None:
                head += varint_field(3, self._intern(self._categories, category, 1, new))
            if name is not None:
                head += varint_field(10, self._intern(self._names, name, 2, new))
            if len(heads) >= _HEADS:
                heads.clear()
            heads[head_key] = head
        if self._track_cleared and _NATIVE is not None:  # the whole packet in one call
            data = _NATIVE.perfetto_track_event(ts, _TRACK_STATE[_NEEDS_STATE], head, args, _MAX_ARGS, self._arg_prefixes,
                                                self._arg_prefix, new, self._annotation, extra)  # fmt: skip
            if data is not None:
                self._buffer.append(data)
                self._buffered += len(data)
                self.packets += 1
                if self._buffered >= 1 << 20:
                    self._drain()
                return
        parts = [head]
        if args:
            if _NATIVE is not None:
                parts.append(_NATIVE.perfetto_annotations(args, _MAX_ARGS, self._arg_prefixes, self._arg_prefix, new,
                                                          self._annotation))  # fmt: skip
            else:
                self._annotations(args, parts, new)
        parts.append(extra)
        event = b"".join(parts)
        self._track_packet(_TRACK_EVENT + varint(len(event)) + event, b"".join(new) if new else b"", ts)

    def _annotations(self, args: dict[str, Any], parts: list[bytes], new: list[bytes]) -> None:
        """The DebugAnnotations of ``args`` (the first ``_MAX_ARGS``) appended to ``parts``: the
        reference of ``_timeline.c``'s ``perfetto_annotations``."""
        prefixes, append = self._arg_prefixes, parts.append
        for key, value in args.items() if len(args) <= _MAX_ARGS else itertools.islice(args.items(), _MAX_ARGS):
            if type(value) is int and 0 <= value < 1 << 64:  # DebugAnnotation {name_iid, uint_value}, made as it comes
                prefix = prefixes.get(key)
                if prefix is None:
                    prefix = self._arg_prefix(key, new)
                inner = prefix + (_SMALL_UINTS[value] if value < 16384 else _UINT + varint(value))
                append(_ANNOTATION + _LENGTHS[len(inner)] + inner)  # a few bytes long
                continue
            append(self._annotation(key, value, new))

    def _annotation(self, key: str, value: Any, new: list[bytes]) -> bytes:
        """The DebugAnnotation of argument ``key`` with any value but an unsigned integer
        (remembered: the same values come again and again)."""
        value_type = type(value)
        cache = self._arg_cache
        try:
            found = cache.get((key, value, value_type))
        except TypeError:  # a list or dict value
            found = None
        if found is None:
            prefix = self._arg_prefixes.get(key)
            if prefix is None:
                prefix = self._arg_prefix(key, new)
            inner = prefix + _annotation_value(value)
            found = _ANNOTATION + varint(len(inner)) + inner
            if len(cache) < _ARG_CACHE and (value is None or value_type in _HASHABLE):
                cache[(key, value, value_type)] = found
        return found

    # -- sequence 2: samples --------------------------------------------------------------------
    def _sample(self, sample: Sample) -> None:
        state = self._sample_state
        if self._sample_entries > _INTERNED_LIMIT:
            state.clear()
            self._sample_entries = 0
            self._sample_cleared = False
        flags = _NEEDS_STATE
        if not self._sample_cleared:
            self._sample_cleared = True
            flags |= _CLEARED
        new: dict[int, list[bytes]] = {}
        by_frames = state.get("by_frames")
        if by_frames is None:
            by_frames = state["by_frames"] = {}
        stack_id = by_frames.get(sample.frames)
        if stack_id is None:

            def intern(kind: str, key: Any, field: int, make: Any) -> int:
                table = state.setdefault(kind, {})
                iid = table.get(key)
                if iid is None:
                    iid = table[key] = len(table) + 1
                    self._sample_entries += 1
                    new.setdefault(field, []).append(bytes_field(field, make(iid)))
                return iid

            frame_ids = []
            for frame in reversed(sample.frames):  # the outermost frame first
                frame_ids.append(self._frame_id(frame, intern))
            stack = tuple(frame_ids)
            stack_id = by_frames[sample.frames] = intern(
                "callstacks", stack, 7, lambda iid: varint_field(1, iid) + b"".join(varint_field(2, f) for f in stack)
            )
            self._sample_entries += 1
        body = varint_field(1, sample.cpu) + varint_field(2, sample.pid) + varint_field(3, sample.tid) + varint_field(4, stack_id)
        packet = _TIMESTAMP + varint(sample.ts) + _SAMPLE_STATE[flags] + bytes_field(66, body)
        if new:
            packet += bytes_field(12, b"".join(b"".join(new[field]) for field in sorted(new)))
        self._packet(packet)

    @staticmethod
    def _frame_id(frame: Frame, intern: Any) -> Any:
        """The frame's iid: its name in ``function_names``, its image (or .NET module) as a
        mapping with its path and build id, and its ``rel_pc`` (the address less the mapping's base)."""
        name, module, path, base, address, build_id = frame
        path = path or module
        path_id = intern("mapping_paths", path, 17, lambda iid: varint_field(1, iid) + bytes_field(2, path.encode()))
        build = varint_field(2, intern("build_ids", build_id, 16, lambda iid: varint_field(1, iid) + bytes_field(2, build_id.encode()))) if build_id else b""
        mapping = intern("mappings", (path, base, build_id), 19, lambda iid: varint_field(1, iid) + build + varint_field(4, base) + varint_field(7, path_id))
        name_id = intern("function_names", name, 5, lambda iid: varint_field(1, iid) + bytes_field(2, name.encode()))
        return intern("frames", frame, 6, lambda iid: (
            varint_field(1, iid) + varint_field(2, name_id) + varint_field(3, mapping) + varint_field(4, address - base)
        ))  # fmt: skip

    # -- sequences 16+: ETW scheduling ------------------------------------------------------------
    def _etw(self, cpu: int, ts: int, event: bytes) -> None:
        bundle = self._bundles.setdefault(cpu, [])
        if not bundle:
            self._bundle_start[cpu] = ts
        bundle.append(bytes_field(2, event))
        if len(bundle) >= _BUNDLE_EVENTS:
            self._flush_bundle(cpu)

    def _flush_bundle(self, cpu: int) -> None:
        bundle = self._bundles.get(cpu)
        if not bundle:
            return
        body = varint_field(1, cpu) + b"".join(bundle)
        bundle.clear()
        self._packet(varint_field(8, self._bundle_start[cpu]) + varint_field(10, ETW_SEQUENCE_BASE + cpu) + bytes_field(95, body))

    # -- items ----------------------------------------------------------------------------------
    def _hold(self, ts: int, item: Item) -> None:
        """Timestamped items in time order: held ``REORDER_WINDOW_NS``, or until ``HELD_LIMIT``
        wait, then written."""
        self._held_count += 1
        entry = (ts, self._held_count, item)
        queue = self._queue
        if ts >= self._newest:  # in order (the common case): the queue, no heap
            queue.append(entry)
            self._newest = ts
        else:
            heapq.heappush(self._held, entry)
        held = self._held
        until = self._newest - REORDER_WINDOW_NS
        if (queue and queue[0][0] <= until) or (held and held[0][0] <= until):
            self._release_held(until)
        if len(queue) + len(held) > HELD_LIMIT:
            self._release_held(None, HELD_LIMIT)

    @property
    def held(self) -> int:
        """How many items wait their turn."""
        return len(self._queue) + len(self._held)

    def _release_held(self, until: int | None, keep: int = 0) -> None:
        """Write the waiting items up to ``until`` (all with None, or all but the newest ``keep``),
        in (time, arrival) order: the least of the queue's head and the heap's."""
        held, queue, released, write = self._held, self._queue, self._released, self._write_now
        sequences = _SEQUENCES
        while held or queue:
            if keep and len(held) + len(queue) <= keep:
                return
            if queue and (not held or queue[0] < held[0]):
                if until is not None and queue[0][0] > until:
                    return
                ts, _, item = queue.popleft()
            else:
                if until is not None and held[0][0] > until:
                    return
                ts, _, item = heapq.heappop(held)
            sequence = sequences.get(type(item), TRACK_SEQUENCE)
            if sequence == ETW_SEQUENCE_BASE:
                sequence += item.cpu  # type: ignore[union-attr]
            last = released.get(sequence)
            if last is not None and ts < last:
                self.late += 1
                continue
            released[sequence] = ts
            write(item)

    def write(self, item: Item) -> None:
        kind = type(item)
        if kind is Instant or kind is Counter or kind is Switch or kind is Wakeup:
            self._hold(item.ts, item)
        elif kind is SliceBegin:
            self._hold(item.span.ts, item)  # type: ignore[union-attr]
        elif kind is SliceEnd:
            self._hold(item.span.end, item)  # type: ignore[union-attr]
        elif kind is Sample:
            assert isinstance(item, Sample)
            self._thread_track(item.pid, item.tid)
            self._hold(item.ts, item)
        else:  # a process or thread: its track descriptor, written at once
            self._write_now(item)

    def _write_now(self, item: Item) -> None:
        kind = type(item)
        if kind is Instant:
            assert isinstance(item, Instant)
            track = self._thread_track(item.pid, item.tid)
            self._track_event(item.ts, _INSTANT, track, item.name, item.category, item.args)
        elif kind is SliceBegin:
            assert isinstance(item, SliceBegin)
            span = item.span
            extra = b""
            if span.parent is not None:
                parent = span.parent
                self._track_event(span.ts, _INSTANT, self._flow_track(parent), f"{span.name} (child)", parent.category,
                                  None, fixed64_field(47, span.id))  # fmt: skip
                extra = fixed64_field(48, span.id)
            self._track_event(span.ts, _SLICE_BEGIN, self._begin_track(span), span.name, span.category, span.args, extra)
        elif kind is SliceEnd:
            assert isinstance(item, SliceEnd)
            span = item.span
            self._track_event(span.end, _SLICE_END, self._end_track(span), None, None, span.end_args)
        elif kind is Counter:
            assert isinstance(item, Counter)
            track = self._counter_track(item.pid, item.name)
            value = item.value
            extra = varint_field(30, value) if isinstance(value, int) else double_field(44, value)
            self._track_event(item.ts, _COUNTER, track, None, None, None, extra)
        elif kind is Switch:
            assert isinstance(item, Switch)
            switch = (
                varint_field(1, item.new_tid) + varint_field(2, item.old_tid) + sint_field(3, item.new_priority)
                + sint_field(4, item.old_priority) + varint_field(11, item.wait_reason & 0xFFFFFFFF)
                + varint_field(12, item.wait_mode & 0xFFFFFFFF) + sint_field(13, item.state)
                + varint_field(10, item.wait_time)
            )  # fmt: skip
            self._etw(item.cpu, item.ts, varint_field(1, item.ts) + varint_field(4, item.cpu) + bytes_field(2, switch))
        elif kind is Wakeup:
            assert isinstance(item, Wakeup)
            ready = (
                varint_field(1, item.tid) + varint_field(5, item.adjust_reason & 0xFFFFFFFF)
                + sint_field(3, item.adjust_increment) + varint_field(6, item.flags & 0xFFFFFFFF)
            )  # fmt: skip
            event = varint_field(1, item.ts) + varint_field(4, item.cpu) + varint_field(5, item.waker_tid) + bytes_field(3, ready)
            self._etw(item.cpu, item.ts, event)
        elif kind is Sample:
            assert isinstance(item, Sample)
            self._sample(item)
        elif kind is Process:
            assert isinstance(item, Process)
            self._process_track(item.pid, item.name)
        elif kind is Thread:
            assert isinstance(item, Thread)
            self._thread_track(item.pid, item.tid, item.name)

    def close(self) -> None:
        self._release_held(None)
        for cpu in sorted(self._bundles):
            self._flush_bundle(cpu)
        self._drain()


REORDER_WINDOW_NS = 1_000_000_000
"""How long timestamped items wait for older ones before they are written."""
HELD_LIMIT = 1 << 16
"""At most this many items wait for older ones (a dense trace holds less than the window): the
oldest are written when more come, so memory stays flat; one that then comes older than an item
written on its sequence is late."""
_SEQUENCES: dict[type, int] = {Sample: SAMPLE_SEQUENCE, Switch: ETW_SEQUENCE_BASE, Wakeup: ETW_SEQUENCE_BASE}


def write_perfetto(items: Iterable[Item], out: IO[bytes]) -> PerfettoWriter:
    """Writes ``items`` to ``out``; returns the writer (its ``packets`` and ``bytes``)."""
    writer = PerfettoWriter(out)
    write = writer.write
    for item in items:
        write(item)
    writer.close()
    return writer
