"""CSwitch, SysCall and PageFault records: the events that come by the million (an event class
of :class:`~openetw.kernel.classes.KernelEventMapper`).

Context switches and system calls keep no state but the thread → process table, so they have a
fast path: packed header and payload in one ``struct`` call (``_switch_raw``, ``_sys_enter_raw``,
``_sys_exit_raw``) for a sink that takes record bytes, and, for system calls, whole columns of
events packed at once with numpy (:meth:`CpuEvents.map_fixed`). The record objects the slow path
gives (``_on_switch``, ``_on_sys_enter``) carry exactly those bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.record import DEFAULT_CONTEXT, EventRecord, PerfInfoRecord, SystemRecord
from openetw.kernel.classes_base import (
    _WINDOWS_PRIORITY,
    CSWITCH,
    CSWITCH_VERSION,
    FAULT_ACCESS_VIOLATION,
    FAULT_COPY_ON_WRITE,
    FAULT_DEMAND_ZERO,
    PAGEFAULT_GROUP,
    PAGEFAULT_VERSION,
    PERFINFO_GROUP,
    SYSCALL_ENTER,
    SYSCALL_EXIT,
    SYSCALL_VERSION,
    THREAD_GROUP,
    MapperState,
    windows_priority,
)

if TYPE_CHECKING:
    from openetw.kernel.ringbuffer import FixedEvents

__all__ = ["CpuEvents"]

_PF_PRESENT, _PF_WRITE = 0x1, 0x2
_CSWITCH = struct.Struct("<IIbbBbbbbbII")
_FAULT = struct.Struct("<QQ")

# The hot records (system calls, context switches) are packed header and payload in one step;
# the header tuple is what the header layout would unpack from those bytes.
_SYSCALL_ENTER_RAW = struct.Struct(L.PERFINFO_TRACE_HEADER.struct.format + "Q")
_SYSCALL_EXIT_RAW = struct.Struct(L.PERFINFO_TRACE_HEADER.struct.format + "I")
_CSWITCH_RAW = struct.Struct(L.SYSTEM_TRACE_HEADER.struct.format + _CSWITCH.format[1:])
_SYSTEM_HEADER = L.SYSTEM_TRACE_HEADER.struct
_PERFINFO64, _SYSTEM64, _TYPED = L.HEADER_TYPE_PERFINFO64, L.HEADER_TYPE_SYSTEM64, F.TYPED_FLAGS
_SYSCALL_ENTER_HOOK, _SYSCALL_EXIT_HOOK = PERFINFO_GROUP << 8 | SYSCALL_ENTER, PERFINFO_GROUP << 8 | SYSCALL_EXIT
_CSWITCH_HOOK = THREAD_GROUP << 8 | CSWITCH
# System call records built column-wise (map_fixed): Enter (24 bytes) and Exit (20 bytes, padded
# to 24 as a buffer aligns it) share one 24-byte row: the header, then Id or Status + padding.
_P = L.PERFINFO_TRACE_HEADER
_NUMPY_CODES = {"B": "u1", "H": "<u2", "I": "<u4", "q": "<i8", "Q": "<u8"}
_SYSCALL_ROW_SIZE = F.aligned(_SYSCALL_ENTER_RAW.size)
_SYSCALL_ROW = np.dtype({
    "names": ["version", "header_type", "flags", "size", "hook", "timestamp", "value"],
    "formats": [_NUMPY_CODES[code] for _, code in _P.fields] + ["<u8"],
    "offsets": [_P.offset(name) for name, _ in _P.fields] + [_P.size],
    "itemsize": _SYSCALL_ROW_SIZE,
})  # fmt: skip
assert [name for name, _ in _P.fields] == ["Version", "HeaderType", "MarkerFlags", "Size", "HookId", "SystemTime"]
assert F.aligned(_SYSCALL_EXIT_RAW.size) == _SYSCALL_ROW_SIZE  # Enter and Exit share one row size
_FIXED_FIELDS: Mapping[str, tuple[str, ...]] = {"sys_enter": ("id",), "sys_exit": ("ret",)}


def _word0(size: int, hook: int) -> np.uint64:
    """The first eight bytes of a system call row (the header up to SystemTime) as one u64."""
    row = np.zeros(1, dtype=_SYSCALL_ROW)
    row["version"], row["header_type"], row["flags"], row["size"], row["hook"] = SYSCALL_VERSION, _PERFINFO64, _TYPED, size, hook
    word: np.uint64 = row.view("<u8")[0]
    return word


assert _SYSCALL_ROW_SIZE == 24 and _P.offset("SystemTime") == 8 and _P.size == 16  # three u64 words per row
_SYSCALL_WORD0 = (_word0(_SYSCALL_ENTER_RAW.size, _SYSCALL_ENTER_HOOK), _word0(_SYSCALL_EXIT_RAW.size, _SYSCALL_EXIT_HOOK))


class CpuEvents(MapperState):
    """Context switches, system calls (one by one or column-wise) and page faults."""

    def fixed_events(self) -> dict[str, tuple[str, ...]]:
        """Events this mapper turns into records column-wise (:meth:`map_fixed`), with the fields
        it reads: system call enter and exit, which need no state. Empty when a handler for them
        was registered or the ``syscall`` flag is off."""
        if "syscall" not in self.flags:
            return {}
        return {name: fields for name, fields in _FIXED_FIELDS.items() if name not in self._registered}

    def map_fixed(self, events: FixedEvents) -> tuple[bytes, int, np.ndarray]:
        """The records of column-wise events (see :meth:`fixed_events`) as one block:
        ``(block, row_size, timestamps)``, every record ``row_size`` bytes (its padding
        included), the same bytes as :meth:`map_events` gives ``write_raw`` one by one. Events of
        other names are left out and counted in :attr:`unmapped`."""
        names = events.names
        kinds = events.kinds
        enter = names.index("sys_enter") if "sys_enter" in names and "sys_enter" not in self._registered else -1
        leave = names.index("sys_exit") if "sys_exit" in names and "sys_exit" not in self._registered else -1
        is_enter = kinds == enter
        mapped = is_enter | (kinds == leave)
        timestamps = events.timestamps
        count = len(kinds)
        if not mapped.all():
            self.unmapped += int(count - np.count_nonzero(mapped))
            is_enter, timestamps = is_enter[mapped], timestamps[mapped]
            count = len(timestamps)
        # A row is three little-endian u64 words: the header's first eight bytes (one of two
        # values), the time, then Id or Status (+ padding).
        rows = np.empty((count, 3), dtype="<u8")
        rows[:, 0] = np.where(is_enter, _SYSCALL_WORD0[0], _SYSCALL_WORD0[1])
        rows[:, 1] = timestamps
        zero = np.zeros(len(kinds), dtype=np.uint64)
        ids = events.columns.get("id", zero)
        status = events.columns.get("ret", zero) & np.uint64(0xFFFFFFFF)
        values = np.where(events.kinds == enter, ids, status)
        rows[:, 2] = values if len(values) == count else values[mapped]
        return rows.tobytes(), _SYSCALL_ROW_SIZE, timestamps


    def _switch_raw(self, ts: int, v: Mapping[str, Any]) -> bytes:
        prev_state = v["prev_state"]
        if prev_state == 0:
            state, reason, mode = 1, 32, 0  # preempted: Ready, WrPreempted, KernelMode
        elif prev_state & 0x2:  # TASK_UNINTERRUPTIBLE
            state, reason, mode = 5, 0, 0   # Waiting, Executive, KernelMode
        else:
            state, reason, mode = 5, 6, 1   # Waiting, UserRequest, UserMode
        prev = v["prev_pid"]
        pid = self._tgid.get(prev)
        if pid is None:
            pid = self.process_of(prev)
        next_prio, prev_prio = v["next_prio"], v["prev_prio"]
        priorities = _WINDOWS_PRIORITY
        return _CSWITCH_RAW.pack(
            CSWITCH_VERSION, _SYSTEM64, _TYPED, _CSWITCH_RAW.size, _CSWITCH_HOOK, prev, pid, ts, 0, 0,
            v["next_pid"], prev,
            priorities[next_prio] if next_prio in priorities else windows_priority(next_prio),
            priorities[prev_prio] if prev_prio in priorities else windows_priority(prev_prio),
            0, 0, reason, mode, state, 0, 0, 0,
        )

    def _on_switch(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        raw = self._switch_raw(ts, v)
        return [SystemRecord(_SYSTEM_HEADER.unpack_from(raw), raw, 0, _CSWITCH_RAW.size, cpu, DEFAULT_CONTEXT)]

    # -- page faults ----------------------------------------------------------------------------
    def _on_page_fault(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        error = v["error_code"]
        if not error & _PF_PRESENT:
            opcode = FAULT_DEMAND_ZERO
        elif error & _PF_WRITE:
            opcode = FAULT_COPY_ON_WRITE
        else:
            opcode = FAULT_ACCESS_VIOLATION
        payload = _FAULT.pack(v["address"], v["ip"])
        return [self._record(PAGEFAULT_GROUP, opcode, PAGEFAULT_VERSION, v["common_pid"], ts, cpu, payload)]

    # -- system calls ---------------------------------------------------------------------------
    @staticmethod
    def _sys_enter_raw(ts: int, v: Mapping[str, Any]) -> bytes:
        return _SYSCALL_ENTER_RAW.pack(SYSCALL_VERSION, _PERFINFO64, _TYPED, _SYSCALL_ENTER_RAW.size, _SYSCALL_ENTER_HOOK, ts, v["id"] & 0xFFFFFFFFFFFFFFFF)

    @staticmethod
    def _sys_exit_raw(ts: int, v: Mapping[str, Any]) -> bytes:
        return _SYSCALL_EXIT_RAW.pack(SYSCALL_VERSION, _PERFINFO64, _TYPED, _SYSCALL_EXIT_RAW.size, _SYSCALL_EXIT_HOOK, ts, v["ret"] & 0xFFFFFFFF)

    def _on_sys_enter(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        size = _SYSCALL_ENTER_RAW.size
        raw = self._sys_enter_raw(ts, v)
        return [PerfInfoRecord((SYSCALL_VERSION, _PERFINFO64, _TYPED, size, _SYSCALL_ENTER_HOOK, ts), raw, 0, size, cpu, DEFAULT_CONTEXT)]

    def _on_sys_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        size = _SYSCALL_EXIT_RAW.size
        raw = self._sys_exit_raw(ts, v)
        return [PerfInfoRecord((SYSCALL_VERSION, _PERFINFO64, _TYPED, size, _SYSCALL_EXIT_HOOK, ts), raw, 0, size, cpu, DEFAULT_CONTEXT)]

