"""Stacks joined to the events they belong to, compressed stacks resolved.

ETW logs a stack as a record of its own right after the event it belongs to: a StackWalk record
(group 0x18) whose ``EventTimeStamp`` is the event's timestamp and whose ``StackThread`` is the
event's thread (the sampled thread of a SampledProfile, the new thread of a CSwitch, the
logging thread of anything else). ``StackWalk/Stack`` (opcode 32) carries the return addresses,
innermost first. With stack compression, ``StackWalk/StackKeyKernel`` (37) and
``StackKeyUser`` (38) carry a key instead, and the key's addresses come in ``StackWalk/KeyDelete``
(35, when the kernel drops the key from its cache) or ``StackWalk/KeyRundown`` (36, at the end of
the trace): a reference resolves to the first definition of its key at or after it (a key is
reused once deleted). An event's kernel part comes before its user part.

Events logged with EVENT_HEADER carry their stack in an extended item instead
(``EVENT_ENABLE_PROPERTY_STACK_TRACE``: STACK_TRACE32/64, or STACK_KEY32/64 into the same cache).
openetw's Linux kernel traces write a StackWalk/Stack record after each sample, as Windows does.

``StackCollector`` is fed records in time order (it feeds the ``TraceState`` too) and gives, at
``finish``, an ``EventStack`` for every event that has one. A stack record that finds no event
within the last ``window`` timestamps is counted, not guessed.
"""

from __future__ import annotations

import bisect
import struct
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from openetw.etl.extended import EXT_STACK_KEY32, EXT_STACK_KEY64, EXT_STACK_TRACE32, EXT_STACK_TRACE64
from openetw.events.trace_state import TraceState

__all__ = ["EventStack", "StackCollector", "StackStats", "collect_stacks", "event_matches"]

_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_STACKWALK_GROUP, _PERFINFO_GROUP, _THREAD_GROUP = 0x18, 0x0F, 0x05
_STACK, _KEY_DELETE, _KEY_RUNDOWN, _KEY_KERNEL, _KEY_USER = 32, 35, 36, 37, 38
_SAMPLE, _CSWITCH, _READY_THREAD = 46, 36, 50
_NO_ID = 0xFFFFFFFF
_HEAD = struct.Struct("<qII")
_KERNEL_NAMES = {
    (_PERFINFO_GROUP, _SAMPLE): "SampledProfile",
    (_PERFINFO_GROUP, 47): "PmcSampledProfile",
    (_THREAD_GROUP, _CSWITCH): "CSwitch",
    (_THREAD_GROUP, _READY_THREAD): "ReadyThread",
}
_KERNEL, _USER = 0, 1
# KernelTraceControl's ImageID and MetaData records, which merging writes at an image event's
# time and thread: they never have stacks of their own.
_MERGED_CLASSES = frozenset({
    uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de").bytes_le, uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671").bytes_le,
})


@dataclass(slots=True)
class EventStack:
    """One event with its stack: return addresses innermost first (kernel frames, then user)."""

    timestamp: int
    filetime: int
    pid: int
    tid: int
    cpu: int
    event: str
    addresses: tuple[int, ...] = ()


@dataclass(slots=True)
class StackStats:
    """What a pass joined and what it could not."""

    records: int = 0
    samples: int = 0
    events_with_stacks: int = 0
    samples_with_stacks: int = 0
    stack_records: int = 0
    unmatched_stacks: int = 0
    key_references: int = 0
    keys_defined: int = 0
    unresolved_keys: int = 0
    extended_stacks: int = 0

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class _Pending:
    """An event that may still get stack parts: (rank, pointer size, addresses or key)."""

    timestamp: int
    tid: int
    cpu: int
    pid: int
    filetime: int
    event: str
    parts: list[tuple[int, int, Any]] = field(default_factory=list)


def event_matches(name: str, wanted: str) -> bool:
    """Whether the event named ``name`` is the one asked for as ``wanted``: the same name, or its
    last part (``CSwitch``, ``Method/LoadVerbose`` match ``…/Method/LoadVerbose``), any case."""
    name, wanted = name.lower(), wanted.lower()
    return name == wanted or name.endswith("/" + wanted)


def _addresses(data: bytes, offset: int, pointer_size: int) -> tuple[int, ...]:
    count = (len(data) - offset) // pointer_size
    if count <= 0:
        return ()
    return struct.unpack_from(f"<{count}{'Q' if pointer_size == 8 else 'I'}", data, offset)


def _is_kernel_address(address: int, pointer_size: int) -> bool:
    return bool(address >> (63 if pointer_size == 8 else 31))


class StackCollector:
    """Joins stacks to events over a trace read in time order (module doc)."""

    def __init__(self, state: TraceState | None = None, *, window: int = 1 << 16) -> None:
        self.state = state if state is not None else TraceState()
        self.stats = StackStats()
        self.window = window
        self._pending: OrderedDict[int, list[_Pending]] = OrderedDict()
        # stack parts that came before their event (a merged trace may log a user stack early)
        self._early: OrderedDict[tuple[int, int], list[tuple[int, int, int, Any]]] = OrderedDict()
        self._joined: list[tuple[_Pending, EventStack]] = []
        self._definitions: dict[int, tuple[list[int], list[tuple[int, ...]]]] = {}
        self._names: dict[tuple[Any, ...], str] = {}

    # -- feeding -----------------------------------------------------------------------------
    def observe(self, record: Any) -> None:
        self.state.observe(record)
        self.stats.records += 1
        kind = record.kind
        if kind in _KERNEL_KINDS:
            hook = record.hook_id or 0
            group, opcode = hook >> 8, hook & 0xFF
            if group == _STACKWALK_GROUP:
                self._stack_walk(record, opcode)
                return
            tid = record.tid
            if group == _PERFINFO_GROUP and opcode == _SAMPLE:
                self.stats.samples += 1
                data = record.user_data
                width = record.pointer_size
                if len(data) >= width + 4:
                    tid = int.from_bytes(data[width : width + 4], "little")
            elif group == _THREAD_GROUP and opcode == _CSWITCH:
                data = record.user_data
                if len(data) >= 4:
                    tid = int.from_bytes(data[:4], "little")
            self._hold(record, tid)
        elif kind == "unknown" or (kind == "classic" and record.provider_guid_bytes in _MERGED_CLASSES):
            return
        else:
            if kind == "event" and record.extended:
                self._extended(record)
            self._hold(record, record.tid)

    def _hold(self, record: Any, tid: Any) -> None:
        timestamp = record.timestamp
        tid = tid if isinstance(tid, int) and tid != _NO_ID else -1
        pid = record.pid
        held = _Pending(timestamp, tid, record.cpu, pid if pid != _NO_ID else -1, record.filetime, self.event_name(record))
        if self._early:
            early = self._early.pop((tid, timestamp), None)
            if early is not None:
                for stack_pid, rank, width, content in early:
                    self._attach(held, stack_pid, (rank, width, content))
        pending = self._pending
        waiting = pending.get(timestamp)
        if waiting is None:
            waiting = pending[timestamp] = []
            if len(pending) > self.window:
                pending.popitem(last=False)
        waiting.append(held)

    def _attach(self, target: _Pending, pid: int, part: tuple[int, int, Any]) -> None:
        if not target.parts:
            self._joined.append((target, self._event_stack(target, pid)))
        target.parts.append(part)

    def _extended(self, record: Any) -> None:
        parts: list[tuple[int, int, Any]] = []
        for item in record.extended:
            data = item.data
            if item.ext_type in (EXT_STACK_TRACE32, EXT_STACK_TRACE64) and len(data) >= 8:
                width = 4 if item.ext_type == EXT_STACK_TRACE32 else 8
                addresses = _addresses(data, 8, width)
                if addresses:
                    rank = _KERNEL if _is_kernel_address(addresses[0], width) else _USER
                    parts.append((rank, width, addresses))
            elif item.ext_type in (EXT_STACK_KEY32, EXT_STACK_KEY64) and len(data) >= 16:
                parts.append((_USER, 8 if item.ext_type == EXT_STACK_KEY64 else 4, int.from_bytes(data[8:16], "little")))
                self.stats.key_references += 1
        if parts:
            self.stats.extended_stacks += 1
            pending = _Pending(record.timestamp, record.tid, record.cpu, record.pid, record.filetime, self.event_name(record), parts)
            self._joined.append((pending, self._event_stack(pending, record.pid)))

    def _stack_walk(self, record: Any, opcode: int) -> None:
        data, width = record.user_data, record.pointer_size
        if opcode in (_KEY_DELETE, _KEY_RUNDOWN):
            if len(data) < width:
                return
            key = int.from_bytes(data[:width], "little")
            times, stacks = self._definitions.setdefault(key, ([], []))
            at = bisect.bisect_right(times, record.timestamp)
            times.insert(at, record.timestamp)
            stacks.insert(at, _addresses(data, width, width))
            self.stats.keys_defined += 1
            return
        if opcode not in (_STACK, _KEY_KERNEL, _KEY_USER) or len(data) < _HEAD.size:
            return
        self.stats.stack_records += 1
        when, pid, tid = _HEAD.unpack_from(data)
        if opcode == _STACK:
            addresses = _addresses(data, _HEAD.size, width)
            if not addresses:
                return
            part: tuple[int, int, Any] = (_KERNEL if _is_kernel_address(addresses[0], width) else _USER, width, addresses)
        else:
            if len(data) < _HEAD.size + width:
                return
            key = int.from_bytes(data[_HEAD.size : _HEAD.size + width], "little")
            part = (_KERNEL if opcode == _KEY_KERNEL else _USER, width, key)
            self.stats.key_references += 1
        target = self._find(when, tid, part[0])
        if target is not None:
            self._attach(target, pid, part)
            return
        early = self._early
        if (tid, when) not in early and len(early) >= self.window:
            _key, dropped = early.popitem(last=False)
            self.stats.unmatched_stacks += len(dropped)
        early.setdefault((tid, when), []).append((pid, *part))

    def _find(self, when: int, tid: int, rank: int) -> _Pending | None:
        waiting = self._pending.get(when)
        if not waiting:
            return None
        taken = None
        for pending in waiting:
            if pending.tid == tid or pending.tid == -1:
                if not any(part[0] == rank for part in pending.parts):
                    return pending
                taken = taken or pending
        return taken

    def _event_stack(self, pending: _Pending, pid: int) -> EventStack:
        tid = pending.tid if pending.tid != -1 else 0
        if not isinstance(pid, int) or pid == _NO_ID:
            pid = pending.pid if pending.pid != -1 else self.state.thread_process(tid, pending.filetime) or 0
        return EventStack(pending.timestamp, pending.filetime, pid, tid, pending.cpu, pending.event)

    # -- names -------------------------------------------------------------------------------
    def event_name(self, record: Any) -> str:
        """``SampledProfile``, ``CSwitch``, ``ReadyThread``; else the schema's name (``Class/Opcode``
        for kernel and classic events, ``Provider/Task/Opcode`` style for manifest events)."""
        kind = record.kind
        if kind in _KERNEL_KINDS:
            hook = record.hook_id or 0
            key: tuple[Any, ...] = (kind, hook, record.version)
            fixed = _KERNEL_NAMES.get((hook >> 8, hook & 0xFF))
            if fixed is not None:
                return fixed
        elif kind == "event":
            key = (kind, record.provider_guid_bytes, record.id, record.version)
        else:
            key = (kind, record.provider_guid_bytes, record.opcode, record.version)
        name = self._names.get(key)
        if name is None:
            schema = self.state.schema_for(record)
            if schema is not None and schema.event_name:
                name = schema.event_name
                if kind == "event" and schema.provider_name:
                    name = f"{schema.provider_name}/{name}"
            elif kind in _KERNEL_KINDS:
                name = f"Kernel/{(record.hook_id or 0) >> 8:#x}/{record.opcode}"
            else:
                name = f"{record.provider_id}/{record.id if kind == 'event' else record.opcode}"
            self._names[key] = name
        return name

    # -- the end -----------------------------------------------------------------------------
    def _resolve(self, key: int, when: int) -> tuple[int, ...] | None:
        found = self._definitions.get(key)
        if found is None:
            return None
        times, stacks = found
        at = bisect.bisect_left(times, when)
        return stacks[at] if at < len(stacks) else stacks[-1]

    def finish(self) -> list[EventStack]:
        """Every event that has a stack, in the order the events came, keys resolved."""
        out: list[EventStack] = []
        stats = self.stats
        for pending, stack in self._joined:
            addresses: list[int] = []
            for _rank, _width, content in sorted(pending.parts, key=lambda part: part[0]):
                if isinstance(content, tuple):
                    addresses.extend(content)
                    continue
                resolved = self._resolve(content, pending.timestamp)
                if resolved is None:
                    stats.unresolved_keys += 1
                    continue
                addresses.extend(resolved)
            if not addresses:
                continue
            stack.addresses = tuple(addresses)
            stats.events_with_stacks += 1
            if stack.event == "SampledProfile":
                stats.samples_with_stacks += 1
            out.append(stack)
        stats.unmatched_stacks += sum(len(parts) for parts in self._early.values())
        self._joined.clear()
        self._pending.clear()
        self._early.clear()
        return out


def collect_stacks(records: Iterable[Any], state: TraceState | None = None) -> tuple[list[EventStack], StackCollector]:
    """Every event of ``records`` (in time order) that has a stack, and the collector (its
    ``state`` and ``stats``)."""
    collector = StackCollector(state)
    for record in records:
        collector.observe(record)
    return collector.finish(), collector
